"""Helpers for the durable tests: the test DBOS database, worker processes, the fake model.

The tests need the PostgreSQL server at ``FANLOOP_TEST_PG_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and are skipped, with the reason, without it.
DBOS gets a system database of its own per test session, ``fanloop_dbos_test_<random>``,
dropped at the end.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import leftovers
from fanloop.providers import Usage
from fanloop.testing import Fault, call, reply

PG_DSN = os.environ.get("FANLOOP_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
WORKER = Path(__file__).with_name("_worker.py")
WAIT = 60.0
"""Seconds a test waits for a worker's line or a run's end before failing."""


@cache
def pg_unreachable() -> str | None:
    """Why PostgreSQL cannot be used for the tests, or ``None`` when it can (asked once)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'fanloop[durable]')"
    try:
        import dbos  # noqa: F401
    except ImportError:
        return "DBOS is not installed (pip install 'fanloop[durable]')"
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL is not reachable at {PG_DSN}: {str(exc).strip()}"
    return None


def new_database_url() -> tuple[str, str]:
    """A fresh DBOS system database name and its URL on the test server."""
    from psycopg.conninfo import conninfo_to_dict

    name = f"fanloop_dbos_test_{uuid.uuid4().hex[:10]}"
    params = conninfo_to_dict(PG_DSN)
    host = params.get("host") or "127.0.0.1"
    port = params.get("port") or 5432
    user = params.get("user") or "postgres"
    password = params.get("password")
    auth = f"{user}:{password}" if password else str(user)
    return name, f"postgresql://{auth}@{host}:{port}/{name}"


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the model ---------------------------------------------------------------------------------

