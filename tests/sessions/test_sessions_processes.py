"""Real processes on one store (a SQLite file, or a PostgreSQL schema): killed with SIGKILL
mid-run, and writing at once.

Every wait here is on something the child says on its stdout, never on a timer.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from sessions_helpers import open_store

from fanloop.messages import Message, ToolResultPart
from fanloop.sessions import EffectStatus, PostgresStore, SQLiteStore, arguments_hash

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

Command = Callable[..., list[str]]


class Child:
    """A running helper process and a line reader on its stdout."""

    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None
        self.stdout = BufferedByteReceiveStream(process.stdout)

    async def line(self) -> str:
        """The next line the child printed ('' at end of output)."""
        try:
            return (await self.stdout.receive_until(b"\n", 65536)).decode()
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return ""

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line.encode() + b"\n")

    async def kill(self) -> None:
        """SIGKILL: no cleanup, no atexit, no flush."""
        self.process.kill()
        assert await self.process.wait() == -signal.SIGKILL


@asynccontextmanager
async def child(command: list[str], stderr: Path) -> AsyncIterator[Child]:
    with stderr.open("wb") as err:
        async with await anyio.open_process(command, stderr=err) as process:
            try:
                yield Child(process)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()


async def test_sigkill_inside_a_dangerous_tool_loses_nothing(
    durable_target: str, tmp_path: Path, child_command: Command
) -> None:
    with anyio.fail_after(60):
        async with child(child_command("crash", durable_target, "s"), tmp_path / "err") as proc:
            assert await proc.line() == "ready", (tmp_path / "err").read_text()
            await proc.kill()

    async with open_store(durable_target) as store:
        session = await store.load("s")
        assert [(m.role, m.text) for m in session.messages] == [
            ("user", "write a file, then mail kim"),
            ("assistant", "writing"),
            ("user", ""),
            ("assistant", "mailing"),
        ]
        assert session.messages[3].tool_calls[0].id == "call_b"
        committed, started = await session.effects()
        assert committed.call_id == "call_a"
        assert committed.status is EffectStatus.COMMITTED
        assert committed.result == ToolResultPart(call_id="call_a", content="wrote 1 byte")
        assert started.call_id == "call_b"
        assert started.status is EffectStatus.STARTED
        assert (started.turn, started.tool) == (2, "send_email")
        assert started.arguments_hash == arguments_hash({"to": "kim@example.com"})
        [info] = await store.list()
        assert (info.message_count, info.open_effects) == (4, 1)

        # The operator checks the mail server and records what they found.
        resolved = await session.resolve_effect("call_b", applied=True, note="in the outbox")
    async with open_store(durable_target) as store:
        assert await (await store.load("s")).effects(EffectStatus.RESOLVED_APPLIED) == [resolved]
        assert (await store.list())[0].open_effects == 0


async def test_sigkill_mid_stream_keeps_every_acknowledged_append(
    durable_target: str, tmp_path: Path, child_command: Command
) -> None:
    acknowledged: list[int] = []
    with anyio.fail_after(60):
        async with child(child_command("stream", durable_target, "s"), tmp_path / "err") as proc:
            while not acknowledged or acknowledged[-1] < 200:
                line = await proc.line()
                assert line, (tmp_path / "err").read_text()
                acknowledged.append(int(line))
            await proc.kill()  # while it keeps appending
            while line := await proc.line():  # acknowledged before it died, still in the pipe
                acknowledged.append(int(line))

    assert acknowledged == list(range(len(acknowledged)))
    async with open_store(durable_target) as store:
        messages = (await store.load("s")).messages
    # Everything acknowledged is there, in order; at most the one append in flight beyond.
    assert len(acknowledged) <= len(messages) <= len(acknowledged) + 1
    assert [m.text for m in messages] == [f"m{i}" for i in range(len(messages))]


async def test_several_processes_and_many_tasks_share_one_file(
    durable_target: str, tmp_path: Path, child_command: Command
) -> None:
    """Three processes and this one write to distinct sessions of a brand-new store at once
    (on PostgreSQL all four create the schema together: the migration lock holds)."""
    sessions, messages = 4, 40
    prefixes = ["p0", "p1", "p2"]

    def writer(prefix: str) -> list[str]:
        return child_command("writer", durable_target, prefix, str(sessions), str(messages))

    async def write_here(store: SQLiteStore | PostgresStore, name: str) -> None:
        session = await store.open(name)
        for i in range(messages):
            await session.append(Message.user(f"{name}:{i}"))

    with anyio.fail_after(90):
        async with (
            child(writer("p0"), tmp_path / "e0") as a,
            child(writer("p1"), tmp_path / "e1") as b,
            child(writer("p2"), tmp_path / "e2") as c,
            open_store(durable_target) as store,
        ):
            children = [a, b, c]
            for proc in children:
                assert await proc.line() == "ready"
            async with anyio.create_task_group() as tg:
                for proc in children:
                    await proc.send("go")
                for s in range(sessions):
                    tg.start_soon(write_here, store, f"here-{s}")
            for n, proc in enumerate(children):
                assert await proc.line() == "done", (tmp_path / f"e{n}").read_text()
                assert await proc.process.wait() == 0

    async with open_store(durable_target) as store:
        infos = await store.list()
        names = [f"{p}-{s}" for p in [*prefixes, "here"] for s in range(sessions)]
        assert sorted(i.id for i in infos) == sorted(names)
        assert {i.message_count for i in infos} == {messages}
        for name in names:
            session = await store.load(name)
            assert [m.text for m in session.messages] == [f"{name}:{i}" for i in range(messages)]
