"""Whatever text the wire accepts, a session stores and reloads (docs/sessions.md).

A session holds valid Unicode: a lone surrogate (from a hostile server, a tool, or a message
built by hand) is stored as U+FFFD and a surrogate pair split in two is joined, on every
store, and what the session holds in memory is what a reload gives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from fanloop import Agent, TerminationReason, tool
from fanloop.messages import (
    Message,
    Origin,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from fanloop.providers._http import create_pool
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import SessionStore, arguments_hash
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply

Reopen = Callable[[], Awaitable[SessionStore]]

HIGH, LOW = "\ud83d", "\ude00"  # the two halves of U+1F600
EMOJI = "\U0001f600"
FFFD = "\ufffd"


def strings(value: Any) -> list[str]:
    """Every string in a JSON-like tree or pydantic model (keys included)."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            stack += item
        elif hasattr(item, "__pydantic_fields__"):
            stack += [getattr(item, name) for name in item.__pydantic_fields__]
    return out


def all_valid(value: Any) -> bool:
    try:
        for text in strings(value):
            text.encode()
    except UnicodeEncodeError:
        return False
    return True


@tool
def lookup(q: str) -> str:
    """Look something up (and answer with broken text, as a careless tool may)."""
    return f"found {q} \ud800 and a pair {HIGH}{LOW}"


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server() -> AsyncIterator[FakeLLMServer]:
    with FakeLLMServer(chars_per_delta=3) as srv:
        yield srv


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_run_over_a_server_sending_broken_surrogates_is_stored_and_reloaded(
    store: SessionStore, reopen: Reopen, server: FakeLLMServer, api: str, transport: str
) -> None:
    server.add(
        reply(
            f"let me look ab{HIGH}{LOW}cd \ud800",
            thinking=f"hm{HIGH}{LOW}m{LOW}",
            signature="sig",
            tool_calls=[call("lookup", q=f"x{HIGH}y")],
        ),
        reply(f"done {HIGH}{LOW} {HIGH}"),
    )
    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    provider: Any
    if api == "anthropic":
        provider = AnthropicProvider(
            "m", api_key="k", base_url=server.anthropic_base_url, http_client=pool
        )
    else:
        provider = OpenAIProvider(
            "m", api_key="k", base_url=server.openai_base_url, http_client=pool
        )
    try:
        session = await store.open("broken-text")
        agent = Agent(provider, tools=[lookup])
        result = await agent.run(f"go {LOW}", session=session)
    finally:
        await provider.aclose()
        await pool.aclose()
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == f"done {EMOJI} {FFFD}"
    prompt, turn, results, _ = session.messages
    assert prompt.text == f"go {FFFD}"
    assert turn.text == f"let me look ab{EMOJI}cd {FFFD}"
    assert turn.content[0].text == f"hm{EMOJI}m{FFFD}"  # the thinking
    assert turn.tool_calls[0].arguments == {"q": f"x{FFFD}y"}
    assert results.content[0].content == f"found x{FFFD}y {FFFD} and a pair {EMOJI}"
    assert all_valid(session.messages)
    assert result.messages == session.messages
    reloaded = await (await reopen()).load("broken-text")
    assert reloaded.messages == session.messages


