"""GenAI spans from OpenTelemetryObserver, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from fanloop import Agent, Delegation, RetryPolicy, tool
from fanloop.errors import Overloaded
from fanloop.otel import OpenTelemetryObserver
from fanloop.providers import ModelRequest, Usage
from fanloop.testing import ScriptedProvider, call, reply


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def observer(exporter: InMemorySpanExporter) -> OpenTelemetryObserver:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryObserver(tracer_provider=provider)


@tool
def lookup(q: str) -> str:
    """Look up."""
    return "found"


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("nope")


async def test_run_chat_and_tool_spans(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    provider = ScriptedProvider(
        [
            Overloaded("busy"),
            reply(
                tool_calls=[call("lookup", _id="t1", q="x"), call("broken", _id="t2")],
                usage=Usage(input_tokens=50, output_tokens=7, cache_read_tokens=5),
            ),
            reply("done", usage=Usage(input_tokens=70, output_tokens=3)),
        ],
        model="claude-haiku-4-5",
    )
    agent = Agent(
        provider,
        tools=[lookup, broken],
        name="helper",
        observer=observer,
        retry=RetryPolicy(base_delay=0.001, jitter=False),
    )
    await agent.run("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("chat claude-haiku-4-5") == 3
    run = spans["invoke_agent helper"]
    assert run.kind is SpanKind.INTERNAL
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.provider.name"] == "scripted"
    assert run.attributes["gen_ai.usage.input_tokens"] == 125
    assert run.attributes["fanloop.termination_reason"] == "completed"

    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    failed, first, _second = chats
    assert failed.attributes["error.type"] == "Overloaded"
    assert failed.status.status_code is StatusCode.ERROR
    assert first.kind is SpanKind.CLIENT
    assert first.attributes["gen_ai.request.model"] == "claude-haiku-4-5"
    assert first.attributes["gen_ai.usage.input_tokens"] == 55
    assert first.attributes["gen_ai.usage.output_tokens"] == 7
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 5
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert all(c.parent.span_id == run.context.span_id for c in chats)

    ok, bad = spans["execute_tool lookup"], spans["execute_tool broken"]
    assert ok.attributes["gen_ai.tool.call.id"] == "t1"
    assert ok.attributes["gen_ai.tool.name"] == "lookup"
    assert ok.parent.span_id == run.context.span_id
    assert bad.attributes["error.type"] == "tool_error"
    assert bad.status.status_code is StatusCode.ERROR


async def test_sub_agent_runs_nest_under_the_delegating_tool_span(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    def model(request: ModelRequest) -> object:
        if request.system and "sub-agent" in request.system:
            return "sub answer"
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", _id="d1", task="look")])
        return "main answer"

    agent = Agent(ScriptedProvider(model), delegation=Delegation(tools=[lookup]), observer=observer)
    result = await agent.run("go")
    assert result.text == "main answer"
    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    delegate_span = by_name["execute_tool delegate"]
    sub_run = by_name["invoke_agent delegate"]
    root = by_name["invoke_agent agent"]
    assert sub_run.parent.span_id == delegate_span.context.span_id
    assert delegate_span.parent.span_id == root.context.span_id
    sub_chats = [
        s
        for s in spans
        if s.name.startswith("chat") and s.parent.span_id == sub_run.context.span_id
    ]
    assert len(sub_chats) == 1


async def test_a_tripped_guardrail_is_an_event_on_the_agent_span(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    from fanloop import GuardrailResult, input_guardrail

    @input_guardrail(run_in_parallel=False)
    def policy(ctx: object, prompt: str) -> GuardrailResult:
        return GuardrailResult(tripped=True, message="not allowed")

    agent = Agent(ScriptedProvider(["never"]), observer=observer, guardrails=[policy])
    result = await agent.run("hi")
    assert result.termination_reason == "guardrail_tripped"
    [span] = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["fanloop.termination_reason"] == "guardrail_tripped"
    [event] = span.events
    assert event.name == "fanloop.guardrail_tripped"
    assert dict(event.attributes or {}) == {
        "fanloop.guardrail.name": "policy",
        "fanloop.guardrail.kind": "input",
        "fanloop.guardrail.message": "not allowed",
    }
