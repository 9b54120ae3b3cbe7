"""A heartbeat that proves the event loop kept running while hostile work ran.

Usage::

    async with heartbeat() as beat:
        await hostile_work()
    assert beat.max_gap < 0.1, beat

The heartbeat task sleeps ``interval`` seconds at a time and records the longest gap between two
wake-ups; a gap far above ``interval`` means something held the event loop (or the interpreter
lock) that long.
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class Heartbeat:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.max_gap = 0.0
        self.beats = 0

    def __repr__(self) -> str:
        return f"<Heartbeat beats={self.beats} max_gap={self.max_gap:.3f}s>"


@asynccontextmanager
async def heartbeat(interval: float = 0.01) -> AsyncIterator[Heartbeat]:
    """Tick every ``interval`` seconds while the body runs; see the module docstring."""
    beat = Heartbeat(interval)
    gc.collect()
    gc.freeze()  # full collections of the test process's own garbage are not the code's doing

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            beat.max_gap = max(beat.max_gap, now - last)
            beat.beats += 1
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        try:
            yield beat
        finally:
            tg.cancel_scope.cancel()
            gc.unfreeze()
