"""Blocking work that a run can always walk away from.

A built-in tool that must block (walk a directory tree, search files, query SQLite) does it in a
worker thread through :func:`run_blocking`. The thread is abandoned at once when the caller is
cancelled (the tool's timeout, the run's deadline, the run being cancelled), and the work is
handed a :class:`Stop` that it checks between small steps, so an abandoned thread also ends
soon after instead of running on unseen. :attr:`Stop.deadline` carries the caller's effective
deadline into the thread, for work (a regular expression search, a database query) that can
be given a time limit of its own.

The work must never hold the interpreter lock for long in one piece: a C routine that does
(the standard :mod:`re` engine on a hostile pattern) freezes every task of the process however
the thread is abandoned. Such work uses an engine that releases the lock and takes a timeout,
or runs in another process.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["Stop", "Stopped", "run_blocking"]

T = TypeVar("T")


class Stopped(TimeoutError):
    """Raised by :meth:`Stop.check` when the work was asked to stop or ran out of time."""


class Stop:
    """A stop signal and a deadline, read by blocking work in a worker thread.

    Attributes:
        deadline: the :func:`time.monotonic` time by which the work must be done, or ``None``.
    """

    __slots__ = ("_event", "deadline")

    def __init__(self, deadline: float | None = None) -> None:
        self._event = threading.Event()
        self.deadline = deadline

    def set(self) -> None:
        """Ask the work to stop."""
        self._event.set()

    @property
    def stopped(self) -> bool:
        """Whether the work should stop now (asked to, or past its deadline)."""
        if self._event.is_set():
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def check(self) -> None:
        """Raise :class:`Stopped` if the work should stop now."""
        if self.stopped:
            raise Stopped("the operation was stopped: it ran out of time or was cancelled")

    def remaining(self, cap: float | None = None) -> float | None:
        """Seconds left before the deadline (at most ``cap``), or ``cap`` without a deadline.

        Raises:
            Stopped: no time is left.
        """
        self.check()
        if self.deadline is None:
            return cap
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Stopped("the operation ran out of time")
        return left if cap is None else min(left, cap)


async def run_blocking(
    fn: Callable[..., T],
    *args: Any,
    limiter: anyio.CapacityLimiter | None = None,
) -> T:
    """Run ``fn(stop, *args)`` in a worker thread the caller can always leave.

    ``stop`` is a :class:`Stop` whose deadline is the caller's effective deadline (the
    innermost of the enclosing cancel scopes' deadlines, such as the tool's timeout and the
    run's deadline), and which is set when the caller stops waiting for any reason.

    Raises:
        TimeoutError: the work gave up because its deadline passed (:class:`Stopped`).
    """
    stop = Stop(_monotonic_deadline())
    try:
        return await anyio.to_thread.run_sync(
            fn, stop, *args, limiter=limiter, abandon_on_cancel=True
        )
    finally:
        stop.set()


def _monotonic_deadline() -> float | None:
    deadline = anyio.current_effective_deadline()
    if math.isinf(deadline):
        return None
    return time.monotonic() + max(0.0, deadline - anyio.current_time())
