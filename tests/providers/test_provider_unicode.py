"""What a server sends enters fanloop as valid Unicode (docs/security.md).

A surrogate pair split across two stream events (``"ab\\ud83d"``, then ``"\\ude00cd"``) is
joined into its character, so the streamed deltas and the final message agree; any other
(lone) surrogate escape becomes U+FFFD; a pair of escapes in one event is the character. Each
case runs on the three wire APIs (Anthropic Messages, OpenAI Chat Completions and Responses),
both transports, streamed and not (where the server can send it). On the Responses API a held
half waits per block (a content part, a summary part, a call's arguments), and a session
stores exactly the text that was streamed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from provider_helpers import make_anthropic, make_openai, make_responses, request, stream_all

from fanloop import Agent, TerminationReason
from fanloop._unicode import holds_surrogates, known_valid
from fanloop.events import TextDelta, ThinkingDelta, ToolCallDelta
from fanloop.messages import INVALID_ARGUMENTS_KEY, Message, Origin, TextPart
from fanloop.providers import ModelResponse, StopReason
from fanloop.providers._http import HTTPProvider, create_pool
from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer, call, reply
from fanloop.testing._faults import Hostile

EMOJI = "\U0001f600"
HIGH, LOW = "\ud83d", "\ude00"  # EMOJI's surrogate pair, as two code points
FFFD = "\ufffd"
STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    # 3 characters per delta: "ab" + HIGH | LOW + "cd" splits the pair across two events.
    with FakeLLMServer(chars_per_delta=3) as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture
async def provider(server: FakeLLMServer, api: str, transport: str) -> AsyncIterator[HTTPProvider]:
    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    make = {"anthropic": make_anthropic, "openai": make_openai, "responses": make_responses}
    made = make[api](server, http_client=pool)
    yield made
    await made.aclose()
    await pool.aclose()


async def answer(provider: HTTPProvider, *, streaming: bool) -> tuple[list[Any], ModelResponse]:
    if streaming:
        return await stream_all(provider, request("go"))
    return [], await provider.complete(request("go"))


def joined(deltas: list[Any], kind: type) -> str:
    return "".join(d.text for d in deltas if type(d) is kind)


def valid(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_storable(response: ModelResponse) -> None:
    """The turn can be serialised (origin included) and read back unchanged."""
    message = Message(role="assistant", content=response.content, origin=response.origin)
    assert Message.model_validate_json(message.model_dump_json()) == message


@STREAMING
async def test_a_surrogate_pair_split_across_events_is_joined(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    server.add(reply(f"ab{HIGH}{LOW}cd", thinking=f"th{HIGH}{LOW}nk{HIGH}{LOW}", signature="sig"))
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"ab{EMOJI}cd"
    assert final.thinking == f"th{EMOJI}nk{EMOJI}"
    if streaming:
        assert joined(deltas, TextDelta) == final.text
        assert joined(deltas, ThinkingDelta) == final.thinking
        assert all(valid(d.text) for d in deltas if isinstance(d, TextDelta | ThinkingDelta))
        # The pair really was split across two events: its high half waited for the low one.
        assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["ab", f"{EMOJI}cd"]
    check_storable(final)


@STREAMING
async def test_lone_surrogates_become_the_replacement_character(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    tool = call("look\ud800up", **{"q\udc00": f"x{LOW}y{HIGH}", "ok": EMOJI})
    server.add(
        reply(f"a\ud800b{LOW}cd{HIGH}", tool_calls=[tool], thinking=f"t{HIGH}", signature="s")
    )
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"a{FFFD}b{FFFD}cd{FFFD}"
    assert final.thinking == f"t{FFFD}"
    (made,) = final.tool_calls
    assert made.name == f"look{FFFD}up"
    assert made.arguments == {f"q{FFFD}": f"x{FFFD}y{FFFD}", "ok": EMOJI}
    if streaming:
        # The high surrogate that ends the text is held back, then sent as U+FFFD when its
        # block ends: the deltas still add up to the final text.
        assert joined(deltas, TextDelta) == final.text
        assert joined(deltas, ThinkingDelta) == final.thinking
        for delta in deltas:
            for name in ("text", "arguments_delta", "name"):
                assert valid(getattr(delta, name, ""))
    check_storable(final)


@STREAMING
async def test_a_pair_of_escapes_in_one_event_is_the_character(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    server.chars_per_delta = 1000
    server.add(reply(f"{HIGH}{LOW} and {EMOJI}", tool_calls=[call("get_weather", city=EMOJI)]))
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"{EMOJI} and {EMOJI}"
    assert final.tool_calls[0].arguments == {"city": EMOJI}
    if streaming:
        assert joined(deltas, TextDelta) == final.text
    check_storable(final)


async def test_a_pair_split_inside_tool_call_arguments_is_joined(
    server: FakeLLMServer, provider: HTTPProvider
) -> None:
    # The argument text itself (not an escape inside it) carries the pair, split across two
    # events: '{"q":"a' + HIGH | LOW + 'b"}'.
    raw = f'{{"q": "ab{HIGH}{LOW}cd", "r": "{HIGH}"}}'
    server.chars_per_delta = 10
    server.add(reply(tool_calls=[call("get_weather", **{INVALID_ARGUMENTS_KEY: raw})]))
    deltas, final = await answer(provider, streaming=True)
    assert final.tool_calls[0].arguments == {"q": f"ab{EMOJI}cd", "r": FFFD}
    fragments = "".join(d.arguments_delta for d in deltas if isinstance(d, ToolCallDelta))
    # The fragments add up to the arguments the final turn holds.
    assert fragments == f'{{"q": "ab{EMOJI}cd", "r": "{FFFD}"}}'
    check_storable(final)


@STREAMING
async def test_a_pair_split_inside_a_refusal_is_joined(
    server: FakeLLMServer, provider: HTTPProvider, api: str, streaming: bool
) -> None:
    server.add(reply(f"no{HIGH}{LOW}pe {HIGH}", stop_reason=StopReason.REFUSAL))
    deltas, final = await answer(provider, streaming=streaming)
    assert final.stop_reason is StopReason.REFUSAL
    assert final.text == f"no{EMOJI}pe {FFFD}"
    if streaming and api != "openai":  # Chat Completions streams no refusal text
        assert joined(deltas, TextDelta) == final.text
        assert [d.text for d in deltas if isinstance(d, TextDelta)][:2] == ["no", f"{EMOJI}pe"]
    check_storable(final)


def _responses_turn(items: list[dict[str, Any]]) -> ModelResponse:
    """A turn FakeLLMServer plays on the Responses API with exactly these output items."""
    raw = {"id": "resp_1", "output": items}
    return ModelResponse(
        content=(TextPart(text="unused"),),
        origin=Origin(provider="openai", api="responses", model="gpt-5", raw=raw),
    )


@STREAMING
@pytest.mark.parametrize("api", ["responses"])
async def test_responses_a_held_half_waits_only_within_its_part(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    # Each part ends in a high surrogate and the next part starts with a low one: the two
    # halves belong to different parts, so they are two lone surrogates, not one character.
    first, second = f"ab{HIGH}{LOW}c{HIGH}", f"{LOW}d"  # 3 per delta: "ab"+HIGH | LOW+"c"+HIGH
    parts = [{"type": "summary_text", "text": first}, {"type": "summary_text", "text": second}]
    content = [
        {"type": "output_text", "text": first, "annotations": []},
        {"type": "refusal", "refusal": second},
    ]
    server.add(
        _responses_turn(
            [
                {"type": "reasoning", "id": "rs_1", "summary": parts, "encrypted_content": "e"},
                {"type": "message", "id": "m_1", "role": "assistant", "content": content},
            ]
        )
    )
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"ab{EMOJI}c{FFFD}{FFFD}d"
    assert final.thinking == f"ab{EMOJI}c{FFFD}\n\n{FFFD}d"
    if streaming:
        texts = [d.text for d in deltas if isinstance(d, TextDelta)]
        assert texts == ["ab", f"{EMOJI}c", FFFD, f"{FFFD}d"]  # the held half ends its part
        thoughts = [d.text for d in deltas if isinstance(d, ThinkingDelta)]
        assert thoughts == ["ab", f"{EMOJI}c", FFFD, f"\n\n{FFFD}d"]
    check_storable(final)


def _event(kind: str, **fields: Any) -> bytes:
    # json.dumps writes a surrogate as its escape, as a server would.
    return b"event: %s\ndata: %s\n\n" % (
        kind.encode(),
        json.dumps({"type": kind, **fields}).encode(),
    )


@pytest.mark.parametrize("api", ["responses"])
async def test_responses_holding_is_per_block_without_done_events(
    server: FakeLLMServer, provider: HTTPProvider
) -> None:
    # A compatible server that sends no .done events and interleaves two calls' arguments.
    def call_item(index: int, name: str) -> bytes:
        item = {"type": "function_call", "call_id": f"call_{index}", "name": name}
        return _event("response.output_item.added", output_index=index, item=item)

    def text(content_index: int, delta: str) -> bytes:
        at = {"output_index": 0, "content_index": content_index}
        return _event("response.output_text.delta", **at, delta=delta)

    def arguments(index: int, delta: str) -> bytes:
        return _event("response.function_call_arguments.delta", output_index=index, delta=delta)

    message = {"type": "message", "role": "assistant", "content": []}
    frames = [
        _event("response.output_item.added", output_index=0, item=message),
        text(0, f"a{HIGH}"),
        text(0, "z"),  # no escape, but it follows a held half: the half was lone
        text(1, f"{LOW}b"),  # another part: a lone half too
        call_item(1, "f"),
        call_item(2, "g"),
        arguments(1, f'{{"q": "x{HIGH}'),
        arguments(2, '{"q": "y"}'),
        arguments(1, f'{LOW}"}}'),  # the same call: the pair is whole
        _event("response.completed", response={"id": "resp_1", "status": "completed"}),
    ]
    server.add(Hostile.raw(frames))
    deltas, final = await answer(provider, streaming=True)
    assert final.text == f"a{FFFD}z{FFFD}b" == joined(deltas, TextDelta)
    assert [c.arguments for c in final.tool_calls] == [{"q": f"x{EMOJI}"}, {"q": "y"}]
    first = "".join(
        d.arguments_delta for d in deltas if isinstance(d, ToolCallDelta) and d.index == 1
    )
    assert first == f'{{"q": "x{EMOJI}"}}'
    check_storable(final)


async def test_a_session_stores_the_text_that_was_streamed(
    server: FakeLLMServer, api: str, transport: str, tmp_path: Path
) -> None:
    server.add(reply(f"ab{HIGH}{LOW}cd {HIGH}", thinking=f"th{HIGH}{LOW}nk", signature="sig"))
    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    make = {"anthropic": make_anthropic, "openai": make_openai, "responses": make_responses}
    provider = make[api](server, http_client=pool)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        session = await store.open("streamed")
        async with Agent(provider).stream("go", session=session) as run:
            events = [event async for event in run]
    finally:
        await provider.aclose()
        await pool.aclose()
    assert run.result.termination_reason is TerminationReason.COMPLETED
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    thought = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert streamed == f"ab{EMOJI}cd {FFFD}"
    assert thought == f"th{EMOJI}nk"
    reloaded = await SQLiteStore(tmp_path / "s.db").load("streamed")
    for turn in (session.messages[-1], reloaded.messages[-1]):
        assert turn.text == streamed
        assert "".join(p.text for p in turn.content if p.kind == "thinking") == thought


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_streamed_turn_is_vouched_for_only_when_no_event_could_hold_a_surrogate(
    server: FakeLLMServer, provider: HTTPProvider
) -> None:
    # A turn decoded from events that hold no surrogate escape is valid Unicode as it stands:
    # appending it to a run walks nothing (its message is vouched for too).
    server.add(reply("plain answer", tool_calls=[call("get_weather", city="Paris")]))
    _, clean = await answer(provider, streaming=True)
    assert known_valid(clean) and known_valid(clean.to_message())
    # One escape, and the turn is checked again when it is appended, as before.
    server.add(reply(f"a{HIGH}b"))
    _, odd = await answer(provider, streaming=True)
    assert odd.text == f"a{FFFD}b"
    assert not known_valid(odd) and not known_valid(odd.to_message())


async def test_a_whole_answer_is_vouched_for_once_decoded(
    server: FakeLLMServer, provider: HTTPProvider
) -> None:
    # A body is decoded as strict UTF-8 and its lone surrogate escapes become U+FFFD: the turn
    # made of it is valid Unicode either way, and appending it walks nothing.
    server.add(reply("plain answer é", tool_calls=[call("get_weather", city="Paris")]))
    _, clean = await answer(provider, streaming=False)
    assert known_valid(clean) and known_valid(clean.to_message())
    server.add(reply(f"a{HIGH}b"))
    _, odd = await answer(provider, streaming=False)
    assert odd.text == f"a{FFFD}b"
    assert known_valid(odd) and not holds_surrogates(odd)
