"""Content capture on GenAI spans: off by default; on, the semantic conventions' message
attributes, each value capped and masked so that no secret reaches an exported span."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fanloop import Agent, tool
from fanloop.errors import ConfigurationError
from fanloop.otel import CAPTURE_ENV, OpenTelemetryObserver, _Masker
from fanloop.testing import ScriptedProvider, call, reply

API_KEY = "sk-ant-api03-" + "Zq7" * 30  # a vendor-shaped key (masked by its shape)
PASSWORD = "correct-horse-battery-staple-42"  # only known as a secret variable's value
FILLER = "lorem ipsum dolor sit amet "


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    monkeypatch.setenv("BILLING_DB_PASSWORD", PASSWORD)


def traced(**options: Any) -> tuple[InMemorySpanExporter, OpenTelemetryObserver]:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, OpenTelemetryObserver(tracing, **options)


@tool
def read_config(path: str) -> str:
    """Read a configuration file."""
    return f"[billing]\nurl = https://billing.example\nkey = {API_KEY}\npassword: {PASSWORD}\n"


@tool
def dump(n: int) -> str:
    """Dump n characters."""
    return FILLER * (n // len(FILLER))


async def run(observer: OpenTelemetryObserver, *turns: Any, tools: Any = (read_config,)) -> None:
    agent = Agent(
        ScriptedProvider(list(turns)),
        tools=list(tools),
        system="You are a billing assistant.",
        observer=observer,
    )
    await agent.run(f"check the billing config (my password is {PASSWORD})")


CONTENT = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


def script() -> tuple[Any, ...]:
    return (
        reply(tool_calls=[call("read_config", _id="t1", path="/etc/billing.ini")]),
        reply(f"The key is {API_KEY} and the password {PASSWORD}."),
    )


async def test_off_by_default() -> None:
    exporter, observer = traced()
    await run(observer, *script())
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        assert not set(CONTENT) & set(span.attributes or {})


async def test_the_environment_variable_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_ENV, "true")
    exporter, observer = traced()
    assert observer.capture_content
    await run(observer, *script())
    assert any(
        "gen_ai.input.messages" in (s.attributes or {}) for s in exporter.get_finished_spans()
    )
    monkeypatch.setenv(CAPTURE_ENV, "true")
    assert not traced(capture_content=False)[1].capture_content  # the argument wins


async def test_captured_content_has_the_semantic_conventions_structure() -> None:
    exporter, observer = traced(capture_content=True)
    await run(observer, *script())
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != "chat scripted-model"}
    first, second = [s for s in exporter.get_finished_spans() if s.name == "chat scripted-model"]
    attrs = first.attributes
    assert json.loads(attrs["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You are a billing assistant."}
    ]
    assert json.loads(attrs["gen_ai.input.messages"]) == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "check the billing config (my password is ******)"}
            ],
        }
    ]
    assert json.loads(attrs["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "t1",
                    "name": "read_config",
                    "arguments": '{"path": "/etc/billing.ini"}',
                }
            ],
            "finish_reason": "tool_use",
        }
    ]
    history = json.loads(second.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    [response] = history[2]["parts"]
    assert response["type"] == "tool_call_response" and response["id"] == "t1"
    assert "url = https://billing.example" in response["response"]
    tool_span = spans["execute_tool read_config"].attributes
    assert tool_span["gen_ai.tool.call.arguments"] == '{"path": "/etc/billing.ini"}'
    assert tool_span["gen_ai.tool.call.result"] == response["response"]
    [out] = json.loads(second.attributes["gen_ai.output.messages"])
    assert out["finish_reason"] == "end_turn"
    assert out["parts"][0]["type"] == "text"


async def test_no_secret_reaches_any_exported_span() -> None:
    exporter, observer = traced(capture_content=True)
    await run(observer, *script())
    exported = "\n".join(s.to_json() for s in exporter.get_finished_spans())
    assert "gen_ai.tool.call.result" in exported
    assert "******" in exported
    for secret in (API_KEY, PASSWORD, API_KEY[:20], PASSWORD[:12]):
        assert secret not in exported
        assert json.dumps(secret)[1:-1] not in exported


async def test_values_are_capped_with_a_marker() -> None:
    exporter, observer = traced(capture_content=True, max_content_chars=1000)
    await run(
        observer,
        reply(tool_calls=[call("dump", _id="t1", n=50_000)]),
        reply("x" * 5000),
        tools=[dump],
    )
    [tool_span] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool dump"]
    result = tool_span.attributes["gen_ai.tool.call.result"]
    assert result.startswith(FILLER)
    assert result.endswith("…[truncated 48,977 characters]")
    assert len(result) < 1100
    last_chat = [s for s in exporter.get_finished_spans() if s.name == "chat scripted-model"][-1]
    # The whole of the input messages is held to the cap: the newest first.
    history = last_chat.attributes["gen_ai.input.messages"]
    assert len(history) < 1600
    [out] = json.loads(last_chat.attributes["gen_ai.output.messages"])
    assert out["parts"][0]["content"] == "x" * 1000 + "…[truncated 4,000 characters]"


def test_a_secret_cut_by_the_cap_is_not_half_shown() -> None:
    mask = _Masker({"BILLING_DB_PASSWORD": PASSWORD})
    for offset in range(0, len(PASSWORD) + 1, 3):
        # the cap falls inside the secret, with a long tail after it
        text = "a" * (1000 - offset) + PASSWORD + " " + "b" * 10_000
        masked = mask(text, 1000)
        assert PASSWORD[:6] not in masked, offset
        assert masked.endswith("characters]")
        # and when the cap falls at the very edge of the scanned margin
        text = "a" * 5000 + PASSWORD + "b" * 10_000
        assert PASSWORD[:6] not in mask(text, 5000 - 4096 + 3)


def test_masking_a_huge_value_scans_only_the_cap() -> None:
    mask = _Masker({"BILLING_DB_PASSWORD": PASSWORD})
    huge = (FILLER + API_KEY + " ") * 200_000  # about 25 MB
    started = time.perf_counter()
    masked = mask(huge, 16_384)
    elapsed = time.perf_counter() - started
    assert len(masked) < 16_500 and API_KEY not in masked
    assert elapsed < 1.0, elapsed  # measured: a few ms; generous for a loaded machine


@pytest.mark.parametrize("bad", [0, 63, 2_000_000, 1.5, True, "16k"])
def test_a_bad_cap_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_content_chars"):
        OpenTelemetryObserver(max_content_chars=bad)


async def test_no_secret_reaches_a_metric_either() -> None:
    """Spans with content and metrics on one run: the metrics' exported data (every attribute
    of every point) holds no secret either."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from fanloop import MultiObserver
    from fanloop.otel import OpenTelemetryMetrics

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    exporter, spans = traced(capture_content=True)
    await run(MultiObserver(spans, OpenTelemetryMetrics(meters)), *script())
    data = reader.get_metrics_data()
    assert data is not None
    exported = data.to_json() + "\n".join(s.to_json() for s in exporter.get_finished_spans())
    assert "gen_ai.client.token.usage" in exported
    for secret in (API_KEY, PASSWORD, API_KEY[:20], PASSWORD[:12]):
        assert secret not in exported
        assert json.dumps(secret)[1:-1] not in exported
    meters.shutdown()
