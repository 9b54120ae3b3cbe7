"""What the HTTP providers share: the connection pool, error translation, the stream handle.

A provider sends its own wire JSON straight to its connection pool, with the URL and headers
worked out once (:mod:`~fanloop.providers._endpoint`), or, given an SDK client, through that
client's low-level ``post()``; either way it reads the raw ``httpx2`` response and decodes the
SSE itself. Everything that can go wrong on the way is translated here into the
:mod:`fanloop.errors` tree:

- an HTTP status error → :func:`~fanloop.errors.error_for_status` (a 400 that says the prompt
  is too long → :class:`~fanloop.errors.ContextWindowExceeded`), with ``status_code``,
  ``request_id``, ``retry_after`` (``retry-after-ms``, ``retry-after`` seconds or HTTP date) and
  the body; ``x-should-retry`` overrides whether it is transient; a 401 or 403 says where the
  key came from (the variable it was read from, or ``api_key=``);
- a timeout → :class:`~fanloop.errors.ProviderTimeout`; a refused, dropped or broken
  connection → :class:`~fanloop.errors.ProviderConnectionError` (one that could not be made
  names host, port and reason: ``cannot connect to 127.0.0.1:9 (connection refused)``);
- an error sent inside the stream → classified by its error type;
- a stream that ends before its end marker → :class:`~fanloop.errors.StreamIncomplete`;
- anything malformed (not JSON, a field of the wrong type or range) →
  :class:`~fanloop.errors.ResponseInvalid`, never a raw exception;
- anything over its cap (:class:`WireLimits`: the body, one stream event, the number of
  content blocks) → :class:`~fanloop.providers._wire.ResponseTooLarge` (not transient).

The server is untrusted: every size it controls is capped. A non-streamed body and a stream
are read chunk by chunk up to ``max_response_bytes`` (after content decoding, so a compressed
bomb is cut at the cap too); an error body is read up to :data:`MAX_ERROR_BODY_BYTES` (the
response hook of the pools fanloop creates, or the provider itself for a borrowed pool), and an
error message is cut to :data:`MAX_ERROR_MESSAGE_CHARS`. Header sizes are capped by the
transports (``httpx2``: 100 KiB in all; ``aiohttp``: 8190 bytes a line, 128 headers), and a
``Content-Encoding`` listing more than :data:`~fanloop.providers._wire.MAX_CONTENT_CODINGS`
codings is refused before anything decodes the body. A pooled connection that received bytes
while idle is never reused (:mod:`~fanloop.providers._idle`).
"""

from __future__ import annotations

import email.utils
import functools
import importlib.util
import math
import os
import ssl
import time
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias

import anyio
import anyio.lowlevel
import httpx2

from .._log import logger
from .._record import record
from .._unicode import vouch_parsed
from ..errors import (
    AuthenticationError,
    BadRequest,
    ConfigurationError,
    ContextWindowExceeded,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseInvalid,
    ServerError,
    error_for_status,
)
from ..events import StreamDelta
from ._connect import clip, connect_reason
from ._sse import DEFAULT_MAX_FRAME_BYTES, SSEDecoder
from ._types import ModelRequest, ModelResponse
from ._wire import ResponseTooLarge, content_codings, loads, short

if TYPE_CHECKING:
    from ..pacing import Pacer
    from ..pacing._gate import PacedStream
    from ._aiohttp import AiohttpTransport

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_BLOCKS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "MALFORMED",
    "MAX_ERROR_BODY_BYTES",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_RETRY_AFTER",
    "Endpoint",
    "HTTPProvider",
    "ProviderStream",
    "SDKErrors",
    "Transport",
    "WireLimits",
    "cap_error_body",
    "create_pool",
    "keepalive_options",
    "log_status",
    "malformed",
    "mapped_errors",
    "no_trust_context",
    "parse_retry_after",
    "resolve_transport",
    "ssl_context",
    "status_error",
    "stream_error",
    "transport_error",
]

DEFAULT_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
"""Pool limits of a provider-owned client: up to 1000 requests in flight at once.

With 100 ms of model latency, 1000 connections carry 10,000 requests a second, more than one
process can prepare; further runs wait for a connection rather than open sockets without end.
On the ``httpx2`` transport idle keep-alive connections are capped at 100: ``httpcore2``
probes every idle connection each time a request starts or ends, so a large idle set costs more
than reconnecting (measured: 2000 concurrent streams ran 2-3x slower with 1000 idle
connections allowed than with 100). The ``aiohttp`` transport keeps them all."""

Transport: TypeAlias = Literal["auto", "aiohttp", "httpx"]
"""How a fanloop-made pool moves bytes: ``"aiohttp"`` (the ``fanloop[aiohttp]`` extra),
``"httpx"`` (``httpx2``'s own pool), or ``"auto"``: ``aiohttp`` when it is installed and no
proxy variable is set, else ``httpx``. ``FANLOOP_HTTP_TRANSPORT`` overrides ``"auto"``."""

DEFAULT_TIMEOUT = httpx2.Timeout(600.0, connect=5.0)
"""The SDKs' own default: long reads (a model may think for minutes), quick connects."""

MAX_ERROR_BODY_BYTES = 1024 * 1024
"""The most of an HTTP error body read (after content decoding): 1 MiB."""

MAX_ERROR_MESSAGE_CHARS = 2000
"""The longest server-sent error message kept in a :class:`~fanloop.errors.ProviderError`."""

