"""Deferred approvals: ``confirm`` returns DEFER, the run parks, a person answers later through
``agent.resume(session, approvals=...)``, from this process or another one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _approval_child import tools as child_tools

from fanloop import DEFER, Agent, Delegation, TerminationReason, tool
from fanloop.errors import ApprovalError
from fanloop.messages import ToolResultPart
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import MemoryStore, Session, SQLiteStore
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply

HERE = Path(__file__).parent


class Bank:
    def __init__(self) -> None:
        self.log: list[str] = []

    def tools(self) -> list[Any]:
        @tool
        def lookup(name: str) -> str:
            """Look a name up."""
            self.log.append(f"lookup {name}")
            return f"{name} found"

        @tool(dangerous=True)
        def send(to: str, amount: int) -> str:
            """Send money."""
            self.log.append(f"send {amount} {to}")
            return f"sent {amount} to {to}"

        return [lookup, send]


def script() -> ScriptedProvider:
    return ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("lookup", _id="c1", name="bob"),
                    call("send", _id="c2", to="bob", amount=5),
                    call("lookup", _id="c3", name="eve"),
                ]
            ),
            "all done",
        ]
    )


def defer_sends(name: str, preview: str) -> Any:
    return DEFER if name == "send" else True


async def parked(session: Session) -> tuple[Bank, ScriptedProvider, Agent]:
    bank, provider = Bank(), script()
    agent = Agent(provider, tools=bank.tools(), confirm=defer_sends)
    result = await agent.run("pay bob", session=session)
    assert result.termination_reason is TerminationReason.AWAITING_APPROVAL
    return bank, provider, agent


async def test_defer_parks_the_batch_at_the_call() -> None:
    session = await MemoryStore().open("s")
    bank, provider = Bank(), script()
    result = await Agent(provider, tools=bank.tools(), confirm=defer_sends).run(
        "pay bob", session=session
    )
    assert result.termination_reason is TerminationReason.AWAITING_APPROVAL
    assert bank.log == ["lookup bob"]  # the call before the barrier ran; the rest waits
    (pending,) = result.pending_approvals
    assert (pending.call_id, pending.name, pending.arguments) == (
        "c2",
        "send",
        {"to": "bob", "amount": 5},
    )
    assert "send" in pending.preview
    assert session.messages[-1].role == "assistant"  # the turn is still open
    assert len(provider.requests) == 1


@pytest.mark.parametrize(
    ("answer", "sent", "text"),
    [
        (True, True, "sent 5 to bob"),
        (False, False, "User declined to run this tool."),
        ("not today", False, "not today"),
    ],
)
async def test_resume_runs_the_batch_on_from_the_parked_call(
    answer: Any, sent: bool, text: str
) -> None:
    session = await MemoryStore().open("s")
    bank, provider, agent = await parked(session)
    result = await agent.resume(session, approvals={"c2": answer})
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "all done"
    expected = ["lookup bob", *(["send 5 bob"] if sent else []), "lookup eve"]
    assert bank.log == expected  # nothing ran twice
    assert len(provider.requests) == 2  # no model call was repeated for the parked turn
    results = session.messages[-2].content
    assert [r.call_id for r in results] == ["c1", "c2", "c3"]  # type: ignore[union-attr]
    assert isinstance(results[1], ToolResultPart) and results[1].content == text
    assert results[1].is_error is not sent
    assert not (await agent.resume(session)).pending_approvals


async def test_a_later_dangerous_call_can_park_again() -> None:
    bank = Bank()
    provider = ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("send", _id="a", to="x", amount=1),
                    call("send", _id="b", to="y", amount=2),
                ]
            ),
            "done",
        ]
    )
    agent = Agent(provider, tools=bank.tools(), confirm=lambda n, p: DEFER)
    session = await MemoryStore().open("s")
    first = await agent.run("go", session=session)
    assert [p.call_id for p in first.pending_approvals] == ["a"]
    second = await agent.resume(session, approvals={"a": True})
    assert second.termination_reason is TerminationReason.AWAITING_APPROVAL
    assert [p.call_id for p in second.pending_approvals] == ["b"]
    third = await agent.resume(session, approvals={"b": True})
    assert third.termination_reason is TerminationReason.COMPLETED
    assert bank.log == ["send 1 x", "send 2 y"]


@pytest.mark.parametrize(
    ("approvals", "match"),
    [
        ({"nope": True}, "no pending approval has the call id 'nope'"),
        ({}, "every pending call needs an answer; missing: c2"),
        (None, "waiting for approval"),
        ({"c2": 1}, "must be True, False or a reason string"),
    ],
)
async def test_bad_answers_are_a_clear_error_that_changes_nothing(
    approvals: Any, match: str
) -> None:
    session = await MemoryStore().open("s")
    bank, provider, agent = await parked(session)
    before = (session.messages, dict(session.metadata))
    with pytest.raises(ApprovalError, match=match):
        await agent.resume(session, approvals=approvals)
    assert (session.messages, dict(session.metadata)) == before
    assert bank.log == ["lookup bob"] and len(provider.requests) == 1


async def test_a_new_turn_cannot_start_while_calls_wait() -> None:
    session = await MemoryStore().open("s")
    _, _, agent = await parked(session)
    with pytest.raises(ApprovalError, match="waiting for approval"):
        await agent.run("something else", session=session)


async def test_approvals_for_a_session_that_waits_for_none_are_refused() -> None:
    session = await MemoryStore().open("s")
    agent = Agent(ScriptedProvider(["hi"]))
    await agent.run("hello", session=session)
    with pytest.raises(ApprovalError, match="no calls waiting"):
        await agent.resume(session, approvals={"x": True})


async def test_confirm_with_a_third_parameter_receives_the_call() -> None:
    seen = []

    def confirm(name: str, preview: str, call: Any) -> bool:
        seen.append((name, call.id, call.arguments))
        return True

    bank = Bank()
    provider = ScriptedProvider([reply(tool_calls=[call("send", _id="k", to="z", amount=3)]), "ok"])
    await Agent(provider, tools=bank.tools(), confirm=confirm).run("go")
    assert seen == [("send", "k", {"to": "z", "amount": 3})]


async def test_a_subagent_cannot_defer() -> None:
    bank = Bank()

    def respond(request: Any) -> Any:
        if request.system and "sub-agent" in request.system:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("send", to="q", amount=9)])
            return reply(request.messages[-1].content[0].content)
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", task="pay q")])
        return reply(request.messages[-1].content[0].content)

    agent = Agent(
        ScriptedProvider(respond),
        tools=bank.tools(),
        delegation=Delegation(tools=bank.tools()),
        confirm=lambda n, p: DEFER,
    )
    result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert "cannot be deferred inside a sub-agent" in result.text
    assert bank.log == []


def test_another_process_answers(tmp_path: Path) -> None:
    """Process A parks the run and exits; this process approves and the run completes."""
    db, effects = tmp_path / "s.db", tmp_path / "effects.log"
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
        out = subprocess.run(
            [sys.executable, str(HERE / "_approval_child.py"), str(db), "s1",
             server.openai_base_url, str(effects)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert out.stdout.split() == ["c2"]
        assert len(server.requests) == 1

        async def approve() -> Any:
            store = SQLiteStore(db)
            session = await store.load("s1")
            provider = OpenAIProvider("gpt-4.1", api_key="test", base_url=server.openai_base_url)
            async with provider:
                agent = Agent(provider, tools=child_tools(effects))
                result = await agent.resume(session, approvals={"c2": True})
            await store.aclose()
            return result

        import anyio

        result = anyio.run(approve)
        assert result.termination_reason is TerminationReason.COMPLETED
        assert result.text == "paid"
        assert len(server.requests) == 2  # the parked turn's model call was not repeated
    assert effects.read_text().splitlines() == ["lookup bob", "send 5 bob"]  # each ran once
