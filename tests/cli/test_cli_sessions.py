"""``fanloop sessions`` and continuing conversations: list, show, resume, effects."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from cli_helpers import PROVIDER, fanloop

from fanloop.messages import Message, ToolCallPart
from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer


def db(work: Path) -> Path:
    return work / ".fanloop" / "sessions.db"


def make_session(work: Path, session_id: str, *messages: Message, started: str | None = None):  # type: ignore[no-untyped-def]
    """A session as a dead process left it, with a ``started`` receipt for call ``started``."""

    async def build() -> None:
        store = SQLiteStore(db(work))
        try:
            session = await store.open(session_id)
            await session.extend(messages)
            if started is not None:
                last = messages[-1]
                call = next(c for c in last.tool_calls if c.id == started)
                await session.begin_effect(turn=1, call=call)
        finally:
            await store.aclose()

    anyio.run(build)


def test_run_then_chat_session_continues(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("Noted: your name is Ada.", "Your name is Ada.")
    first = fanloop(
        "run", *PROVIDER, "--root", str(work), "--session", "ada", "My name is Ada.", env=env
    )
    assert first.code == 0, first.err
    second = fanloop(
        "chat", *PROVIDER, "--root", str(work), "--session", "ada",
        env=env, input="What is my name?\n",
    )  # fmt: skip
    assert second.code == 0, second.err
    assert "session ada · 2 messages so far" in second.out
    assert "Your name is Ada." in second.out
    sent = server.requests[1].messages
    assert [m["content"] for m in sent[1:]] == [
        "My name is Ada.",
        "Noted: your name is Ada.",
        "What is my name?",
    ]

    listing = fanloop("sessions", "list", "--root", str(work), env=env)
    assert listing.code == 0, listing.err
    row = next(x for x in listing.out.splitlines() if x.startswith("ada "))
    assert "My name is Ada." in row and " 4 " in row  # title and message count

    shown = fanloop("sessions", "show", "ada", "--root", str(work), env=env)
    assert shown.code == 0, shown.err
    assert "you: What is my name?" in shown.out
    assert "assistant: Your name is Ada." in shown.out

    as_json = fanloop("sessions", "list", "--json", "--root", str(work), env=env)
    assert json.loads(as_json.out.splitlines()[0])["id"] == "ada"


def test_resume_finishes_an_open_turn_then_chats(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    make_session(work, "left-open", Message.user("What is 2 + 2?"))
    server.add("4.", "8.")
    done = fanloop(
        "sessions", "resume", "left-open", *PROVIDER, "--root", str(work),
        env=env, input="And doubled?\n",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "finishing the turn that was left open" in done.out
    assert "4." in done.out and "8." in done.out
    assert [m["content"] for m in server.requests[1].messages[1:]] == [
        "What is 2 + 2?",
        "4.",
        "And doubled?",
    ]


def test_effects_and_resolve_effect(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    call = ToolCallPart(id="call_pay_1", name="bash", arguments={"command": "pay-invoice 42"})
    make_session(
        work,
        "pay",
        Message.user("Pay invoice 42."),
        Message.assistant("Paying.", call),
        started="call_pay_1",
    )
    root = ("--root", str(work))

    effects = fanloop("sessions", "effects", "pay", *root, env=env)
    assert effects.code == 0, effects.err
    row = next(x for x in effects.out.splitlines() if "call_pay_1" in x)
    assert "bash" in row and "started" in row
    everywhere = fanloop("sessions", "effects", *root, env=env)  # open ones of every session
    assert "call_pay_1" in everywhere.out

    # Resuming refuses to guess: the run stops with effect_outcome_uncertain.
    stuck = fanloop("sessions", "resume", "pay", *PROVIDER, *root, env=env)
    assert stuck.code == 1
    assert "effect_outcome_uncertain" in stuck.out
    assert "call_pay_1" in stuck.err and "Traceback" not in stuck.err
    assert server.requests == []
    listing = fanloop("sessions", "list", *root, env=env)
    assert any(x.startswith("pay ") and "   1 " in x for x in listing.out.splitlines())

    resolved = fanloop(
        "sessions", "resolve-effect", "pay", "call_pay_1", "--applied",
        "--note", "the bank shows the payment", *root, env=env,
    )  # fmt: skip
    assert resolved.code == 0, resolved.err
    assert "resolved call_pay_1 (bash)" in resolved.out
    after = fanloop("sessions", "effects", "pay", "--json", *root, env=env)
    receipt = json.loads(after.out)
    assert receipt["status"] == "resolved_applied"
    assert receipt["note"] == "the bank shows the payment"
    again = fanloop(
        "sessions", "resolve-effect", "pay", "call_pay_1", "--not-applied", *root, env=env
    )
    assert again.code == 1 and "resolved_applied" in again.err

    # Now the session resumes: the model is told the call took effect.
    server.add("Invoice 42 is paid.")
    resumed = fanloop("sessions", "resume", "pay", *PROVIDER, *root, env=env)
    assert resumed.code == 0, resumed.err
    assert "Invoice 42 is paid." in resumed.out
    tool_result = server.requests[0].messages[-1]
    assert tool_result["role"] == "tool" and "took effect" in tool_result["content"]


def test_unknown_session(env: dict[str, str], work: Path) -> None:
    for args in (("show", "nope"), ("effects", "nope")):
        done = fanloop("sessions", *args, "--root", str(work), env=env)
        assert done.code == 1
        assert "no session 'nope'" in done.err and "Traceback" not in done.err
    empty = fanloop("sessions", "list", "--root", str(work), env=env)
    assert empty.code == 0 and "no sessions yet" in empty.out
    assert not db(work).exists()  # looking does not create the store
