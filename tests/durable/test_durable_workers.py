"""Durable runs across real worker processes: crash recovery after SIGKILL, sub-agents spread
over workers by a queue with a global limit, events read from another process, approvals.

The workers are ``_worker.py`` processes on this session's DBOS database; their models are the
FakeLLMServers of this process, which count every model call (a worker's death loses none of
those counts). Tools mark each start and end in files, with the worker's pid.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from durable_helpers import (
    LEAD_USAGE,
    SPENDER_USAGE,
    STREAMED_TEXT,
    WAIT,
    Env,
    Worker,
    account_row,
    requests_of,
)

from fanloop import TerminationReason
from fanloop._delegate import SUBAGENT_SYSTEM
from fanloop.durable import DurableRun, RunRecovered
from fanloop.errors import BadRequest
from fanloop.events import ApprovalRequested, TextDelta, ToolFinished, ToolStarted

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def workers(env: Env) -> dict[str, Worker]:
    """Two workers that serve the queues, and ``crash1``..``crash3`` that only run what they
    start (each crash test kills one)."""
    started = {name: env.worker(name) for name in ("w1", "w2")}
    started.update({name: env.worker(name, "--no-queues") for name in CRASH_WORKERS})
    for worker in started.values():
        worker.wait_for("READY")
    return started


CRASH_WORKERS = ("crash1", "crash2", "crash3", "crash4")


def recover(env: Env, workers: dict[str, Worker], name: str) -> Worker:
    """SIGKILL worker ``name`` and start its replacement (same DBOS executor id), which hands
    the dead worker's runs back to DBOS on launch: a live worker then runs each of them on."""
    workers[name].kill()
    replacement = workers[name] = env.worker(name, "--no-queues")
    replacement.wait_for("READY")
    return replacement


def lines(marks: Path, name: str) -> list[list[str]]:
    path = marks / name
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def collect(run: DurableRun, until: Any = None) -> list[Any]:
    """The run's events (from this process), until ``until(events)`` holds or the run ends."""
    events: list[Any] = []
    with anyio.fail_after(WAIT):
        async for event in run.events():
            events.append(event)
            if until is not None and until(events):
                break
    return events


