"""The handle ``agent.stream()`` returns: an ``async with`` block that iterates events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic

import anyio
from anyio.abc import TaskGroup

from ._result import OutputT, RunResult
from .events import Event

__all__ = ["RunStream"]

_EMPTY: Any = object()


class _Channel:
    """The bounded buffer between a run (one producer) and its consumer (one reader).

    ``anyio``'s memory object stream does more per item than a stream of deltas can afford: its
    ``receive()`` passes a checkpoint (one more trip through the event loop) and makes an event
    and a task record before it waits, and its ``send`` asks whether the waiting reader has a
    cancellation pending. Here an item goes into a list; a side that must wait (the reader
    on an empty buffer, the producer on a full one) waits on one future (an ``anyio.Event`` on
    another backend), which the other side resolves. A reader waiting is woken by the next item
    even when ``size`` is 0.
    """

    __slots__ = (
        "_head",
        "_items",
        "_loop",
        "_reader",
        "_size",
        "_writer",
        "can_hand_over",
        "handed",
        "recv_closed",
        "send_closed",
    )

    def __init__(self, size: int) -> None:
        # The items from _head on (a list: an empty deque is a 64-slot block, 0.7 KB a stream).
        self._items: list[Any] = []
        self._head = 0
        self._size = size
        self._reader: Any = None  # what the reader waits on, set while it waits
        self._writer: Any = None  # what the producer waits on, set while it waits
        self.send_closed = False
        self.recv_closed = False
        # A model call's stream the reader reads itself while it streams (see hand).
        self.handed: Any = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # another backend (trio)
            self._loop = None
        self.can_hand_over = self._loop is not None

    def _waiter(self) -> Any:
        return self._loop.create_future() if self._loop is not None else anyio.Event()

    @staticmethod
    def _wake(waiter: Any) -> None:
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_result(None)
        else:
            waiter.set()

    def send(self, item: Event) -> Awaitable[None] | None:
        """Add ``item`` at once while the buffer has room (or the reader waits on an empty
        one), else return an awaitable that waits for room (backpressure). Once the reader is
        gone (a consumer that left is cancelling the run) the item is dropped."""
        if self.recv_closed:
            return None
        reader = self._reader
        if reader is not None:  # waiting on an empty buffer
            self._reader = None
            self._items.append(item)
            self._wake(reader)
            return None
        if len(self._items) - self._head < self._size:
            self._items.append(item)
            return None
        return self._put(item)

    async def _put(self, item: Event) -> None:
        """Wait for room in the full buffer, then add ``item``."""
        while True:
            waiter = self._writer = self._waiter()
            try:
                await (waiter if self._loop is not None else waiter.wait())
            finally:
                self._writer = None
            if self.recv_closed:  # the consumer left and is cancelling the run: let it
                await anyio.lowlevel.checkpoint()
                return
            if self._reader is not None or len(self._items) - self._head < self._size:
                self.send(item)  # room now: taken at once
                return

    def take(self) -> Event:
        """The next item, or ``_EMPTY``."""
        items = self._items
        head = self._head
        if head == len(items):
            return _EMPTY  # type: ignore[no-any-return]
        item: Event = items[head]
        items[head] = None
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= 64 and 2 * head >= len(items):  # never emptied: drop the taken part
            del items[:head]
            head = 0
        self._head = head
        writer = self._writer
        if writer is not None:  # waiting on a full buffer: there is room now
            self._writer = None
            self._wake(writer)
        return item

    async def get(self) -> Event:
        """The next item, waiting for one; ``anyio.EndOfStream`` once the producer is done and
        the buffer empty."""
        while True:
            if self.recv_closed:
                raise anyio.ClosedResourceError
            item = self.take()
            if item is not _EMPTY:
                return item
            if self.send_closed:
                raise anyio.EndOfStream
            waiter = self.arm_reader()
            try:
                await (waiter if self._loop is not None else waiter.wait())
            finally:
                self.disarm_reader(waiter)

    def arm_reader(self) -> Any:
        """What the reader waits on for the next item (or a stream to read), now set; a
        producer waiting with an item (a buffer of 0) is let go to hand it over."""
        waiter = self._reader = self._waiter()
        writer = self._writer
        if writer is not None:
            self._writer = None
            self._wake(writer)
        return waiter

    def disarm_reader(self, waiter: Any) -> None:
        """The reader stopped waiting on ``waiter`` (woken, or cancelled)."""
        if self._reader is waiter:
            self._reader = None

    def reader_waits(self) -> bool:
        """Whether the reader waits on an empty buffer (and so could read a stream itself)."""
        return self._reader is not None

    def hand(self, handed: Any) -> None:
        """Let the reader read ``handed`` (its ``next()`` gives the next item, or ``None`` at
        its end) in its own task, after what is buffered; waking it if it waits. On asyncio
        only: the producer of a paced stream then costs the reader no second task's wake-up
        per item, and holds no future of its own while it waits."""
        self.handed = handed
        reader, self._reader = self._reader, None
        if reader is not None:
            self._wake(reader)

    def unhand(self, handed: Any) -> None:
        if self.handed is handed:
            self.handed = None

    def close_send(self) -> None:
        self.send_closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            self._wake(reader)

    def close_recv(self) -> None:
        """The reader left: drop what is buffered and wake a producer waiting for room."""
        self.recv_closed = True
        self._items.clear()
        self._head = 0
        writer, self._writer = self._writer, None
        if writer is not None:
            self._wake(writer)


class RunStream(Generic[OutputT]):
    """A run in progress, streaming its events.

    ::

        async with agent.stream("Summarise the repo") as run:
            async for event in run:
                if event.kind == "text_delta":
                    print(event.text, end="")
        print(run.result.termination_reason)

    The run starts when the block is entered and runs in a task of its own, writing into a
    bounded buffer: a consumer that falls behind slows the run instead of growing memory.
    Iteration ends after the ``run_finished`` event. If the run failed with a provider error,
    iteration raises it after the last event. Leaving the block before the run is over
    cancels the run; ``result`` then holds the partial result (``cancelled``). Each handle is
    one run: entering it again raises :class:`RuntimeError`.
    """

    def __init__(
        self,
        execute: Callable[..., Awaitable[RunResult]],
        *,
        buffer: int = 64,
    ) -> None:
        self._execute: Callable[..., Awaitable[RunResult]] | None = execute
        self._buffer = buffer
        self._result: RunResult[Any] | None = None
        self._error: BaseException | None = None
        self._error_raised = False
        self._tg: TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._scope = anyio.CancelScope()
        self._channel: _Channel | None = None

    @property
    def result(self) -> RunResult[OutputT]:
        """The :class:`~fanloop.RunResult`, once the run has ended."""
        if self._result is None:
            raise RuntimeError("the run has not finished yet; iterate the stream to the end")
        return self._result

    @property
    def done(self) -> bool:
        """Whether the run has ended."""
        return self._result is not None

    async def __aenter__(self) -> RunStream[OutputT]:
        if self._channel is not None:
            raise RuntimeError(
                "this run stream was entered before: each `agent.stream(...)` is one run, "
                "so call it again for another"
            )
        channel = self._channel = _Channel(self._buffer)
        if channel._loop is not None:
            # On asyncio the run is a plain task, awaited by __aexit__: a task group would add
            # a cancel scope, a task record and a wrapper coroutine to every stream in flight.
            # A consumer cancelled while it waits there cancels the task it awaits, as the
            # group would.
            self._task = channel._loop.create_task(self._produce())
            return self
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._produce)
        return self

    async def _produce(self) -> None:
        channel = self._channel
        if channel is None:  # pragma: no cover - started by __aenter__ only
            raise RuntimeError("the run stream was not entered")
        with self._scope:  # the run's own scope: cancelling it leaves the consumer running
            try:
                assert self._execute is not None  # __aenter__ checked
                run = self._execute(send=channel.send)
                self._execute = None  # started: its arguments live on in the run's frames
                self._result = await run
            except anyio.get_cancelled_exc_class() as exc:
                self._result = getattr(exc, "partial", None)
                raise
            except Exception as exc:
                self._error = exc
                self._result = getattr(exc, "partial", None)
            finally:
                channel.close_send()

    def __aiter__(self) -> RunStream[OutputT]:
        if self._channel is None:
            raise _not_entered()
        return self

    async def __anext__(self) -> Event:
        channel = self._channel
        if channel is None:
            raise _not_entered()
        while True:
            item = channel.take()  # buffered: no trip through the event loop
            if item is not _EMPTY:
                return item
            handed = channel.handed
            if handed is not None:  # a model's stream to read here, in this task
                read: Event | None = await handed.next()
                if read is not None:
                    return read
                continue
            if channel._loop is None or channel.send_closed or channel.recv_closed:
                break
            # Wait for the next item (or a stream to read): one future, awaited here, not in
            # a coroutine of its own (get) as well.
            waiter = channel.arm_reader()
            try:
                await waiter
            finally:
                channel.disarm_reader(waiter)
        try:
            return await channel.get()
        except anyio.EndOfStream:
            if self._error is not None and not self._error_raised:
                self._error_raised = True
                raise self._error from None
            raise StopAsyncIteration from None

    async def cancel(self) -> None:
        """Cancel the run. Iteration then ends after the run's last events (``run_finished``),
        and ``result`` holds the partial result."""
        self._scope.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if (self._tg is None and self._task is None) or self._channel is None:
            raise RuntimeError("RunStream.__aexit__ without __aenter__")
        if self._result is None or exc_type is not None:
            self._channel.close_recv()  # wakes a producer blocked on a full buffer
            self._scope.cancel()
        try:
            if self._task is not None:
                await self._task
            else:
                # The block's own exception is not handed to the task group (which would wrap
                # it in an ExceptionGroup): it propagates as itself once the run task is done.
                await self._tg.__aexit__(None, None, None)  # type: ignore[union-attr]
        finally:
            self._channel.close_recv()
        if exc_type is None and self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error
        return None

    def __repr__(self) -> str:
        state: Any = self._result.termination_reason if self._result else "running"
        return f"<RunStream {state}>"


def _not_entered() -> TypeError:
    return TypeError(
        "agent.stream() opens a run that must be closed: write "
        "`async with agent.stream(...) as run:` and then `async for event in run:` "
        "(leaving the block early cancels the run)"
    )
