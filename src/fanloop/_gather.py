"""Running many agent runs at once from a service: :func:`gather`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from .errors import ConfigurationError

__all__ = ["gather"]

T = TypeVar("T")


async def gather(
    *runs: Awaitable[T] | Callable[[], Awaitable[T]],
    limit: int | None = None,
    fail_fast: bool = False,
) -> list[T | Exception]:
    """Run many agent runs concurrently; return every result or exception, in input order.

    ::

        results = await fanloop.gather(*(agent.run(q) for q in questions), limit=50)
        for r in results:
            if isinstance(r, Exception): ...

    Args:
        runs: awaitables (e.g. ``agent.run(...)`` coroutines) or zero-argument callables
            returning one (started only when a slot is free).
        limit: at most this many run at the same time (``None``: all at once).
        fail_fast: on the first exception, cancel the others and raise it. By default one
            failure cancels nothing and comes back in its slot.

    Cancelling ``gather`` cancels every run in it.
    """
    if limit is not None and limit < 1:
        for item in runs:
            if inspect.iscoroutine(item):
                item.close()
        raise ConfigurationError("limit must be >= 1")
    results: list[Any] = [None] * len(runs)
    started = [False] * len(runs)
    limiter = anyio.CapacityLimiter(limit) if limit is not None else None
    failure: list[Exception] = []

    async def one(index: int, item: Awaitable[T] | Callable[[], Awaitable[T]]) -> None:
        if limiter is not None:
            await limiter.acquire()
        try:
            started[index] = True
            awaitable = item() if callable(item) and not inspect.isawaitable(item) else item
            results[index] = await awaitable
        except Exception as exc:
            results[index] = exc
            if fail_fast and not failure:
                failure.append(exc)
                tg.cancel_scope.cancel()
        finally:
            if limiter is not None:
                limiter.release()

    try:
        async with anyio.create_task_group() as tg:
            for index, item in enumerate(runs):
                tg.start_soon(one, index, item)
    finally:
        for index, item in enumerate(runs):  # close coroutines that never got to start
            if not started[index] and inspect.iscoroutine(item):
                item.close()
    if failure:
        raise failure[0]
    return results
