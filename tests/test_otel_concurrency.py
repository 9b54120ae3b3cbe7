"""One OpenTelemetryObserver shared by concurrent runs (the normal case in a service: one
module-level agent, many requests): each run gets its own, complete span tree. Also parallel
sub-agents under one parent, a sub-agent whose agent has the same observer, and handoffs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fanloop import Agent, Delegation, gather, handoff, tool
from fanloop.otel import OpenTelemetryMetrics, OpenTelemetryObserver
from fanloop.providers import ModelRequest
from fanloop.testing import ScriptedProvider, call, reply

N = 8


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


class Started(SpanProcessor):
    """Counts the spans started: every one of them must also end."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.count += 1


@pytest.fixture
def started() -> Started:
    return Started()


@pytest.fixture
def observer(exporter: InMemorySpanExporter, started: Started) -> OpenTelemetryObserver:
    provider = TracerProvider()
    provider.add_span_processor(started)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryObserver(tracer_provider=provider)


class Barrier:
    """Holds every caller until ``n`` have arrived: all runs are mid-tool at once."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.all_in = anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.n:
            self.all_in.set()
        with anyio.fail_after(30):
            await self.all_in.wait()


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def tool_answered(request: ModelRequest) -> bool:
    return any(m.tool_results_parts for m in request.messages)


async def test_concurrent_root_runs_of_one_agent_each_get_a_complete_span_tree(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    barrier = Barrier(N)

    @tool
    async def lookup(q: str) -> str:
        """Look up."""
        await barrier.wait()
        return f"found {q}"

    def model(request: ModelRequest) -> Any:
        if not tool_answered(request):
            # the same call id in every run: ids come from the model and need not be unique
            return reply(tool_calls=[call("lookup", _id="t1", q=request.messages[0].text)])
        return "done"

    agent = Agent(ScriptedProvider(model), tools=[lookup], name="helper", observer=observer)
    results = await gather(*(agent.run(f"q{i}") for i in range(N)))
    assert all(not isinstance(r, Exception) and r.text == "done" for r in results)

    spans = list(exporter.get_finished_spans())
    runs = [s for s in spans if s.name == "invoke_agent helper"]
    assert len(runs) == N
    assert len({r.context.trace_id for r in runs}) == N  # N traces, not one tangle
    assert Counter(s.name.split()[0] for s in spans) == {
        "invoke_agent": N,
        "chat": 2 * N,
        "execute_tool": N,
    }
    for run in runs:
        below = children(spans, run)
        assert sorted(s.name.split()[0] for s in below) == ["chat", "chat", "execute_tool"]
        assert run.attributes is not None
        assert run.attributes["fanloop.termination_reason"] == "completed"
        assert run.attributes["fanloop.turns"] == 2
        assert all(children(spans, s) == [] for s in below)
    # each run's tool span is its own call, with its own argument
    for run in runs:
        [tool_span] = [s for s in children(spans, run) if s.name.startswith("execute_tool")]
        assert tool_span.attributes is not None
        assert tool_span.attributes["gen_ai.tool.call.id"] == "t1"
    assert observer._by_id == {}  # nothing left open


async def test_parallel_sub_agents_under_one_parent_each_nest_under_their_call(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    barrier = Barrier(2)

    @tool
    async def lookup(q: str) -> str:
        """Look up."""
        await barrier.wait()
        return f"found {q}"

    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if "sub-agent" in system:
            if not tool_answered(request):
                return reply(tool_calls=[call("lookup", _id="s1", q="x")])
            return "sub answer"
        if len(request.messages) == 1:
            return reply(
                tool_calls=[
                    call("delegate", _id="d1", task="look one"),
                    call("delegate", _id="d2", task="look two"),
                ]
            )
        return "main answer"

    agent = Agent(ScriptedProvider(model), delegation=Delegation(tools=[lookup]), observer=observer)
    result = await agent.run("go")
    assert result.text == "main answer"

    spans = list(exporter.get_finished_spans())
    [root] = [s for s in spans if s.name == "invoke_agent agent"]
    delegates = [s for s in children(spans, root) if s.name == "execute_tool delegate"]
    assert len(delegates) == 2
    for delegate in delegates:
        [sub] = children(spans, delegate)
        assert sub.name.startswith("invoke_agent")
        below = children(spans, sub)
        assert sorted(s.name.split()[0] for s in below) == ["chat", "chat", "execute_tool"]
    assert len(spans) == 1 + 2 + 2 * (1 + 3) + 2  # root, its chats, two sub-trees, delegates


async def test_a_sub_agent_with_the_same_observer_is_traced_once(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver, started: Started
) -> None:
    # The sub-agent's events reach the observer twice (its own agent's and the parent's).
    def model(request: ModelRequest) -> Any:
        if (request.system or "").startswith("researcher"):
            return "notes"
        if len(request.messages) == 1:
            return reply(tool_calls=[call("researcher", _id="r1", task="dig")])
        return "report"

    provider = ScriptedProvider(model)
    researcher = Agent(provider, name="researcher", system="researcher", observer=observer)
    main = Agent(provider, name="main", tools=[researcher.as_tool()], observer=observer)
    results = await gather(main.run("a"), main.run("b"))
    assert all(not isinstance(r, Exception) and r.text == "report" for r in results)

    spans = list(exporter.get_finished_spans())
    assert Counter(s.name for s in spans) == {
        "invoke_agent main": 2,
        "invoke_agent researcher": 2,
        "execute_tool researcher": 2,
        "chat scripted-model": 6,
    }
    for root in (s for s in spans if s.name == "invoke_agent main"):
        [tool_span] = [s for s in children(spans, root) if s.name.startswith("execute_tool")]
        [sub] = children(spans, tool_span)
        assert sub.name == "invoke_agent researcher"
        assert [s.name for s in children(spans, sub)] == ["chat scripted-model"]
    assert started.count == len(spans)  # no span started twice and left open


async def test_after_a_handoff_the_run_goes_on_in_the_same_span_tree(
    exporter: InMemorySpanExporter, observer: OpenTelemetryObserver
) -> None:
    barrier = Barrier(N)

    @tool
    async def lookup_invoice(order: str) -> str:
        """Look up the invoice of an order."""
        await barrier.wait()
        return f"invoice of {order}: 40 EUR"

    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if system.startswith("triage"):
            return reply(tool_calls=[call("transfer_to_billing", _id="h1")])
        if not tool_answered(request) or request.messages[-1].tool_results_parts[0].call_id == (
            "h1"
        ):
            return reply(tool_calls=[call("lookup_invoice", _id="i1", order="A1")])
        return "40 EUR"

    provider = ScriptedProvider(model)
    billing = Agent(provider, name="billing", system="billing", tools=[lookup_invoice])
    triage = Agent(
        provider, name="triage", system="triage", handoffs=[handoff(billing)], observer=observer
    )
    results = await gather(*(triage.run(f"invoice {i}?") for i in range(N)))
    assert all(not isinstance(r, Exception) and r.text == "40 EUR" for r in results)

    spans = list(exporter.get_finished_spans())
    runs = [s for s in spans if s.name == "invoke_agent triage"]
    assert len(runs) == N
    for run in runs:
        below = children(spans, run)
        assert sorted(s.name for s in below) == [
            "chat scripted-model",
            "chat scripted-model",
            "chat scripted-model",
            "execute_tool lookup_invoice",
            "execute_tool transfer_to_billing",
        ]
        assert run.attributes is not None
        assert run.attributes["fanloop.termination_reason"] == "completed"
        [event] = [e for e in run.events if e.name == "fanloop.handoff"]
        assert dict(event.attributes or {}) == {
            "fanloop.handoff.from_agent": "triage",
            "fanloop.handoff.to_agent": "billing",
        }
    assert len(spans) == 6 * N


async def test_without_a_tracer_provider_a_run_is_not_tracked() -> None:
    # No provider given and the global one is the API's proxy: nothing to record into.
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a global tracer provider is set in this process")
    observer = OpenTelemetryObserver()
    seen: list[Any] = []

    @tool
    def probe() -> str:
        """Probe."""
        seen.append((dict(observer._by_id), observer.trace_context("p1")))
        return "ok"

    def model(request: ModelRequest) -> Any:
        return "done" if tool_answered(request) else reply(tool_calls=[call("probe", _id="p1")])

    await Agent(ScriptedProvider(model), tools=[probe], observer=observer).run("go")
    assert seen == [({}, None)]


# -- the same runs on OpenTelemetryMetrics ----------------------------------------------------


def durations(reader: InMemoryMetricReader, name: str) -> dict[str, int]:
    """The count of each point of histogram ``name``, by its agent or tool name."""
    data = reader.get_metrics_data()
    out: dict[str, int] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for p in metric.data.data_points:
                        attrs = dict(p.attributes or {})
                        key = str(attrs.get("gen_ai.tool.name") or attrs.get("gen_ai.agent.name"))
                        count = getattr(p, "count", None)
                        out[key] = out.get(key, 0) + (int(p.value) if count is None else count)
    return out


async def test_metrics_go_on_after_a_handoff_and_count_a_shared_sub_agent_once() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    observer = OpenTelemetryMetrics(meters)

    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if system.startswith("researcher"):
            return "notes"
        if system.startswith("triage"):
            return reply(tool_calls=[call("transfer_to_billing", _id="h1")])
        if not tool_answered(request) or request.messages[-1].tool_results_parts[0].call_id == (
            "h1"
        ):
            return reply(tool_calls=[call("researcher", _id="r1", task="dig")])
        return "40 EUR"

    provider = ScriptedProvider(model)
    researcher = Agent(provider, name="researcher", system="researcher", observer=observer)
    billing = Agent(provider, name="billing", system="billing", tools=[researcher.as_tool()])
    triage = Agent(
        provider, name="triage", system="triage", handoffs=[handoff(billing)], observer=observer
    )
    results = await gather(*(triage.run(f"invoice {i}?") for i in range(N)))
    assert all(not isinstance(r, Exception) and r.text == "40 EUR" for r in results)
    try:
        # per run: triage's call, billing's two (after the handoff), the researcher's one
        assert sum(durations(reader, "gen_ai.client.operation.duration").values()) == 4 * N
        assert durations(reader, "fanloop.tool.duration") == {
            "transfer_to_billing": N,
            "researcher": N,
        }
        assert durations(reader, "fanloop.runs") == {"triage": N, "researcher": N}
        assert set(durations(reader, "fanloop.runs.active").values()) == {0}
    finally:
        meters.shutdown()
