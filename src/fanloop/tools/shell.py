"""The ``bash`` tool: run a shell command in the workspace, with a timeout.

The command runs as ``bash -c COMMAND`` in its own session (so its own process group), with
the workspace root as working directory, stdin closed, and stdout and stderr merged. When the
timeout passes, or the call is cancelled, the whole process group gets ``SIGTERM``, then
``SIGKILL`` after a short grace period: nothing the command started in its group survives it.
(A process that moves itself to a new session, e.g. with ``setsid``, leaves the group and is out
of reach; so is a daemon started that way.)

When the command exits normally, its output is read until the pipe closes or, if a background
child keeps the pipe open, for a short moment more; background children of a command that
finished are left running.

The command does not get the host's secrets: every variable the ``env`` tool would mask (a
sensitive name such as ``OPENAI_API_KEY``, ``GITHUB_TOKEN`` or ``DATABASE_URL``, or a value
holding a credential, e.g. a JSON Web Token or a URL with a password) is left out of its
environment. ``BashTool(env_passthrough=("MY_TOKEN",))`` passes named variables through
anyway, ``env={...}`` adds variables set explicitly, and ``inherit_env=True`` hands over the
whole environment unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, Process

from .._log import logger
from .._record import record
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._secrets import scrub_environ
from ._workspace import StrPath, Workspace, arg_str
from .base import Tool, ToolResult

__all__ = ["BashTool", "CommandOutcome", "child_environ", "run_command"]

_KILL_SETTLE = 2.0  # seconds to wait for killed processes to be gone
_NONINTERACTIVE = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


@record(frozen=True)
class CommandOutcome:
    """How a command ended.

    Attributes:
        exit_code: the exit status (negative: killed by that signal); ``None`` if it never
            finished (timed out).
        output: merged stdout and stderr, bounded (the middle is dropped with a note).
        timed_out: the timeout passed and the process group was killed.
        elapsed: seconds from start to end.
        truncated: the output was longer than the limit, and its middle was dropped.
    """

    exit_code: int | None
    output: str
    timed_out: bool
    elapsed: float
    truncated: bool = False


def child_environ(
    *,
    extra: Mapping[str, str] | None = None,
    passthrough: Iterable[str] = (),
    inherit: bool = False,
) -> dict[str, str]:
    """The environment for a command: this process's, without its secrets, non-interactive.

    Args:
        extra: variables set explicitly (always passed, last).
        passthrough: names of secret-looking variables passed through anyway.
        inherit: pass this process's environment unchanged (no scrubbing).
    """
    base = dict(os.environ) if inherit else scrub_environ(os.environ, keep=passthrough)
    return {**base, **_NONINTERACTIVE, **(extra or {})}


class _Bounded:
    """Keeps the first and the last ``limit // 2`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_size += len(chunk)
            while self.tail_size - len(self.tail[0]) >= self.half:
                self.tail_size -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + min(self.tail_size, self.half)

    def text(self, errors: str = "replace") -> str:
        tail = b"".join(self.tail)
        if len(tail) > self.half:
            tail = tail[-self.half :]
        omitted = self.total - len(self.head) - len(tail)
        head_text = self.head.decode("utf-8", errors=errors)
        tail_text = tail.decode("utf-8", errors=errors)
        if omitted <= 0:
            return head_text + tail_text
        return f"{head_text}\n[... {omitted:,} bytes of output omitted ...]\n{tail_text}"


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group; ``False`` if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member changed user; nothing we can do
        return True
    return True


