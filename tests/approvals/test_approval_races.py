"""A dangerous call runs at most once, whoever answers its approval and however often.

Two real processes resume the same parked batch at the same moment (a double-clicked
"Approve", two queue workers), many times over, on SQLite and on PostgreSQL. What happened is
counted where no process can lie about it: executions in a file, model requests at the fake
server, receipts and the transcript in the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _approval_child import tools
from _approval_racer import open_store

from fanloop import DEFER, Agent, TerminationReason, tool
from fanloop.errors import ApprovalConflict, ApprovalError
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import EffectStatus, MemoryStore, Session, SessionStore, pending_approvals
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply
from sessions.sessions_helpers import PG_DSN, drop_schema, new_schema, pg_unreachable

HERE = Path(__file__).parent
RACER = HERE / "_approval_racer.py"
RACES = 24


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the racing processes keep their sessions: a SQLite file or a fresh PG schema."""
    if request.param == "sqlite":
        yield str(tmp_path / "sessions.db")
        return
    if (reason := pg_unreachable()) is not None:
        pytest.skip(reason)
    schema = new_schema()
    try:
        yield f"{PG_DSN}#{schema}"
    finally:
        drop_schema(schema)


def respond(body: dict[str, Any]) -> Any:
    """The model: ``pay bobN`` → look bobN up and send him 5; tool results → ``paid``."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "paid"
    who = last["content"].split()[-1]
    return reply(
        tool_calls=[
            call("lookup", _id="c1", name=who),
            call("send", _id="c2", to=who, amount=5),
        ]
    )


def race_of(request: Any) -> str:
    """Which race a request at the fake server belongs to (its first user message)."""
    first = next(m for m in request.body["messages"] if m["role"] == "user")
    return str(first["content"].split()[-1])


async def park(target: str, base_url: str, effects: Path, ids: list[str]) -> None:
    """Run each session up to its dangerous call, which waits for approval."""
    store = open_store(target)
    async with OpenAIProvider("gpt-4.1", api_key="test", base_url=base_url) as provider:
        agent = Agent(provider, tools=tools(effects), confirm=lambda name, preview: DEFER)
        for session_id in ids:
            session = await store.open(session_id)
            result = await agent.run(f"pay {session_id}", session=session)
            assert result.termination_reason is TerminationReason.AWAITING_APPROVAL
    await store.aclose()


class Racer:
    """A racing process: answers one race per pair of lines on its standard input."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(RACER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the racer exited with {self.proc.wait(timeout=30)}"
        return line.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def test_two_processes_racing_one_approval_run_the_call_once(target: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    ids = [f"bob{n}" for n in range(RACES)]
    outcomes: list[list[dict[str, Any]]] = []
    with FakeLLMServer(responder=respond) as server:
        anyio.run(park, target, server.openai_base_url, effects, ids)
        racers = [Racer(target, server.openai_base_url, str(effects)) for _ in range(2)]
        try:
            for session_id in ids:
                for racer in racers:
                    racer.send(f"{session_id} c2")
                assert [racer.read() for racer in racers] == ["ready", "ready"]
                for racer in racers:  # both resume at the same moment
                    racer.send("go")
                outcomes.append([json.loads(racer.read()) for racer in racers])
            for racer in racers:
                assert racer.proc.stdin is not None
                racer.proc.stdin.close()
                assert racer.proc.wait(timeout=60) == 0
        finally:
            for racer in racers:
                racer.close()
        requests = Counter(race_of(r) for r in server.requests)

    # Each race: one resume ran the batch and finished the turn, the other was told so.
    for race in outcomes:
        kinds = sorted(o["outcome"] for o in race)
        assert kinds == ["completed", "conflict"], race
        (won,) = [o for o in race if o["outcome"] == "completed"]
        assert won["text"] == "paid"
        (lost,) = [o for o in race if o["outcome"] == "conflict"]
        assert lost["answers"] == ({"c2": True} if lost["answered"] else {})
    # Counted outside the racers: each send ran once, each parked turn's model call was
    # not repeated and the final turn was asked for once.
    lines = effects.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("send")) == sorted(
        f"send 5 {i}" for i in ids
    )
    assert requests == dict.fromkeys(ids, 2)
    anyio.run(check_transcripts, target, ids)


async def check_transcripts(target: str, ids: list[str]) -> None:
    """Every transcript is true: the call's result is what the receipt committed."""
    store = open_store(target)
    for session_id in ids:
        session = await store.load(session_id)
        assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]
        results = {r.call_id: r for r in session.messages[2].tool_results_parts}
        assert results["c2"].content == f"sent 5 to {session_id}"
        assert not results["c2"].is_error
        receipt = await session.effect("c2")
        assert receipt is not None and receipt.status is EffectStatus.COMMITTED
        assert receipt.result == results["c2"]
        assert session.messages[3].text == "paid"
        assert pending_approvals(session) == ()
    await store.aclose()


