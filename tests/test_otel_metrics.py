"""Metrics from OpenTelemetryMetrics, read back from the real SDK's in-memory reader, and once
through the OTLP/HTTP exporter to a loopback receiver that decodes the protobuf."""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fanloop import Agent, Delegation, Limits, MultiObserver, RetryPolicy, tool
from fanloop.errors import Overloaded
from fanloop.events import RunStarted, ToolFinished, ToolStarted
from fanloop.messages import ToolCallPart, ToolResultPart
from fanloop.otel import OpenTelemetryMetrics, OpenTelemetryObserver
from fanloop.pacing import Pacing, paced
from fanloop.providers import ModelRequest, StopReason, Usage
from fanloop.testing import FakeLLMServer, Fault, ScriptedProvider, call, reply

TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
TOKEN_BUCKETS += [16777216, 67108864]
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
DURATION_BUCKETS += [40.96, 81.92]
FAST = RetryPolicy(base_delay=0.001, jitter=False)
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted"}


class Metrics:
    """What the reader holds, by instrument name: ``{name: (metric, [points])}``."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.by_name: dict[str, Any] = {}
        data = reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                assert scope.scope.name == "fanloop"
                for metric in scope.metrics:
                    self.by_name[metric.name] = metric

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        return [(dict(p.attributes), p) for p in self.by_name[name].data.data_points]

    def point(self, name: str, **attributes: Any) -> Any:
        """The one point whose attributes include ``attributes`` (dots spelled ``__``)."""
        wanted = {k.replace("__", "."): v for k, v in attributes.items()}
        found = [p for attrs, p in self.points(name) if wanted.items() <= attrs.items()]
        assert len(found) == 1, (name, wanted, self.points(name))
        return found[0]

    def attributes(self, name: str) -> list[dict[str, Any]]:
        return [attrs for attrs, _ in self.points(name)]


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def metrics_observer(reader: InMemoryMetricReader) -> tuple[MeterProvider, OpenTelemetryMetrics]:
    provider = MeterProvider(metric_readers=[reader])
    return provider, OpenTelemetryMetrics(provider)


@tool
def lookup(q: str) -> str:
    """Look up."""
    return "found"


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("nope")


async def test_a_run_records_every_metric_with_its_attributes_and_buckets() -> None:
    reader = InMemoryMetricReader()
    meters, observer = metrics_observer(reader)
    provider = ScriptedProvider(
        [
            Overloaded("busy"),
            reply(
                tool_calls=[call("lookup", _id="t1", q="x"), call("broken", _id="t2")],
                usage=Usage(
                    input_tokens=50, output_tokens=7, cache_read_tokens=300, cache_write_tokens=20
                ),
            ),
            reply("done", usage=Usage(input_tokens=70, output_tokens=3)),
        ],
        model="claude-haiku-4-5",
    )
    agent = Agent(provider, tools=[lookup, broken], name="helper", observer=observer, retry=FAST)
    result = await agent.run("go")
    got = Metrics(reader)
    meters.shutdown()

    tokens = got.by_name["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    model = {
        "gen_ai.request.model": "claude-haiku-4-5",
        "gen_ai.response.model": "claude-haiku-4-5",
    }
    for attrs in got.attributes("gen_ai.client.token.usage"):
        assert attrs.items() >= {**CHAT, **model}.items()
        assert "error.type" not in attrs
    uncached = got.point(
        "gen_ai.client.token.usage",
        gen_ai__token__type="input",
        fanloop__token__cache="none",
    )
    assert (uncached.count, uncached.sum) == (2, 120)
    assert list(uncached.explicit_bounds) == TOKEN_BUCKETS
    read = got.point(
        "gen_ai.client.token.usage", gen_ai__token__type="input", fanloop__token__cache="read"
    )
    assert (read.count, read.sum) == (1, 300)
    write = got.point(
        "gen_ai.client.token.usage", gen_ai__token__type="input", fanloop__token__cache="write"
    )
    assert (write.count, write.sum) == (1, 20)
    output = got.point("gen_ai.client.token.usage", gen_ai__token__type="output")
    assert (output.count, output.sum) == (2, 10)
    assert output.min == 3 and output.max == 7
    # the input points add up to the prompt the model saw, as the convention counts input
    assert uncached.sum + read.sum + write.sum == result.usage.total_input_tokens

    duration = got.by_name["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    ok = got.point("gen_ai.client.operation.duration", gen_ai__response__model="claude-haiku-4-5")
    assert ok.count == 2 and list(ok.explicit_bounds) == DURATION_BUCKETS
    failed = got.point("gen_ai.client.operation.duration", error__type="Overloaded")
    assert failed.count == 1
    assert sorted(got.attributes("gen_ai.client.operation.duration"), key=len) == [
        {**CHAT, "gen_ai.request.model": "claude-haiku-4-5", "error.type": "Overloaded"},
        {**CHAT, **model},
    ]

    first = got.by_name["gen_ai.client.operation.time_to_first_chunk"]
    assert first.unit == "s"
    (first_point,) = first.data.data_points
    assert first_point.count == 2  # the two answers; the failed attempt sent nothing
    assert list(first_point.explicit_bounds) == DURATION_BUCKETS
    assert first_point.sum <= ok.sum

    tools = got.by_name["fanloop.tool.duration"]
    assert tools.unit == "s"
    assert sorted(got.attributes("fanloop.tool.duration"), key=str) == [
        {"gen_ai.tool.name": "broken", "fanloop.tool.outcome": "error"},
        {"gen_ai.tool.name": "lookup", "fanloop.tool.outcome": "ok"},
    ]
    assert list(
        got.point("fanloop.tool.duration", gen_ai__tool__name="lookup").explicit_bounds
    ) == (DURATION_BUCKETS)

    retries = got.point("fanloop.retries", fanloop__retry__reason="Overloaded")
    assert retries.value == 1
    assert got.attributes("fanloop.retries") == [
        {
            "fanloop.retry.reason": "Overloaded",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "claude-haiku-4-5",
        }
    ]
    assert got.by_name["fanloop.retries"].data.is_monotonic

    runs = got.point("fanloop.runs")
    assert runs.value == 1
    assert got.attributes("fanloop.runs") == [
        {"gen_ai.agent.name": "helper", "fanloop.termination_reason": "completed"}
    ]
    active = got.by_name["fanloop.runs.active"]
    assert not active.data.is_monotonic
    assert got.point("fanloop.runs.active", gen_ai__agent__name="helper").value == 0

    cost = got.point("fanloop.cost.usd", gen_ai__request__model="claude-haiku-4-5")
    assert result.cost_usd is not None and result.cost_usd > 0
    assert math.isclose(cost.value, result.cost_usd, rel_tol=1e-9)
    assert "fanloop.pacing.wait" not in got.by_name  # nothing was paced


async def test_runs_in_flight_while_a_run_is_on_and_zero_after(
    reader: InMemoryMetricReader,
) -> None:
    meters, observer = metrics_observer(reader)
    both_inside = anyio.Event()
    release = anyio.Event()
    inside = 0

    @tool
    async def wait_here() -> str:
        """Wait."""
        nonlocal inside
        inside += 1
        if inside == 2:
            both_inside.set()
        await release.wait()
        return "ok"

    agent = Agent(
        ScriptedProvider(
            lambda r: reply(tool_calls=[call("wait_here")]) if len(r.messages) == 1 else "done"
        ),
        tools=[wait_here],
        observer=observer,
    )
    async with anyio.create_task_group() as tg:  # two runs of one agent at once
        tg.start_soon(agent.run, "a")
        tg.start_soon(agent.run, "b")
        await both_inside.wait()
        assert Metrics(reader).point("fanloop.runs.active").value == 2
        assert "fanloop.runs" not in Metrics(reader).by_name
        release.set()
    got = Metrics(reader)
    meters.shutdown()
    assert got.point("fanloop.runs.active").value == 0
    assert got.point("fanloop.runs", fanloop__termination_reason="completed").value == 2


async def test_cancelled_runs_close_their_call_and_tool_and_leave_nothing_in_flight(
    reader: InMemoryMetricReader,
) -> None:
    meters, observer = metrics_observer(reader)
    in_tool = anyio.Event()
    in_model = anyio.Event()

    @tool
    async def forever() -> str:
        """Never returns."""
        in_tool.set()
        await anyio.sleep_forever()
        return "never"

    async def hang(request: ModelRequest) -> Any:
        in_model.set()
        await anyio.sleep_forever()

    tool_agent = Agent(
        ScriptedProvider([reply(tool_calls=[call("forever", _id="f1")])]),
        tools=[forever],
        name="tooling",
        observer=observer,
    )
    model_agent = Agent(ScriptedProvider(hang), name="asking", observer=observer)
    for agent, entered in ((tool_agent, in_tool), (model_agent, in_model)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "go")
            await entered.wait()
            tg.cancel_scope.cancel()
    got = Metrics(reader)
    meters.shutdown()
    for name in ("tooling", "asking"):
        assert got.point("fanloop.runs.active", gen_ai__agent__name=name).value == 0
        run = got.point("fanloop.runs", gen_ai__agent__name=name)
        assert run.value == 1
    for attrs in got.attributes("fanloop.runs"):
        assert attrs["fanloop.termination_reason"] == "cancelled"
        assert attrs["error.type"] == "CancelledError"
    cancelled_tool = got.point("fanloop.tool.duration", fanloop__tool__outcome="cancelled")
    assert cancelled_tool.count == 1
    assert got.attributes("fanloop.tool.duration") == [
        {"gen_ai.tool.name": "forever", "fanloop.tool.outcome": "cancelled"}
    ]
    cancelled_call = got.point("gen_ai.client.operation.duration", error__type="CancelledError")
    assert cancelled_call.count == 1


async def test_a_failed_call_and_run_carry_error_type(reader: InMemoryMetricReader) -> None:
    meters, observer = metrics_observer(reader)
    agent = Agent(
        ScriptedProvider([Overloaded("busy"), Overloaded("still busy")]),
        observer=observer,
        retry=RetryPolicy(max_retries=1, base_delay=0.001, jitter=False),
    )
    with pytest.raises(Overloaded):
        await agent.run("go")
    got = Metrics(reader)
    meters.shutdown()
    failed = got.point("gen_ai.client.operation.duration", error__type="Overloaded")
    assert failed.count == 2  # the retried attempt and the last one
    assert got.point("fanloop.retries").value == 1
    assert got.attributes("fanloop.runs") == [
        {
            "gen_ai.agent.name": "agent",
            "fanloop.termination_reason": "provider_error",
            "error.type": "Overloaded",
        }
    ]
    assert got.point("fanloop.runs.active").value == 0
    tokens = got.by_name.get("gen_ai.client.token.usage")
    assert tokens is None or not tokens.data.data_points


async def test_an_answer_cut_off_at_max_tokens_is_a_retry_for_max_tokens(
    reader: InMemoryMetricReader,
) -> None:
    meters, observer = metrics_observer(reader)
    agent = Agent(
        ScriptedProvider(
            [reply(tool_calls=[call("lookup", q="x")], stop_reason=StopReason.MAX_TOKENS), "done"]
        ),
        tools=[lookup],
        observer=observer,
    )
    result = await agent.run("go")
    assert result.text == "done"
    got = Metrics(reader)
    meters.shutdown()
    assert got.point("fanloop.retries", fanloop__retry__reason="max_tokens").value == 1
    assert got.point("gen_ai.client.operation.duration").count == 2


async def test_sub_agents_are_counted_under_their_own_name(reader: InMemoryMetricReader) -> None:
    meters, observer = metrics_observer(reader)

    def model(request: ModelRequest) -> object:
        if request.system and "sub-agent" in request.system:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("lookup", q="y")])
            return "sub answer"
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", _id="d1", task="look")])
        return "main answer"

    agent = Agent(ScriptedProvider(model), delegation=Delegation(tools=[lookup]), observer=observer)
    await agent.run("go")
    got = Metrics(reader)
    meters.shutdown()
    assert got.point("fanloop.runs", gen_ai__agent__name="agent").value == 1
    assert got.point("fanloop.runs", gen_ai__agent__name="delegate").value == 1
    for attrs, point in got.points("fanloop.runs.active"):
        assert point.value == 0, attrs
    assert got.point("gen_ai.client.operation.duration").count == 4  # 2 calls each
    tool_names = {a["gen_ai.tool.name"] for a in got.attributes("fanloop.tool.duration")}
    assert tool_names == {"delegate", "lookup"}


async def test_pacing_waits_are_recorded_apart_from_the_call(
    reader: InMemoryMetricReader,
) -> None:
    meters, observer = metrics_observer(reader)
    provider = paced(ScriptedProvider(["one", "two"]), Pacing(requests_per_minute=60))
    agent = Agent(provider, observer=observer)
    await agent.run("a")
    await agent.run("b")  # one request a second: this one waits for its slot
    got = Metrics(reader)
    meters.shutdown()
    wait = got.point("fanloop.pacing.wait", fanloop__pacing__reason="requests")
    assert wait.count >= 1 and wait.sum > 0
    # the call is timed from when it went out, not from when it began to wait
    call = got.point("gen_ai.client.operation.duration")
    assert call.count == 2 and call.sum < wait.sum
    assert got.by_name["fanloop.pacing.wait"].unit == "s"
    assert list(wait.explicit_bounds) == DURATION_BUCKETS


async def test_over_http_a_retried_429_and_cached_tokens(reader: InMemoryMetricReader) -> None:
    from fanloop.providers.anthropic import AnthropicProvider

    meters, observer = metrics_observer(reader)
    script = [
        Fault.http(429, retry_after=0.01),
        reply(
            "cached answer",
            usage=Usage(
                input_tokens=12, output_tokens=5, cache_read_tokens=2048, cache_write_tokens=256
            ),
        ),
    ]
    with FakeLLMServer(script) as server:
        provider = AnthropicProvider(
            "claude-sonnet-4-5", api_key="test", base_url=server.anthropic_base_url
        )
        async with provider:
            agent = Agent(provider, observer=observer, retry=FAST)
            result = await agent.run("hi")
    assert result.text == "cached answer"
    got = Metrics(reader)
    meters.shutdown()
    base = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
    }
    assert got.attributes("fanloop.retries") == [
        {
            "fanloop.retry.reason": "RateLimited",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4-5",
        }
    ]
    failed = got.point("gen_ai.client.operation.duration", error__type="RateLimited")
    assert failed.count == 1
    answered = got.point(
        "gen_ai.client.operation.duration", gen_ai__response__model="claude-sonnet-4-5"
    )
    assert answered.count == 1
    for attrs in got.attributes("gen_ai.client.operation.duration"):
        assert attrs.items() >= base.items()
    sums = {
        (a["gen_ai.token.type"], a["fanloop.token.cache"]): p.sum
        for a, p in got.points("gen_ai.client.token.usage")
    }
    assert sums == {
        ("input", "none"): 12,
        ("input", "read"): 2048,
        ("input", "write"): 256,
        ("output", "none"): 5,
    }
    assert got.point("gen_ai.client.operation.time_to_first_chunk").count == 1
    cost = got.point("fanloop.cost.usd")
    assert result.cost_usd is not None
    assert math.isclose(cost.value, result.cost_usd, rel_tol=1e-9)


async def test_model_and_tool_names_from_outside_are_capped() -> None:
    reader = InMemoryMetricReader()
    meters, observer = metrics_observer(reader)
    from fanloop import _otel_metrics

    path = ("agent",)
    observer.on_event(RunStarted("r1", "agent", "m", "scripted", agent_path=path))
    for i in range(_otel_metrics.MAX_VALUES + 50):
        part = ToolCallPart(id=f"c{i}", name=f"invented_{i}", arguments={})
        observer.on_event(ToolStarted(part, agent_path=path))
        result = ToolResultPart(call_id=part.id, content="Unknown tool", is_error=True)
        observer.on_event(ToolFinished(part, result, agent_path=path))
    long = ToolCallPart(id="long", name="x" * 1000, arguments={})
    observer.on_event(ToolStarted(long, agent_path=path))
    observer.on_event(
        ToolFinished(
            long, ToolResultPart(call_id="long", content="", is_error=True), agent_path=path
        )
    )
    got = Metrics(reader)
    meters.shutdown()
    names = [a["gen_ai.tool.name"] for a in got.attributes("fanloop.tool.duration")]
    assert len(names) == _otel_metrics.MAX_VALUES + 1
    assert got.point("fanloop.tool.duration", gen_ai__tool__name="_OTHER").count == 51


async def test_with_the_span_observer_and_on_a_noop_meter() -> None:
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meters, metrics = metrics_observer(reader)
    both = MultiObserver(OpenTelemetryObserver(tracing), metrics)
    await Agent(ScriptedProvider(["hi"]), observer=both).run("hello")
    assert [s.name for s in spans.get_finished_spans()] == [
        "chat scripted-model",
        "invoke_agent agent",
    ]
    assert Metrics(reader).point("fanloop.runs").value == 1
    meters.shutdown()

    # no meter provider at all (the API's no-op meter, global or given): runs as usual
    for quiet in (OpenTelemetryMetrics(), OpenTelemetryMetrics(NoOpMeterProvider())):
        result = await Agent(
            ScriptedProvider([reply(tool_calls=[call("lookup", q="x")]), "done"]),
            tools=[lookup],
            observer=quiet,
            limits=Limits(max_turns=5),
        ).run("go")
        assert result.text == "done"
        assert quiet._current.get() is None


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        assert length < 10_000_000
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_the_otlp_http_exporter_sends_the_metrics() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    handler = type("Receiver", (_Receiver,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        exporter = OTLPMetricExporter(endpoint=f"http://127.0.0.1:{port}/v1/metrics", timeout=10)
        periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        meters = MeterProvider(metric_readers=[periodic])
        agent = Agent(
            ScriptedProvider(
                [
                    reply(
                        tool_calls=[call("lookup", q="x")],
                        usage=Usage(input_tokens=40, output_tokens=4),
                    ),
                    reply("done", usage=Usage(input_tokens=60, output_tokens=6)),
                ]
            ),
            tools=[lookup],
            observer=OpenTelemetryMetrics(meters),
        )
        await agent.run("go")
        assert await anyio.to_thread.run_sync(lambda: meters.force_flush(10_000))
        await anyio.to_thread.run_sync(meters.shutdown)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert handler.bodies
    found: dict[str, Any] = {}
    for body in handler.bodies:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "fanloop"
                for metric in scope.metrics:
                    found.setdefault(metric.name, metric)
    tokens = found["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    sums = {}
    for point in tokens.histogram.data_points:
        attrs = {kv.key: kv.value.string_value for kv in point.attributes}
        sums[attrs["gen_ai.token.type"]] = point.sum
        assert list(point.explicit_bounds) == TOKEN_BUCKETS
        assert attrs["gen_ai.provider.name"] == "scripted"
    assert sums == {"input": 100, "output": 10}
    assert found["gen_ai.client.operation.duration"].unit == "s"
    assert found["gen_ai.client.operation.duration"].histogram.data_points[0].count == 2
    (runs,) = found["fanloop.runs"].sum.data_points
    assert runs.as_int == 1 and found["fanloop.runs"].sum.is_monotonic
    (active,) = found["fanloop.runs.active"].sum.data_points
    assert active.as_int == 0 and not found["fanloop.runs.active"].sum.is_monotonic
    (tool_point,) = found["fanloop.tool.duration"].histogram.data_points
    assert tool_point.count == 1


def test_a_global_meter_provider_set_later_is_used_from_the_next_run(tmp_path: Any) -> None:
    """In a process of its own: the global meter provider can be set only once."""
    import subprocess
    import sys

    script = tmp_path / "later.py"
    script.write_text(
        "import anyio\n"
        "from opentelemetry import metrics\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from fanloop import Agent\n"
        "from fanloop.otel import OpenTelemetryMetrics\n"
        "from fanloop.testing import ScriptedProvider\n"
        "observer = OpenTelemetryMetrics()\n"
        "agent = Agent(ScriptedProvider(['one', 'two']), observer=observer)\n"
        "anyio.run(agent.run, 'a')\n"
        "reader = InMemoryMetricReader()\n"
        "metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))\n"
        "anyio.run(agent.run, 'b')\n"
        "data = reader.get_metrics_data()\n"
        "points = {m.name: m.data.data_points for r in data.resource_metrics\n"
        "          for s in r.scope_metrics for m in s.metrics}\n"
        "calls = points['gen_ai.client.operation.duration'][0].count\n"
        "print(points['fanloop.runs'][0].value, calls)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1"]  # the second run only


def test_the_dashboard_uses_the_instruments_and_the_doc_shows_its_queries() -> None:
    import json
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    dashboard = json.loads((docs / "grafana" / "fanloop-dashboard.json").read_text())
    page = (docs / "observability.md").read_text()
    # every instrument's Prometheus name (the default OTLP-to-Prometheus translation)
    known = set()
    for line in page.splitlines():
        match = re.match(r"\| `([a-z_.]+)` \| ([a-z -]+) \| `([^`]+)` \|", line)
        if match:
            name, kind, unit = match.groups()
            base = name.replace(".", "_") + ("_seconds" if unit == "s" else "")
            if kind == "histogram":
                known |= {base + "_bucket", base + "_sum", base + "_count"}
            elif kind == "counter":
                known.add(base + "_total")
            else:
                known.add(base)
    assert len(known) == 5 * 3 + 3 + 1  # 5 histograms, 3 counters, 1 up-down counter
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(dashboard["panels"]) >= 8
    for expr in exprs:
        assert expr in page, expr
        used = set(
            re.findall(r"\b(?:gen_ai|fanloop)_[a-z_]+(?=[{[)])", re.sub(r"by \([^)]*\)", "", expr))
        )
        assert used and used <= known, (expr, used - known)


async def test_under_a_fallback_provider_each_attempt_names_its_provider(
    reader: InMemoryMetricReader,
) -> None:
    from fanloop.providers.fallback import FallbackProvider

    meters, observer = metrics_observer(reader)
    first = ScriptedProvider(
        [Overloaded("busy", provider="first"), Overloaded("still busy", provider="first")],
        model="claude-haiku-4-5",
    )
    first.name = "first"
    second = ScriptedProvider(["answer"], model="gpt-4.1")
    second.name = "second"
    retry = RetryPolicy(max_retries=1, base_delay=0.001, jitter=False)
    agent = Agent(FallbackProvider(first, second, retry=retry), observer=observer)
    assert (await agent.run("go")).text == "answer"
    got = Metrics(reader)
    meters.shutdown()
    calls = {
        (a["gen_ai.provider.name"], a.get("error.type"), a.get("gen_ai.response.model")): p.count
        for a, p in got.points("gen_ai.client.operation.duration")
    }
    assert calls == {("first", "Overloaded", None): 2, ("second", None, "gpt-4.1"): 1}
    assert got.attributes("fanloop.retries") == [
        {
            "fanloop.retry.reason": "Overloaded",
            "gen_ai.provider.name": "first",
            "gen_ai.request.model": "claude-haiku-4-5",
        }
    ]
    assert got.point("gen_ai.client.token.usage", gen_ai__token__type="output").count == 1
    for attrs in got.attributes("gen_ai.client.token.usage"):
        assert attrs["gen_ai.provider.name"] == "second"


async def test_a_streamed_run_is_recorded_like_any_other(reader: InMemoryMetricReader) -> None:
    meters, observer = metrics_observer(reader)
    agent = Agent(
        ScriptedProvider([reply(tool_calls=[call("lookup", q="x")]), "done"], chunk_size=2),
        tools=[lookup],
        observer=observer,
    )
    async with agent.stream("go") as run:
        kinds = [event.kind async for event in run]
    assert kinds.count("text_delta") >= 2
    got = Metrics(reader)
    meters.shutdown()
    assert got.point("gen_ai.client.operation.duration").count == 2
    assert got.point("gen_ai.client.operation.time_to_first_chunk").count == 2
    assert got.point("fanloop.tool.duration", gen_ai__tool__name="lookup").count == 1
    assert got.point("fanloop.runs", fanloop__termination_reason="completed").value == 1
    assert got.point("fanloop.runs.active").value == 0
