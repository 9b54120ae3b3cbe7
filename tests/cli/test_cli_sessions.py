"""``fanloop sessions`` and continuing conversations: list, show, resume, effects."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from cli_helpers import PROVIDER, fanloop

from fanloop.messages import Message, ToolCallPart
from fanloop.sessions import PostgresStore, SQLiteStore
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


# -- the same commands on PostgreSQL (--store / FANLOOP_STORE) ---------------------------------

PG_DSN = os.environ.get("FANLOOP_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_env(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``env`` with FANLOOP_STORE_SCHEMA set to a fresh schema (dropped afterwards)."""
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed")
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {PG_DSN}: {exc}")
    schema = f"fanloop_cli_{uuid.uuid4().hex[:12]}"
    try:
        yield {**env, "FANLOOP_STORE_SCHEMA": schema}
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
def test_sessions_on_postgres(server: FakeLLMServer, pg_env: dict[str, str], work: Path) -> None:
    """--store with a PostgreSQL URL, or FANLOOP_STORE: run, chat, list, show, effects,
    resolve-effect and resume all use the database, and no SQLite file appears."""
    server.add("Noted: your name is Ada.", "Your name is Ada.")
    store = ("--store", PG_DSN)
    first = fanloop("run", *PROVIDER, *store, "--session", "ada", "My name is Ada.", env=pg_env)
    assert first.code == 0, first.err
    from_env = {**pg_env, "FANLOOP_STORE": PG_DSN}
    second = fanloop(
        "chat", *PROVIDER, "--session", "ada", env=from_env, input="What is my name?\n"
    )
    assert second.code == 0, second.err
    assert "session ada · 2 messages so far" in second.out
    assert "Your name is Ada." in second.out

    listing = fanloop("sessions", "list", *store, env=pg_env)
    assert listing.code == 0, listing.err
    row = next(x for x in listing.out.splitlines() if x.startswith("ada "))
    assert "My name is Ada." in row and " 4 " in row
    shown = fanloop("sessions", "show", "ada", env=from_env)
    assert "assistant: Your name is Ada." in shown.out, shown.err

    # A session a dead process left with an open effect, written through the library.
    call = ToolCallPart(id="call_pay_1", name="bash", arguments={"command": "pay-invoice 42"})

    async def build() -> None:
        async with PostgresStore(PG_DSN, schema=pg_env["FANLOOP_STORE_SCHEMA"]) as pg:
            session = await pg.open("pay")
            await session.extend([Message.user("Pay invoice 42."), Message.assistant("Ok.", call)])
            await session.begin_effect(turn=1, call=call)

    anyio.run(build)
    effects = fanloop("sessions", "effects", *store, env=pg_env)
    assert "call_pay_1" in effects.out and "started" in effects.out, effects.err
    resolved = fanloop(
        "sessions", "resolve-effect", "pay", "call_pay_1", "--applied", *store, env=pg_env
    )
    assert resolved.code == 0, resolved.err
    server.add("Invoice 42 is paid.")
    resumed = fanloop("sessions", "resume", "pay", *PROVIDER, *store, env=pg_env)
    assert resumed.code == 0, resumed.err
    assert "Invoice 42 is paid." in resumed.out
    missing = fanloop("sessions", "show", "nope", *store, env=pg_env)
    assert missing.code == 1 and "no session 'nope' in postgresql://" in missing.err
    assert not (work / ".fanloop").exists()


def test_unreachable_postgres_store_is_one_line_without_the_password(
    env: dict[str, str], work: Path
) -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://kim:hunter2@127.0.0.1:{port}/test"
    for args in (("sessions", "list"), ("run", *PROVIDER, "hello")):
        done = fanloop(*args, "--store", dsn, "--root", str(work), env=env)
        assert done.code == 1, done.err
        assert "could not open the session store" in done.err and "refused" in done.err
        assert "hunter2" not in done.err + done.out and "Traceback" not in done.err
    bad = fanloop("sessions", "list", "--store", PG_DSN, env={**env, "FANLOOP_STORE_SCHEMA": "x;"})
    assert bad.code == 2 and "FANLOOP_STORE_SCHEMA" in bad.err
