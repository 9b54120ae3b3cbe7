"""Deferred approvals from the command line: ``run --defer``, ``sessions pending``,
``sessions approve``; each step a real ``python -m fanloop`` against the fake server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_helpers import PROVIDER, Done, fanloop

from fanloop.testing import FakeLLMServer, call, reply

APPEND = "echo ran >> marker.txt"  # a side effect that counts its runs


def cli(env: dict[str, str], work: Path, *args: str, input: str | None = None) -> Done:
    return fanloop(*args, "--root", str(work), env=env, input=input)


def agent(env: dict[str, str], work: Path, *args: str, input: str | None = None) -> Done:
    """A command that runs the agent (it needs the model options)."""
    return cli(env, work, *args, *PROVIDER, input=input)


def park(server: FakeLLMServer, env: dict[str, str], work: Path, session: str, *more: str) -> Done:
    """``fanloop run --defer``: the model asks for bash, the call is parked; the model's
    next answer is queued for whoever answers the call."""
    server.add(
        reply("Appending.", tool_calls=[call("bash", _id="call_b1", command=APPEND)]),
        "Answered.",
    )
    done = agent(env, work, "run", "--defer", "--session", session, *more, "Append a line")
    assert done.code == 3, done.err  # waiting for a person: neither success nor failure
    assert not (work / "marker.txt").exists()
    assert len(server.requests) == 1
    return done


def runs(work: Path) -> int:
    marker = work / "marker.txt"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_defer_then_pending_then_approve_runs_the_call_once(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    parked = park(server, env, work, "s1")
    assert "$ echo ran >> marker.txt" in parked.out  # the preview
    assert "deferred" in parked.out
    assert "⏸ awaiting approval: 1 call waiting" in parked.out
    assert f"fanloop sessions approve s1 call_b1 --root {work}" in parked.out

    # pending: of every session, and of one, as text and as JSON
    everywhere = cli(env, work, "sessions", "pending")
    assert everywhere.code == 0, everywhere.err
    assert "session s1 · call call_b1 · bash" in everywhere.out
    assert "$ echo ran >> marker.txt" in everywhere.out
    one = cli(env, work, "sessions", "pending", "s1", "--json")
    assert one.code == 0, one.err
    assert [json.loads(x) for x in one.out.splitlines()] == [
        {
            "session_id": "s1",
            "call_id": "call_b1",
            "tool": "bash",
            "name": "bash",
            "arguments": {"command": APPEND},
            "preview": "$ echo ran >> marker.txt",
        }
    ]
    shown = cli(env, work, "sessions", "show", "s1")
    assert "1 call waiting for approval" in shown.out

    # the session takes no new turn (nor a resume) while the call waits
    blocked = agent(env, work, "run", "--session", "s1", "something else")
    assert blocked.code == 1
    assert "waiting for approval" in blocked.err and "sessions approve s1 call_b1" in blocked.err
    resumed = agent(env, work, "sessions", "resume", "s1")
    assert resumed.code == 1 and "sessions approve s1 call_b1" in resumed.err
    assert len(server.requests) == 1 and runs(work) == 0

    approved = agent(env, work, "sessions", "approve", "s1", "call_b1")
    assert approved.code == 0, approved.err
    assert "approved call_b1 (bash) in session s1" in approved.out
    assert "✓ bash(command='echo ran >> marker.txt')" in approved.out
    assert "Answered." in approved.out
    assert runs(work) == 1
    # one more model request (the answer to the tool result); the parked turn's was not repeated
    assert len(server.requests) == 2
    assert server.requests[1].messages[-1]["role"] == "tool"

    # answered: nothing waits now, and approving again runs nothing
    again = agent(env, work, "sessions", "approve", "s1", "call_b1")
    assert again.code == 1 and "call_b1 of session 's1' were already answered" in again.err
    none = cli(env, work, "sessions", "pending")
    assert none.code == 0 and "no calls waiting for approval" in none.out
    assert runs(work) == 1 and len(server.requests) == 2


def test_two_approves_at_once_run_the_call_once(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    """A double-clicked approval from the command line: two ``sessions approve`` processes
    started together; one runs the call and the turn, the other is told it was answered."""
    park(server, env, work, "s3")
    command = [sys.executable, "-m", "fanloop", "sessions", "approve", "s3", "call_b1"]
    command += [*PROVIDER, "--root", str(work)]
    procs = [
        subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=60) for p in procs]
    done = [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    assert sorted(code for code, _, _ in done) == [0, 1], done
    (loser,) = [err for code, _, err in done if code == 1]
    assert "already answered" in loser or "being answered by another resume" in loser
    assert runs(work) == 1
    assert len(server.requests) == 2  # the parking turn and the winner's next turn


def test_deny_with_a_reason_and_json(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    parked = park(server, env, work, "s2", "--json")
    events = [json.loads(x) for x in parked.out.splitlines()]  # stdout: events only
    result = events[-1]["result"]
    assert result["termination_reason"] == "awaiting_approval"
    assert [p["call_id"] for p in result["pending_approvals"]] == ["call_b1"]
    assert "fanloop sessions approve s2 call_b1" in parked.err

    denied = agent(env, work, "sessions", "approve", "s2", "call_b1", "--deny", "not on Fridays")
    assert denied.code == 0, denied.err
    assert "denied call_b1 (bash)" in denied.out
    assert "✗ bash(command='echo ran >> marker.txt')  declined" in denied.out
    assert runs(work) == 0
    tool_result = server.requests[-1].messages[-1]
    assert tool_result["role"] == "tool" and "not on Fridays" in tool_result["content"]
    assert len(server.requests) == 2  # the parked turn's request, and the one after the answer


def test_wrong_call_id_and_bad_usage_change_nothing(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    park(server, env, work, "s3")
    wrong = agent(env, work, "sessions", "approve", "s3", "call_nope")
    assert wrong.code == 1
    assert wrong.err.count("\n") == 1 and "Traceback" not in wrong.err
    assert "call_nope" in wrong.err and "waiting: call_b1 (bash)" in wrong.err
    for args, message in (
        ((), "name the CALL_ID"),
        (("--deny", "call_b1"), "after the CALL_IDs"),
    ):
        bad = agent(env, work, "sessions", "approve", "s3", *args)
        assert bad.code == 2 and message in bad.err, bad.err
    unknown = agent(env, work, "sessions", "approve", "nope", "call_b1")
    assert unknown.code == 1 and "no session 'nope'" in unknown.err
    assert runs(work) == 0 and len(server.requests) == 1
    still = cli(env, work, "sessions", "pending", "s3", "--json")
    assert json.loads(still.out)["call_id"] == "call_b1"  # still waiting, unchanged

    answered = agent(env, work, "sessions", "approve", "s3", "--all")  # every waiting call
    assert answered.code == 0, answered.err
    assert runs(work) == 1


def test_defer_needs_a_session_and_chat_stops_at_a_deferred_call(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    alone = agent(env, work, "chat", "--defer")
    assert alone.code == 2 and "--defer needs --session ID" in alone.err
    both = agent(env, work, "run", "--defer", "--yes", "--session", "x", "hi")
    assert both.code == 2 and "not allowed with" in both.err
    assert server.requests == []

    server.add(reply(tool_calls=[call("bash", _id="call_c1", command=APPEND)]))
    chat = agent(
        env, work, "chat", "--defer", "--session", "c1",
        input="Append a line\nThis line is never sent\n",
    )  # fmt: skip
    assert chat.code == 3, chat.err
    assert "fanloop sessions approve c1 call_c1" in chat.out
    assert len(server.requests) == 1  # the chat stopped: the session takes no new turn
    assert runs(work) == 0
