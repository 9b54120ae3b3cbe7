"""Events for the slot tests: a call holds the concurrency slot; another waits for it.

The tests wait on these instead of sleeping and hoping the other task got there: on a loaded
machine it may not have.
"""

from __future__ import annotations

from typing import Any

import anyio

from fanloop.pacing import Pacing, RedisPacing


def waiting_for_a_slot(pacing: Pacing | RedisPacing) -> anyio.Event:
    """An event set when a call of ``pacing`` starts waiting for a concurrency slot."""
    backend: Any = pacing._backend()
    released = backend.released
    waiting = anyio.Event()

    async def spy(timeout: float) -> None:
        waiting.set()
        await released(timeout)

    backend.released = spy  # this instance only: the state lives as long as the pacing
    return waiting
