"""Durable runs traced with OpenTelemetry across worker processes: a run killed with SIGKILL and
recovered on another worker, and a sub-agent's child workflow run by another worker, stay in
the trace the run was started in.

The traced agents of ``_worker.py`` export their spans to ``spans-PID.jsonl`` files in the
module's marks directory; a worker killed with SIGKILL loses only the spans still open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from durable_helpers import WAIT, Env, Worker

from fanloop import TerminationReason
from fanloop.durable import DurableRun
from fanloop.events import ToolFinished, ToolStarted

pytest.importorskip("opentelemetry.sdk", reason="the tracing tests need the OpenTelemetry SDK")

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def workers(env: Env) -> dict[str, Worker]:
    """``tw1`` serves the queues; ``tcrash`` and ``tparent`` run only what they start."""
    started = {"tw1": env.worker("tw1")}
    started.update({name: env.worker(name, "--no-queues") for name in ("tcrash", "tparent")})
    for worker in started.values():
        worker.wait_for("READY")
    return started


def spans(marks: Path) -> list[dict[str, Any]]:
    """Every exported span, with the pid of the worker that exported it."""
    out = []
    for path in sorted(marks.glob("spans-*.jsonl")):
        pid = path.stem.split("-")[1]
        for line in path.read_text().splitlines():
            span = json.loads(line)
            span["pid"] = pid
            out.append(span)
    return out


async def test_a_run_recovered_on_another_worker_stays_in_its_trace(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    (env.marks / "block").touch()  # fetch(2) blocks until its worker dies
    workers["tcrash"].start("tcrash", "traced-crash", "fetch-everything")
    run = DurableRun("traced-crash", client=client)

    def batch_stuck(events: list[Any]) -> bool:
        finished = {e.call.id for e in events if isinstance(e, ToolFinished)}
        started = {e.call.id for e in events if isinstance(e, ToolStarted)}
        return {"f0", "f1", "na", "nb", "f3"} <= finished and "f2" in started

    events: list[Any] = []
    with anyio.fail_after(WAIT):
        async for event in run.events():
            events.append(event)
            if batch_stuck(events):
                break
    workers["tcrash"].wait_for("BLOCKED")
    dead = str(workers["tcrash"].process.pid)
    (env.marks / "block").unlink()
    workers["tcrash"].kill()
    replacement = workers["tcrash"] = env.worker("tcrash", "--no-queues")
    replacement.wait_for("READY")  # hands the dead worker's run back: tw1 runs it on
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.termination_reason is TerminationReason.COMPLETED

    everything = spans(env.marks)
    [client_span] = [
        s
        for s in everything
        if s["name"] == "invoke_agent tracked" and s["kind"] == "SpanKind.CLIENT"
    ]
    assert client_span["pid"] == dead  # made by start(), in the process that started the run
    trace_id = client_span["context"]["trace_id"]
    ours = [s for s in everything if s["context"]["trace_id"] == trace_id]
    tools = [
        s for s in everything if s["name"].startswith(("execute_tool fetch", "execute_tool note"))
    ]
    assert tools and all(s["context"]["trace_id"] == trace_id for s in tools)  # one trace
    # DBOS puts the recovered run on its internal queue, which every live worker serves.
    pids = {s["pid"] for s in ours}
    assert dead in pids and len(pids) == 2  # two processes, one trace
    [live] = pids - {dead}
    assert live in {str(w.process.pid) for w in workers.values()}
    # The dead worker's invoke_agent span never ended (SIGKILL); the recovered execution's is
    # a child of the CLIENT span, as the first one was.
    runs = [
        s for s in ours if s["name"] == "invoke_agent tracked" and s["kind"] == "SpanKind.INTERNAL"
    ]
    assert [(s["pid"], s["parent_id"]) for s in runs] == [(live, client_span["context"]["span_id"])]
    assert any(s["name"] == "execute_tool fetch" and s["pid"] == dead for s in ours)
    assert any(s["name"] == "execute_tool fetch" and s["pid"] == live for s in ours)


async def test_a_sub_agent_run_by_another_worker_is_in_its_parents_trace(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["tparent"].start("tdesk", "traced-desk", "ask")  # its queue is served by tw1 only
    run = DurableRun("traced-desk", client=client)
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.text == "The clerk said: clerk answers 'opening hours?'"

    everything = spans(env.marks)
    [tool] = [s for s in everything if s["name"] == "execute_tool ask_clerk"]
    [clerk] = [s for s in everything if s["name"] == "invoke_agent clerk"]
    assert tool["pid"] == str(workers["tparent"].process.pid)
    assert clerk["pid"] == str(workers["tw1"].process.pid)
    assert clerk["context"]["trace_id"] == tool["context"]["trace_id"]
    assert clerk["parent_id"] == tool["context"]["span_id"]
    assert clerk["attributes"]["fanloop.resumed"] is True
    trace_id = tool["context"]["trace_id"]
    names = sorted(s["name"] for s in everything if s["context"]["trace_id"] == trace_id)
    assert names == [
        "chat gpt-4.1",
        "chat gpt-4.1",
        "chat gpt-4.1",
        "execute_tool ask_clerk",
        "invoke_agent clerk",
        "invoke_agent desk",
        "invoke_agent desk",
    ]
