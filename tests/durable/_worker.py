"""A DBOS worker process for the durable tests.

Usage: python _worker.py SYSTEM_DB_URL LLM_URL SLOW_LLM_URL EXECUTOR_ID MARKS_DIR [--no-queues]

It builds the test agents (their models are the test process's FakeLLMServers), launches DBOS
(recovering the pending runs of EXECUTOR_ID), prints READY, then reads commands on stdin:

  start AGENT WORKFLOW_ID PROMPT...   start a run of that agent in this process
  run AGENT WORKFLOW_ID PROMPT...     run it here and print RESULT WORKFLOW_ID repr(output)

Tools leave their traces in MARKS_DIR: ``calls`` (one line per start and end of a tool call,
with this process's pid) and, for the fan-out tool, ``where`` and ``running`` (how many calls
run at once, counted under a file lock).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import anyio
from dbos import DBOS
from pydantic import BaseModel

from fanloop import DEFER, Agent, Delegation, Limits, ModelSettings, tool
from fanloop.durable import DurableAgent
from fanloop.providers.openai import OpenAIProvider

db_url, llm_url, slow_url, executor_id, marks_dir = sys.argv[1:6]
listen = "--no-queues" not in sys.argv
marks = Path(marks_dir)
PID = os.getpid()


def mark(file: str, line: str) -> None:
    with (marks / file).open("a") as f:
        f.write(f"{PID} {line}\n")


# -- crash: a batch of concurrent tools and a lane of a tool that is not concurrent-safe ------


@tool(concurrent_safe=True)
async def fetch(n: int) -> str:
    """Fetch item n."""
    mark("calls", f"fetch {n} start")
    if n == 2 and (marks / "block").exists():
        print("BLOCKED", flush=True)
        await anyio.sleep_forever()
    mark("calls", f"fetch {n} done")
    return f"item {n}"


@tool
async def note(text: str) -> str:
    """Write a note (one at a time)."""
    mark("calls", f"note {text} start")
    mark("calls", f"note {text} done")
    return f"noted {text}"


# -- fan-out: sub-agents record where they ran and how many ran at once ----------------------


def _running(delta: int) -> int:
    path = marks / "running"
    with path.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        now = int(f.read() or 0) + delta
        f.seek(0)
        f.truncate()
        f.write(str(now))
    return now


@tool(concurrent_safe=True)
async def where(label: str) -> str:
    """Say where this runs."""
    now = _running(+1)
    mark("where", f"{label} start {now}")
    await anyio.sleep(0.4)
    _running(-1)
    mark("where", f"{label} done")
    return f"{label} ran in {PID}"


# -- budgets: sub-agents spend from one account in the database --------------------------------


@tool(concurrent_safe=True)
async def tick(n: int) -> str:
    """Count one more."""
    return f"tick {n}"


# -- approvals ----------------------------------------------------------------------------------


@tool(dangerous=True)
async def charge(amount: int) -> str:
    """Charge the card."""
    mark("calls", f"charge {amount}")
    return f"charged {amount}"


@tool(dangerous=True)
async def refund(amount: int) -> str:
    """Refund the card."""
    mark("calls", f"refund {amount}")
    return f"refunded {amount}"


def confirm(name: str, preview: str) -> object:
    if name == "refund":
        return DEFER
    if "amount=500" in preview:
        return "Too much."
    return True


# -- typed output: the validator's verdict is checkpointed -------------------------------------


class Invoice(BaseModel):
    total: float
    currency: str


def upper_currency(invoice: Invoice) -> Invoice:
    mark("calls", "validate invoice")
    return invoice.model_copy(update={"currency": invoice.currency.upper()})


# -- tracing: the traced agents export their spans to MARKS_DIR/spans-PID.jsonl ------------------


def tracing_observer() -> object:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from fanloop.otel import OpenTelemetryObserver

    class JSONLinesExporter(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            with (marks / f"spans-{PID}.jsonl").open("a", encoding="utf-8") as f:
                for span in spans:  # type: ignore[attr-defined]
                    f.write(span.to_json(indent=None) + "\n")
            return SpanExportResult.SUCCESS

    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(JSONLinesExporter()))
    return OpenTelemetryObserver(tracing)


fast = OpenAIProvider("gpt-4.1", api_key="test", base_url=llm_url)
slow = OpenAIProvider("gpt-4.1", api_key="test", base_url=slow_url)
limits = Limits(max_turns=10)
durables = {
    "crash": DurableAgent(
        Agent(fast, system="agent:crash", tools=[fetch, note], limits=limits), name="crash"
    ),
    "fanout": DurableAgent(
        Agent(fast, system="agent:fanout", delegation=Delegation(tools=[where])),
        name="fanout",
        concurrency=4,
        worker_concurrency=3,
        poll_interval=0.05,
    ),
    "stream": DurableAgent(Agent(slow, system="agent:stream"), name="stream"),
    "gate": DurableAgent(
        Agent(fast, system="agent:gate", tools=[charge, refund], confirm=confirm), name="gate"
    ),
    "fail": DurableAgent(Agent(fast, system="agent:fail"), name="fail"),
    "desk": DurableAgent(
        Agent(
            fast,
            system="agent:desk",
            tools=[Agent(fast, system="agent:clerk", name="clerk").as_tool("ask_clerk")],
        ),
        name="desk",
    ),
    "typed": DurableAgent(
        Agent(
            fast,
            system="agent:typed",
            output_type=Invoice,
            output_validators=[upper_currency],
            output_mode="tool",
        ),
        name="typed",
    ),
    "budget": DurableAgent(
        Agent(
            fast,
            system="agent:budget",
            delegation=Delegation(tools=[tick]),
            model_settings=ModelSettings(max_tokens=50),
            limits=Limits(max_turns=20, max_total_tokens=10_000),
        ),
        name="budget",
        concurrency=8,
        poll_interval=0.05,
    ),
    "meter": DurableAgent(
        Agent(slow, system="agent:meter", limits=Limits(max_total_tokens=5_000)), name="meter"
    ),
    "auto": DurableAgent(
        Agent(fast, system="agent:auto", tools=[charge], auto_approve=True),
        name="auto",
        events=False,
    ),
}
try:
    observer = tracing_observer()
except ImportError:  # no OpenTelemetry SDK: the tracing tests skip
    pass
else:
    durables["tcrash"] = DurableAgent(
        Agent(
            fast,
            system="agent:crash",
            tools=[fetch, note],
            limits=limits,
            name="tracked",
            observer=observer,  # type: ignore[arg-type]
        ),
        name="tcrash",
    )
    durables["tdesk"] = DurableAgent(
        Agent(
            fast,
            system="agent:desk",
            tools=[Agent(fast, system="agent:clerk", name="clerk").as_tool("ask_clerk")],
            name="desk",
            observer=observer,  # type: ignore[arg-type]
        ),
        name="tdesk",
    )


async def main() -> None:
    DBOS(
        config={
            "name": "fanloop-tests",
            "system_database_url": db_url,
            "application_version": "fanloop-tests",
            "executor_id": executor_id,
        }
    )
    if not listen:
        DBOS.listen_queues([])
    DBOS.launch()  # inside the event loop: every workflow of this process runs on it
    if listen:
        for durable in durables.values():
            await durable.register_queues()
    print("READY", flush=True)
    async with anyio.create_task_group() as tg:
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            command, agent, workflow_id, prompt = line.rstrip("\n").split(" ", 3)
            if command == "run":  # in this process, waiting for the result
                result = await durables[agent].run(prompt, workflow_id=workflow_id)
                print(f"RESULT {workflow_id} {result.output!r}", flush=True)
                continue
            assert command == "start"
            run = await durables[agent].start(prompt, workflow_id=workflow_id)
            print(f"STARTED {run.workflow_id}", flush=True)
        tg.cancel_scope.cancel()


anyio.run(main)
