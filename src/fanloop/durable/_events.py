"""A durable run's events, written to its workflow's DBOS stream and read from anywhere.

Writing: the run's agent has an :class:`EventSink` as its observer. Its ``on_event`` is
synchronous (it never makes the loop wait, so it cannot change the order in which concurrent
tool calls reach their steps) and only queues the event; a *pump*, started as the workflow's
first step and running beside the loop, writes what has queued as one stream entry (a JSON
list of event dicts) per database write. ``request_started`` (the whole request, every turn)
is not written.

Recovery: a recovered workflow replays its completed steps, and the loop emits their events
again. Every event but a streamed delta has a key that names it the same way in every
execution (its kind, its tool call's id, how many such events came before), and the pump of a
recovered run first reads what the stream already holds, skips every event whose key is in it,
and writes a :class:`RunRecovered` marker. Deltas come only from model calls that really run;
a model call cut short by the crash runs again in full, and the marker's ``discard_partial``
says its earlier deltas must be dropped.

Sub-agents: a delegated sub-agent runs as its own workflow with its own stream; the parent's
``delegate`` step relays the child's entries into the parent's stream with their lineage
(agent path, the delegating call's id), so one stream holds the whole tree's events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import anyio

from .._dispatch import DELTA_KINDS
from ..events import _Event
from ..observers import NullObserver
from ._codec import decode_event, dump_run_output, register_event_class
from ._dbos import dbos, require, step

if TYPE_CHECKING:
    from anyio.abc import TaskStatus
    from dbos import DBOSClient

__all__ = ["DONE", "STREAM", "EventSink", "RunRecovered", "read_events", "wait_output"]

STREAM = "fanloop.events"
"""The key of a durable run's event stream in its workflow."""

LINGER = 0.02
"""Seconds the writer lets events gather after the first of a burst (one write for many)."""

DONE = "fanloop.done"
"""The workflow event set when a run is over (a notification: waiters need not poll)."""

DONE_WAIT = 5.0
"""Seconds of one wait for the ``done`` event before the run's status is checked."""

NOT_STREAMED = frozenset({"request_started"})
DELTAS = frozenset({*DELTA_KINDS, "output_partial"})
"""Events made while a model call streams: what a provider yields, and the partial typed
answer the loop makes from it."""
SETTLED_BY = frozenset({"response_completed", "retry_scheduled", "model_failed"})
"""Events after which the deltas before them are settled (kept or already discarded)."""


@dataclass(slots=True)
class RunRecovered(_Event):
    """The run was recovered after its worker stopped; events before this one came from the
    earlier execution.

    Events of steps that completed before the crash are not repeated. ``discard_partial`` is
    true when the earlier execution had streamed deltas of a model call that did not complete:
    that call runs again from the start, so consumers should drop those deltas.
    """

    kind: ClassVar[Literal["run_recovered"]] = "run_recovered"
    attempt: int
    discard_partial: bool = False


register_event_class(RunRecovered)