MAX_RETRY_AFTER = 86400.0
"""The longest ``Retry-After`` :func:`parse_retry_after` reports (a day); a
:class:`~fanloop.RetryPolicy` then caps it at its ``max_retry_after``."""

# After the end marker, the rest of the body (normally just the chunked terminator) is read
# so the connection can be reused, but no more than this, and for no longer.
_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 0.5
# A stream whose bytes are always ready never suspends on its reads: give the event loop a
# turn at least this often (seconds).
_FAIR_SHARE = 0.02
# A stream is handed to the SSE decoder this much at a time (decoded chunks can be 1 MiB).
_FEED_BYTES = 64 * 1024


DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The largest response body accepted by default (64 MiB)."""

DEFAULT_MAX_BLOCKS = 1024
"""The most content blocks (tool calls) one response may hold by default."""


@record(frozen=True)
class WireLimits:
    """The caps on what one response from the server may hold.

    Attributes:
        max_response_bytes: the body of one response, streamed or not, after content
            decoding (default 64 MiB).
        max_frame_bytes: one stream event (SSE frame), and so one line (default 16 MiB).
        max_blocks: content blocks (Anthropic) or tool calls (OpenAI) in one response
            (default 1024).

    Going over a cap is :class:`~fanloop.providers._wire.ResponseTooLarge`, a
    :class:`~fanloop.errors.ResponseInvalid` that is not retried.
    """

    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_blocks: int = DEFAULT_MAX_BLOCKS

    def __post_init__(self) -> None:
        for name in ("max_response_bytes", "max_frame_bytes", "max_blocks"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")


_CONTEXT_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
)

# In-stream and body error types (Anthropic's and OpenAI's names) -> fanloop error classes.
_ERROR_TYPES: dict[str, type[ProviderError]] = {
    "overloaded_error": Overloaded,
    "overloaded": Overloaded,
    "rate_limit_error": RateLimited,
    "rate_limit_exceeded": RateLimited,
    "requests": RateLimited,
    "tokens": RateLimited,
    "api_error": ServerError,
    "server_error": ServerError,
    "internal_error": ServerError,
    "timeout_error": ProviderTimeout,
    "authentication_error": AuthenticationError,
    "permission_error": AuthenticationError,
    "invalid_api_key": AuthenticationError,
    "invalid_request_error": BadRequest,
    "not_found_error": BadRequest,
    "request_too_large": BadRequest,
    "context_length_exceeded": ContextWindowExceeded,
}


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every pool fanloop creates (building one costs ~50 ms)."""
    return httpx2.create_ssl_context()


@functools.cache
def no_trust_context() -> ssl.SSLContext:
    """A TLS context that accepts no certificate (it loads no trust store, so it is free).

    The pools of a plain-http endpoint use it: they never need TLS, unless the server
    redirects to https, and then they fail closed rather than build a trust store.
    """
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def resolve_transport(transport: Transport = "auto") -> Literal["aiohttp", "httpx"]:
    """The transport ``transport`` stands for in this process (see :data:`Transport`)."""
    if transport == "auto":
        forced = os.environ.get("FANLOOP_HTTP_TRANSPORT", "").strip().lower()
        if forced in ("aiohttp", "httpx"):
            return forced  # type: ignore[return-value]
        return "aiohttp" if _aiohttp_usable() else "httpx"
    if transport not in ("aiohttp", "httpx"):
        raise ConfigurationError(
            f"transport must be 'auto', 'aiohttp' or 'httpx', not {transport!r}"
        )
    return transport


@functools.cache
def _aiohttp_usable() -> bool:
    # aiohttp would ignore proxy variables unless it re-reads them on every request; with a
    # proxy configured, httpx2 (which honours them once, at construction) is the better pool.
    return importlib.util.find_spec("aiohttp") is not None and not urllib.request.getproxies()


def create_pool(
    *,
    limits: httpx2.Limits = DEFAULT_LIMITS,
    timeout: httpx2.Timeout | float | None = DEFAULT_TIMEOUT,
    transport: Transport = "auto",
    verify: ssl.SSLContext | bool | None = None,
) -> httpx2.AsyncClient:
    """A connection pool for one or more providers (``http_client=``).

    Args:
        limits: connection caps (``max_keepalive_connections`` matters only to ``httpx``).
        timeout: per-request timeouts.
        transport: ``"auto"``, ``"aiohttp"`` or ``"httpx"`` (see :data:`Transport`).
        verify: the TLS context (``None``: fanloop's shared one, :func:`ssl_context`;
            ``True``: the transport's default).

    The caller owns it: a provider given a pool never closes it. Its response hook
    (:func:`cap_error_body`) reads at most :data:`MAX_ERROR_BODY_BYTES` of an error body.
    It follows no redirects: an API that answers a POST with a redirect is an error (the key
    is never sent on to another address, the body never resent). On the ``aiohttp`` transport
    the providers send to the transport directly, so headers, auth or hooks set on the pool
    later are not applied to their requests.
    Connections use TCP keep-alive probes (as the SDKs' default pools do), so a connection
    idle through minutes of model thinking is not dropped silently by a middlebox.

    A pool (its connections) belongs to the event loop that first uses it: a provider's own
    pools are made per loop (:class:`~fanloop.providers._pools.LoopPools`); a pool passed in
    must be used from one loop.
    """
    tls = ssl_context() if verify is None else verify
    if resolve_transport(transport) == "aiohttp":
        from ._aiohttp import AiohttpTransport

        wire = AiohttpTransport(limits=limits, verify=tls)
        pool = httpx2.AsyncClient(
            transport=wire,
            timeout=timeout,
            event_hooks={"response": [cap_error_body]},
        )
        pool._fanloop_wire = wire  # type: ignore[attr-defined]  # see direct_transport()
        return pool
    from ._idle import guarded_transport
    from ._pools import GatedTransport

    inner = guarded_transport(limits=limits, verify=tls, socket_options=keepalive_options())
    return httpx2.AsyncClient(
        transport=GatedTransport(inner, limits.max_connections)
        if limits.max_connections
        else inner,
        timeout=timeout,
        event_hooks={"response": [cap_error_body]},
    )


