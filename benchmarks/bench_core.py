"""Core overhead: fanloop's loop vs a hand-written loop on the same ScriptedProvider, and the
wall time of a 32-call fan-out. Run: ``python benchmarks/bench_core.py``."""

from __future__ import annotations

import statistics
import time
from typing import Any

import anyio

from _common import Row, median_time, table, write
from fanloop import Agent, Delegation, Limits, MultiObserver, NullObserver, tool
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, ToolSpec
from fanloop.testing import ScriptedProvider, call, reply

TURNS = 50


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


def conversation_model() -> ScriptedProvider:
    """A model that calls noop once per turn for TURNS turns, then answers."""
    tool_turn = reply("step", tool_calls=[call("noop", _id="c")])
    final = reply("done")

    def answer(request: ModelRequest) -> ModelResponse:
        return tool_turn if len(request.messages) < 2 * TURNS else final

    return ScriptedProvider(answer, chunk_size=1000, record=False)


async def handwritten(provider: ScriptedProvider, prompt: str) -> str:
    """The minimal loop a user would write by hand on the same provider protocol."""
    specs = (ToolSpec(name=noop.name, description=noop.description, parameters=noop.parameters),)
    tools = {"noop": noop}
    messages = [Message.user(prompt)]
    while True:
        request = ModelRequest(messages=tuple(messages), tools=specs, max_tokens=4096)
        response: Any = None
        async with provider.stream(request) as events:
            async for item in events:
                if isinstance(item, ModelResponse):
                    response = item
        messages.append(response.to_message())
        if not response.tool_calls:
            return str(response.text)
        results = []
        for c in response.tool_calls:
            out = await tools[c.name].run(**c.arguments)
            results.append(ToolResultPart(call_id=c.id, content=str(out)))
        messages.append(Message.tool_results(results))


async def per_turn(repeats: int = 15) -> Row:
    provider = conversation_model()
    agent = Agent(provider, tools=[noop], limits=Limits(max_turns=None))

    async def fanloop_run() -> None:
        result = await agent.run("go")
        assert result.turns == TURNS + 1

    async def baseline_run() -> None:
        assert await handwritten(provider, "go") == "done"

    await fanloop_run()
    await baseline_run()  # warm up both
    ours = await median_time(fanloop_run, repeats) / (TURNS + 1)
    base = await median_time(baseline_run, repeats) / (TURNS + 1)
    return Row(
        "50-turn tool conversation (ScriptedProvider, streaming)",
        "per turn",
        ours * 1e6,
        base * 1e6,
        "µs",
        "≤ 1.2× hand-written loop",
    )


class _Counter(NullObserver):
    """Counts responses: an observer without ``on_event``."""

    def __init__(self) -> None:
        self.responses = 0

    def on_response(self, response: object) -> None:
        self.responses += 1


class _EveryEvent(NullObserver):
    """An observer with an empty ``on_event``: what any event-fed observer costs the loop."""

    def on_event(self, event: object) -> None:
        pass


