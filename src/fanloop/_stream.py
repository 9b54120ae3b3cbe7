"""The handle ``agent.stream()`` returns: an ``async with`` block that iterates events."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._result import OutputT, RunResult
from .events import Event

__all__ = ["RunStream"]


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
    cancels the run; ``result`` then holds the partial result (``cancelled``).
    """

    def __init__(
        self,
        execute: Callable[..., Awaitable[RunResult]],
        *,
        buffer: int = 64,
    ) -> None:
        self._execute = execute
        self._buffer = buffer
        self._result: RunResult[Any] | None = None
        self._error: BaseException | None = None
        self._error_raised = False
        self._tg: TaskGroup | None = None
        self._scope = anyio.CancelScope()
        self._send: MemoryObjectSendStream[Event] | None = None
        self._recv: MemoryObjectReceiveStream[Event] | None = None

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
        self._send, self._recv = anyio.create_memory_object_stream[Event](self._buffer)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._produce)
        return self

    async def _produce(self) -> None:
        if self._send is None:  # pragma: no cover - started by __aenter__ only
            raise RuntimeError("the run stream was not entered")
        with self._scope:  # the run's own scope: cancelling it leaves the consumer running
            async with self._send:
                try:
                    self._result = await self._execute(send=self._deliver)
                except anyio.get_cancelled_exc_class() as exc:
                    self._result = getattr(exc, "partial", None)
                    raise
                except Exception as exc:
                    self._error = exc
                    self._result = getattr(exc, "partial", None)

    async def _deliver(self, event: Event) -> None:
        if self._send is None:  # pragma: no cover - started by __aenter__ only
            raise RuntimeError("the run stream was not entered")
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            try:  # room in the buffer: no trip through the event loop per event
                self._send.send_nowait(event)
            except anyio.WouldBlock:
                await self._send.send(event)  # full: wait for the consumer (backpressure)
            # (a consumer that left is cancelling the run: the event is dropped)

    def __aiter__(self) -> RunStream[OutputT]:
        if self._recv is None:
            raise _not_entered()
        return self

    async def __anext__(self) -> Event:
        recv = self._recv
        if recv is None:
            raise _not_entered()
        try:
            try:
                return recv.receive_nowait()
            except anyio.WouldBlock:
                return await recv.receive()
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
        if self._tg is None or self._recv is None:
            raise RuntimeError("RunStream.__aexit__ without __aenter__")
        if self._result is None or exc_type is not None:
            self._recv.close()  # wakes a producer blocked on a full buffer
            self._scope.cancel()
        try:
            # The block's own exception is not handed to the task group (which would wrap it
            # in an ExceptionGroup): it propagates as itself once the run task is done.
            await self._tg.__aexit__(None, None, None)
        finally:
            self._recv.close()
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
