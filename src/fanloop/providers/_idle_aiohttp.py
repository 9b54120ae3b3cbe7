"""The ``aiohttp`` pool's side of :mod:`~fanloop.providers._idle`: a response is accepted only for
a request in flight.

``aiohttp``'s connection protocol parses whatever arrives, request or not: a response written
onto an idle pooled connection is queued there and handed to the next request sent on it
(which is not even sent: the queued answer comes back at once). Here each connection is in
one of three states:

- idle in the pool: a byte that arrives closes the connection, and a pooled connection is
  handed out only if nothing is queued on it and its socket has nothing to read;
- sending (just made, or handed to a request whose first byte is not written yet: ``aiohttp``
  writes it from a task of its own, a loop turn or more later): a byte that arrives is
  dropped and refuses the request, and so does one waiting in the socket of a reused
  connection when the first byte is about to be written; the request fails with
  :class:`Unsent` before anything of it went out, and the transport sends it again on
  another connection;
- in flight (its first byte written): what arrives is its answer.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from ._sockets import socket_readable

__all__ = ["QUIET", "GuardedConnector", "Unsent", "unsent"]

_IDLE, _SENDING, _IN_FLIGHT = range(3)


class Unsent(Exception):
    """A request was refused before any byte of it was written (so it can be sent again)."""


def unsent(exc: BaseException) -> bool:
    """Whether ``exc`` (an ``aiohttp`` failure) was caused by :class:`Unsent`."""
    seen: BaseException | None = exc
    for _ in range(8):  # aiohttp wraps the write's failure once or twice
        if seen is None:
            return False
        if isinstance(seen, Unsent):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Transport:
    """The connection's transport, with its protocol told of every write (see
    :meth:`_Protocol.writing`); everything else is the transport's own."""

    __slots__ = ("_protocol", "_transport")

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def write(self, data: Any) -> None:
        self._protocol.writing()
        self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self._protocol.writing()
        self._transport.writelines(chunks)

    # What aiohttp calls for every request, spelled out: reaching these through
    # ``__getattr__`` first failed the normal lookup (an AttributeError made and dropped)
    # twenty times a run.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def close(self) -> None:
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


# The base methods called on every chunk and request, named once: ``super()`` makes an object
# for the collector on each call (Python 3.11).
_data_received = ResponseHandler.data_received
_is_connected = ResponseHandler.is_connected


