"""A heartbeat that proves the event loop kept running while hostile work ran.

Usage::

    async with heartbeat() as beat:
        await hostile_work()
    assert beat.max_stall < 0.1, beat

The heartbeat task sleeps ``interval`` seconds at a time and measures each gap between two
wake-ups. A gap far above ``interval`` means something held the event loop (or the interpreter
lock) that long, or that the operating system gave the process no CPU that long: on a busy
machine (two cores, other test runs, CPU burners beside them) a gap of 150 ms happens with no
code holding anything.

So each gap is also measured in the time the scheduler kept this process's threads waiting
for a CPU while they were ready to run (``run_delay`` in Linux's
``/proc/self/task/<tid>/schedstat``), and ``max_stall`` is the longest gap less that wait: the
time the loop was held by the process's own doing. What a loaded machine adds is taken out;
what code does to the loop is not:

- a blocking call on the loop (``time.sleep``, blocking I/O, a lock): the loop thread sleeps,
  it is not waiting for a CPU, so none of the gap is taken out;
- CPU-bound work on the loop: the CPU time it uses stays in the gap (only the time it was
  ready but descheduled is taken out), so 0.5 s of CPU is 0.5 s however busy the machine;
- another thread holding the interpreter lock: the loop thread waits on the lock, not for a
  CPU; only the time the holder itself waited for a CPU is taken out.

The waits of all the process's threads are added up, so a gap where two threads wait at once
is excused for both; the excuse never exceeds the gap. Without schedstat (not Linux), nothing is
taken out and ``max_stall`` is ``max_gap``.

A :class:`Stopwatch` measures a whole call the same way, for bounds on how long something took
that a busy machine must not break (``watch.own < 0.8``) and that the bug must still break; on an
idle machine ``own`` is the wall clock. :func:`cpu_seconds` measures synchronous work by the CPU
time it takes (for "linear, not quadratic" bounds).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio


def cpu_waits() -> dict[int, int] | None:
    """Nanoseconds each thread of this process has spent ready to run, waiting for a CPU.

    ``None`` where the kernel does not say (no ``/proc/self/task/<tid>/schedstat``).

    The files are read with the interpreter lock held (:data:`_PROC`): every ordinary file call
    lets go of it, and while a worker thread runs Python code, taking it back costs up to a
    switch interval (5 ms). Read the ordinary way, a dozen threads' files cost the loop 0.1 to
    0.3 s a beat, a stall of the heartbeat's own making.
    """
    tids = _PROC.tasks()
    if tids is None:
        return None
    waits: dict[int, int] = {}
    for tid in tids:
        text = _PROC.read(f"/proc/self/task/{tid}/schedstat")
        try:
            waits[tid] = int(text.split()[1])
        except (IndexError, ValueError):  # the thread ended meanwhile
            continue
    return waits or None


class _Dirent(ctypes.Structure):
    # struct dirent of glibc and musl on 64-bit Linux
    _fields_ = (
        ("d_ino", ctypes.c_uint64),
        ("d_off", ctypes.c_int64),
        ("d_reclen", ctypes.c_ushort),
        ("d_type", ctypes.c_ubyte),
        ("d_name", ctypes.c_char * 256),
    )


class _ProcReader:
    """Reads small ``/proc`` files through libc called with the interpreter lock held
    (:class:`ctypes.PyDLL`), or the ordinary way where that is not available."""

    def __init__(self) -> None:
        self._libc: Any = None
        if sys.platform.startswith("linux") and ctypes.sizeof(ctypes.c_void_p) == 8:
            try:
                libc = ctypes.PyDLL(None)
                for name, args, result in (
                    ("open", (ctypes.c_char_p, ctypes.c_int), ctypes.c_int),
                    ("read", (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t), ctypes.c_ssize_t),
                    ("close", (ctypes.c_int,), ctypes.c_int),
                    ("opendir", (ctypes.c_char_p,), ctypes.c_void_p),
                    ("readdir", (ctypes.c_void_p,), ctypes.POINTER(_Dirent)),
                    ("closedir", (ctypes.c_void_p,), ctypes.c_int),
                ):
                    function = getattr(libc, name)
                    function.argtypes, function.restype = args, result
                self._libc = libc
            except (OSError, AttributeError):
                self._libc = None
        self._buffer = ctypes.create_string_buffer(256)

    def tasks(self) -> list[int] | None:
        if self._libc is None:
            try:
                return [int(tid) for tid in os.listdir("/proc/self/task")]
            except OSError:
                return None
        directory = self._libc.opendir(b"/proc/self/task")
        if not directory:
            return None
        tids = []
        try:
            while entry := self._libc.readdir(directory):
                name = entry.contents.d_name
                if name.isdigit():
                    tids.append(int(name))
        finally:
            self._libc.closedir(directory)
        return tids

    def read(self, path: str) -> bytes:
        """The file's first 256 bytes (``b""`` if it cannot be read)."""
        if self._libc is None:
            try:
                with open(path, "rb") as fh:
                    return fh.read(256)
            except OSError:
                return b""
        fd = self._libc.open(path.encode(), os.O_RDONLY | os.O_CLOEXEC)
        if fd < 0:
            return b""
        try:
            count = self._libc.read(fd, self._buffer, len(self._buffer))
        finally:
            self._libc.close(fd)
        return self._buffer.raw[: max(count, 0)]