def direct_transport(pool: httpx2.AsyncClient) -> AiohttpTransport | None:
    """The ``aiohttp`` transport a :func:`create_pool` pool sends through, if it has one.

    The providers hand their prebuilt requests straight to it (:meth:`AiohttpTransport.post`),
    skipping the ``httpx2`` client layer.
    """
    return getattr(pool, "_fanloop_wire", None)


@functools.cache
def keepalive_options() -> list[tuple[int, int, int]]:
    """TCP keep-alive: probe after 60 s idle, every 60 s, 5 times (the SDKs' settings)."""
    import socket

    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5)):
        number = getattr(socket, name, None)
        if number is not None:
            options.append((socket.IPPROTO_TCP, number, value))
    return options


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, else ``retry-after``.

    ``retry-after`` may be seconds (possibly fractional) or an HTTP date. Returns ``None``
    when neither header is present or parseable (garbage, NaN, over-long values); negative
    waits become ``0``; the result is at most :data:`MAX_RETRY_AFTER` (``inf`` too). The
    :class:`~fanloop.RetryPolicy` caps it further at its ``max_retry_after``.

    Example:
        >>> parse_retry_after({"retry-after-ms": "250"})
        0.25
        >>> parse_retry_after({"retry-after": "2"})
        2.0
        >>> parse_retry_after({"retry-after": "nan"}) is None
        True
    """
    seconds = _seconds(headers.get("retry-after-ms"), 1000.0)
    if seconds is not None:
        return seconds
    value = headers.get("retry-after")
    seconds = _seconds(value, 1.0)
    if seconds is not None or not isinstance(value, str) or len(value) > 64:
        return seconds
    try:
        delta = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except Exception:  # any unparseable or out-of-range date
        return None
    return _clamp_wait(delta)


def _seconds(value: object, per_second: float) -> float | None:
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return _clamp_wait(number / per_second)


def _clamp_wait(seconds: float) -> float | None:
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _should_retry(headers: Mapping[str, str]) -> bool | None:
    value = headers.get("x-should-retry")
    if value == "true":
        return True
    if value == "false":
        return False
    return None


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name`` (``httpx2`` and ``aiohttp`` headers alike)."""
    get_list = getattr(headers, "get_list", None)
    if get_list is not None:
        return get_list(name)  # type: ignore[no-any-return]
    return headers.getall(name, [])  # type: ignore[attr-defined,no-any-return]


def _request_id(headers: Mapping[str, str]) -> str | None:
    return short(headers.get("request-id")) or short(headers.get("x-request-id"))