def test_a_resume_that_died_mid_call_is_taken_over_after_its_lease(
    target: str, tmp_path: Path
) -> None:
    """A resume killed inside the approved call holds the batch until its lease runs out;
    then another resume takes it over and, finding the call started but never committed,
    ends ``effect_outcome_uncertain`` without running it again."""
    effects = tmp_path / "effects.log"
    hold = effects.with_name(effects.name + ".hold")
    with FakeLLMServer(responder=respond) as server:
        anyio.run(park, target, server.openai_base_url, effects, ["bob"])
        hold.touch()
        racer = Racer(target, server.openai_base_url, str(effects), "1.0")
        try:
            racer.send("bob c2")
            assert racer.read() == "ready"
            racer.send("go")
            deadline = time.monotonic() + 60
            while "send 5 bob" not in effects.read_text():  # the call has started
                assert time.monotonic() < deadline and racer.proc.poll() is None
                time.sleep(0.01)
            os.kill(racer.proc.pid, signal.SIGKILL)
        finally:
            racer.close()
            hold.unlink()

        async def take_over() -> Any:
            store = open_store(target)
            async with OpenAIProvider(
                "gpt-4.1", api_key="test", base_url=server.openai_base_url
            ) as provider:
                agent = Agent(provider, tools=tools(effects))
                session = await store.load("bob")
                with pytest.raises(ApprovalConflict) as held:  # the dead resume's lease holds
                    await agent.resume(session, approvals={"c2": True})
                assert not held.value.answered
                with anyio.fail_after(60):
                    while True:  # a lease is time itself: poll until it has run out
                        try:
                            result = await agent.resume(session, approvals={"c2": True})
                        except ApprovalConflict:
                            await anyio.sleep(0.1)
                        else:
                            break
                receipt = await session.effect("c2")
            await store.aclose()
            return result, receipt, session

        result, receipt, session = anyio.run(take_over)
        assert len(server.requests) == 1  # only the parking turn: nothing was run on blindly
    assert result.termination_reason is TerminationReason.EFFECT_OUTCOME_UNCERTAIN
    assert receipt is not None and receipt.status is EffectStatus.STARTED
    assert effects.read_text().splitlines().count("send 5 bob") == 1
    c2 = {r.call_id: r for r in session.messages[-1].tool_results_parts}["c2"]
    assert c2.is_error and "outcome is unknown" in c2.content


# -- in one process ----------------------------------------------------------------------


class Ledger:
    def __init__(self) -> None:
        self.sent = 0

    def tools(self) -> list[Any]:
        @tool(dangerous=True)
        async def send(to: str, amount: int) -> str:
            """Send money."""
            self.sent += 1
            await anyio.sleep(0)
            return f"sent {amount} to {to}"

        return [send]


async def parked_session(store: SessionStore) -> tuple[Session, Ledger, ScriptedProvider]:
    ledger = Ledger()
    provider = ScriptedProvider(
        [reply(tool_calls=[call("send", _id="c2", to="bob", amount=5)]), "paid", "paid"]
    )
    agent = Agent(provider, tools=ledger.tools(), confirm=lambda n, p: DEFER)
    session = await store.open("s")
    result = await agent.run("pay bob", session=session)
    assert result.termination_reason is TerminationReason.AWAITING_APPROVAL
    return session, ledger, provider


async def test_concurrent_resumes_in_one_process_run_the_call_once() -> None:
    store = MemoryStore()
    _, ledger, provider = await parked_session(store)
    agent = Agent(provider, tools=ledger.tools())
    outcomes: list[Any] = []

    async def resume(copy: Session) -> None:
        try:
            outcomes.append(await agent.resume(copy, approvals={"c2": True}))
        except ApprovalConflict as exc:
            outcomes.append(exc)

    copies = [await store.load("s") for _ in range(8)]
    async with anyio.create_task_group() as tg:
        for copy in copies:
            tg.start_soon(resume, copy)
    assert ledger.sent == 1
    done = [o for o in outcomes if not isinstance(o, ApprovalConflict)]
    assert [o.text for o in done] == ["paid"]
    assert len(outcomes) == 8
    assert provider.remaining == 1  # the final turn was asked for once
    assert len((await store.load("s")).messages) == 4


async def test_a_late_duplicate_answer_is_told_the_batch_has_run() -> None:
    store = MemoryStore()
    session, ledger, provider = await parked_session(store)
    agent = Agent(provider, tools=ledger.tools())
    stale = await store.load("s")  # read while the call still waited
    assert (await agent.resume(session, approvals={"c2": "not today"})).text == "paid"
    with pytest.raises(ApprovalConflict, match="already answered") as caught:
        await agent.resume(stale, approvals={"c2": True})
    assert isinstance(caught.value, ApprovalError)  # callers catching ApprovalError still do
    assert (caught.value.answered, caught.value.answers) == (True, {"c2": "not today"})
    assert caught.value.session_id == "s" and caught.value.call_ids == ("c2",)
    assert ledger.sent == 0  # declined, and the duplicate approval changed nothing
    assert len((await store.load("s")).messages) == 4
    with pytest.raises(ApprovalError, match="no calls waiting"):
        await agent.resume(stale, approvals={"other": True})


async def test_a_streamed_duplicate_answer_raises_before_any_event() -> None:
    store = MemoryStore()
    session, ledger, provider = await parked_session(store)
    agent = Agent(provider, tools=ledger.tools())
    stale = await store.load("s")
    async with agent.stream(session=session, resume=True, approvals={"c2": True}) as run:
        assert [e.kind async for e in run][-1] == "run_finished"
    assert run.result.text == "paid"
    events: list[str] = []
    with pytest.raises(ApprovalConflict) as caught:
        async with agent.stream(session=stale, resume=True, approvals={"c2": True}) as late:
            events.extend([e.kind async for e in late])
    assert events == []  # the loser's run never started: no run_started, nothing appended
    assert (caught.value.answered, caught.value.answers) == (True, {"c2": True})
    assert ledger.sent == 1
