"""Connection pools that follow the event loop: one per loop, made on first use in it.

A connection pool is bound to the event loop that opened its connections (an ``aiohttp``
session is bound to it from the start). A provider that kept one pool would fail with "Event
loop is closed" in the second ``asyncio.run()`` of a script, and could not serve two threads
that each run their own loop. :class:`LoopPools` keeps one pool per running loop instead:

- the pool of a loop is made by the first request sent from that loop;
- it is closed inside its loop when the loop shuts down (``asyncio.run()`` and ``anyio.run()``
  finalize async generators before closing the loop, and a small async generator started in
  the loop holds the pool), or by :meth:`LoopPools.aclose`, or soon after the provider is
  garbage-collected (its loop is asked to close it, as :meth:`LoopPools.aclose` asks other
  loops);
- the pool of a loop that was closed without that shutdown step is dropped.

An open pool is held by this module (:data:`_OPEN`), not only by its provider. A provider in a
reference cycle is collected with everything only it reaches, and the finalizers of all of
that run first: a pool among them would have its connections finalized ("Unclosed connector")
before its close could run. The async generator refers to its :class:`LoopPools` weakly, so
a provider that nothing else holds is freed at once, not at the collector's next pass.

Looking up the current loop's pool is one identity check in the common case (the same loop as
the last request).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import anyio
import httpx2

__all__ = ["GatedTransport", "LoopPools"]


def _running_loop() -> object:
    """A key for the running event loop: the loop itself under asyncio, the run's token under
    trio (each ``trio.run`` has its own, in whatever thread), else one key for everything."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return trio.lowlevel.current_trio_token()
        except RuntimeError:  # not in a trio run
            pass
    return _OTHER


_OTHER = object()


