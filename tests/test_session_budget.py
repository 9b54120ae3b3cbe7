"""A budget for a whole session: every run on it spends from one account, kept in the
session, so it holds across runs and across processes that resume the session."""

from __future__ import annotations

from pathlib import Path

from fanloop import Agent, Limits, TerminationReason
from fanloop.providers import Usage
from fanloop.sessions import (
    SQLiteStore,
    session_budget,
    session_spend,
    set_session_budget,
)
from fanloop.testing import ScriptedProvider, reply

TURN = Usage(input_tokens=300, output_tokens=100)


def model(n: int = 10) -> ScriptedProvider:
    return ScriptedProvider([reply(f"answer {i}", usage=TURN) for i in range(n)])


async def test_runs_on_a_session_share_its_budget_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    session = await SQLiteStore(db).open("s")
    await set_session_budget(session, Limits(max_total_tokens=1000, max_tool_calls=50))
    provider = model()
    agent = Agent(provider, limits=Limits(max_total_tokens=10_000))
    for _ in range(2):
        result = await agent.run("hi", session=session)
        assert result.termination_reason is TerminationReason.COMPLETED
    assert session_spend(session).usage.total_tokens == 800

    # Another process opens the session: the account came with it.
    again = await SQLiteStore(db).load("s")
    assert session_budget(again) == Limits(max_turns=None, max_total_tokens=1000, max_tool_calls=50)
    third = await agent.run("one more", session=again)
    assert third.termination_reason is TerminationReason.COMPLETED  # 800 < 1000: it may start
    fourth = await agent.run("and another", session=again)
    assert fourth.termination_reason is TerminationReason.TOKEN_BUDGET
    assert len(provider.requests) == 3  # the fourth run never called the model
    assert session_spend(again).runs == 4


async def test_without_a_budget_sessions_keep_no_account(tmp_path: Path) -> None:
    session = await SQLiteStore(tmp_path / "s.db").open("s")
    await Agent(model()).run("hi", session=session)
    assert session_budget(session) is None
    assert session_spend(session).runs == 0
    assert "fanloop.spent" not in session.metadata


async def test_the_tighter_of_the_agents_and_the_sessions_limit_wins(tmp_path: Path) -> None:
    session = await SQLiteStore(tmp_path / "s.db").open("s")
    await set_session_budget(session, Limits(max_total_tokens=100_000))
    result = await Agent(model(), limits=Limits(max_total_tokens=300)).run("hi", session=session)
    assert result.termination_reason is TerminationReason.COMPLETED
    second = await Agent(model(), limits=Limits(max_total_tokens=300)).run("hi", session=session)
    assert second.termination_reason is TerminationReason.COMPLETED  # per-run limit, fresh
    await set_session_budget(session, None)
    assert session_budget(session) is None
