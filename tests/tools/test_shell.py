"""The bash tool with real subprocesses: exit codes, bounds, and no process left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from anyio.abc import Process

from fanloop.errors import ToolError
from fanloop.tools import BashTool
from fanloop.tools.shell import run_command


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


@pytest.fixture(autouse=True)
def _reap_listed_pids(ws: Path) -> Iterator[None]:
    """Kill every process a test's command listed, pass or fail: none outlives the test."""
    yield
    for name in ("pids", "bg"):
        listed = read_pids(ws / name) if (ws / name).exists() else []
        for pid in listed:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def test_output_and_exit_code(ws: Path) -> None:
    tool = BashTool(root=ws)
    ok = await tool.run(command="echo out; echo err >&2")
    assert ok.content == "out\nerr\n[exit code 0]"
    assert not ok.is_error
    assert ok.metadata == {"exit_code": 0, "timed_out": False}
    failed = await tool.run(command="echo nope; exit 3")
    assert failed.content == "nope\n[exit code 3]"
    assert failed.is_error
    assert (await tool.run(command="true")).content == "(no output)\n[exit code 0]"


async def test_runs_in_the_workspace_root_with_stdin_closed(ws: Path) -> None:
    result = await BashTool(root=ws).run(command="pwd; cat; echo end")
    assert result.content == f"{ws.resolve()}\nend\n[exit code 0]"


async def test_output_is_bounded_head_and_tail(ws: Path) -> None:
    result = await BashTool(root=ws, max_output=1000).run(
        command="echo START; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END"
    )
    assert result.content.startswith("START\nxxx")
    assert "bytes of output omitted ...]" in result.content
    assert result.content.endswith("xxx\nEND\n[exit code 0]")
    assert len(result.content) < 1200


async def test_timeout_kills_the_whole_process_group(ws: Path) -> None:
    # Every process ignores SIGTERM, so only the SIGKILL that follows the grace period ends them.
    command = (
        "trap '' TERM; "
        "sleep 60 & echo $! >> pids; "
        "(trap '' TERM; sleep 60; true) & echo $! >> pids; "
        "echo $$ >> pids; echo started; wait"
    )
    started = time.monotonic()
    result = await BashTool(root=ws, kill_grace=0.3).run(command=command, timeout=1)
    # 1 s, the 0.3 s grace and the moment SIGKILL takes; a margin for a busy machine. A group
    # that ignores SIGTERM and is never sent SIGKILL would run for its 60 s.
    assert time.monotonic() - started < 10
    assert result.is_error
    assert result.metadata == {"exit_code": None, "timed_out": True}
    assert result.content == (
        "started\n[timed out after 1 s; the command and its children were killed]"
    )
    pids = read_pids(ws / "pids")
    assert len(pids) == 3
    assert [pid for pid in pids if alive(pid)] == []


async def test_cancellation_kills_the_whole_process_group(ws: Path) -> None:
    os.mkfifo(ws / "ready")
    command = (
        "sleep 60 & echo $! >> pids; "
        "(sleep 60; true) & echo $! >> pids; "
        "echo $$ >> pids; echo ready > ready; wait"
    )
    tool = BashTool(root=ws, kill_grace=0.3)
    finished = False

    async def call() -> None:
        nonlocal finished
        await tool.run(command=command, timeout=60)
        finished = True  # pragma: no cover - the call is cancelled

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            # Opening the FIFO blocks until the command writes to it: then all pids are written.
            await anyio.to_thread.run_sync((ws / "ready").read_text)
            tg.cancel_scope.cancel()
    assert not finished
    pids = read_pids(ws / "pids")
    assert len(pids) == 3
    assert [pid for pid in pids if alive(pid)] == []


async def test_cancellation_while_the_process_starts_kills_the_group(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child runs as soon as it is spawned, while open_process still connects its pipes; on a
    # busy machine the whole command can run in that window. A cancellation delivered there must
    # still kill the group (it used to lose the process: asyncio killed the leader alone).
    os.mkfifo(ws / "ready")
    command = "sleep 60 & echo $! >> pids; (sleep 60; true) & echo $! >> pids; echo $$ >> pids; "
    command += "echo ready > ready; wait"
    real_open = anyio.open_process
    cancelled = anyio.Event()

    async def slow_open(*args: Any, **kwargs: Any) -> Process:
        process = await real_open(*args, **kwargs)
        await cancelled.wait()  # "still connecting the pipes" when the cancellation comes
        return process

    monkeypatch.setattr(anyio, "open_process", slow_open)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(BashTool(root=ws, kill_grace=0.3).run, command=command))
            await anyio.to_thread.run_sync((ws / "ready").read_text)
            tg.cancel_scope.cancel()
            cancelled.set()
    pids = read_pids(ws / "pids")
    assert len(pids) == 3
    assert [pid for pid in pids if alive(pid)] == []


async def test_a_caller_already_cancelled_starts_nothing(ws: Path) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_command(["bash", "-c", "echo $$ > pids"], cwd=ws, timeout=10)
    assert scope.cancelled_caught
    assert not (ws / "pids").exists()


async def test_a_background_child_holding_the_pipe_does_not_block(ws: Path) -> None:
    result = await BashTool(root=ws).run(command="sleep 60 & echo $! > bg; echo done", timeout=30)
    assert result.content == "done\n[exit code 0]"  # the fixture kills the sleep


def test_preview_shows_the_command() -> None:
    assert BashTool().preview(command="rm -rf build") == "$ rm -rf build"
    assert BashTool.dangerous


async def test_bad_input(ws: Path) -> None:
    tool = BashTool(root=ws, max_timeout=5)
    with pytest.raises(ToolError, match="The command is empty"):
        await tool.run(command="  ")
    with pytest.raises(ToolError, match="Missing required argument 'command'"):
        await tool.run()
    with pytest.raises(ToolError, match="must be a positive number"):
        await tool.run(command="true", timeout=-1)
    assert tool.parameters["properties"]["timeout"]["maximum"] == 5
    with pytest.raises(ToolError, match="Cannot run bash in"):
        await BashTool(root=ws / "gone").run(command="true")