class LoopPools:
    """The connection pools of one provider, one per event loop.

    Args:
        factory: makes a new pool; called in the loop that will use it.
    """

    __slots__ = ("__weakref__", "_entries", "_factory", "_last", "_lock")

    def __init__(self, factory: Callable[[], httpx2.AsyncClient]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        # loop -> (pool, the async generator that closes it when the loop shuts down)
        self._entries: dict[object, tuple[httpx2.AsyncClient, AsyncGenerator[None, None]]] = {}
        self._last: tuple[object, httpx2.AsyncClient] | None = None  # read and set atomically

    async def get(self) -> httpx2.AsyncClient:
        """The pool of the running loop, made now if this loop has none yet."""
        pool = self.ready()
        return pool if pool is not None else await self._open(_running_loop())

    def ready(self) -> httpx2.AsyncClient | None:
        """The running loop's pool when it is the one used last (the common case: one loop),
        else ``None`` (:meth:`get` finds or makes it)."""
        last = self._last
        if last is not None and last[0] is _running_loop():
            return last[1]
        return None

    def current(self) -> httpx2.AsyncClient | None:
        """The pool of the running loop, if it has one (for inspection)."""
        entry = self._entries.get(_running_loop())
        return entry[0] if entry is not None else None

    async def _open(self, loop: object) -> httpx2.AsyncClient:
        keeper: AsyncGenerator[None, None] | None = None
        with self._lock:
            self._drop_dead()
            entry = self._entries.get(loop)
            if entry is None:
                pool = self._factory()
                keeper = _keeper(weakref.ref(self), loop, pool)
                self._entries[loop] = (pool, keeper)
                _OPEN[pool] = (loop, keeper)
            else:
                pool = entry[0]
            self._last = (loop, pool)
        if keeper is not None:
            # Started in this loop, the generator is finalized by it: at shutdown
            # (shutdown_asyncgens), or soon after it is garbage-collected.
            await keeper.asend(None)
        return pool

    def _drop_dead(self) -> None:
        """Forget the pools of loops that were closed without finalizing them."""
        for loop in [k for k in self._entries if isinstance(k, asyncio.AbstractEventLoop)]:
            if loop.is_closed():
                del self._entries[loop]
        _drop_closed_loops()  # also lets go of those loops' entries in _OPEN
        last = self._last
        if last is not None and last[0] not in self._entries:
            self._last = None

    def _forget(self, loop: object, pool: httpx2.AsyncClient) -> None:
        with self._lock:
            entry = self._entries.get(loop)
            if entry is not None and entry[0] is pool:
                del self._entries[loop]
            last = self._last
            if last is not None and last[1] is pool:
                self._last = None

    async def aclose(self) -> None:
        """Close every pool: the running loop's now, other live loops' in their own loop.

        The provider stays usable: the next request opens a new pool.
        """
        here = _running_loop()
        with self._lock:
            entries = list(self._entries.items())
            self._entries.clear()
            self._last = None
        for loop, (pool, keeper) in entries:
            if loop is here:
                await keeper.aclose()
            else:
                _close_elsewhere(loop, pool, keeper)

    def __del__(self) -> None:
        # Collected without aclose(): each live loop is asked to close its pool. A loop that
        # stops first closes it anyway (its generator is alive until then: see _OPEN).
        for loop, (pool, keeper) in list(self._entries.items()):
            _close_elsewhere(loop, pool, keeper)
        _drop_closed_loops()


_OPEN: dict[httpx2.AsyncClient, tuple[object, AsyncGenerator[None, None]]] = {}
"""Every open pool, with its loop and the async generator that closes it (see the module's
docstring); a pool leaves when it is closed, or when its loop is found closed."""


def _drop_closed_loops() -> None:
    """Let go of the pools of loops closed without finalizing their generators (nothing can
    close those any more)."""
    for pool, (loop, _) in list(_OPEN.items()):
        if isinstance(loop, asyncio.AbstractEventLoop) and loop.is_closed():
            _OPEN.pop(pool, None)


async def _keeper(
    pools: weakref.ref[LoopPools], loop: object, pool: httpx2.AsyncClient
) -> AsyncGenerator[None, None]:
    """Holds ``pool`` open until its loop finalizes this generator, then closes it."""
    try:
        yield
    finally:
        owner = pools()
        if owner is not None:
            owner._forget(loop, pool)
        try:
            await pool.aclose()  # nothing to do if it was closed already (see _close_pool)
        finally:
            _OPEN.pop(pool, None)


def _close_elsewhere(
    loop: object, pool: httpx2.AsyncClient, keeper: AsyncGenerator[None, None]
) -> None:
    """Ask ``loop`` (maybe another thread's, maybe the running one) to close ``pool``.

    On asyncio the pool is closed, not its generator: the loop's shutdown may be closing the
    generator at the same moment, and a generator closed twice at once is an error the loop
    reports. ``loop`` may also be a trio run's token: the run closes the generator (and so the
    pool) in a system task, as trio warns of a generator collected before it was exhausted. A
    loop or run that has ended, or another backend, leaves the pool to its generator alone,
    which the backend finalizes once nothing holds it.
    """
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # closed in the meantime
            loop.call_soon_threadsafe(_close_in_loop, pool)
            return
    run_sync_soon = getattr(loop, "run_sync_soon", None)  # a trio run's token
    if run_sync_soon is not None:
        with contextlib.suppress(RuntimeError):  # trio.RunFinishedError: the run has ended
            run_sync_soon(_close_in_trio, keeper)
            return
    _OPEN.pop(pool, None)


def _close_in_loop(pool: httpx2.AsyncClient) -> None:
    """Close ``pool`` in the loop this runs in, as a task of its own."""
    task = asyncio.get_running_loop().create_task(_close_pool(pool))
    _closing.add(task)  # held until done: a task nobody references may be collected
    task.add_done_callback(_closing.discard)


def _close_in_trio(keeper: AsyncGenerator[None, None]) -> None:
    """Close ``keeper`` (and so its pool) in the trio run this runs in, as a system task."""
    trio = sys.modules["trio"]
    trio.lowlevel.spawn_system_task(_close_keeper, keeper)


async def _close_keeper(keeper: AsyncGenerator[None, None]) -> None:
    with contextlib.suppress(Exception):  # nobody waits for this close to report to
        await keeper.aclose()


async def _close_pool(pool: httpx2.AsyncClient) -> None:
    try:
        with contextlib.suppress(Exception):  # nobody waits for this close to report to
            await pool.aclose()
    finally:
        # Its generator, no longer held, is finalized by the loop and finds the pool closed.
        _OPEN.pop(pool, None)


_closing: set[asyncio.Task[Any]] = set()


class GatedTransport(httpx2.AsyncBaseTransport):
    """``httpx2``'s own transport, with requests waiting for a free connection in front of it.

    ``httpcore2``'s pool scans every connection and every queued request each time a request
    starts or ends. With 10,000 runs queued behind 1000 connections, those scans starved the
    event loop for seconds, so the first wave of connects (each allowed 5 s) timed out before
    the loop could see them succeed: 1000 connect timeouts in 10,000 runs on loopback. Here a
    request first waits for one of ``limit`` slots (the pool's ``max_connections``), honouring
    the ``pool`` timeout, and only then enters the pool, which so never holds more requests
    than connections. The slot is returned when the response is closed.

    Args:
        inner: the pool's transport.
        limit: requests in the pool at once (its ``max_connections``).
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._slots: anyio.Semaphore | None = None  # made in the loop that uses it

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        slots = self._slots
        if slots is None:
            slots = self._slots = anyio.Semaphore(self._limit)
        wait = request.extensions.get("timeout", {}).get("pool")
        try:
            with anyio.fail_after(wait):
                await slots.acquire()
        except TimeoutError:
            raise httpx2.PoolTimeout(
                f"no free connection within {wait} s ({self._limit} in use)"
            ) from None
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            slots.release()
            raise
        response.stream = _Released(response.stream, slots)
        return response

    @property
    def _pool(self) -> Any:
        """The inner transport's connection pool (for inspection, as on ``httpx2``'s own)."""
        return getattr(self._inner, "_pool", None)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Released(httpx2.AsyncByteStream):
    """A response body that returns its request's slot when it is closed (once)."""

    __slots__ = ("_slots", "_stream")

    def __init__(self, stream: Any, slots: anyio.Semaphore) -> None:
        self._stream = stream
        self._slots: anyio.Semaphore | None = slots

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        slots, self._slots = self._slots, None
        try:
            await self._stream.aclose()
        finally:
            if slots is not None:
                slots.release()
