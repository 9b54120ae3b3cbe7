"""Helpers for driving ``python -m fanloop`` in subprocesses and on a pseudo-terminal."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# Chat Completions: the tests read the requests' ``messages`` (``openai`` is the Responses API).
PROVIDER = ("--provider", "openai-chat", "--model", "gpt-4o")


@dataclass
class Done:
    code: int
    out: str
    err: str


def fanloop(
    *args: str,
    env: dict[str, str],
    cwd: Path | None = None,
    input: str | None = None,
    timeout: float = 30.0,
) -> Done:
    """Run ``python -m fanloop ARGS`` to the end, stdin a pipe (or closed), not a terminal."""
    proc = subprocess.run(
        [sys.executable, "-m", "fanloop", *args],
        env=env,
        cwd=cwd,
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Closed:
    code: int
    head: list[str]
    err: str
    after_close: float  # seconds from closing the pipe to the exit


def closed_pipe(*args: str, env: dict[str, str], lines: int = 1, timeout: float = 30.0) -> Closed:
    """``python -m fanloop ARGS | head -LINES``: read ``lines`` lines of stdout, close the
    pipe, and wait for the process to end."""
    with subprocess.Popen(
        [sys.executable, "-m", "fanloop", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            head = [proc.stdout.readline().decode() for _ in range(lines)]
            proc.stdout.close()  # what head does when it has its lines
            closed_at = time.monotonic()
            err = proc.stderr.read().decode(errors="replace")  # to the end: the process exited
            code = proc.wait(timeout=timeout)
            return Closed(code, head, err, time.monotonic() - closed_at)
        finally:
            if proc.poll() is None:
                proc.kill()


class Terminal:
    """``python -m fanloop`` on a pseudo-terminal (stdin, stdout and stderr all on it);
    ``columns`` sets its width (by default the terminal reports no size)."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str],
        cwd: Path | None = None,
        columns: int | None = None,
    ) -> None:
        master, slave = os.openpty()
        if columns is not None:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.fd = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fanloop", *args],
            env=env,
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
            start_new_session=True,
        )
        os.close(slave)
        self.output = ""
        self.seen = 0  # expect() searches from here

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the process is gone and the terminal closed
            return False
        if not data:
            return False
        self.output += data.decode("utf-8", errors="replace")
        return True

    def expect(self, pattern: str, timeout: float = 15.0) -> str:
        """Read until ``pattern`` (a regex, escape codes ignored) shows up; return the text
        read up to and including it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            plain = ESCAPE.sub("", self.output)
            match = regex.search(plain, self.seen)
            if match:
                self.seen = match.end()
                return plain[: match.end()]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {pattern!r}; got:\n{plain}")
            if not self._read(0.1) and not regex.search(ESCAPE.sub("", self.output), self.seen):
                raise AssertionError(f"the process ended before {pattern!r}; got:\n{plain}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the process."""
        self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout: float = 15.0) -> int:
        """Read the rest of the output and return the exit code."""
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if self.proc.poll() is not None and not select.select([self.fd], [], [], 0)[0]:
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"the process did not exit; got:\n{self.plain}")
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    @property
    def plain(self) -> str:
        return ESCAPE.sub("", self.output)

    def close(self) -> None:
        """Kill what is left of the session (the process and anything in its group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.fd)
