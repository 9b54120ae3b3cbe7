"""A response is accepted only for a request in flight: an idle connection that received bytes
is never reused.

HTTP/1.1 pairs responses with requests by order alone. A server, or a proxy in between, that
writes a response nobody asked for onto a keep-alive connection while it sits idle in the pool
has those bytes read as the answer to the next request sent on it: with a buggy shared proxy in
the path, one user's answer delivered to another. Both transports guard against it:

- ``aiohttp`` (:mod:`~fanloop.providers._idle_aiohttp`): its connection protocol parses
  whatever arrives, request or not, and queues a complete response for the next reader. Ours
  closes a pooled connection the moment a byte arrives, checks that a pooled connection's
  socket has nothing unread before handing it out, and refuses a request, unsent, when bytes
  arrive between that check and its first byte (``aiohttp`` writes from a task of its own);
  the transport then sends it on another connection.
- ``httpx2`` (:func:`guarded_transport`): ``httpcore2`` probes an idle connection's socket when
  it assigns a request to it, but not what ``h11`` or ``anyio`` already read past the end of the
  last response (a stray response written right behind a real one), and not the loop turns
  between that probe and the request's first byte. Here a connection is refused when ``h11``
  holds bytes past the last response, and again, just before the request's first byte is
  written, when ``anyio`` or the socket holds any; the request then goes to another connection
  (nothing was sent on this one).

What cannot be told apart is a stray response that arrives after the request was written: it
is read as the answer, exactly as a real one would be.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from ._sockets import socket_readable

__all__ = ["guarded_transport", "socket_readable"]


def _anyio_buffers(stream: Any) -> tuple[list[Any], list[tuple[ssl.SSLObject, ssl.MemoryBIO]]]:
    """Where the ``anyio`` stream under an ``httpcore2`` stream keeps bytes it received but has
    not handed on: the protocols of its asyncio socket streams (which queue what arrived while
    a read waited, and the part of a chunk over the size asked for) and the TLS layers (records
    not yet decrypted, plaintext not yet read).

    These are private attributes of ``anyio``; where one is missing the check sees nothing
    there, and the socket probe still runs.
    """
    protocols: list[Any] = []
    tls: list[tuple[ssl.SSLObject, ssl.MemoryBIO]] = []
    layer = getattr(stream, "_stream", None)
    for _ in range(4):  # TLS over TCP, or TLS in TLS through a proxy: a few layers at most
        if layer is None:
            break
        ssl_object = getattr(layer, "_ssl_object", None)
        read_bio = getattr(layer, "_read_bio", None)
        if isinstance(ssl_object, ssl.SSLObject) and isinstance(read_bio, ssl.MemoryBIO):
            tls.append((ssl_object, read_bio))
        protocol = getattr(layer, "_protocol", None)
        if protocol is not None:
            protocols.append(protocol)
        layer = getattr(layer, "transport_stream", None)
    return protocols, tls


class _Stream(httpcore2.AsyncNetworkStream):
    """A connection's stream that will not start a second request while bytes wait to be read.

    ``httpcore2`` writes a request whole before it reads, so the first write after a read
    starts a new request; if anything waits to be read then, it arrived while the connection
    was idle, and the request is refused with :class:`httpcore2.ConnectionNotAvailable`
    before any byte of it is written (the pool then sends it on another connection). A new
    connection is not checked: it had no earlier request whose answer could be mistaken, and
    a TLS session ticket may still wait there.
    """

    __slots__ = ("_inner", "_protocols", "_socket", "_starts_request", "_tls", "_used")

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._protocols, self._tls = _anyio_buffers(inner)
        self._socket = inner.get_extra_info("socket")
        self._starts_request = True  # the next write is a request's first byte
        self._used = False  # a request was written before

    def holds_bytes(self) -> bool:
        """Bytes (or an end of stream) wait to be read, in ``anyio`` or in the socket."""
        for protocol in self._protocols:
            if getattr(protocol, "read_queue", None) or getattr(protocol, "is_at_eof", False):
                return True
        for ssl_object, read_bio in self._tls:
            if ssl_object.pending() or read_bio.pending:
                return True
        return socket_readable(self._socket)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._starts_request = True
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._starts_request and buffer:
            self._starts_request = False
            if self._used and self.holds_bytes():
                # httpcore2 closes the connection on the way out.
                raise httpcore2.ConnectionNotAvailable()
            self._used = True
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore2's probe of an idle connection
            return self.holds_bytes()
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.AsyncNetworkBackend):
    """``httpcore2``'s ``anyio`` backend, its streams wrapped in :class:`_Stream`."""

    def __init__(self) -> None:
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Connection(httpcore2.AsyncConnectionInterface):
    """A pooled connection that is never reused while ``h11`` holds bytes past the end of the
    last response (they arrived with it, so the socket probe cannot see them)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: httpcore2.AsyncConnectionInterface) -> None:
        self._inner = inner

    def _read_too_far(self) -> bool:
        http11 = getattr(self._inner, "_connection", None)  # set once connected
        h11_state = getattr(http11, "_h11_state", None)
        return h11_state is not None and bool(h11_state.trailing_data[0])

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        if self._inner.is_idle() and self._read_too_far():
            await self._inner.aclose()
            raise httpcore2.ConnectionNotAvailable()
        return await self._inner.handle_async_request(request)

    def has_expired(self) -> bool:
        return self._inner.has_expired() or (self._inner.is_idle() and self._read_too_far())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def info(self) -> str:
        return self._inner.info()

    def can_handle_request(self, origin: httpcore2.Origin) -> bool:
        return self._inner.can_handle_request(origin)

    def is_available(self) -> bool:
        return self._inner.is_available()

    def is_idle(self) -> bool:
        return self._inner.is_idle()

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def can_multiplex(self) -> bool:
        return self._inner.can_multiplex()

    def __repr__(self) -> str:
        return repr(self._inner)


class _Pool(httpcore2.AsyncConnectionPool):
    """``httpcore2``'s pool, its connections wrapped in :class:`_Connection`."""

    def create_connection(self, origin: httpcore2.Origin) -> httpcore2.AsyncConnectionInterface:
        return _Connection(super().create_connection(origin))


def guarded_transport(
    *,
    limits: httpx2.Limits,
    verify: ssl.SSLContext | bool,
    socket_options: Iterable[Any],
) -> httpx2.AsyncHTTPTransport:
    """``httpx2``'s own transport (HTTP/1.1, no proxy) on a pool that never reuses a
    connection holding unrequested bytes (see the module docstring)."""
    tls = httpx2.create_ssl_context(verify=verify)
    options = list(socket_options)
    transport = httpx2.AsyncHTTPTransport(limits=limits, verify=tls, socket_options=options)
    transport._pool = _Pool(
        ssl_context=tls,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        socket_options=options,
        network_backend=_Backend(),
    )
    return transport
