"""The loop's bookkeeping (docs/loop.md): a monotone step id on every model request (events, logs,
spans), a turn-completed event at each round's end, a context-critical event before compaction."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from fanloop import Agent, ContextPolicy, Limits, RetryPolicy, tool
from fanloop.errors import Overloaded
from fanloop.testing import ScriptedProvider, call, reply
from helpers import collect
from test_context import read, reader_model

FAST = RetryPolicy(max_retries=3, base_delay=0, jitter=False)


@tool
def ping() -> str:
    """Ping."""
    return "pong"


async def test_every_model_request_gets_the_next_step_id_retries_included() -> None:
    provider = ScriptedProvider(
        [Overloaded("busy"), reply(tool_calls=[call("ping")]), Overloaded("busy"), "done"]
    )
    with capture_logs() as logs:
        result, events = await collect(Agent(provider, tools=[ping], retry=FAST), "go")
    assert result.text == "done"
    requests = [(e.turn, e.attempt, e.step) for e in events if e.kind == "request_started"]
    assert requests == [(1, 1, 1), (1, 2, 2), (2, 1, 3), (2, 2, 4)]
    assert [e.step for e in events if e.kind == "retry_scheduled"] == [1, 3]
    assert [e.step for e in events if e.kind == "response_completed"] == [2, 4]
    assert [e["step"] for e in logs if e["event"] == "model_call_retry"] == [1, 3]


async def test_each_round_ends_with_turn_completed() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("ping"), call("ping")]), "done"])
    _, events = await collect(Agent(provider, tools=[ping]), "go")
    turns = [(e.turn, e.tool_calls) for e in events if e.kind == "turn_completed"]
    assert turns == [(1, 2), (2, 0)]
    kinds = [e.kind for e in events]
    # the round's results are in the transcript before it is announced as complete
    assert kinds.index("turn_completed") > kinds.index("tool_finished")
    assert kinds[-2:] == ["turn_completed", "run_finished"]


async def test_context_critical_comes_before_compaction() -> None:
    agent = Agent(
        reader_model(pages=12),
        tools=[read],
        context=ContextPolicy(context_window=3000, compact_threshold=0.8),
        limits=Limits(max_turns=40),
    )
    _, events = await collect(agent, "Make a digest of the document.")
    kinds = [e.kind for e in events]
    critical = [e for e in events if e.kind == "context_critical"]
    assert critical and critical[0].limit == 3000 and critical[0].threshold == 0.8
    assert critical[0].used >= 2400
    assert kinds.index("context_critical") == kinds.index("compaction_started") - 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_the_step_is_on_the_chat_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fanloop.otel import OpenTelemetryObserver

    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider([reply(tool_calls=[call("ping")]), "done"])
    await Agent(provider, tools=[ping], observer=OpenTelemetryObserver(tracing)).run("go")
    chats: list[Any] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert sorted(s.attributes["fanloop.step"] for s in chats) == [1, 2]
