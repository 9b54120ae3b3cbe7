"""Traces across processes: a run parked for approval and resumed elsewhere is one trace; the
stored trace context is validated; model requests carry ``traceparent`` when asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fanloop import DEFER, Agent, MultiObserver, NullObserver, TerminationReason, tool
from fanloop._approvals import PENDING_KEY, TRACE_KEY
from fanloop.otel import OpenTelemetryObserver, continued_context
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import MemoryStore, Session
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply

HERE = Path(__file__).parent


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name} found"


@tool(dangerous=True)
def send(to: str, amount: int) -> str:
    """Send money."""
    return f"sent {amount} to {to}"


def traced() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, tracing


def script() -> ScriptedProvider:
    return ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("lookup", _id="c1", name="bob"),
                    call("send", _id="c2", to="bob", amount=5),
                ]
            ),
            "paid",
        ]
    )


def agent_with(provider: ScriptedProvider, observer: Any) -> Agent:
    return Agent(
        provider, tools=[lookup, send], confirm=lambda name, preview: DEFER, observer=observer
    )


async def park(session: Session, observer: Any) -> ScriptedProvider:
    provider = script()
    result = await agent_with(provider, observer).run("pay bob", session=session)
    assert result.termination_reason is TerminationReason.AWAITING_APPROVAL
    return provider


def by_name(spans: Any, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


# -- one process ----------------------------------------------------------------------------


async def test_a_resumed_run_is_a_child_of_the_run_that_parked() -> None:
    store = MemoryStore()
    session = await store.open("s")
    exporter_a, tracing_a = traced()
    provider = await park(session, OpenTelemetryObserver(tracing_a))
    [parked] = by_name(exporter_a.get_finished_spans(), "invoke_agent agent")
    stored = session.metadata[PENDING_KEY][TRACE_KEY]
    assert set(stored) == {"traceparent"}
    assert stored["traceparent"].split("-")[1] == f"{parked.context.trace_id:032x}"

    exporter_b, tracing_b = traced()  # another observer, another tracer provider
    agent = agent_with(provider, OpenTelemetryObserver(tracing_b))
    result = await agent.resume(await store.load("s"), approvals={"c2": True})
    assert result.termination_reason is TerminationReason.COMPLETED
    spans = exporter_b.get_finished_spans()
    [resumed] = by_name(spans, "invoke_agent agent")
    assert resumed.parent is not None and resumed.parent.is_remote
    assert resumed.parent.span_id == parked.context.span_id
    assert resumed.attributes["fanloop.resumed"] is True
    assert {s.context.trace_id for s in spans} == {parked.context.trace_id}
    assert [s.name for s in spans] == [
        "execute_tool send",
        "chat scripted-model",
        "invoke_agent agent",
    ]


async def test_nothing_is_stored_without_a_tracing_observer() -> None:
    store = MemoryStore()
    session = await store.open("s")
    await park(session, MultiObserver(NullObserver()))
    assert TRACE_KEY not in session.metadata[PENDING_KEY]
    session = await store.open("t")
    await park(session, None)
    assert TRACE_KEY not in session.metadata[PENDING_KEY]


async def test_a_tracing_observer_inside_a_multi_observer_stores_its_context() -> None:
    store = MemoryStore()
    session = await store.open("s")
    _, tracing = traced()
    await park(session, MultiObserver(NullObserver(), OpenTelemetryObserver(tracing)))
    assert "traceparent" in session.metadata[PENDING_KEY][TRACE_KEY]


# -- hostile stored values --------------------------------------------------------------------

GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "stored",
    [
        {"traceparent": "x" * 100_000},
        {"traceparent": GOOD + "-extra"},
        {"traceparent": GOOD.upper()},
        {"traceparent": "ff" + GOOD[2:]},
        {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"},
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01"},
        {"traceparent": GOOD[:-1] + "\n"},
        {"traceparent": 12},
        {"traceparent": ["00", "x"]},
        {},
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ["traceparent", GOOD],
        None,
    ],
    ids=lambda v: repr(v)[:40],
)
async def test_a_corrupt_stored_trace_context_is_ignored(stored: Any) -> None:
    store = MemoryStore()
    session = await store.open("s")
    _, tracing_a = traced()
    provider = await park(session, OpenTelemetryObserver(tracing_a))
    state = dict(session.metadata[PENDING_KEY])
    state[TRACE_KEY] = stored
    await session.set_metadata(**{PENDING_KEY: state})

    exporter, tracing = traced()
    agent = agent_with(provider, OpenTelemetryObserver(tracing))
    result = await agent.resume(await store.load("s"), approvals={"c2": True})
    assert result.termination_reason is TerminationReason.COMPLETED
    [run] = by_name(exporter.get_finished_spans(), "invoke_agent agent")
    assert run.parent is None  # a trace of its own
    assert "fanloop.resumed" not in run.attributes
    assert continued_context(stored) is None


def test_a_valid_traceparent_with_a_hostile_tracestate_keeps_the_parent_only() -> None:
    from opentelemetry import trace

    for state in ("k=" + "v" * 600, "k=v\x00", "k=\u00e9"):
        ctx = continued_context({"traceparent": GOOD, "tracestate": state})
        assert ctx is not None
        span_context = trace.get_current_span(ctx).get_span_context()
        assert f"{span_context.trace_id:032x}" == GOOD.split("-")[1]
        assert len(span_context.trace_state) == 0
    ctx = continued_context({"traceparent": GOOD, "tracestate": "vendor=abc"})
    assert trace.get_current_span(ctx).get_span_context().trace_state.get("vendor") == "abc"


# -- two processes ------------------------------------------------------------------------------


def spans_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_parked_in_one_process_and_approved_in_another_is_one_trace(
    tmp_path: Path,
) -> None:
    db, spans_a, spans_b = tmp_path / "s.db", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with FakeLLMServer() as server:
        server.add(
            reply(
                tool_calls=[
                    call("lookup", _id="c1", name="bob"),
                    call("send", _id="c2", to="bob", amount=5),
                ]
            ),
            "paid",
        )
        for mode, spans in (("park", spans_a), ("resume", spans_b)):
            out = subprocess.run(
                [sys.executable, str(HERE / "_otel_process.py"), mode, str(db), "s1",
                 server.openai_base_url, str(spans)],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
    a, b = spans_of(spans_a), spans_of(spans_b)
    assert [s["name"] for s in a] == ["chat gpt-4.1", "execute_tool lookup", "invoke_agent agent"]
    assert [s["name"] for s in b] == [
        "execute_tool send",
        "chat gpt-4.1",
        "invoke_agent agent",
        "approve-request",
    ]
    fanloop_spans = [s for s in a + b if "gen_ai.operation.name" in s["attributes"]]
    assert len({s["context"]["trace_id"] for s in fanloop_spans}) == 1  # one trace, two processes
    parked = a[-1]
    resumed, approver = b[-2], b[-1]
    assert resumed["parent_id"] == parked["context"]["span_id"]
    assert resumed["attributes"]["fanloop.resumed"] is True
    # The approving request's span (a trace of its own here) is linked, not the parent.
    assert approver["context"]["trace_id"] != parked["context"]["trace_id"]
    [link] = resumed["links"]
    assert link["context"]["span_id"] == approver["context"]["span_id"]
    assert link["attributes"] == {"fanloop.link": "resumed_by"}


# -- traceparent on model requests --------------------------------------------------------------


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("propagate", [False, True])
async def test_model_requests_carry_the_chat_spans_traceparent_when_asked(
    propagate: bool, api: str, transport: str
) -> None:
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    exporter, tracing = traced()
    observer = OpenTelemetryObserver(tracing, propagate_to_requests=propagate)
    with FakeLLMServer() as server:
        server.add(reply(tool_calls=[call("lookup", _id="c1", name="bob")]), "done", api=api)
        provider: Any
        if api == "openai":
            provider = OpenAIProvider(
                "gpt-4.1", api_key="test", base_url=server.openai_base_url, transport=transport
            )
        else:
            provider = AnthropicProvider(
                "gpt-4.1", api_key="test", base_url=server.anthropic_base_url, transport=transport
            )
        async with provider:
            result = await Agent(provider, tools=[lookup], observer=observer).run("hi")
        assert result.text == "done"
        headers = [r.headers for r in server.requests]
    chats = by_name(exporter.get_finished_spans(), "chat gpt-4.1")
    assert len(headers) == len(chats) == 2
    if not propagate:
        assert all("traceparent" not in h for h in headers)
        return
    for h, chat in zip(headers, chats, strict=True):
        version, trace_id, span_id, flags = h["traceparent"].split("-")
        assert version == "00"
        assert int(flags, 16) & 1  # sampled
        assert trace_id == f"{chat.context.trace_id:032x}"
        assert span_id == f"{chat.context.span_id:016x}"  # the call's own chat span


async def test_the_header_is_not_left_behind_after_the_run() -> None:
    from fanloop.providers._endpoint import TRACE_HEADERS

    _, tracing = traced()
    observer = OpenTelemetryObserver(tracing, propagate_to_requests=True)
    await Agent(ScriptedProvider(["hi"]), observer=observer).run("hello")
    assert TRACE_HEADERS.get() is None