async def test_a_message_built_by_hand_is_stored_as_valid_unicode(
    store: SessionStore, reopen: Reopen
) -> None:
    session = await store.open("by-hand")
    dirty = Message(
        role="assistant",
        content=(
            TextPart(text=f"a{HIGH}{LOW}b\ud800"),
            ThinkingPart(text=f"{LOW}", signature=f"s{HIGH}"),
            ToolCallPart(
                id="c1", name=f"t{LOW}", arguments={f"k{HIGH}": [f"{HIGH}{LOW}", {"x": LOW}]}
            ),
        ),
        origin=Origin(provider="p", api="a", model=f"m{HIGH}", raw=[{"text": f"a{HIGH}"}]),
    )
    index = await session.append(dirty)
    stored = session.messages[index]
    assert stored.content == (
        TextPart(text=f"a{EMOJI}b{FFFD}"),
        ThinkingPart(text=FFFD, signature=f"s{FFFD}"),
        ToolCallPart(id="c1", name=f"t{FFFD}", arguments={f"k{FFFD}": [EMOJI, {"x": FFFD}]}),
    )
    assert stored.origin == Origin(
        provider="p", api="a", model=f"m{FFFD}", raw=[{"text": f"a{FFFD}"}]
    )
    await session.extend([Message.user(f"u{HIGH}"), Message.user("clean")])
    await session.set_metadata(title=f"t{HIGH}", notes={f"k{LOW}": [f"v{HIGH}{LOW}"]})
    assert session.metadata == {"title": f"t{FFFD}", "notes": {f"k{FFFD}": [f"v{EMOJI}"]}}
    assert all_valid(session.messages)
    for current in (session, await (await reopen()).load("by-hand")):
        assert current.messages == session.messages
        assert current.metadata == session.metadata
    await session.replace([Message.user(f"summary {LOW}")])
    assert session.messages == (Message.user(f"summary {FFFD}"),)
    assert (await (await reopen()).load("by-hand")).messages == session.messages


async def test_the_store_itself_applies_the_same_rule(store: SessionStore, reopen: Reopen) -> None:
    """Messages handed to a store directly (not through a Session) are stored the same way."""
    await store.open_record("direct")
    await store.append_messages("direct", 0, [Message.user(f"x{HIGH}y{HIGH}{LOW}")])
    record = await (await reopen()).read_record("direct")
    assert record.messages == (Message.user(f"x{FFFD}y{EMOJI}"),)


async def test_receipts_hold_valid_unicode(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("receipts")
    dirty = ToolCallPart(id="k1", name=f"charge{HIGH}", arguments={"memo": f"m{LOW}"})
    clean = ToolCallPart(id="k1", name=f"charge{FFFD}", arguments={"memo": f"m{FFFD}"})
    started = await session.begin_effect(turn=1, call=dirty)
    assert started.tool == f"charge{FFFD}"
    # The call as a reloaded session holds it hashes the same as the one that was admitted.
    assert (
        started.arguments_hash == arguments_hash(clean.arguments) == arguments_hash(dirty.arguments)
    )
    done = await session.commit_effect("k1", ToolResultPart(call_id="k1", content=f"ok{HIGH}"))
    assert done.result == ToolResultPart(call_id="k1", content=f"ok{FFFD}")
    await session.begin_effect(turn=1, call=ToolCallPart(id="k2", name="charge", arguments={}))
    resolved = await session.resolve_effect("k2", applied=False, note=f"n{LOW}")
    assert resolved.resolution_note == f"n{FFFD}"
    again = await (await reopen()).load("receipts")
    assert await again.effect("k1") == done
    assert await again.effect("k2") == resolved


async def test_a_run_whose_scripted_model_sends_lone_surrogates_completes(
    store: SessionStore, reopen: Reopen
) -> None:
    """The same rule for a provider that is not on the wire (here a scripted one)."""
    provider = ScriptedProvider(
        [reply(f"x{HIGH}", tool_calls=[call("lookup", q=f"{LOW}")]), f"end{HIGH}"]
    )
    session = await store.open("scripted")
    result = await Agent(provider, tools=[lookup]).run("go", session=session)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.messages == session.messages
    assert all_valid(session.messages)
    assert (await (await reopen()).load("scripted")).messages == session.messages


async def test_without_a_session_the_run_holds_the_same_valid_text() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("lookup", q=f"{HIGH}")]), f"end{LOW}"])
    result = await Agent(provider, tools=[lookup]).run(f"go{HIGH}")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert all_valid(result.messages)
    assert result.messages[0].text == f"go{FFFD}"
    assert result.messages[2].content[0].content == f"found {FFFD} {FFFD} and a pair {EMOJI}"