class EventSink(NullObserver):
    """Queues a run's events (as the agent's observer) for the pump that writes them.

    Args:
        path: the run's agent path (the root of every event it emits).
        enabled: ``False`` writes nothing (and the pump only finishes its step).
    """

    def __init__(
        self, path: tuple[str, ...], *, enabled: bool = True, output_adapter: Any = None
    ) -> None:
        self.path = path
        self.enabled = enabled
        self._adapter = output_adapter
        self._queue: list[dict[str, Any]] = []
        self._counts: dict[str, int] = {}
        self._wake: anyio.Event | None = None
        self._progress: anyio.Event | None = None
        self._ended = anyio.Event()
        self._closed = False
        self._queued = 0
        self._done = 0

    # -- producing ---------------------------------------------------------------------------

    def on_event(self, event: Any) -> None:
        """Queue ``event`` (called by the loop for every event, synchronously)."""
        if not self.enabled or event.kind in NOT_STREAMED:
            return
        data = event.to_dict() if event.kind != "run_finished" else self._finished(event)
        if event.kind not in DELTAS:
            call = getattr(event, "call", None)
            data["key"] = self.key(
                "/".join(event.agent_path),
                event.parent_call_id or "",
                event.kind,
                call.id if call is not None else "",
            )
        self.add(data)

    def _finished(self, event: Any) -> dict[str, Any]:
        """``run_finished`` with its typed answer dumped by the output type's own adapter."""
        error = event.error
        problem = None if error is None else {"type": type(error).__name__, "message": str(error)}
        return {
            "kind": event.kind,
            "agent_path": list(event.agent_path),
            "parent_call_id": event.parent_call_id,
            "result": dump_run_output(event.result, None, self._adapter)["result"],
            "error": problem,
        }

    def key(self, *parts: str) -> str:
        """A key naming the next event with these parts, the same in every execution."""
        prefix = "|".join(parts)
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}|{n}"

    def add(self, data: dict[str, Any]) -> None:
        """Queue one event dict (with its ``key``, unless it is a delta)."""
        if not self.enabled:
            return
        self._queue.append(data)
        self._queued += 1
        if self._wake is not None:
            self._wake.set()

    def close(self) -> None:
        """No more events: the pump writes what is queued, closes the stream and returns."""
        self._closed = True
        self._ended.set()
        if self._wake is not None:
            self._wake.set()

    async def flushed(self) -> None:
        """Wait until everything queued so far is in the stream."""
        target = self._queued
        while self.enabled and self._done < target:
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()

    # -- the pump ----------------------------------------------------------------------------

    async def pump(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the writer as the workflow's first step (start it with ``task_group.start``).

        A recovered workflow whose writer had already finished gets that step's recorded
        result back: its events are all in the stream, so this execution writes none.
        """
        live = False

        async def body() -> int:
            nonlocal live
            live = True
            task_status.started()
            written = await self._drain()
            await self.finish()
            return written

        await step("fanloop.events", body)
        if not live:
            self._stop()
            task_status.started()

    def _stop(self) -> None:
        self.enabled = False
        self._queue.clear()
        if self._progress is not None:
            self._progress.set()

    async def _drain(self) -> int:
        DBOS = dbos()
        portable = require().WorkflowSerializationFormat.PORTABLE
        if not self.enabled:  # no stream: only end when the run does (then ``done`` is set)
            await self._ended.wait()
            return 0
        seen, closed, marker = await self._earlier(str(DBOS.workflow_id))
        if closed:  # an earlier execution wrote everything and closed the stream
            self._stop()
            return 0
        if marker is not None:
            self._queue.insert(0, marker)
            self._queued += 1
        written = 0
        while True:
            if not self._queue:
                if self._closed:
                    break
                self._wake = anyio.Event()
                await self._wake.wait()
                with anyio.move_on_after(LINGER):  # let a burst gather: one write for many
                    await self._ended.wait()
                continue
            batch, self._queue = self._queue, []
            fresh = [d for d in batch if d.get("key") not in seen]
            if fresh:
                await DBOS.write_stream_async(STREAM, fresh, serialization_type=portable)
                written += len(fresh)
            self._done += len(batch)
            if self._progress is not None:
                self._progress.set()
                self._progress = None
        await DBOS.close_stream_async(STREAM)
        return written

    @staticmethod
    async def finish() -> None:
        """Tell waiters the run is over (its output follows at once): the ``done`` event."""
        await dbos().set_event_async(DONE, True)

    async def _earlier(self, workflow_id: str) -> tuple[set[str], bool, dict[str, Any] | None]:
        """What an earlier execution of this workflow wrote: its keys, whether it closed the
        stream, and the recovery marker to write (``None`` on a first execution)."""
        timeout_error = require().error.DBOSStreamTimeoutError
        entries: list[dict[str, Any]] = []
        closed = False
        reader = dbos().read_stream_async(workflow_id, STREAM, timeout_seconds=0)
        try:
            async for value in reader:
                entries.extend(value)
            closed = True
        except timeout_error:
            pass
        finally:
            await reader.aclose()
        if not entries:
            return set(), closed, None
        seen = {str(d["key"]) for d in entries if d.get("key") is not None}
        own = [d for d in entries if tuple(d.get("agent_path") or ()) == self.path]
        attempt = 2 + sum(1 for d in own if d.get("kind") == "run_recovered")
        partial = False
        for d in own:
            if d.get("kind") in DELTAS:
                partial = True
            elif d.get("kind") in SETTLED_BY:
                partial = False
        marker = RunRecovered(attempt, partial, agent_path=self.path).to_dict()
        marker["key"] = f"{'/'.join(self.path)}||run_recovered||{attempt}"
        return seen, closed, marker

    # -- sub-agents --------------------------------------------------------------------------

    async def relay(self, workflow_id: str, call_id: str) -> None:
        """Queue a sub-agent workflow's events as this run's, until its stream ends.

        Each gets the lineage it would have had in one process (this run's path before its
        own, the delegating call's id) and a key naming its place in the child's stream, so
        a relay run again after a crash skips what was relayed before.
        """
        reader = dbos().read_stream_async(workflow_id, STREAM)
        n = 0
        try:
            async for value in reader:
                for data in value:
                    data = dict(data)
                    data["agent_path"] = [*self.path, *(data.get("agent_path") or ())]
                    if data.get("parent_call_id") is None:
                        data["parent_call_id"] = call_id
                    data["key"] = f"{workflow_id}|{n}"
                    n += 1
                    self.add(data)
        finally:
            await reader.aclose()


async def read_events(
    workflow_id: str, *, client: DBOSClient | None = None, raw: bool = False
) -> AsyncIterator[Any]:
    """The events of a durable run, from its start, as they are written, until it ends.

    Works from any process that can reach the DBOS system database: with ``client`` (a
    ``dbos.DBOSClient``) or, without it, through this process's launched ``DBOS``. Events come
    back as the classes of :mod:`fanloop.events` (plus :class:`RunRecovered`); sub-agents'
    events are included, with their lineage. ``raw=True`` yields the JSON dicts as stored.

    Args:
        workflow_id: the run's workflow id (``DurableRun.workflow_id``).
        client: read through this client instead of the launched ``DBOS``.
        raw: yield the stored dicts instead of event objects.
    """
    source = (
        client.read_stream_async(workflow_id, STREAM)
        if client is not None
        else dbos().read_stream_async(workflow_id, STREAM)
    )
    try:
        async for value in source:
            for data in value:
                if raw:
                    yield data
                    continue
                event = decode_event(data)
                if event is not None:
                    yield event
    finally:
        await source.aclose()


async def wait_output(workflow_id: str, *, client: DBOSClient | None = None) -> Any:
    """The output of the workflow ``workflow_id``, once it has one.

    Waits on the run's ``done`` event (a notification) rather than polling the workflow's
    status, then fetches the output; a run that ends without the event (it failed in DBOS,
    or was cancelled) is noticed within :data:`DONE_WAIT` seconds.
    """
    source: Any = client if client is not None else dbos()
    handle = await source.retrieve_workflow_async(workflow_id)
    while True:
        if await source.get_event_async(workflow_id, DONE, timeout_seconds=DONE_WAIT):
            break
        status = (await handle.get_status()).status
        if status not in ("PENDING", "ENQUEUED", "DELAYED"):
            break
    return await handle.get_result(polling_interval_sec=0.01)