_PROC = _ProcReader()


def _waiters(before: dict[int, int] | None, after: dict[int, int] | None) -> str:
    """The threads that waited for a CPU between two :func:`cpu_waits`, by name, longest
    first (``": loop 0.020s, worker 0.180s"``)."""
    if before is None or after is None:
        return ""
    names = {t.native_id: t.name for t in threading.enumerate()}
    waits = sorted(((ns - before.get(tid, 0), tid) for tid, ns in after.items()), reverse=True)
    shown = [f"{names.get(tid, tid)} {ns / 1e9:.3f}s" for ns, tid in waits[:3] if ns > 0]
    return ": " + ", ".join(shown) if shown else ""


def waited_between(before: dict[int, int] | None, after: dict[int, int] | None) -> float:
    """Seconds the process's threads waited for a CPU between two :func:`cpu_waits`."""
    if before is None or after is None:
        return 0.0
    # A thread that started in between waited all its run_delay in between.
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def cpu_seconds(work: Callable[[], object]) -> float:
    """The CPU time this thread spends in ``work()``: the cost of the work itself, however busy
    the machine is (a wall clock also counts the time other processes had the CPU). Garbage
    collections of the test process's heap are left out (60-300 ms, not the work's doing)."""
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        work()
        return time.thread_time() - started
    finally:
        gc.enable()


class Stopwatch:
    """Seconds since it was made: on the wall clock, and less the process's waits for a CPU.

    ``own`` is what the process's own doing took: timers, blocking calls and the work's CPU
    time count in full; the time a busy machine kept the process's threads from running does
    not. Work done in another process is not counted in its waits: bound that on the wall
    clock, with a margin a loaded machine meets. ``own`` is for upper bounds only: a thread
    that waited for a CPU while the call slept on a timer is taken out too, so a lower bound
    ("it did wait 0.3 s") belongs on ``wall``, which a busy machine only lengthens.
    """

    def __init__(self) -> None:
        self._waits, self._start = cpu_waits(), time.monotonic()
        self._seen = dict(self._waits or {})  # each thread's waits, as last read

    def __repr__(self) -> str:
        return f"<Stopwatch own={self.own:.3f}s wall={self.wall:.3f}s>"

    def mark(self) -> None:
        """Read every thread's waits now. A thread's waits can only be read while it lives:
        a worker that ends before ``own`` is read calls this last, so its waits count."""
        for tid, ns in (cpu_waits() or {}).items():
            self._seen[tid] = max(ns, self._seen.get(tid, 0))

    @property
    def wall(self) -> float:
        """Wall-clock seconds since the start."""
        return time.monotonic() - self._start

    @property
    def own(self) -> float:
        """Wall-clock seconds since the start, less the time the process waited for a CPU."""
        self.mark()
        elapsed = time.monotonic() - self._start
        return elapsed - min(waited_between(self._waits, self._seen), elapsed)


_STACKS_SHOWN = 40_000  # characters of the stacks a heartbeat's repr shows


