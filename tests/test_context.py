"""Context management: the threshold, compaction into a summary, window-exceeded recovery."""

from __future__ import annotations

from typing import Any

import pytest

from fanloop import Agent, ContextPolicy, Hooks, Limits, TerminationReason, tool
from fanloop._context import SUMMARY_HEADER, SUMMARY_PROMPT
from fanloop.errors import ContextWindowExceeded
from fanloop.messages import Message, ToolCallPart, ToolResultPart
from fanloop.providers import ModelRequest, Usage
from fanloop.sessions import MemoryStore
from fanloop.testing import ScriptedProvider, call, reply
from helpers import collect


@tool
def read(page: int) -> str:
    """Read a page of a long document."""
    return f"page {page}: " + "lorem ipsum " * 100


def is_summary_request(request: ModelRequest) -> bool:
    last = request.messages[-1]
    return any(getattr(p, "text", None) == SUMMARY_PROMPT for p in last.content)


def reader_model(pages: int) -> ScriptedProvider:
    """Reads ``pages`` pages one per turn, reporting growing input usage, then answers."""

    read_so_far = 0

    def answer(request: ModelRequest) -> Any:
        nonlocal read_so_far
        if is_summary_request(request):
            return reply("The user asked for a digest; pages read so far were about lorem.")
        size = sum(len(str(m.model_dump())) for m in request.messages) // 4
        usage = Usage(input_tokens=size, output_tokens=20)
        if read_so_far >= pages:
            return reply("Digest: it is all lorem ipsum.", usage=usage)
        read_so_far += 1
        return reply(tool_calls=[call("read", page=read_so_far)], usage=usage)

    return ScriptedProvider(answer)


def pairs_intact(messages: tuple[Message, ...] | list[Message]) -> bool:
    """Every tool result answers a call of the message just before it, and vice versa."""
    for i, m in enumerate(messages):
        results = [p.call_id for p in m.content if isinstance(p, ToolResultPart)]
        if results:
            prev = messages[i - 1] if i else None
            calls = [p.id for p in prev.content if isinstance(p, ToolCallPart)] if prev else []
            if calls != results:
                return False
    return messages[0].role == "user"


async def test_compaction_past_the_threshold_keeps_pairs_and_continues() -> None:
    provider = reader_model(pages=12)
    compactions: list[Any] = []
    hooks = Hooks(
        on_compact_start=lambda: compactions.append("start"),
        on_compact_end=lambda before, after: compactions.append((before, after)),
    )
    agent = Agent(
        provider,
        tools=[read],
        context=ContextPolicy(context_window=3000, compact_threshold=0.8),
        hooks=hooks,
        limits=Limits(max_turns=40),
    )
    result, events = await collect(agent, "Make a digest of the document.")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "Digest: it is all lorem ipsum."
    starts = [e for e in events if e.kind == "compaction_started"]
    ends = [e for e in events if e.kind == "compaction_finished"]
    assert starts and len(starts) == len(ends)
    assert compactions[0] == "start"
    assert compactions[1] == (ends[0].before_count, ends[0].after_count)
    assert ends[0].after_count < ends[0].before_count
    summary_requests = [r for r in provider.requests if is_summary_request(r)]
    assert len(summary_requests) == len(starts)
    assert pairs_intact(result.messages)
    assert result.messages[0].text.startswith(SUMMARY_HEADER)
    assert "digest" in result.messages[0].text
    for request in provider.requests:
        assert pairs_intact(request.messages)


async def test_context_usage_is_reported_against_the_window() -> None:
    seen: list[tuple[int, int]] = []
    provider = ScriptedProvider([reply("hi", usage=Usage(input_tokens=120, output_tokens=5))])
    agent = Agent(
        provider,
        context=ContextPolicy(context_window=1000),
        hooks=Hooks(on_context=lambda used, limit: seen.append((used, limit))),
    )
    await agent.run("hello")
    assert seen == [(125, 1000)]


async def test_window_exceeded_triggers_one_compaction_and_a_retry() -> None:
    state = {"failed": False}

    def answer(request: ModelRequest) -> Any:
        if is_summary_request(request):
            return reply("summary of the early turns")
        if len(request.messages) >= 7 and not state["failed"]:
            state["failed"] = True
            raise ContextWindowExceeded("prompt is too long", status_code=400)
        done = sum(1 for m in request.messages for p in m.content if isinstance(p, ToolResultPart))
        if done >= 4:
            return "finished"
        return reply(tool_calls=[call("read", page=done + 1)])

    session = await MemoryStore().open("ctx")
    provider = ScriptedProvider(answer)
    result = await Agent(provider, tools=[read]).run("go", session=session)
    assert state["failed"]
    assert result.termination_reason is TerminationReason.COMPLETED
    assert sum(1 for r in provider.requests if is_summary_request(r)) == 1
    assert session.messages == result.messages
    assert session.messages[0].text.startswith(SUMMARY_HEADER)
    assert pairs_intact(session.messages)


async def test_still_too_long_after_compaction_ends_with_context_exhausted() -> None:
    turns = 0

    def answer(request: ModelRequest) -> Any:
        nonlocal turns
        if is_summary_request(request):
            return reply("summary")
        turns += 1
        if turns > 3:
            raise ContextWindowExceeded("prompt is too long", status_code=400)
        return reply(tool_calls=[call("read", page=turns)])

    result = await Agent(ScriptedProvider(answer), tools=[read]).run("go")
    assert result.termination_reason is TerminationReason.CONTEXT_EXHAUSTED
    assert pairs_intact(result.messages)
    assert result.messages[-1].role == "user"  # the history is intact and resumable


@pytest.mark.parametrize(
    ("length", "cut"), [(999, False), (1000, False), (1001, True), (5000, True)]
)
async def test_the_tool_result_cap_cuts_at_exactly_the_limit(length: int, cut: bool) -> None:
    output = "".join(str(i % 10) for i in range(length))  # every cut point is visible

    @tool
    def dump() -> str:
        """Dump a lot."""
        return output

    provider = ScriptedProvider([reply(tool_calls=[call("dump")]), "ok"])
    result = await Agent(
        provider, tools=[dump], context=ContextPolicy(max_tool_result_chars=1000)
    ).run("go")
    content = result.messages[2].content[0].content  # type: ignore[union-attr]
    if not cut:
        assert content == output
        return
    note = f"\n[... output truncated: {length - 1000} more characters not shown (limit 1000)]"
    assert content == output[:1000] + note


async def test_oversized_tool_results_are_cut_with_a_note() -> None:
    @tool
    def dump() -> str:
        """Dump a lot."""
        return "x" * 5000

    provider = ScriptedProvider([reply(tool_calls=[call("dump")]), "ok"])
    result = await Agent(
        provider, tools=[dump], context=ContextPolicy(max_tool_result_chars=1000)
    ).run("go")
    content = result.messages[2].content[0].content  # type: ignore[union-attr]
    assert content.startswith("x" * 1000)
    assert "[... output truncated: 4000 more characters not shown (limit 1000)]" in content
