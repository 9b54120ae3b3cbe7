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
import contextvars
import functools
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from ._sockets import socket_readable

__all__ = ["GuardedConnector", "Unsent", "unsent"]

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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


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
        super().set_response_params(*args, **kwargs)

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
            super().data_received(data)
        elif self._pooled:
            self.close()
        else:  # a request waits to be sent here (or none came yet): it will be refused
            self._stray = True

    def is_connected(self) -> bool:
        # The connector asks this of a pooled connection before it hands it out (and when it
        # sweeps the pool).
        if self._pooled and super().is_connected() and self._holds_bytes():
            self.close()
        return super().is_connected()

    def _holds_bytes(self) -> bool:
        """A response is queued here, or bytes wait in the socket."""
        transport = self.transport
        return bool(
            self.should_close
            or transport is None
            or socket_readable(transport.get_extra_info("socket"))
        )


class GuardedConnector(aiohttp.TCPConnector):
    """``aiohttp``'s connector, its connections on :class:`_Protocol`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(_Protocol, loop=self._loop)  # type: ignore[assignment]

    def has_idle(self, host: str | None, port: int | None) -> bool:
        """Whether a kept-alive connection to ``host:port`` waits in the pool (a request
        there may take it instead of connecting)."""
        # (aiohttp drops a key's entry when its last connection is taken; a pool holds few)
        return any(key.host == host and key.port == port for key in self._conns)

    def _release(self, key: Any, protocol: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(protocol, _Protocol):
            protocol.released()
        super()._release(key, protocol, *args, **kwargs)