class Heartbeat:
    """What a :func:`heartbeat` saw.

    Attributes:
        interval: seconds the ticking task sleeps between beats.
        beats: the number of beats (the end of the body counts as one).
        max_gap: the longest wall-clock gap between two beats.
        max_stall: the longest gap less the time the process waited for a CPU in it.
        waited: in the gap of ``max_stall``, the seconds taken out.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.max_gap = 0.0
        self.max_stall = 0.0
        self.waited = 0.0
        self.waiters = ""  # the threads that waited in that gap, by name
        self.beats = 0
        self.stacks = ""  # with ``dump_after``: every thread's stack in each long gap
        # The waits are read before the clock: a wait that falls between the two readings is
        # left in the gap, never taken out of one it does not belong to.
        self._waits, self._last = cpu_waits(), time.monotonic()

    def __repr__(self) -> str:
        stacks = ""
        if self.stacks:
            # faulthandler writes the newest thread first (the worker a stall is usually about)
            # and the main thread last: a long dump keeps its head.
            cut = len(self.stacks) - _STACKS_SHOWN
            more = f"\n... ({cut} more characters)" if cut > 0 else ""
            stacks = f"\nstacks in the long gaps:\n{self.stacks[:_STACKS_SHOWN]}{more}"
        return (
            f"<Heartbeat beats={self.beats} max_stall={self.max_stall:.3f}s "
            f"(a gap less {self.waited:.3f}s waiting for a CPU{self.waiters}) "
            f"max_gap={self.max_gap:.3f}s>{stacks}"
        )

    def beat(self) -> bool:
        """Measure the gap since the last beat; whether it is the longest stall so far."""
        waits, now = cpu_waits(), time.monotonic()
        before = self._waits
        gap, waited = now - self._last, waited_between(before, waits)
        self._waits, self._last = waits, now
        self.beats += 1
        self.max_gap = max(self.max_gap, gap)
        stall = gap - min(waited, gap)
        if stall > self.max_stall:
            self.max_stall, self.waited = stall, waited
            # Which threads waited (for the failure message).
            self.waiters = _waiters(before, waits) if waited > 0.001 else ""
            return True
        return False


@asynccontextmanager
async def heartbeat(
    interval: float = 0.01, dump_after: float | None = None
) -> AsyncIterator[Heartbeat]:
    """Tick every ``interval`` seconds while the body runs; see the module docstring.

    The first gap starts when the body does, and the last ends when it ends: a block before
    the body's first await, or after its last, is measured too.

    ``dump_after``: when no beat came for that many seconds, :mod:`faulthandler` writes every
    thread's stack from a thread of its own, which needs no interpreter lock: the stack of the
    thread that holds the lock shows the very call it is in. The stacks written in the gap of
    ``max_stall`` are kept in ``stacks`` (and shown by the heartbeat's ``repr``, so in a failed
    assertion's message).
    """
    with contextlib.ExitStack() as stack:
        dumps = None if dump_after is None else stack.enter_context(tempfile.TemporaryFile("w+"))
        written = 0  # how much of ``dumps`` was read
        gc.collect()
        gc.freeze()  # full collections of the test process's own garbage are not the code's doing
        beat = Heartbeat(interval)

        def measure() -> None:
            nonlocal written
            longest = beat.beat()
            if dumps is None:
                return
            faulthandler.cancel_dump_traceback_later()
            size = os.fstat(dumps.fileno()).st_size
            if size > written:  # stacks written in the gap just measured
                dumps.seek(written)
                stacks, written = dumps.read(), size
                if longest:
                    beat.stacks = stacks
            elif longest:
                beat.stacks = ""

        def arm() -> None:
            if dumps is not None:
                faulthandler.dump_traceback_later(dump_after, file=dumps)

        ended = False

        async def tick() -> None:
            # A cancel reaches a task whose sleep is already over only at its next await: the
            # tick may wake once more after the body ended, and must not measure or arm then
            # (an armed dump outlives its file, and its descriptor may be the next one's).
            while True:
                await anyio.sleep(interval)
                if ended:
                    return
                measure()
                arm()

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            arm()
            try:
                yield beat
            finally:
                ended = True
                measure()
                tg.cancel_scope.cancel()
                gc.unfreeze()
