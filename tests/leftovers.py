"""No test leaves a process behind: the processes a test started that outlive it.

A process of this test run is one that descends from the pytest process, or, once its parent
is gone and it was handed to init, one whose environment carries :data:`MARK` with this run's
pid (every child inherits it, unless a test hands it an environment of its own). Reading
``/proc`` (Linux); elsewhere nothing is found.

``tests/conftest.py`` snapshots the pids before each test and, after its teardown, fails the
test for every process of the run that is new and still there (a zombie child nobody reaped
counts too), once they had a few seconds to finish exiting; it kills and reaps them, so they do
not outlive the run either. At the end of the session it does the same for every process of the
run that is left. A fixture wider than a test that starts processes inside a test hands them
over with :func:`owned_by_fixture`: the check at the end of the session still counts them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

MARK = "FANLOOP_TEST_RUN"
"""The environment variable that marks the processes of a test run (its value: pytest's pid)."""

SETTLE = float(os.environ.get("FANLOOP_TEST_SETTLE", "10"))
"""Seconds a new process gets to finish exiting after its test, before it counts as left."""

_owned: set[int] = set()


@dataclass(frozen=True)
class Proc:
    """A process as ``/proc/<pid>/stat`` shows it."""

    pid: int
    ppid: int
    state: str
    started: int  # clock ticks after boot: with the pid, it names one process
    command: str

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")

    def __str__(self) -> str:
        what = "a zombie nobody reaped" if self.zombie else f"parent {self.ppid}"
        return f"pid {self.pid} ({what}): {self.command}"


def mark_this_run() -> None:
    """Mark the processes this one starts from now on (call once, at start-up)."""
    os.environ[MARK] = str(os.getpid())


def owned_by_fixture(pid: int) -> None:
    """``pid`` belongs to a fixture wider than a test: it may outlive the test that made it."""
    _owned.add(pid)


def pids() -> set[int]:
    """Every process id now in ``/proc`` (empty without procfs)."""
    try:
        return {int(name) for name in os.listdir("/proc") if name.isdigit()}
    except OSError:
        return set()


def stat(pid: int) -> Proc | None:
    """The process ``pid``, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    name, _, rest = data.rpartition(b")")
    fields = rest.split()
    try:
        return Proc(pid, int(fields[1]), fields[0].decode(), int(fields[19]), _command(pid, name))
    except (IndexError, ValueError):
        return None


def _command(pid: int, name: bytes) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(400).split(b"\0")
    except OSError:
        argv = []
    line = b" ".join(a for a in argv if a) or name.partition(b"(")[2]
    return line.decode(errors="replace")[:200]


def _marked(pid: int) -> bool:
    mark = f"{MARK}={os.getpid()}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return mark in fh.read().split(b"\0")
    except OSError:
        return False


def _descends(proc: Proc, me: int, known: dict[int, Proc | None]) -> bool:
    seen: set[int] = set()
    while proc.ppid not in (0, 1) and proc.pid not in seen:
        if proc.ppid == me:
            return True
        seen.add(proc.pid)
        if proc.ppid not in known:
            known[proc.ppid] = stat(proc.ppid)
        parent = known[proc.ppid]
        if parent is None:
            return False
        proc = parent
    return proc.ppid == me


def of_this_run(candidates: Iterable[int]) -> list[Proc]:
    """The processes among ``candidates`` that belong to this run (not pytest itself)."""
    me = os.getpid()
    known: dict[int, Proc | None] = {}
    found = []
    for pid in sorted(set(candidates) - {me}):
        proc = known[pid] = stat(pid)
        if proc is None:
            continue
        if proc.zombie and proc.ppid != me:
            continue  # its parent, one of ours or init, reaps it
        if _descends(proc, me, known) or _marked(pid):
            found.append(proc)
    return found


def left_since(before: set[int]) -> list[Proc]:
    """This run's processes that are new since ``before`` and still there after a few seconds
    to finish exiting (the ones a fixture wider than the test owns are not counted)."""
    deadline = time.monotonic() + SETTLE
    while True:
        left = [p for p in of_this_run(pids() - before) if p.pid not in _owned]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def everything_left() -> list[Proc]:
    """Every process of this run still there (after a few seconds to finish exiting)."""
    deadline = time.monotonic() + SETTLE
    while True:
        left = of_this_run(pids())
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill(procs: Iterable[Proc]) -> None:
    """SIGKILL each process (unless it has since been replaced by another), reap our children."""
    procs = list(procs)
    for proc in procs:
        now = stat(proc.pid)
        if now is not None and now.started == proc.started and not now.zombie:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        _reap(procs)
        if all(_gone(p) for p in procs):
            return
        time.sleep(0.02)


def _gone(proc: Proc) -> bool:
    now = stat(proc.pid)
    return now is None or now.started != proc.started or (now.zombie and now.ppid != os.getpid())


def _reap(procs: Iterable[Proc]) -> None:
    me = os.getpid()
    for proc in procs:
        now = stat(proc.pid)
        if now is not None and now.ppid == me and now.started == proc.started:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, os.WNOHANG)
