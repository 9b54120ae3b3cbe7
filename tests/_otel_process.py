"""One process of the cross-process tracing test (run as a script, not collected).

``python _otel_process.py park DB SESSION BASE_URL SPANS`` runs an agent on the fake server with
a session in the SQLite file DB; its ``confirm`` defers the dangerous call, so the run ends with
``awaiting_approval``. ``python _otel_process.py resume DB SESSION BASE_URL SPANS`` approves
that call inside a span of its own (``approve-request``, standing for the web request that
carried the click) and runs the batch on. Each process exports its finished spans to SPANS, one
JSON object per line (``ReadableSpan.to_json``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from fanloop import DEFER, Agent, tool
from fanloop.otel import OpenTelemetryObserver
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import SQLiteStore


class JSONLinesExporter(SpanExporter):
    """Appends each finished span to a file as one line of JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as f:
            for span in spans:
                f.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name} is in the directory"


@tool(dangerous=True)
def send(to: str, amount: int) -> str:
    """Send money."""
    return f"sent {amount} to {to}"


async def main(mode: str, db: str, session_id: str, base_url: str, spans: str) -> None:
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(JSONLinesExporter(Path(spans))))
    observer = OpenTelemetryObserver(tracing)
    store = SQLiteStore(db)
    try:
        async with OpenAIProvider("gpt-4.1", api_key="test", base_url=base_url) as provider:
            agent = Agent(
                provider,
                tools=[lookup, send],
                confirm=lambda name, preview: DEFER,
                observer=observer,
            )
            if mode == "park":
                session = await store.open(session_id)
                result = await agent.run("pay bob", session=session)
                assert result.termination_reason == "awaiting_approval", result
            else:
                session = await store.load(session_id)
                with tracing.get_tracer("approver").start_as_current_span("approve-request"):
                    result = await agent.resume(session, approvals={"c2": True})
                assert result.termination_reason == "completed", result
            print(result.termination_reason, flush=True)
    finally:
        await store.aclose()
        tracing.shutdown()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
