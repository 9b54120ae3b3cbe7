"""Small helpers shared by fanloop's own tests."""

from __future__ import annotations

from typing import Any

from fanloop.events import Event


class Recorder:
    """Collects every event of a run (pass ``recorder.send`` as a stream consumer)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]


async def collect(agent: Any, prompt: str | None, **kwargs: Any) -> tuple[Any, list[Event]]:
    """Run ``agent.stream(prompt)`` to the end; return the result and every event."""
    events: list[Event] = []
    async with agent.stream(prompt, **kwargs) as run:
        async for event in run:
            events.append(event)
    return run.result, events