def _clip(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    return clip(text, limit)


def _error_object(body: Any) -> dict[str, Any]:
    """The ``{"type", "message", ...}`` error object of either vendor's error body."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            return inner
        return body
    return {}


def _classify(
    default: type[ProviderError], error_type: str | None, code: Any, message: str
) -> type[ProviderError]:
    cls = default
    for key in (code, error_type):
        if isinstance(key, str) and key in _ERROR_TYPES:
            cls = _ERROR_TYPES[key]
            break
    if issubclass(cls, BadRequest) or cls is ProviderError:
        lowered = message.lower()
        if any(marker in lowered for marker in _CONTEXT_MARKERS):
            cls = ContextWindowExceeded
    return cls


def status_error(
    status_code: int,
    headers: Mapping[str, str],
    body: Any,
    *,
    provider: str,
    fallback_message: str = "",
    key_source: str | None = None,
) -> ProviderError:
    """The fanloop error for an HTTP error response.

    ``key_source`` says where the API key came from (``"the key in ANTHROPIC_API_KEY"``):
    a 401 or 403 message starts with it, so the reader knows which key to check.
    """
    error = _error_object(body)
    message = _message(error.get("message")) or _clip(fallback_message) or f"HTTP {status_code}"
    cls = error_for_status(status_code)
    if status_code in (400, 413, 422):
        cls = _classify(cls, error.get("type"), error.get("code"), message)
    if key_source and status_code in (401, 403):
        verdict = "was rejected" if status_code == 401 else "lacks permission for this request"
        message = f"{key_source} {verdict}: {message}"
    return cls(
        message,
        status_code=status_code,
        request_id=_request_id(headers) or short(_body_request_id(body)),
        retry_after=parse_retry_after(headers),
        provider=provider,
        body=body,
        transient=_should_retry(headers),
    )


def _body_request_id(body: Any) -> Any:
    return body.get("request_id") if isinstance(body, dict) else None


def _message(value: Any) -> str:
    """A server-sent error message as text, cut to :data:`MAX_ERROR_MESSAGE_CHARS`."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        value = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    return _clip(value)


def stream_error(
    body: Any, *, provider: str, request_id: str | None = None, size: int = 0
) -> ProviderError:
    """The fanloop error for an error sent inside a 200 stream, classified by its type.

    ``status_code`` stays ``None`` (the HTTP status was a success). An unrecognised type is a
    :class:`~fanloop.errors.ServerError` (transient): the server broke off a response it had
    accepted. ``size`` is the byte size of the event: the body is kept on the error only when
    it is at most :data:`MAX_ERROR_BODY_BYTES`.
    """
    error = _error_object(body)
    message = _message(error.get("message")) or "error event in the response stream"
    code = error.get("code")
    cls: type[ProviderError] = ServerError
    if type(code) is int and 400 <= code <= 599:
        cls = error_for_status(code)
    cls = _classify(cls, error.get("type"), code, message)
    return cls(
        message,
        request_id=request_id or short(_body_request_id(body)),
        provider=provider,
        body=body if size <= MAX_ERROR_BODY_BYTES else None,
    )


def transport_error(
    exc: BaseException, *, provider: str, request_id: str | None = None
) -> ProviderError:
    """The fanloop error for a raw ``httpx2`` transport failure.

    A connection that could not be made says where to and why, on either transport:
    ``cannot connect to 127.0.0.1:9 (connection refused)``.
    """
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        text = f"cannot connect to {_target(exc)} ({connect_reason(exc)})"
        cls: type[ProviderError] = (
            ProviderTimeout if isinstance(exc, httpx2.ConnectTimeout) else ProviderConnectionError
        )
        return cls(text, provider=provider, request_id=request_id)
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderTimeout(f"timed out: {text}", provider=provider, request_id=request_id)
    return ProviderConnectionError(
        f"connection failed: {text}", provider=provider, request_id=request_id
    )


def _target(exc: BaseException) -> str:
    """``host:port`` of the request that ``exc`` (an ``httpx2`` error) was raised for."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # raised outside a request
        return "the server"
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{port}"


MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)
"""What decoding a malformed payload raises (``Malformed`` and ``UnicodeDecodeError`` are
value errors); reported as :class:`~fanloop.errors.ResponseInvalid` (:func:`mapped_errors`)."""


def malformed(
    exc: BaseException, what: str, *, provider: str, request_id: str | None
) -> ResponseInvalid:
    """The :class:`~fanloop.errors.ResponseInvalid` for a payload that failed to decode."""
    detail = _clip(str(exc) or type(exc).__name__, 300)
    return ResponseInvalid(f"{what}: {detail}", provider=provider, request_id=request_id)


class mapped_errors:  # a class, as contextlib.suppress is: a generator costs ~3x as much
    """Raise whatever fails in the ``with`` block as a :class:`~fanloop.errors.ProviderError`:
    the one place the providers translate errors (as ``httpx`` maps ``httpcore``'s).

    - a :class:`~fanloop.errors.ProviderError` gets ``provider`` and ``request_id`` where it
      has none (it was raised where they were unknown);
    - an ``httpx2`` transport failure → :func:`transport_error` (chained from it);
    - a body that does not decode (``httpx2.DecodingError``) →
      :class:`~fanloop.errors.ResponseInvalid` saying ``undecodable``, when given;
    - any other ``httpx2`` error (too many redirects; an undecodable body when
      ``undecodable`` is not given) → a plain :class:`~fanloop.errors.ProviderError`;
    - a malformed payload (:data:`MALFORMED`) → :class:`~fanloop.errors.ResponseInvalid`
      saying ``invalid``, when given (else it propagates as it is).

    Only ``Exception`` subclasses are translated: cancellation (``CancelledError``, ``anyio``'s
    cancel exception), ``GeneratorExit`` and ``KeyboardInterrupt`` pass through untouched. An
    endpoint brings its own exceptions into this vocabulary first: the ``aiohttp`` transport
    raises ``httpx2``'s, an SDK endpoint raises ours (:class:`Endpoint`).
    """

    __slots__ = ("invalid", "provider", "request_id", "undecodable")

    def __init__(
        self,
        provider: str,
        request_id: str | None = None,
        *,
        undecodable: str | None = None,
        invalid: str | None = None,
    ) -> None:
        self.provider = provider
        self.request_id = request_id
        self.undecodable = undecodable
        self.invalid = invalid

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.raise_mapped(exc)

    def raise_mapped(self, exc: BaseException) -> None:
        """Raise what ``exc`` translates to, as leaving the ``with`` block with it would;
        return when it goes on as itself (the caller re-raises it). Call it in the ``except``
        clause that caught ``exc``: the error raised is chained to it."""
        provider, request_id = self.provider, self.request_id
        if isinstance(exc, ProviderError):
            if exc.provider is None:
                exc.provider = provider
            if exc.request_id is None:
                exc.request_id = request_id
        elif isinstance(exc, httpx2.HTTPError):
            if isinstance(exc, httpx2.TransportError):
                raise transport_error(exc, provider=provider, request_id=request_id) from exc
            if self.undecodable is not None and isinstance(exc, httpx2.DecodingError):
                raise malformed(
                    exc, self.undecodable, provider=provider, request_id=request_id
                ) from None
            raise ProviderError(_clip(str(exc)), provider=provider, request_id=request_id) from exc
        elif self.invalid is not None and isinstance(exc, MALFORMED):
            raise malformed(exc, self.invalid, provider=provider, request_id=request_id) from None


_PLAIN: dict[str, mapped_errors] = {}


def _plain_mapping(provider: str) -> mapped_errors:
    """A ``mapped_errors(provider)`` shared by every request of providers of that name (it
    keeps no state of its own): not an object per request in flight."""
    mapping = _PLAIN.get(provider)
    if mapping is None:
        if len(_PLAIN) > 256:
            _PLAIN.clear()
        mapping = _PLAIN[provider] = mapped_errors(provider)
    return mapping


async def cap_error_body(response: httpx2.Response, *, force: bool = False) -> None:
    """``httpx2`` response hook: an error response's body reads as at most
    :data:`MAX_ERROR_BODY_BYTES`, decoded.

    Gzip and deflate are decoded here, up to the cap; a body in another encoding reads as
    empty. :func:`create_pool` and the providers' own pools install it; a provider applies it
    itself to an error response from another pool (``force``: whatever the status, e.g. a
    redirect that was not followed), and an SDK client passed as ``client=`` reads error
    bodies through its own pool.
    """
    if response.status_code < 400 and not force:
        return
    try:
        codings = content_codings(response.headers.get_list("content-encoding"))
    except ResponseTooLarge:
        codings = ["(too many)"]  # unreadable
    response.stream = _CappedBody(response.stream, codings, MAX_ERROR_BODY_BYTES)
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]


class _CappedBody(httpx2.AsyncByteStream):
    """The first ``limit`` bytes of a body, decoded."""

    def __init__(self, stream: Any, codings: list[str], limit: int) -> None:
        self._stream = stream
        self._codings = codings
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        codings = self._codings
        decoder: Any = None
        if codings:
            if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
                return  # nothing readable
            decoder = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in codings[0] else 32))
        left = self._limit
        async for chunk in self._stream:
            if decoder is not None:
                try:
                    chunk = decoder.decompress(chunk, left)
                except zlib.error:
                    return
            if len(chunk) > left:
                chunk = chunk[:left]
            if chunk:
                left -= len(chunk)
                yield chunk
            if left <= 0:
                return

    async def aclose(self) -> None:
        await self._stream.aclose()


class Response(Protocol):
    """What the providers read of a response: an ``httpx2.Response``, or the ``aiohttp``
    pool's :class:`~fanloop.providers._aiohttp.WireResponse`."""

    status_code: int

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@record(frozen=True)
class SDKErrors:
    """The exception classes of one SDK that its endpoint translates
    (:class:`~fanloop.providers._endpoint.SDKEndpoint`)."""

    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]
    base: type[Exception]


class Endpoint(Protocol):
    """Where a provider's requests go. Two kinds:
    :class:`~fanloop.providers._endpoint.WireEndpoint` (fanloop's own: the prebuilt body
    straight to a connection pool) and :class:`~fanloop.providers._endpoint.SDKEndpoint` (a
    vendor SDK client the user passed, through its ``post()``)."""

    def post(self, provider: HTTPProvider, body: bytes, *, stream: bool) -> Awaitable[Response]:
        """Send ``body`` for ``provider``: the response, its body not yet read.

        Raises (when awaited) a :class:`~fanloop.errors.ProviderError` or an ``httpx2`` error
        (:func:`mapped_errors` translates the latter); returns any HTTP status (an error
        status is the provider's to read).
        """
        ...

    def refused(self, provider: HTTPProvider, exc: RuntimeError) -> Exception:
        """The error to raise for a request that failed with ``exc`` under way (a closed
        pool is the user's :class:`~fanloop.errors.ConfigurationError`)."""
        ...

    async def aclose(self) -> None:
        """Close what the endpoint made for itself (never what the user passed in)."""
        ...


class HTTPProvider:
    """Base of the HTTP providers: request sending, lifecycle and error translation.

    Subclasses set ``_path`` and ``_api`` and implement ``_encode`` (the request body),
    ``_decode`` (a non-streamed JSON response) and ``_parser`` (a streamed one).

    ``client`` is the :class:`Endpoint` requests are sent to (kept as ``_client``).
    """

    name: str
    model: str
    _path: ClassVar[str]
    _api: ClassVar[str]

    def __init__(
        self,
        client: Endpoint,
        *,
        key_source: str | None = None,
        limits: WireLimits | None = None,
        pacing: Pacer | None = None,
    ) -> None:
        self._client = client
        self._key_source = key_source
        self._closed = False  # aclose() was called and no request has been sent since
        self.limits = limits or WireLimits()
        if pacing is not None:
            from ..pacing import Pacer

            if not isinstance(pacing, Pacer):
                raise ConfigurationError(f"pacing= takes a Pacing or RedisPacing, not {pacing!r}")
        self.pacing = pacing

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pools this provider created (idempotent).

        A pool passed in as ``http_client``, or an SDK client passed as ``client``, belongs to
        the caller and stays open. The provider stays usable: a later request opens a new
        pool. Without ``aclose()``, a pool is closed when its event loop shuts down
        (``asyncio.run()``, ``anyio.run()``).
        """
        self._closed = True
        await self._client.aclose()

    async def __aenter__(self) -> HTTPProvider:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, name={self.name!r})"

    # -- the request ------------------------------------------------------------------------

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        raise NotImplementedError

    def _decode(self, data: Any, request_id: str | None) -> ModelResponse:
        raise NotImplementedError

    def _parser(self, request_id: str | None) -> StreamParser:
        raise NotImplementedError

    def _frames(self) -> FrameDecoder:
        """The decoder that cuts a streamed body into ``(event, data)`` frames: SSE."""
        return SSEDecoder(self.limits.max_frame_bytes)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with one non-streamed call (behind ``pacing``, when set)."""
        if self.pacing is not None:
            return await self.pacing.complete(request, self._complete)
        return await self._complete(request)

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        body = self._encode(request, stream=False)
        # Sent as a stream so that the body is read here, chunk by chunk, up to the cap.
        response = await self._post(body, stream=True)
        request_id = _request_id(response.headers)
        raw = await self._read_body(response, request_id)
        with mapped_errors(self.name, request_id, invalid="the response body is not JSON"):
            data = loads(raw[3:] if raw[:3] == b"\xef\xbb\xbf" else raw)
        with mapped_errors(self.name, request_id, invalid="malformed response"):
            decoded = self._decode(data, request_id)
        # Every string of ``data`` is valid Unicode (strict UTF-8, and ``loads`` made any lone
        # surrogate escape U+FFFD): so is the turn made of them, but for what came from
        # configuration, which vouch_parsed checks. Appending it then walks nothing.
        vouch_parsed(decoded, decoded.model, decoded.provider)
        return decoded

    async def _read_body(self, response: Response, request_id: str | None) -> bytes:
        """The (decoded) body, at most ``max_response_bytes`` of it."""
        limit = self.limits.max_response_bytes
        parts: list[bytes] = []
        size = 0
        try:
            with mapped_errors(
                self.name, request_id, undecodable="the response body cannot be decoded"
            ):
                length = response.headers.get("content-length", "")
                if length.isdigit():
                    if len(length) > 20 or int(length) > limit:
                        raise self._too_large(request_id)
                    read_framed = getattr(response, "read_framed", None)
                    if read_framed is not None and (whole := await read_framed()) is not None:
                        return whole  # type: ignore[no-any-return]
                clock = time.monotonic
                turn_ends = clock() + _FAIR_SHARE
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise self._too_large(request_id)
                    parts.append(chunk)
                    if clock() > turn_ends:  # decoded chunks of one read come without a pause
                        await anyio.lowlevel.checkpoint()
                        turn_ends = clock() + _FAIR_SHARE
        finally:
            await response.aclose()
        return b"".join(parts)

    def _too_large(self, request_id: str | None) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"the response is over the {self.limits.max_response_bytes:,}-byte limit "
            "(max_response_bytes)",
            provider=self.name,
            request_id=request_id,
        )

    def stream(self, request: ModelRequest) -> ProviderStream | PacedStream:
        """Stream the answer to ``request``.

        Use as ``async with provider.stream(request) as events:``; iterating ``events`` yields
        :data:`~fanloop.events.StreamDelta` events as they arrive, then the final
        :class:`~fanloop.providers.ModelResponse`. Keep-alive comments and ``ping`` events
        yield nothing. With ``pacing``, the request is sent once the pacing lets it through,
        and each wait first yields a :class:`~fanloop.events.PacingWait`.
        """
        if self.pacing is not None:
            return self.pacing.stream(request, self._unpaced_stream)
        return ProviderStream(self, request)

    def _unpaced_stream(self, request: ModelRequest) -> ProviderStream:
        return ProviderStream(self, request)

    async def _post(self, body: bytes, *, stream: bool) -> Response:
        """Send ``body``; the response, its body not yet read (errors raised as ours).
        (``ProviderStream.__aenter__`` does the same in its own frame.)"""
        if self._closed:
            self._closed = False
        with _plain_mapping(self.name):
            try:
                response = await self._client.post(self, body, stream=stream)
            except RuntimeError as exc:  # the pool was closed under the request
                raise self._client.refused(self, exc) from None
        if not 200 <= response.status_code < 300 or "content-encoding" in response.headers:
            await self._vet(response)
        return response

    async def _vet(self, response: Response) -> None:
        """Raise for a response that may not be read: an HTTP error status (anything but 2xx,
        as the SDKs), or more content codings than accepted (the response closed first)."""
        if not 200 <= response.status_code < 300:
            raise await self._status_failure(response)
        headers = response.headers
        if "content-encoding" in headers:
            with mapped_errors(self.name, _request_id(headers)):
                try:
                    content_codings(_values(headers, "content-encoding"))
                except ResponseTooLarge:
                    await response.aclose()
                    raise

    async def _status_failure(self, response: Response) -> ProviderError:
        """The error for an HTTP error response: its body read up to the cap, then closed."""
        if isinstance(response, httpx2.Response) and not isinstance(response.stream, _CappedBody):
            await cap_error_body(response, force=True)  # not capped by our pools' hook
        try:
            content = await _read_capped(response, MAX_ERROR_BODY_BYTES)
        except (httpx2.HTTPError, *MALFORMED):
            content = b""
        finally:
            await response.aclose()
        body: Any = None
        fallback = ""
        if content:
            try:
                body = loads(content[3:] if content[:3] == b"\xef\xbb\xbf" else content)
            except (ProviderError, *MALFORMED):
                body = content.decode("utf-8", "replace")
            if not isinstance(body, dict):
                fallback = f"HTTP {response.status_code}: {_clip(str(body), 500)}"
        if 300 <= response.status_code < 400:
            body = None
            location = response.headers.get("location") or "nowhere"
            fallback = (
                f"HTTP {response.status_code}: the server redirected to {_clip(location, 300)}; "
                "fanloop does not follow redirects (base_url should be the API's own address)"
            )
        error = status_error(
            response.status_code,
            response.headers,
            body,
            provider=self.name,
            fallback_message=fallback,
            key_source=self._key_source,
        )
        log_status(error)
        return error