async def _kill_group(process: Process, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL what is left."""
    pgid = process.pid  # the leader of its own session: its pid is the group id
    if _signal_group(pgid, signal.SIGTERM):
        deadline = anyio.current_time() + grace
        with anyio.move_on_after(grace):
            await process.wait()
        # The leader is gone; give the rest of the group what remains of the grace period.
        # Other members are not our children: nothing signals their exit, so poll.
        while anyio.current_time() < deadline and _group_alive(pgid):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    if _signal_group(pgid, signal.SIGKILL):
        # SIGKILL is delivered asynchronously: wait (briefly) until every member is gone.
        with anyio.move_on_after(_KILL_SETTLE):
            await process.wait()
            while _group_alive(pgid):  # noqa: ASYNC110 - not our children: poll
                await anyio.sleep(0.005)
    await process.wait()


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in the group."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # no procfs: trust kill(0), which also counts zombies
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _pump(stream: ByteReceiveStream, sink: _Bounded, done: anyio.Event) -> None:
    try:
        async for chunk in stream:
            sink.add(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        done.set()


async def run_command(
    argv: list[str],
    *,
    cwd: StrPath,
    timeout: float,
    max_output: int = 30_000,
    kill_grace: float = 2.0,
    drain: float = 0.25,
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = True,
    decode_errors: str = "replace",
) -> CommandOutcome:
    """Run ``argv`` in a new process group; kill the whole group on timeout or cancellation.

    Args:
        argv: the program and its arguments.
        cwd: the working directory.
        timeout: seconds before the process group is killed.
        max_output: bytes of merged stdout/stderr kept (head and tail).
        kill_grace: seconds between SIGTERM and SIGKILL.
        drain: seconds to keep reading output after the process exited, when a background
            child still holds the pipe.
        env: the environment (default: :func:`child_environ`, this process's without its
            secrets, with pagers and prompts turned off).
        merge_stderr: merge stderr into the output; ``False`` discards it.
        decode_errors: how bytes that are not UTF-8 are decoded (``"surrogateescape"`` keeps
            them, for output that is passed back to a program).

    Returns:
        The :class:`CommandOutcome`. Cancellation propagates, after the group is killed.

    Raises:
        ToolError: the program could not be started.
    """
    started = time.monotonic()
    await anyio.lowlevel.checkpoint_if_cancelled()  # nothing is started for a cancelled caller
    try:
        # Shielded: the child runs as soon as it is spawned, before ``open_process`` returns (it
        # still connects the pipes). A cancellation delivered in that window would lose the
        # process object, and asyncio would kill the leader alone: its children would live on.
        # Once we hold the process, the cancellation is delivered below and the group killed.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
                start_new_session=True,
                env=dict(env) if env is not None else child_environ(),
            )
    except OSError as exc:  # the program or the directory is missing, the arguments too long
        raise ToolError(f"Cannot run {argv[0]} in {cwd}: {exc.strerror or exc}.") from None
    except ValueError as exc:  # a NUL byte in an argument or in the environment
        raise ToolError(f"Cannot run {argv[0]}: {exc}.") from None
    sink = _Bounded(max_output)
    finished = False
    try:
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                eof = anyio.Event()
                assert process.stdout is not None
                tg.start_soon(_pump, process.stdout, sink, eof)
                await process.wait()
                finished = True
                with anyio.move_on_after(drain):
                    await eof.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:
                logger.info("bash_killing_process_group", pid=process.pid)
                await _kill_group(process, kill_grace)
            await process.aclose()
    return CommandOutcome(
        exit_code=process.returncode if finished else None,
        output=sink.text(decode_errors),
        timed_out=not finished,
        elapsed=time.monotonic() - started,
        truncated=sink.truncated,
    )


class BashTool(Tool):
    """``bash``: run a shell command in the workspace (dangerous).

    Args:
        root: the working directory (default: the current directory at call time).
        timeout: default seconds before the command's process group is killed.
        max_timeout: the largest timeout the model may ask for.
        max_output: bytes of output returned (the first and last halves).
        kill_grace: seconds between SIGTERM and SIGKILL when killing.
        env: variables to set for every command (passed even if they look secret).
        env_passthrough: names of variables of this process passed to the command even though
            they look secret (by default such variables are left out).
        inherit_env: pass this process's whole environment, secrets included.
    """

    name = "bash"
    description = (
        "Run a shell command with bash in the workspace root and return its combined "
        "stdout/stderr and exit code. Non-interactive (stdin is closed). The command is killed, "
        "with everything it started, when the timeout passes. The host's secrets (API keys, "
        "tokens, passwords in environment variables) are not in its environment."
    )
    dangerous = True

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        timeout: float = 120.0,
        max_timeout: float = 600.0,
        max_output: int = 30_000,
        kill_grace: float = 2.0,
        env: Mapping[str, str] | None = None,
        env_passthrough: Iterable[str] = (),
        inherit_env: bool = False,
    ) -> None:
        self.workspace = Workspace(root)
        self.env = dict(env or {})
        self.env_passthrough = frozenset(env_passthrough)
        self.inherit_env = inherit_env
        self.default_timeout = timeout
        self.max_timeout = max_timeout
        self.max_output = max_output
        self.kill_grace = kill_grace
        self.parameters = {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": max_timeout,
                    "description": f"Seconds before the command is killed. Default: {timeout:g}.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    def _environ(self, stop: Stop) -> dict[str, str]:
        return child_environ(
            extra=self.env, passthrough=self.env_passthrough, inherit=self.inherit_env
        )

    def preview(self, **kwargs: Any) -> str:
        """The command line, as ``$ command``."""
        command = kwargs.get("command")
        return f"$ {command}" if isinstance(command, str) else super().preview(**kwargs)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run the command; see the class docstring."""
        command = arg_str(kwargs, "command")
        if not command.strip():
            raise ToolError("The command is empty.")
        if "\x00" in command:
            raise ToolError("The command contains a NUL byte, which a command line cannot hold.")
        timeout = kwargs.get("timeout")
        if timeout is None:
            timeout = self.default_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ToolError(f"Argument 'timeout' must be a positive number, got {timeout!r}.")
        timeout = min(float(timeout), self.max_timeout)
        outcome = await run_command(
            ["bash", "-c", command],
            cwd=self.workspace.root,
            timeout=timeout,
            max_output=self.max_output,
            kill_grace=self.kill_grace,
            env=await run_blocking(self._environ),
        )
        body = outcome.output if outcome.output.strip() else "(no output)"
        if not body.endswith("\n"):
            body += "\n"
        if outcome.timed_out:
            status = f"[timed out after {timeout:g} s; the command and its children were killed]"
        else:
            status = f"[exit code {outcome.exit_code}]"
        return ToolResult(
            body + status,
            is_error=outcome.timed_out or outcome.exit_code != 0,
            metadata={"exit_code": outcome.exit_code, "timed_out": outcome.timed_out},
        )
