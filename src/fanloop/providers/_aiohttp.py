"""An ``httpx2`` transport on an ``aiohttp`` connection pool (the ``fanloop[aiohttp]`` extra).

The providers keep the ``httpx2`` API (``pool.send(...)``, its response and error classes)
while the bytes travel through ``aiohttp``. ``httpcore2``'s pool scans its connections each
time a request starts or ends, so with a thousand requests in flight most of the time goes
into scheduling; ``aiohttp``'s connector hands out an idle connection in constant time.

The SDKs ship the same idea (``DefaultAioHttpClient``); this one is ours so that failures map
onto ``httpx2``'s exception classes precisely (a refused connection is a ``ConnectError``, not
a timeout, so fanloop's error translation tells them apart, and its message names host, port
and reason rather than aiohttp's connector settings), the per-request work is small, and the
response body is read as it arrives.

The providers' hot path skips ``httpx2`` altogether on such a pool: :meth:`AiohttpTransport.post`
sends a prebuilt body with prebuilt headers and returns a :class:`WireResponse`, the part of
``httpx2.Response`` the providers read (status, headers, body chunks). Building an
``httpx2.Request`` (URL parsing, header merging) and an ``httpx2.Response`` for every call cost
more than the whole of ``aiohttp``'s own work.

Imported only when a pool is built with it: ``aiohttp`` costs ~100 ms to import.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterable, Iterator, Mapping
from typing import Any

import aiohttp
import httpx2
from yarl import URL

from ._connect import connect_reason
from ._idle_aiohttp import QUIET, GuardedConnector, unsent
from ._wire import ResponseTooLarge, content_codings

__all__ = ["AiohttpTransport", "WireResponse"]

_READ_SIZE = 64 * 1024
"""At most this many body bytes are handed on at a time."""

_INFLATE_STEP = 1 << 20
"""At most this many decoded bytes come out of one step of a compressed body: a small
compressed chunk can expand a thousandfold, and the readers check their caps per chunk."""


@functools.lru_cache(maxsize=64)
def _client_timeout(
    connect: float | None, read: float | None, pool: float | None
) -> aiohttp.ClientTimeout:
    # httpx2's "pool" (waiting for a connection) is aiohttp's "connect" (pool wait plus
    # connection set-up); "connect" is the socket connect, "read" the gap between reads.
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


def _translate(exc: BaseException) -> httpx2.TransportError:
    """The ``httpx2`` exception for an ``aiohttp`` (or socket) failure."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout(text)
    if isinstance(exc, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
        return httpx2.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Not aiohttp's "Cannot connect to host h:p ssl:default [...]": "ssl:default" is its
        # connector setting, shown even for plain http.
        return httpx2.ConnectError(
            f"cannot connect to {exc.host}:{exc.port} ({connect_reason(exc)})"
        )
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx2.UnsupportedProtocol(text)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(text)
    return httpx2.ReadError(text)


_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _failure(exc: BaseException, method: str, named: str | None) -> httpx2.TransportError:
    """The ``httpx2`` error a request raises for ``exc``; ``named``: the URL it names (its
    ``request``) when no ``httpx2`` request is behind this one."""
    error = _translate(exc)
    if named is not None:
        error.request = httpx2.Request(method, named)  # (messages name the host)
    return error


_ATTEMPTS = 3
"""Tries of a request refused before its first byte was sent (each on another connection)."""


async def _queued(
    turn: asyncio.Future[None],
    pooled: GuardedConnector,
    limit: float | None,
    method: str,
    named: str | None,
) -> None:
    """Wait in ``pooled``'s queue until the request is admitted, at most ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    waiting: asyncio.Future[None] | None = turn
    while waiting is not None:
        turn = waiting
        timer = None
        if deadline is not None:
            timer = loop.call_at(deadline, _expire, turn, limit, context=QUIET)
        try:
            await turn
        except BaseException as exc:
            pooled.withdraw(turn)
            if isinstance(exc, _FAILURES):  # timed out, or the pool was closed
                raise _failure(exc, method, named) from exc
            raise
        finally:
            if timer is not None:
                timer.cancel()
        waiting = pooled.admit(again=True)


def _expire(turn: asyncio.Future[None], limit: float | None) -> None:
    if not turn.done():
        turn.set_exception(
            aiohttp.ConnectionTimeoutError(f"no connection of the pool was free within {limit} s")
        )


class _Inflate:
    """A gzip or deflate body decoded step by step (see :data:`_INFLATE_STEP`)."""

    __slots__ = ("_decoder",)

    def __init__(self, coding: str) -> None:
        # gzip: a gzip header; deflate: zlib's (auto-detected, as httpx2 does it).
        self._decoder = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in coding else 32))

    def steps(self, data: bytes) -> Iterator[bytes]:
        """``data`` decoded, at most :data:`_INFLATE_STEP` bytes at a time (lazily: the next
        step is decoded only when the reader asks for it)."""
        decoder = self._decoder
        try:
            while data:
                piece = decoder.decompress(data, _INFLATE_STEP)
                data = decoder.unconsumed_tail
                if piece:
                    yield piece
        except zlib.error as exc:
            raise httpx2.DecodingError(f"the body is not valid {exc}") from None


def _through(decoder: _Inflate, pieces: Iterable[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield from decoder.steps(piece)


def _decoders(codings: list[str]) -> list[_Inflate]:
    """The decoders of a ``Content-Encoding`` (at most
    :data:`~fanloop.providers._wire.MAX_CONTENT_CODINGS`), outermost first: gzip and deflate
    (the ones sent in ``Accept-Encoding``); other codings pass through as they are, as
    ``httpx2`` does."""
    return [_Inflate(c) for c in reversed(codings) if c in ("gzip", "x-gzip", "deflate")]


class WireResponse:
    """A response from :meth:`AiohttpTransport.post`: what the providers read of an
    ``httpx2.Response``, without building one.

    Attributes:
        status_code: the HTTP status.
        headers: the response headers (case-insensitive, as ``aiohttp`` parsed them).
    """

    __slots__ = ("_response", "_transport", "headers", "status_code", "waits")

    def __init__(self, response: aiohttp.ClientResponse, transport: AiohttpTransport) -> None:
        self.waits = 0
        """How many reads of :meth:`chunks` found nothing buffered and waited (gave the event
        loop a turn): a reader that sees it change needs no pause of its own."""
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers
        self._response = response
        self._transport: AiohttpTransport | None = transport

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body as it arrives, not decoded.

        At most :data:`_READ_SIZE` bytes at a time: ``readany()`` would return all that is
        buffered, and the readers give the loop a turn between chunks, not inside one.

        Raises:
            httpx2.TransportError: the connection failed.
        """
        content = self._response.content
        try:
            while True:
                chunk = content.read_nowait(_READ_SIZE)
                if not chunk:
                    self.waits += 1
                    chunk = await content.read(_READ_SIZE)
                    if not chunk:
                        return
                yield chunk
        except _FAILURES as exc:
            raise _translate(exc) from exc

    @property
    def resumable(self) -> bool:
        """Whether :meth:`read_chunk` reads the body (one not encoded)."""
        return "content-encoding" not in self.headers

    async def read_chunk(self) -> bytes:
        """The next piece of a body that is not encoded, as it arrives; ``b""`` at its end.

        A read cancelled while it waits loses nothing (the bytes stay buffered for the next
        one), so it may be cut short by a timeout of whoever reads, unlike :meth:`chunks`.

        Raises:
            httpx2.TransportError: the connection failed.
        """
        content = self._response.content
        try:
            chunk = content.read_nowait(_READ_SIZE)
            if not chunk:
                self.waits += 1
                chunk = await content.read(_READ_SIZE)
        except _FAILURES as exc:
            raise _translate(exc) from exc
        return chunk

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, decoded, chunk by chunk as it arrives (a body without a
        ``Content-Encoding`` is :meth:`chunks` itself: no generator in between, per chunk).

        Raises:
            httpx2.DecodingError: a gzip or deflate body that does not decode, or more content
                codings than :data:`~fanloop.providers._wire.MAX_CONTENT_CODINGS`.
            httpx2.TransportError: the connection failed.
        """
        if "content-encoding" not in self.headers:
            return self.chunks()
        return self._decoded()

    async def _decoded(self) -> AsyncIterator[bytes]:
        try:
            codings = content_codings(self.headers.getall("content-encoding", ()))  # type: ignore[attr-defined]
        except ResponseTooLarge as exc:  # as httpx2 refuses too many: a DecodingError
            raise httpx2.DecodingError(str(exc)) from None
        decoders = _decoders(codings) if codings else None
        chunks = self.chunks()
        try:
            async for chunk in chunks:
                if not decoders:
                    yield chunk
                    continue
                pieces: Iterable[bytes] = (chunk,)
                for decoder in decoders:
                    pieces = _through(decoder, pieces)
                for piece in pieces:
                    yield piece
        finally:
            # Closed here, with this one: left to the collector, the event loop's finalizer
            # hook would close it a loop turn later (a wake-up and a task per response).
            await chunks.aclose()

    async def read_framed(self) -> bytes | None:
        """The whole body in one read when a ``Content-Length`` frames it and it is not
        encoded (the common case of a non-streamed answer), else ``None`` (then read
        :meth:`aiter_bytes`). The caller checks the length against its cap first."""
        headers = self.headers
        if "content-encoding" in headers or not headers.get("content-length", "").isdigit():
            return None
        try:
            return await self._response.content.read()  # the parser stops at Content-Length
        except _FAILURES as exc:
            raise _translate(exc) from exc

    def at_eof(self) -> bool:
        """The whole body has arrived and been read (the connection can be reused as is)."""
        return self._response.content.at_eof()

    async def aread(self) -> bytes:
        """The whole body, decoded (callers cap it by reading :meth:`aiter_bytes` instead)."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        """Free the connection: back to the pool if the body was read to its end, else closed
        (aiohttp never reuses a connection with a pending body)."""
        self._response.release()
        transport, self._transport = self._transport, None
        if transport is not None:
            transport._open_bodies -= 1


class _Body(httpx2.AsyncByteStream):
    """A :class:`WireResponse`'s body as an ``httpx2`` stream (``httpx2`` decodes it)."""

    __slots__ = ("_wire",)

    def __init__(self, wire: WireResponse) -> None:
        self._wire = wire

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._wire.chunks()

    async def aclose(self) -> None:
        await self._wire.aclose()


_OWN_HEADERS = ("Accept-Encoding", "User-Agent")
"""Headers ``aiohttp`` adds to a request that does not name them (its own values): the
request is sent with the ones it names, and without the others."""


def _unnamed(headers: Mapping[str, str]) -> tuple[str, ...] | None:
    """Which of :data:`_OWN_HEADERS` ``headers`` leaves out (``None``: neither, the usual
    case: fanloop's requests and ``httpx2``'s name both). Telling ``aiohttp`` to skip headers
    costs every request two header tables, so only a request that needs it does."""
    if "Accept-Encoding" in headers and "User-Agent" in headers:
        return None
    named = {name.lower() for name in headers}
    missing = tuple(name for name in _OWN_HEADERS if name.lower() not in named)
    return missing or None


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Send ``httpx2`` requests over one ``aiohttp.ClientSession`` (HTTP/1.1).

    Args:
        limits: ``max_connections`` caps open connections (``None``: no cap); idle ones are
            kept for ``keepalive_expiry`` seconds. ``max_keepalive_connections`` is not
            needed: idle connections cost ``aiohttp`` nothing per request.
        verify: the TLS context.
        trust_env: read proxy variables and ``.netrc`` (per request, so off by default).

    The session is created on the first request, in the event loop that sends it.
    """

    def __init__(
        self,
        *,
        limits: httpx2.Limits,
        verify: ssl.SSLContext | bool = True,
        trust_env: bool = False,
    ) -> None:
        self._limits = limits
        self._verify = verify
        self._trust_env = trust_env
        self._session: aiohttp.ClientSession | None = None
        self._connector: GuardedConnector | None = None
        self._open_bodies = 0  # responses not yet closed: connections in use, at most
        self._urls: dict[str, URL] = {}  # post()'s targets, parsed once
        # Fewer open bodies than this: a connection may be free, or one may be opened.
        self._free_below = limits.max_connections or 1 << 62

    def _open(self) -> aiohttp.ClientSession:
        limits = self._limits
        connector = self._connector = GuardedConnector(
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry or 5.0,
            ssl=self._verify,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # httpx2 decodes content-encoding itself
            trust_env=self._trust_env,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        return self._session

    def post(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: httpx2.Timeout,
    ) -> Awaitable[WireResponse]:
        """POST ``body`` to ``url``: an awaitable of the response, its body not yet read (the
        request's own coroutine: a run waiting for the response holds no frame of this
        method).

        Redirects are not followed. Failures raise as ``httpx2`` transport errors.
        """
        target = self._urls.get(url)
        if target is None:
            if len(self._urls) > 64:
                self._urls.clear()
            target = self._urls[url] = URL(url, encoded=True)
        return self._send(
            "POST",
            target,
            headers,
            body,
            _client_timeout(timeout.connect, timeout.read, timeout.pool),
            skip=_unnamed(headers),
            named=url,
        )

    async def _send(
        self,
        method: str,
        url: URL,
        headers: Any,
        data: Any,
        timeout: aiohttp.ClientTimeout,
        server_hostname: str | None = None,
        skip: tuple[str, ...] | None = None,
        named: str | None = None,
    ) -> WireResponse:
        """Send a request; its response, the body not yet read. ``named``: the URL a transport
        error names (its ``request``), when no ``httpx2`` request is behind this one."""
        session = self._session or self._open()
        pooled = self._connector
        turn = pooled.admit() if pooled is not None else None
        if turn is not None:
            # Every connection is taken: wait in the pool's queue, before aiohttp builds the
            # request, at most aiohttp's connect timeout (httpx2's pool timeout), as long as
            # a request may wait inside aiohttp.
            assert pooled is not None
            await _queued(turn, pooled, timeout.connect, method, named)
        elif self._open_bodies < self._free_below and not (
            pooled is not None and pooled.has_idle(url.host, url.port)
        ):
            # This request may open a connection. One loop turn first: runs that start
            # together do their set-up in one turn of the loop, and a connect begun early in
            # it had its 5 s counted against everyone else's set-up (1000 connect timeouts in
            # 10,000 runs on a loaded machine). Once every connection is busy, requests wait
            # in the pool's queue instead and take connections that are already open; while
            # one is kept alive in the pool, a request takes it without connecting.
            try:
                await asyncio.sleep(0)
            except BaseException:
                if pooled is not None:
                    pooled.abandon()
                raise
        # A request refused before its first byte went out (bytes arrived on the connection
        # while it waited to be sent: see GuardedConnector) is sent again on another one.
        attempts = _ATTEMPTS if data is None or isinstance(data, bytes) else 1
        while True:
            attempts -= 1
            try:
                response = await session._request(
                    method,
                    url,
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    timeout=timeout,
                    server_hostname=server_hostname,
                    skip_auto_headers=skip,
                )
            except BaseException as exc:
                if pooled is not None:
                    pooled.abandon()  # (failed before it connected: its admission is freed)
                if not isinstance(exc, _FAILURES):
                    raise
                if attempts and unsent(exc):
                    continue
                raise _failure(exc, method, named) from exc
            self._open_bodies += 1
            return WireResponse(response, self)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout: dict[str, Any] = request.extensions.get("timeout", {})
        try:
            data: Any = request.content or None
        except httpx2.RequestNotRead:  # a streamed upload
            data = request.stream
            request.headers.pop("transfer-encoding", None)
        wire = await self._send(
            request.method,
            URL(str(request.url), encoded=True),
            request.headers.multi_items(),
            data,
            _client_timeout(timeout.get("connect"), timeout.get("read"), timeout.get("pool")),
            request.extensions.get("sni_hostname"),
            _unnamed(request.headers),
        )
        return httpx2.Response(
            status_code=wire.status_code,
            headers=wire._response.raw_headers,
            stream=_Body(wire),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = self._connector = None