STREAMED_TEXT = " ".join(f"word{i}" for i in range(40))
LEAD_USAGE = Usage(input_tokens=100, output_tokens=20)
SPENDER_USAGE = Usage(input_tokens=580, output_tokens=20)
SPENDER_CALLS = 9
"""Model calls a spending sub-agent makes when nothing stops it (8 ticks and its answer)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def respond(body: dict[str, Any]) -> Any:
    """The fake model of every test agent: its turn follows from the request alone, so any
    worker process gets the same answer to the same request."""
    messages = body["messages"]
    system = _text(messages[0]["content"]) if messages[0]["role"] == "system" else ""
    results = [_text(m["content"]) for m in messages if m["role"] == "tool"]
    user = next(_text(m["content"]) for m in messages if m["role"] == "user")
    if system == "agent:crash":
        if not results:
            return reply(tool_calls=[call("fetch", _id="f0", n=0)])
        if len(results) == 1:
            return reply(
                "Fetching the rest.",
                tool_calls=[
                    call("fetch", _id="f1", n=1),
                    call("note", _id="na", text="a"),
                    call("fetch", _id="f2", n=2),
                    call("note", _id="nb", text="b"),
                    call("fetch", _id="f3", n=3),
                ],
            )
        return "Done: " + ", ".join(results)
    if system == "agent:fanout":
        if not results:
            return reply(
                tool_calls=[call("delegate", _id=f"d{i}", task=f"{user}:{i}") for i in range(8)]
            )
        return f"All {len(results)} reports in."
    if system == "agent:budget":
        if not results:
            tasks = [call("delegate", _id=f"d{i}", task=f"{user}:{i}") for i in range(8)]
            return reply(tool_calls=tasks, usage=LEAD_USAGE)
        return reply(f"All {len(results)} reports in.", usage=LEAD_USAGE)
    if system.startswith("You are a sub-agent") and user.startswith("spend"):
        if len(results) < SPENDER_CALLS - 1:
            return reply(tool_calls=[call("tick", n=len(results))], usage=SPENDER_USAGE)
        return reply("spent", usage=SPENDER_USAGE)
    if system == "agent:meter":
        return reply(STREAMED_TEXT, usage=SPENDER_USAGE)
    if system.startswith("You are a sub-agent"):
        if not results:
            return reply(tool_calls=[call("where", _id="w", label=user)])
        return f"report on {user}"
    if system == "agent:stream":
        return STREAMED_TEXT
    if system == "agent:gate":
        if not results:
            return reply(
                tool_calls=[
                    call("charge", _id="c1", amount=50),
                    call("charge", _id="c2", amount=500),
                    call("refund", _id="r1", amount=20),
                ]
            )
        return "Payments handled."
    if system == "agent:desk":
        if not results:
            return reply(tool_calls=[call("ask_clerk", _id="k1", task="opening hours?")])
        return f"The clerk said: {results[0]}"
    if system == "agent:clerk":
        return f"clerk answers {user!r}"
    if system == "agent:typed":
        return reply(tool_calls=[call("final_result", _id="o1", total=12.5, currency="eur")])
    if system == "agent:fail":
        return Fault.http(400, message="the fake model rejects this request")
    if system == "agent:auto":
        if not results:
            return reply(tool_calls=[call("charge", _id="a1", amount=7)])
        return "Charged."
    raise AssertionError(f"unexpected request (system {system!r})")


def requests_of(server: Any, system: str, user: str | None = None) -> list[int]:
    """For each request the server got from the agent with ``system`` (and, if given, this
    first user message): how many tool results it carried (which turn it was)."""
    out = []
    for request in server.requests:
        messages = request.body["messages"]
        if not messages or _text(messages[0]["content"]) != system:
            continue
        if user is not None and _text(messages[1]["content"]) != user:
            continue
        out.append(sum(1 for m in messages if m["role"] == "tool"))
    return out


# -- workers -----------------------------------------------------------------------------------


class Worker:
    """A worker process (``_worker.py``): its output lines are collected as they come."""

    def __init__(
        self, db_url: str, llm_urls: tuple[str, str], executor: str, marks: Path, *flags: str
    ) -> None:
        self.executor = executor
        self.log = marks / f"{executor}-{uuid.uuid4().hex[:6]}.log"
        self._lines: queue.Queue[str] = queue.Queue()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), db_url, *llm_urls, executor, str(marks), *flags],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put("")  # the process is gone

    def wait_for(self, expected: str, timeout: float = WAIT) -> str:
        """Block until the worker prints a line starting with ``expected``."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"{self.executor}: no {expected!r} in {timeout} s") from None
            if line.startswith(expected):
                return line
            if line == "" and self.process.poll() is not None:
                raise AssertionError(
                    f"{self.executor} exited ({self.process.returncode}) before {expected!r}:\n"
                    + self.log.read_text()[-3000:]
                )

    def start(self, agent: str, workflow_id: str, prompt: str) -> None:
        """Have the worker start a run (and wait until it has)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"start {agent} {workflow_id} {prompt}\n")
        self.process.stdin.flush()
        self.wait_for(f"STARTED {workflow_id}")

    def run(self, agent: str, workflow_id: str, prompt: str) -> str:
        """Have the worker run a run to its end (``DurableAgent.run``); its ``repr(output)``."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"run {agent} {workflow_id} {prompt}\n")
        self.process.stdin.flush()
        return self.wait_for(f"RESULT {workflow_id} ").split(" ", 2)[2]

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the worker."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@dataclass
class Env:
    """What the workers of a test module share."""

    db_url: str
    server: Any
    slow_server: Any
    marks: Path
    workers: list[Worker] = field(default_factory=list)

    def worker(self, executor: str, *flags: str) -> Worker:
        """Start a worker process (it launches DBOS; wait for its ``READY``). It is the
        module's: stopped with the others when the module's tests are done."""
        urls = (self.server.openai_base_url, self.slow_server.openai_base_url)
        worker = Worker(self.db_url, urls, executor, self.marks, *flags)
        self.workers.append(worker)
        leftovers.owned_by_fixture(worker.process.pid)
        return worker


async def account_row(db_url: str, account: str) -> dict[str, int]:
    """A durable tree's budget account as the database holds it: tokens charged and
    reservations live."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT input_tokens + output_tokens + cache_read_tokens + cache_write_tokens, "
            "(SELECT count(*) FROM fanloop.budget_reservation WHERE account = %s) "
            "FROM fanloop.budget_account WHERE id = %s",
            (account, account),
        )
        row = await cur.fetchone()
    assert row is not None, f"no budget account {account!r}"
    return {"total_tokens": int(row[0]), "reservations": int(row[1])}