async def test_a_run_killed_mid_batch_is_recovered_without_repeating_completed_steps(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    (env.marks / "block").touch()  # fetch(2) blocks until its worker dies
    workers["crash1"].start("crash", "crash-run", "fetch-everything")
    run = DurableRun("crash-run", client=client)

    def batch_stuck(events: list[Any]) -> bool:
        finished = {e.call.id for e in events if isinstance(e, ToolFinished)}
        started = {e.call.id for e in events if isinstance(e, ToolStarted)}
        return {"f0", "f1", "na", "nb", "f3"} <= finished and "f2" in started

    await collect(run, until=batch_stuck)
    workers["crash1"].wait_for("BLOCKED")
    dead = str(workers["crash1"].process.pid)
    (env.marks / "block").unlink()
    recover(env, workers, "crash1")
    with anyio.fail_after(WAIT):
        result = await run.result()

    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "Done: item 0, item 1, noted a, item 2, noted b, item 3"
    calls = [c for c in lines(env.marks, "calls") if c[1] in ("fetch", "note")]
    done = Counter(" ".join(c[1:3]) for c in calls if c[3] == "done")
    assert done == dict.fromkeys(
        ("fetch 0", "fetch 1", "note a", "fetch 2", "note b", "fetch 3"), 1
    )
    # Only the call cut off by the kill ran again (at least once), in another process: DBOS
    # recovery puts the run back on its internal queue, which every live worker serves.
    starts = [c[0] for c in calls if c[3] == "start" and c[1:3] == ["fetch", "2"]]
    live = {str(w.process.pid) for w in workers.values()}
    assert starts[0] == dead and len(starts) == 2 and starts[1] in live
    assert [c[0] for c in calls if c[1:4] == ["fetch", "2", "done"]] == [starts[1]]
    # The lane of `note` (not concurrent-safe) kept the model's order.
    notes = [c[1:4] for c in calls if c[1] == "note"]
    assert notes == [["note", x, y] for x in "ab" for y in ("start", "done")]
    # Completed model calls were not repeated: one request per turn, counted at the server.
    assert sorted(requests_of(env.server, "agent:crash")) == [0, 1, 6]

    # The stream tells the story once, with a marker where the recovery began.
    events = await collect(run)
    recovered = [e for e in events if isinstance(e, RunRecovered)]
    assert len(recovered) == 1 and recovered[0].attempt == 2
    assert not recovered[0].discard_partial
    finished = Counter(e.call.id for e in events if isinstance(e, ToolFinished))
    assert finished == dict.fromkeys(("f0", "f1", "na", "f2", "nb", "f3"), 1)
    kinds = [e.kind for e in events]
    assert kinds.count("run_started") == kinds.count("run_finished") == 1
    assert kinds.count("response_completed") == 3


async def test_a_model_call_cut_off_mid_stream_runs_again_and_its_deltas_are_discarded(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["crash2"].start("stream", "cut-stream-run", "cut-off")
    run = DurableRun("cut-stream-run", client=client)
    await collect(run, until=lambda es: sum(isinstance(e, TextDelta) for e in es) >= 3)
    recover(env, workers, "crash2")
    with anyio.fail_after(WAIT):
        result = await run.result()

    assert result.text == STREAMED_TEXT
    # The call was not complete: it is the one step that runs again.
    assert requests_of(env.slow_server, "agent:stream", "cut-off") == [0, 0]
    events = await collect(run)
    (marker,) = [i for i, e in enumerate(events) if isinstance(e, RunRecovered)]
    assert events[marker].discard_partial
    after = "".join(e.text for e in events[marker:] if isinstance(e, TextDelta))
    assert after == STREAMED_TEXT  # what follows the marker is whole


async def test_a_parent_killed_during_its_fan_out_finds_its_sub_agents_again(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["crash3"].start("fanout", "orphans-run", "orphans")
    run = DurableRun("orphans-run", client=client)

    def children_running(events: list[Any]) -> bool:
        return sum(isinstance(e, ToolStarted) and e.call.name == "where" for e in events) >= 2

    await collect(run, until=children_running)
    recover(env, workers, "crash3")  # the sub-agents keep running on w1 and w2
    with anyio.fail_after(WAIT):
        result = await run.result()

    assert result.text == "All 8 reports in."
    labels = [w[1] for w in lines(env.marks, "where") if w[2] == "start"]
    mine = sorted(label for label in labels if label.startswith("orphans:"))
    assert mine == [f"orphans:{i}" for i in range(8)]  # no sub-agent started twice
    assert sorted(requests_of(env.server, "agent:fanout", "orphans")) == [0, 8]
    for i in range(8):
        assert requests_of(env.server, SUBAGENT_SYSTEM, f"orphans:{i}") == [0, 1]
    # Each sub-agent's events reached the parent's stream once, though the relays that were
    # cut off by the kill ran again.
    events = await collect(run)
    relayed = Counter(
        (e.kind, e.parent_call_id)
        for e in events
        if e.agent_path == ("agent", "delegate") and e.kind in ("tool_started", "tool_finished")
    )
    assert relayed == {(k, f"d{i}"): 1 for k in ("tool_started", "tool_finished") for i in range(8)}


async def test_sub_agents_spread_over_workers_within_the_queue_limit(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w1"].start("fanout", "fanout-run", "research")
    run = DurableRun("fanout-run", client=client)
    with anyio.fail_after(WAIT):
        result = await run.result()

    assert result.text == "All 8 reports in."
    assert result.tool_calls == 16  # 8 delegations and, rolled up, each sub-agent's lookup
    starts = [w for w in lines(env.marks, "where") if w[2] == "start"]
    mine = [w for w in starts if w[1].startswith("research:")]
    assert sorted(w[1] for w in mine) == [f"research:{i}" for i in range(8)]
    pids = {w[0] for w in mine}
    assert len(pids) >= 2, f"all sub-agents ran in one process: {pids}"
    assert pids <= {str(w.process.pid) for w in (workers["w1"], workers["w2"])}
    peak = max(int(w[3]) for w in mine)
    assert 2 <= peak <= 4, f"{peak} sub-agents ran at once (queue limit 4)"
    # One model call per turn: the root's two, and two for each of the 8 sub-agents.
    assert sorted(requests_of(env.server, "agent:fanout", "research")) == [0, 8]
    for i in range(8):
        assert requests_of(env.server, SUBAGENT_SYSTEM, f"research:{i}") == [0, 1]

    # The sub-agents' events are in the parent's stream, with their lineage.
    events = await collect(run)
    lineage = {(e.agent_path, e.parent_call_id) for e in events if isinstance(e, ToolFinished)}
    assert lineage >= {(("agent", "delegate"), f"d{i}") for i in range(8)}


async def test_a_runs_text_deltas_are_read_from_another_process_while_it_runs(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w2"].start("stream", "stream-run", "tell me")
    run = DurableRun("stream-run", client=client)
    texts: list[str] = []
    first_seen_while = None
    with anyio.fail_after(WAIT):
        async for event in run.events():
            if isinstance(event, TextDelta):
                if first_seen_while is None:
                    handle = await client.retrieve_workflow_async("stream-run")
                    first_seen_while = (await handle.get_status()).status
                texts.append(event.text)
    assert first_seen_while == "PENDING"  # the run was still going: the deltas come live
    assert len(texts) > 5
    assert "".join(texts) == STREAMED_TEXT
    result = await run.result()
    assert result.text == STREAMED_TEXT


async def test_confirm_answers_are_checkpointed_and_defer_waits_for_an_approval(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w1"].start("gate", "gate-run", "pay")
    run = DurableRun("gate-run", client=client)
    events = await collect(
        run,
        until=lambda es: any(isinstance(e, ApprovalRequested) and e.call.id == "r1" for e in es),
    )
    resolved = {e.call.id: (e.approved, e.reason) for e in events if e.kind == "approval_resolved"}
    assert resolved == {"c1": (True, None), "c2": (False, "Too much.")}
    assert "refund" not in [c[1] for c in lines(env.marks, "calls")]  # it waits for a person
    await run.approve("r1", True)
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.text == "Payments handled."
    results = {p.call_id: p for m in result.messages for p in m.tool_results_parts}
    assert results["c1"].content == "charged 50"
    assert results["c2"].is_error and results["c2"].content == "Too much."
    assert results["r1"].content == "refunded 20"
    charges = [c[1:] for c in lines(env.marks, "calls") if c[1] in ("charge", "refund")]
    assert charges == [["charge", "50"], ["refund", "20"]]


async def test_auto_approve_runs_dangerous_tools_and_a_run_may_stream_no_events(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w2"].start("auto", "auto-run", "charge")  # this agent has events=False
    run = DurableRun("auto-run", client=client)
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.text == "Charged."
    assert ["charge", "7"] in [c[1:] for c in lines(env.marks, "calls")]
    assert await collect(run) == []


async def test_a_provider_error_ends_the_run_as_it_does_in_memory(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w1"].start("fail", "fail-run", "hello")
    with anyio.fail_after(WAIT), pytest.raises(BadRequest) as caught:
        await DurableRun("fail-run", client=client).result()
    assert caught.value.status_code == 400
    partial = caught.value.partial
    assert partial is not None
    assert partial.termination_reason is TerminationReason.PROVIDER_ERROR
    assert [m.text for m in partial.messages] == ["hello"]


async def test_a_typed_answer_and_its_validators_verdict_are_checkpointed(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w2"].start("typed", "typed-run", "extract")
    with anyio.fail_after(WAIT):
        result = await DurableRun("typed-run", client=client).result()
    # Without the agent at hand (a bare client) the typed answer comes back as its JSON.
    assert result.output == {"total": 12.5, "currency": "EUR"}
    steps = [s["function_name"] for s in await client.list_workflow_steps_async("typed-run")]
    assert steps.count("fanloop.output_check") == 1
    assert [c[1:] for c in lines(env.marks, "calls")].count(["validate", "invoice"]) == 1
    # Through DurableAgent (the agent at hand), it comes back as the output type.
    assert workers["w1"].run("typed", "typed-run-2", "extract") == (
        "Invoice(total=12.5, currency='EUR')"
    )


async def test_an_agent_given_as_a_tool_runs_as_a_child_workflow(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["w1"].start("desk", "desk-run", "ask")
    run = DurableRun("desk-run", client=client)
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.text == "The clerk said: clerk answers 'opening hours?'"
    assert result.usage.total_tokens > 0
    steps = [s["function_name"] for s in await client.list_workflow_steps_async("desk-run")]
    assert "fanloop.subagent:ask_clerk" in steps
    assert requests_of(env.server, "agent:clerk") == [0]
    events = await collect(run)
    assert ("text_delta", ("agent", "clerk"), "k1") in {
        (e.kind, e.agent_path, e.parent_call_id) for e in events
    }


async def test_parallel_sub_agents_spend_from_one_account_in_the_database(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    """Eight sub-agents on two workers under one 10,000-token limit. Before: each child
    workflow started with what the parent had left and spent it on its own (here 4.3x the
    limit; 3.63x in the issue). Now every model call reserves in the tree's account."""
    workers["w1"].start("budget", "budget-run", "spend")
    with anyio.fail_after(WAIT):
        result = await DurableRun("budget-run", client=client).result()
    calls = sum(len(requests_of(env.server, SUBAGENT_SYSTEM, f"spend:{i}")) for i in range(8))
    lead = len(requests_of(env.server, "agent:budget", "spend"))
    spent = calls * SPENDER_USAGE.total_tokens + lead * LEAD_USAGE.total_tokens
    assert spent <= 10_000, f"{spent / 10_000:.2f}x the limit"
    assert calls >= 8  # they did spend: the limit, not a failure, stopped them
    notes = [p.content for m in result.messages for p in m.tool_results_parts]
    assert sum("stopped early (token_budget" in n for n in notes) >= 1
    # The account saw exactly what the server reported, and holds nothing any more.
    row = await account_row(env.db_url, "budget-run")
    assert row["total_tokens"] == spent
    assert row["reservations"] == 0


async def test_a_reservation_held_by_a_killed_worker_is_settled_on_recovery(
    env: Env, workers: dict[str, Worker], client: Any
) -> None:
    workers["crash4"].start("meter", "meter-run", "cut-off")
    run = DurableRun("meter-run", client=client)
    await collect(run, until=lambda es: sum(isinstance(e, TextDelta) for e in es) >= 3)
    held = await account_row(env.db_url, "meter-run")
    assert held["reservations"] == 1 and held["total_tokens"] == 0  # in flight, not charged
    recover(env, workers, "crash4")
    with anyio.fail_after(WAIT):
        result = await run.result()
    assert result.text == STREAMED_TEXT
    assert requests_of(env.slow_server, "agent:meter", "cut-off") == [0, 0]
    row = await account_row(env.db_url, "meter-run")
    assert row["reservations"] == 0  # the dead worker's reservation did not leak
    assert row["total_tokens"] == SPENDER_USAGE.total_tokens  # the call that reported