async def per_turn_metrics(repeats: int = 15) -> list[Row]:
    """The per-turn loop with OpenTelemetry (docs/observability.md), in CPU time.

    Eight agents on the same script, run in turn: no observer; an observer with an empty
    ``on_event`` (the events every such observer makes the loop build and dispatch);
    ``OpenTelemetryMetrics`` with no meter provider configured (the API's no-op meter: its
    own cost, against the empty observer) and on an SDK ``MeterProvider`` with an in-memory
    reader; ``OpenTelemetryObserver`` spans on an SDK ``TracerProvider`` (a simple processor
    and an in-memory exporter), without and with content capture, and with no tracer provider
    at all (the API's proxy: each run is skipped); a ``MultiObserver`` of two observers without
    ``on_event`` (it subscribes only what they define). CPU time of this process,
    not wall time, so other processes on a busy machine move the figures less.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fanloop.otel import OpenTelemetryMetrics, OpenTelemetryObserver

    sdk = MeterProvider(metric_readers=[InMemoryMetricReader()])
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    observers: dict[str, Any] = {
        "none": None,
        "empty": _EveryEvent(),
        "no-op": OpenTelemetryMetrics(),  # no global meter provider: the API's no-op meter
        "sdk": OpenTelemetryMetrics(sdk),
        "spans": OpenTelemetryObserver(tracing),
        "content": OpenTelemetryObserver(tracing, capture_content=True),
        # no tracer provider given, no global one: the API's proxy (nothing recorded)
        "spans no-op": OpenTelemetryObserver(),
        "multi": MultiObserver(_Counter(), _Counter()),  # no on_event inside
    }
    agents = {
        name: Agent(conversation_model(), tools=[noop], limits=Limits(max_turns=None), observer=obs)
        for name, obs in observers.items()
    }
    times: dict[str, list[float]] = {name: [] for name in agents}
    for agent in agents.values():  # warm up
        await agent.run("go")
    for _ in range(repeats):  # interleaved, so drift hits all four alike
        for name, agent in agents.items():
            started = time.process_time()
            result = await agent.run("go")
            times[name].append((time.process_time() - started) / (TURNS + 1))
            assert result.turns == TURNS + 1
            spans.clear()  # the exporter keeps every span: memory, not the observer's cost
    sdk.shutdown()
    tracing.shutdown()
    cpu = {name: statistics.median(values) * 1e6 for name, values in times.items()}
    workload = "50-turn tool conversation (ScriptedProvider), CPU time"
    return [
        Row(
            f"{workload}: an observer with an empty `on_event` (baseline: no observer)",
            "per turn",
            cpu["empty"],
            cpu["none"],
            "µs",
        ),
        Row(
            f"{workload}: `OpenTelemetryMetrics` on the API's no-op meter "
            "(baseline: the empty `on_event` observer)",
            "per turn",
            cpu["no-op"],
            cpu["empty"],
            "µs",
            "≤ 1.1×",
        ),
        Row(
            f"{workload}: `OpenTelemetryMetrics` on an SDK `MeterProvider` (baseline: no observer)",
            "per turn",
            cpu["sdk"],
            cpu["none"],
            "µs",
            "≤ 2.5×",
        ),
        Row(
            f"{workload}: `OpenTelemetryObserver` spans on an SDK `TracerProvider` "
            "(baseline: no observer)",
            "per turn",
            cpu["spans"],
            cpu["none"],
            "µs",
        ),
        Row(
            f"{workload}: the same with `capture_content=True` (baseline: spans without content)",
            "per turn",
            cpu["content"],
            cpu["spans"],
            "µs",
        ),
        Row(
            f"{workload}: `OpenTelemetryObserver` with no tracer provider set "
            "(baseline: the empty `on_event` observer)",
            "per turn",
            cpu["spans no-op"],
            cpu["empty"],
            "µs",
            "≤ 1.1×",
        ),
        Row(
            f"{workload}: a `MultiObserver` of two observers without `on_event` "
            "(baseline: no observer)",
            "per turn",
            cpu["multi"],
            cpu["none"],
            "µs",
            "≤ 1.1×",
        ),
    ]


async def fan_out(sync: bool, repeats: int = 3) -> Row:
    if sync:

        @tool(concurrent_safe=True)
        def sleeper(n: int) -> str:
            """Sleep 0.2 s (blocking)."""
            time.sleep(0.2)
            return str(n)
    else:

        @tool(concurrent_safe=True)
        async def sleeper(n: int) -> str:
            """Sleep 0.2 s."""
            await anyio.sleep(0.2)
            return str(n)

    turn = reply(tool_calls=[call("sleeper", n=i) for i in range(32)])
    agent = Agent(
        ScriptedProvider(lambda r: turn if len(r.messages) == 1 else "done"), tools=[sleeper]
    )
    wall = await median_time(lambda: agent.run("go"), repeats)
    variant = "sync, worker threads" if sync else "async"
    return Row(
        f"one turn, 32 calls of a tool sleeping 0.2 s ({variant})",
        "wall time",
        wall,
        0.2,
        "s",
        "≤ 0.3 s",
    )


async def delegations(repeats: int = 3) -> Row:
    """8 sub-agents delegated in one turn, each calling a tool that sleeps 0.5 s."""

    @tool
    async def slow_lookup(topic: str) -> str:
        """Look a topic up (0.5 s)."""
        await anyio.sleep(0.5)
        return f"facts about {topic}"

    def model(request: ModelRequest) -> Any:
        if request.system and "sub-agent" in request.system:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("slow_lookup", topic=request.messages[0].text)])
            return "report"
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", task=f"topic {i}") for i in range(8)])
        return "all reports in"

    agent = Agent(ScriptedProvider(model), delegation=Delegation(tools=[slow_lookup]))
    wall = await median_time(lambda: agent.run("research"), repeats)
    return Row(
        "one turn delegating to 8 sub-agents whose tool sleeps 0.5 s",
        "wall time",
        wall,
        0.5,
        "s",
        "well under 1 s",
    )


async def main() -> list[Row]:
    return [
        await per_turn(),
        *await per_turn_metrics(),
        await fan_out(sync=False),
        await fan_out(sync=True),
        await delegations(),
    ]


if __name__ == "__main__":
    rows = anyio.run(main)
    text = table(rows)
    print(text)
    print(f"\nwritten to {write('core.md', text + chr(10))}")