class _Protocol(ResponseHandler):
    """``aiohttp``'s connection protocol, which answers no request with bytes that arrived
    before it (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._read_due = 0.0  # the read timeout's moment (see _reschedule_timeout)
        self._state = _IDLE
        self._pooled = False  # back in the pool since its last request
        self._stray = False  # bytes arrived before a request was sent: it never will be
        self._used = False  # a request was sent on it before
        # The read timer runs in a context of its own: a timer scheduled in the request's
        # context carries a snapshot of it (a web request's, a run's context variables),
        # and once cancelled it stays in the loop's heap until it would have fired.
        self._timer_context = contextvars.Context()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]

    def set_response_params(self, *args: Any, **kwargs: Any) -> None:
        # Called for each request, once it has the connection and before it is written.
        self._state = _SENDING
        self._pooled = False
        ResponseHandler.set_response_params(self, *args, **kwargs)

    def _reschedule_timeout(self) -> None:
        # aiohttp's own cancels the read timer and schedules a new one on every chunk that
        # arrives (a timer handle and a heap push per streamed delta). Here the chunk only
        # moves the moment the timeout is due; the timer armed earlier, when it fires, arms
        # itself again for what is left, and times out only once nothing arrived for
        # ``sock_read`` seconds.
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        loop = self._loop
        self._read_due = loop.time() + timeout
        if self._read_timeout_handle is None:
            self._read_timeout_handle = loop.call_at(
                self._read_due, self._read_timer, context=self._timer_context
            )

    def _read_timer(self) -> None:
        self._read_timeout_handle = None
        if self._loop.time() < self._read_due:
            self._read_timeout_handle = self._loop.call_at(
                self._read_due, self._read_timer, context=self._timer_context
            )
        else:
            self._on_read_timeout()

    def writing(self) -> None:
        """A write is about to go out; the first of a request is refused if bytes arrived
        first (raises :class:`Unsent`). A new connection's socket is not probed: a TLS
        session ticket may still wait there."""
        if self._state != _SENDING:
            return
        if self._stray or (self._used and self._holds_bytes()):
            raise Unsent("bytes arrived on the connection before the request was sent")
        self._state = _IN_FLIGHT
        self._used = True

    def released(self) -> None:
        """The connection went back to the pool (or is being closed)."""
        self._state = _IDLE
        self._pooled = True

    def data_received(self, data: bytes) -> None:
        if self._state == _IN_FLIGHT or not data:
            _data_received(self, data)
        elif self._pooled:
            self.close()
        else:  # a request waits to be sent here (or none came yet): it will be refused
            self._stray = True

    def is_connected(self) -> bool:
        # The connector asks this of a pooled connection before it hands it out (and when it
        # sweeps the pool).
        if self._pooled and _is_connected(self) and self._holds_bytes():
            self.close()
        return _is_connected(self)

    def _holds_bytes(self) -> bool:
        """A response is queued here, or bytes wait in the socket."""
        transport = self.transport
        return bool(
            self.should_close
            or transport is None
            or socket_readable(transport.get_extra_info("socket"))
        )


QUIET = contextvars.Context()
"""The context the pool queue's callbacks and timers run in: one scheduled in a request's own
context would keep a snapshot of it (a run's context variables) in the loop until it ran."""


class GuardedConnector(aiohttp.TCPConnector):
    """``aiohttp``'s connector, its connections on :class:`_Protocol`, and a queue in front of
    it for the requests that find every connection taken.

    ``aiohttp`` queues such a request inside its connector, after it has built the request
    (its headers, body payload, cookies, timers, two coroutines and a closure): with ten
    thousand runs on a pool of a thousand connections, nine thousand of those sat in memory
    and every full collection walked them. Here a request asks :meth:`admit` first; when
    every connection is taken it waits for a future in a queue, holding nothing of
    ``aiohttp``'s, and is woken when ``aiohttp`` frees a connection (:meth:`_release_waiter`,
    which ``aiohttp`` calls whenever one is released or a connect fails). Woken, it asks
    again, from the front of the queue if it has to wait once more. As in ``aiohttp``'s own
    queue, a request that finds a connection free takes it, even with others queued: a run
    that goes on to its next turn is not sent behind every run that has not started. An
    admitted request counts against the limit until it reaches :meth:`connect` (it is
    *entering*), so that a burst of requests started in one loop turn does not all go in.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(_Protocol, loop=self._loop)  # type: ignore[assignment]
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._entering: set[asyncio.Task[Any] | None] = set()  # admitted, not yet connecting
        self._waking = False

    def _free(self) -> int:
        return self._limit - len(self._acquired) - len(self._entering)

    def admit(self, again: bool = False) -> asyncio.Future[None] | None:
        """Admit the calling task's request: ``None`` when it may go on now, else a future
        that resolves when a connection may be free for it (then ask again, ``again=True``:
        a request that still finds none waits at the front of the queue). If the wait ends
        otherwise, call :meth:`withdraw`; an admitted request that fails before it connects
        calls :meth:`abandon`."""
        if not self._limit or self._closed:
            return None
        if not self._waiters and self._free() > 0:
            self._entering.add(asyncio.current_task())
            return None
        turn = self._loop.create_future()
        if again:
            self._queue.appendleft(turn)
        else:
            self._queue.append(turn)
        return turn

    def withdraw(self, turn: asyncio.Future[None]) -> None:
        """The wait for ``turn`` ended without the request going on (cancelled, timed out,
        the pool closed): a wake-up it was given goes to the next in the queue."""
        if not turn.done():
            turn.cancel()  # (left in the queue: skipped when its turn would come)
        elif not turn.cancelled() and turn.exception() is None:
            self._wake()

    def abandon(self) -> None:
        """The calling task's admitted request failed before it reached :meth:`connect`."""
        if self._entering:
            task = asyncio.current_task()
            if task in self._entering:
                self._entering.discard(task)
                self._wake()

    def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        # The admitted request now takes a connection, or a placeholder for one it opens:
        # both before the coroutine first yields, so it is counted in ``_acquired`` next.
        if self._entering:
            self._entering.discard(asyncio.current_task())
        return aiohttp.TCPConnector.connect(self, req, traces, timeout)

    def _release_waiter(self) -> None:
        # A connection was freed (or a connect failed). A request waiting inside aiohttp
        # already holds its built request: it goes first.
        if self._waiters:
            aiohttp.TCPConnector._release_waiter(self)
        elif self._queue and not self._waking:
            self._waking = True
            self._loop.call_soon(self._wake_later, context=QUIET)

    def _wake_later(self) -> None:
        self._waking = False
        self._wake()

    def _wake(self) -> None:
        queue = self._queue
        free = self._free()
        while queue and free > 0:
            turn = queue.popleft()
            if not turn.done():
                turn.set_result(None)
                free -= 1

    def _close(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._close(*args, **kwargs)
        finally:
            queue, self._queue = self._queue, collections.deque()
            for turn in queue:
                if not turn.done():
                    turn.set_exception(aiohttp.ClientConnectionError("Connector is closed."))
            self._entering.clear()

    def has_idle(self, host: str | None, port: int | None) -> bool:
        """Whether a kept-alive connection to ``host:port`` waits in the pool (a request
        there may take it instead of connecting)."""
        # (aiohttp drops a key's entry when its last connection is taken; a pool holds few)
        for key in self._conns:  # noqa: SIM110 (a loop: no generator per request)
            if key.host == host and key.port == port:
                return True
        return False

    def _release(self, key: Any, protocol: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(protocol, _Protocol):
            protocol.released()
        aiohttp.TCPConnector._release(self, key, protocol, *args, **kwargs)