async def _read_capped(response: Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the (decoded) body."""
    parts: list[bytes] = []
    async for chunk in response.aiter_bytes():
        parts.append(chunk[:limit])
        limit -= len(chunk)
        if limit <= 0:
            break
    return b"".join(parts)


def log_status(error: ProviderError) -> None:
    logger.debug(
        "provider_http_error",
        provider=error.provider,
        status_code=error.status_code,
        request_id=error.request_id,
        error_class=type(error).__name__,
    )


class FrameDecoder(Protocol):
    """Cuts chunks of a streamed body into ``(event, data)`` frames (:class:`SSEDecoder`)."""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]: ...


class StreamParser(Protocol):
    """Turns the SSE frames of one response into deltas and, at the end, a response."""

    done: bool

    def feed(self, event: bytes, data: bytes) -> tuple[StreamDelta, ...] | StreamDelta | None:
        """Handle one frame; return the deltas it produced (or raise a ProviderError)."""
        ...

    def finish(self) -> ModelResponse:
        """The final response; raises StreamIncomplete if the end marker never came."""
        ...


class ProviderStream:
    """The async-with handle :meth:`HTTPProvider.stream` returns.

    Entering sends the request (HTTP errors raise here); iterating reads the stream.
    Leaving closes the response, so an abandoned stream frees its connection.
    """

    __slots__ = ("_provider", "_request", "_response")

    def __init__(self, provider: HTTPProvider, request: ModelRequest) -> None:
        self._provider = provider
        self._request = request
        self._response: Response | None = None

    async def __aenter__(self) -> ProviderStream:
        provider = self._provider
        body = provider._encode(self._request, stream=True)
        # (HTTPProvider._post, inlined: a run waiting for the response holds this frame and
        # the transport's, not a third between them)
        if provider._closed:
            provider._closed = False
        with _plain_mapping(provider.name):
            try:
                response = await provider._client.post(provider, body, stream=True)
            except RuntimeError as exc:  # the pool was closed under the request
                raise provider._client.refused(provider, exc) from None
        if not 200 <= response.status_code < 300 or "content-encoding" in response.headers:
            await provider._vet(response)
        self._response = response
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._response is not None:
            await self._response.aclose()

    def __aiter__(self) -> AsyncIterator[StreamDelta | ModelResponse]:
        if self._response is None:
            raise RuntimeError("use 'async with provider.stream(request) as events:'")
        return self._events(self._response)

    def resumable(self) -> ResumableItems | None:
        """The items (as iterating gives them) through a reader whose ``__anext__`` may be
        cancelled while it waits without losing anything, when the response allows it (the
        ``aiohttp`` transport's, its body not encoded); else ``None``.

        Such a reader may also be read by another task of the loop than the one that sent the
        request (one at a time): reading depends on no context variable and on no cancel scope.
        A run's stream consumer reads the model's answer this way (``fanloop._model.Handed``).
        """
        response = self._response
        if response is None or not getattr(response, "resumable", False):
            return None
        return ResumableItems(self._provider, response)

    async def _events(self, response: Response) -> AsyncIterator[StreamDelta | ModelResponse]:
        provider = self._provider
        name = provider.name
        request_id = _request_id(response.headers)
        parser = provider._parser(request_id)
        limits = provider.limits
        feed = provider._frames().feed
        budget = limits.max_response_bytes
        chunks = response.aiter_bytes()
        clock = time.monotonic
        turn_ends = clock() + _FAIR_SHARE
        waits = getattr(response, "waits", None)
        with mapped_errors(
            name,
            request_id,
            undecodable="the response stream cannot be decoded",
            invalid="malformed response stream",  # a malformed frame
        ):
            async for chunk in chunks:
                budget -= len(chunk)
                if budget < 0:
                    raise provider._too_large(request_id)
                for piece in _pieces(chunk):
                    for event, data in feed(piece):
                        out = parser.feed(event, data)
                        if out is None:
                            if parser.done:
                                break
                            continue
                        if type(out) is tuple:
                            for delta in out:
                                yield delta
                        else:
                            yield out  # type: ignore[misc]
                    if parser.done:
                        break
                    if clock() > turn_ends:
                        # No pause unless the reads never waited since (WireResponse.waits):
                        # the deltas of a paced stream would each pay a trip through the loop.
                        if (seen := getattr(response, "waits", None)) is None or seen == waits:
                            await anyio.lowlevel.checkpoint()
                        waits = seen
                        turn_ends = clock() + _FAIR_SHARE
                if parser.done:
                    break
            if parser.done:
                if getattr(response, "at_eof", _never)():  # nothing follows the end marker
                    await chunks.aclose()  # type: ignore[attr-defined]
                else:
                    await _drain(chunks)
            final = parser.finish()
        yield final


class ResumableItems:
    """A streamed response's items, as :meth:`ProviderStream._events` gives them, for a reader
    that may give up waiting (a timeout around one ``__anext__``) and come back: each await
    comes before any state changes (a read of bytes that loses none when cancelled, the fair
    share's pause, the drain of what follows the end marker), and parsing is synchronous.
    """

    __slots__ = (
        "_budget",
        "_decoder",
        "_drain_until",
        "_failure",
        "_head",
        "_over",
        "_parser",
        "_pending",
        "_provider",
        "_request_id",
        "_response",
        "_turn_ends",
        "_waits",
    )

    def __init__(self, provider: HTTPProvider, response: Any) -> None:
        self._provider = provider
        self._response = response
        self._request_id = _request_id(response.headers)
        self._parser = provider._parser(self._request_id)
        self._decoder = provider._frames()  # (not its bound feed: an object per stream)
        self._budget = provider.limits.max_response_bytes
        self._pending: list[Any] = []  # parsed, not yet handed out (from _head on)
        self._head = 0
        self._over = False
        self._failure: Exception | None = None  # raised once what was parsed before it is out
        self._turn_ends = time.monotonic() + _FAIR_SHARE
        self._waits = response.waits
        self._drain_until: float | None = None

    def __aiter__(self) -> ResumableItems:
        return self

    async def __anext__(self) -> StreamDelta | ModelResponse:
        pending = self._pending
        head = self._head
        if head < len(pending):
            item = pending[head]
            pending[head] = None
            self._head = head + 1
            return item  # type: ignore[no-any-return]
        pending.clear()
        self._head = 0
        while True:
            if self._over:
                failure, self._failure = self._failure, None
                if failure is not None:
                    raise failure
                raise StopAsyncIteration
            if self._parser.done:
                await self._end()
            else:
                if time.monotonic() > self._turn_ends:
                    # The fair share's pause (as ProviderStream._events): none unless the
                    # reads never waited since the last one. (Here, not in a method of its
                    # own: the time is up on most reads of a stream whose deltas come one at
                    # a time, and a coroutine each time was an object for the collector.)
                    response = self._response
                    if response.waits == self._waits:
                        await anyio.lowlevel.checkpoint()
                    self._waits = response.waits
                    self._turn_ends = time.monotonic() + _FAIR_SHARE
                # A try, not ``with self._errors()``: the block would hold a bound
                # ``__exit__`` for as long as the read waits, for every stream in flight.
                try:
                    self._parse(await self._response.read_chunk())
                except Exception as exc:
                    if not pending:
                        self._errors().raise_mapped(exc)
                        raise
                    try:
                        self._errors().raise_mapped(exc)
                        failure = exc
                    except Exception as mapped:
                        failure = mapped
                    self._failure = failure  # what came before the failure goes out first
                    self._over = True
            if pending:
                self._head = 1
                item = pending[0]
                pending[0] = None
                return item  # type: ignore[no-any-return]

    def _errors(self) -> mapped_errors:
        """The stream's error mapping, made when there is an error to map or at the end (not
        held by every stream in flight)."""
        return mapped_errors(
            self._provider.name,
            self._request_id,
            undecodable="the response stream cannot be decoded",
            invalid="malformed response stream",
        )

    async def _end(self) -> None:
        """After the end marker: read what follows it (see :func:`_drain`), then the final
        response."""
        response = self._response
        with self._errors():
            if not response.at_eof():
                # One drain's time in all, however often a reader that stops waiting comes
                # back (each call to _drain would start its own).
                if self._drain_until is None:
                    self._drain_until = time.monotonic() + _DRAIN_SECONDS
                left = self._drain_until - time.monotonic()
                if left > 0:
                    with anyio.move_on_after(left):
                        await _drain(_Chunks(response))
            final = self._parser.finish()
        self._pending.append(final)
        self._over = True

    def _parse(self, chunk: bytes) -> None:
        """Parse ``chunk`` into ``_pending`` (``b""``: the body ended)."""
        parser = self._parser
        if not chunk:
            self._pending.append(parser.finish())  # raises if the end marker never came
            self._over = True
            return
        self._budget -= len(chunk)
        if self._budget < 0:
            raise self._provider._too_large(self._request_id)
        pending = self._pending
        decoder = self._decoder
        for piece in (chunk,) if len(chunk) <= _FEED_BYTES else _pieces(chunk):
            for event, data in decoder.feed(piece):
                out = parser.feed(event, data)
                if out is None:
                    if parser.done:
                        break
                    continue
                if type(out) is tuple:
                    pending.extend(out)
                else:
                    pending.append(out)
            if parser.done:
                break


class _Chunks:
    """A response's :meth:`read_chunk` as an async iterator (for :func:`_drain`)."""

    __slots__ = ("_response",)

    def __init__(self, response: Any) -> None:
        self._response = response

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        chunk: bytes = await self._response.read_chunk()
        if not chunk:
            raise StopAsyncIteration
        return chunk


def _never() -> bool:
    return False


def _pieces(chunk: bytes) -> Sequence[bytes]:
    """``chunk`` in parts of at most :data:`_FEED_BYTES`, so that the loop gets a turn between
    them: a decoded chunk can be a MiB of tiny frames."""
    if len(chunk) <= _FEED_BYTES:
        return (chunk,)
    return [chunk[i : i + _FEED_BYTES] for i in range(0, len(chunk), _FEED_BYTES)]


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the end marker (normally nothing but the body's end), so that the
    connection can be reused; give up after :data:`_DRAIN_BYTES` or :data:`_DRAIN_SECONDS`."""
    left = _DRAIN_BYTES
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for chunk in chunks:
                left -= len(chunk)
                if left < 0:
                    break
        except (httpx2.TransportError, httpx2.DecodingError):
            pass
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_DRAIN_SECONDS):
            await aclose()
