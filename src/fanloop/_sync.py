"""``run_sync``'s event loop: one long-lived loop in a daemon thread, shared by every call.

Running each ``run_sync`` in a fresh ``anyio.run`` would strand the providers' pooled
connections on a closed loop: the second call would fail with "Event loop is closed". One
loop for the process keeps connection pools valid across calls, as a long-running service's
loop does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _shared_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="fanloop-run-sync", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_blocking(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn()`` on the shared loop and wait for it; Ctrl-C cancels the run cleanly."""
    loop = _shared_loop()

    async def main() -> T:
        return await fn()

    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(main(), loop)
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        with contextlib.suppress(concurrent.futures.CancelledError, Exception):
            future.result(timeout=10)
        raise
