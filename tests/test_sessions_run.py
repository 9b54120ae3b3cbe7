"""Runs on sessions: persistence as messages are appended, receipts, resume, real crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from fanloop import Agent, TerminationReason, tool
from fanloop._resume import INTERRUPTED
from fanloop.messages import Message, ToolCallPart, ToolResultPart
from fanloop.sessions import EffectStatus, MemoryStore, Session, SQLiteStore
from fanloop.testing import ScriptedProvider, call, reply

HERE = Path(__file__).resolve().parent


@tool(dangerous=True)
def charge(amount: int) -> str:
    """Charge the card."""
    return f"charged {amount}"


async def test_every_message_is_persisted_as_it_is_appended(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    session = await store.open("s1")
    seen_on_disk: list[int] = []

    async def on_message() -> None:
        other = await SQLiteStore(tmp_path / "s.db").load("s1")
        seen_on_disk.append(len(other.messages))

    from fanloop import Hooks

    provider = ScriptedProvider([reply(tool_calls=[call("charge", amount=1)]), "done"])
    agent = Agent(provider, tools=[charge], auto_approve=True, hooks=Hooks(on_message=on_message))
    result = await agent.run("go", session=session)
    assert seen_on_disk == [1, 2, 3, 4]
    assert session.messages == result.messages
    reloaded = await SQLiteStore(tmp_path / "s.db").load("s1")
    assert reloaded.messages == result.messages

    again = await agent.with_options(provider=ScriptedProvider(["second answer"])).run(
        "more", session=session
    )
    assert [m.text for m in again.new_messages] == ["more", "second answer"]
    assert len(session.messages) == 6


async def test_dangerous_calls_leave_committed_receipts() -> None:
    session = await MemoryStore().open("r")
    provider = ScriptedProvider([reply(tool_calls=[call("charge", _id="k1", amount=5)]), "ok"])
    await Agent(provider, tools=[charge], auto_approve=True).run("go", session=session)
    receipt = await session.effect("k1")
    assert receipt is not None
    assert receipt.status == EffectStatus.COMMITTED
    assert receipt.tool == "charge"
    assert receipt.result == ToolResultPart(call_id="k1", content="charged 5")


def run_child(db: Path, markers: Path, scenario: str) -> None:
    """Start the child run, wait until it says READY, and SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "crash_child.py"), str(db), "crash", str(markers), scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def charges(markers: Path) -> list[str]:
    path = markers / "charges"
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
async def test_killed_in_the_middle_of_a_dangerous_tool(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    run_child(db, tmp_path, "mid-tool")
    session = await SQLiteStore(db).load("crash")
    assert [m.role for m in session.messages] == ["user", "assistant"]
    assert session.messages[1].tool_calls[0].id == "c1"
    receipt = await session.effect("c1")
    assert receipt is not None and receipt.status == EffectStatus.STARTED

    untouched = ScriptedProvider(["should not be asked"])
    result = await Agent(untouched, tools=[charge], auto_approve=True).resume(session)
    assert result.termination_reason is TerminationReason.EFFECT_OUTCOME_UNCERTAIN
    assert "c1" in (result.detail or "") and "charge" in (result.detail or "")
    assert untouched.requests == []
    assert charges(tmp_path) == ["42"]

    await session.resolve_effect("c1", applied=True, note="seen in the payment log")
    resumed = await Agent(ScriptedProvider(["Charged once."]), tools=[charge]).resume(session)
    assert resumed.termination_reason is TerminationReason.COMPLETED
    assert charges(tmp_path) == ["42"]  # never run again
    receipt = await session.effect("c1")
    assert receipt is not None and receipt.status == EffectStatus.RESOLVED_APPLIED


@pytest.mark.slow
async def test_killed_after_the_effect_committed_replays_it(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    run_child(db, tmp_path, "after-commit")
    session = await SQLiteStore(db).load("crash")
    assert [m.role for m in session.messages] == ["user", "assistant"]
    receipt = await session.effect("c1")
    assert receipt is not None and receipt.status == EffectStatus.COMMITTED

    provider = ScriptedProvider(["Charged 42."])
    result = await Agent(provider, tools=[charge], auto_approve=True).resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert charges(tmp_path) == ["42"]  # replayed from the receipt, not run again
    results = session.messages[2].content
    assert results[0] == ToolResultPart(call_id="c1", content="charged 42")
    assert results[1].is_error and "interrupted" in results[1].content  # type: ignore[union-attr]
    assert provider.requests[0].messages[-1] == session.messages[2]


@pytest.mark.slow
async def test_killed_between_two_turns_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    run_child(db, tmp_path, "between-turns")
    session = await SQLiteStore(db).load("crash")
    assert [m.role for m in session.messages] == ["user", "assistant", "user"]
    assert session.messages[2].content[0] == ToolResultPart(call_id="c1", content="charged 42")

    result = await Agent(ScriptedProvider(["Charged."]), tools=[charge]).resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "Charged."
    assert charges(tmp_path) == ["42"]


async def _open_turn(receipt: str) -> Session:
    """A session a dead process left with three charges asked for and none answered.

    ``k0`` has no receipt; ``k1`` was committed; ``k2`` has a receipt in state ``receipt``.
    """
    session = await MemoryStore().open("open")
    calls = [ToolCallPart(id=f"k{i}", name="charge", arguments={"amount": i}) for i in range(3)]
    await session.append(Message.user("charge three"))
    await session.append(Message(role="assistant", content=tuple(calls)))
    for c in calls[1:]:
        await session.begin_effect(turn=1, call=c)
    await session.commit_effect("k1", ToolResultPart(call_id="k1", content="charged 1 (then)"))
    if receipt == "committed":
        await session.commit_effect("k2", ToolResultPart(call_id="k2", content="charged 2 (then)"))
    elif receipt != "started":
        await session.resolve_effect("k2", applied=receipt == "resolved_applied")
    return session


@pytest.mark.parametrize(
    ("receipt", "content", "is_error"),
    [
        ("committed", "charged 2 (then)", False),
        (
            "resolved_applied",
            "The operator confirmed this call took effect; its output was lost.",
            False,
        ),
        (
            "resolved_not_applied",
            "The operator confirmed this call did not take effect. Call it again if it is "
            "still needed.",
            True,
        ),
    ],
)
async def test_resume_answers_each_open_call_from_its_receipt(
    receipt: str, content: str, is_error: bool
) -> None:
    """In process, every receipt state a dead process can leave (the crash tests run a child)."""
    ran: list[int] = []

    @tool(dangerous=True)
    def charge(amount: int) -> str:
        """Charge the card."""
        ran.append(amount)
        return f"charged {amount}"

    session = await _open_turn(receipt)
    provider = ScriptedProvider(["Done."])
    result = await Agent(provider, tools=[charge], auto_approve=True).resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert ran == []
    answered = session.messages[2].content
    assert [p.call_id for p in answered] == ["k0", "k1", "k2"]  # type: ignore[union-attr]
    k0, k1, k2 = answered
    assert k0 == ToolResultPart(call_id="k0", content=INTERRUPTED, is_error=True)
    assert k1 == ToolResultPart(call_id="k1", content="charged 1 (then)")
    assert k2 == ToolResultPart(call_id="k2", content=content, is_error=is_error)
    assert provider.requests[0].messages[-1] == session.messages[2]


async def test_resume_stops_at_a_receipt_left_started_and_names_it() -> None:
    session = await _open_turn("started")
    untouched = ScriptedProvider(["should not be asked"])
    result = await Agent(untouched, tools=[charge], auto_approve=True).resume(session)
    assert result.termination_reason is TerminationReason.EFFECT_OUTCOME_UNCERTAIN
    assert result.detail == (
        "tool call k2 (charge) was started but never committed; check its effect and "
        "resolve it with `fanloop sessions resolve-effect`"
    )
    assert untouched.requests == []
    assert [m.role for m in session.messages] == ["user", "assistant"]  # nothing half-answered


async def test_resume_of_a_finished_session_asks_nothing() -> None:
    session = await MemoryStore().open("done")
    await Agent(ScriptedProvider(["hello"])).run("hi", session=session)
    provider = ScriptedProvider([])
    result = await Agent(provider).resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "hello"
    assert provider.requests == []


async def test_concurrent_runs_on_many_sessions_in_one_file(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "many.db")

    def model(request: object) -> object:
        msgs = request.messages  # type: ignore[attr-defined]
        if len(msgs) == 1:
            return reply(tool_calls=[call("charge", amount=len(msgs[0].text))])
        return f"done {msgs[0].text}"

    agent = Agent(ScriptedProvider(model), tools=[charge], auto_approve=True)

    async def one(i: int) -> None:
        session = await store.open(f"s{i}")
        await agent.run(f"job {i}", session=session)

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(one, i)
    fresh = SQLiteStore(tmp_path / "many.db")
    for i in range(40):
        session = await fresh.load(f"s{i}")
        assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]
        assert session.messages[-1].text == f"done job {i}"
    assert len(await fresh.list()) == 40


async def test_resume_can_be_streamed() -> None:
    session = await MemoryStore().open("stream-resume")
    await session.append(Message.user("hello"))
    agent = Agent(ScriptedProvider(["Hi, resumed."], chunk_size=3))
    chunks = []
    async with agent.stream(session=session, resume=True) as run:
        async for event in run:
            if event.kind == "text_delta":
                chunks.append(event.text)
    assert "".join(chunks) == "Hi, resumed."
    assert run.result.termination_reason is TerminationReason.COMPLETED
    assert [m.role for m in session.messages] == ["user", "assistant"]
