"""What the HTTP providers share: the connection pool, error translation, the stream handle.

A provider built on an official SDK sends its own wire JSON through the SDK client's low-level
``post()`` (so authentication, base URL, headers and the SDK's error classes stay the SDK's),
reads the raw ``httpx2`` response and decodes the SSE itself. Everything that can go wrong on
the way is translated here into the :mod:`fanloop.errors` tree:

- an HTTP status error → :func:`~fanloop.errors.error_for_status` (a 400 that says the prompt
  is too long → :class:`~fanloop.errors.ContextWindowExceeded`), with ``status_code``,
  ``request_id``, ``retry_after`` (``retry-after-ms``, ``retry-after`` seconds or HTTP date) and
  the body; ``x-should-retry`` overrides whether it is transient;
- a timeout → :class:`~fanloop.errors.ProviderTimeout`; a refused, dropped or broken
  connection → :class:`~fanloop.errors.ProviderConnectionError`;
- an error sent inside the stream → classified by its error type;
- a stream that ends before its end marker → :class:`~fanloop.errors.StreamIncomplete`.
"""

from __future__ import annotations

import email.utils
import functools
import importlib.util
import json
import os
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, TypeAlias

import httpx2

from .._log import logger
from ..errors import (
    AuthenticationError,
    BadRequest,
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
from ._sse import SSEDecoder
from ._types import ModelRequest, ModelResponse

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "HTTPProvider",
    "ProviderStream",
    "SDKErrors",
    "Transport",
    "create_pool",
    "default_pool",
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


def resolve_transport(transport: Transport = "auto") -> Literal["aiohttp", "httpx"]:
    """The transport ``transport`` stands for in this process (see :data:`Transport`)."""
    if transport == "auto":
        forced = os.environ.get("FANLOOP_HTTP_TRANSPORT", "").strip().lower()
        if forced in ("aiohttp", "httpx"):
            return forced  # type: ignore[return-value]
        return "aiohttp" if _aiohttp_usable() else "httpx"
    if transport not in ("aiohttp", "httpx"):
        raise ValueError(f"transport must be 'auto', 'aiohttp' or 'httpx', not {transport!r}")
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
) -> httpx2.AsyncClient:
    """A connection pool for one or more providers (``http_client=``).

    Args:
        limits: connection caps (``max_keepalive_connections`` matters only to ``httpx``).
        timeout: per-request timeouts.
        transport: ``"auto"``, ``"aiohttp"`` or ``"httpx"`` (see :data:`Transport`).

    The caller owns it: a provider given a pool never closes it.
    """
    if resolve_transport(transport) == "aiohttp":
        from ._aiohttp import AiohttpTransport

        return httpx2.AsyncClient(
            transport=AiohttpTransport(limits=limits, verify=ssl_context()),
            timeout=timeout,
            follow_redirects=True,
        )
    return httpx2.AsyncClient(
        limits=limits, timeout=timeout, follow_redirects=True, verify=ssl_context()
    )


def default_pool(
    sdk_client: Callable[..., httpx2.AsyncClient],
    timeout: httpx2.Timeout | float | None,
) -> httpx2.AsyncClient:
    """The pool a provider creates for itself when it is given none.

    On the ``aiohttp`` transport when :func:`resolve_transport` picks it; otherwise the SDK's
    own ``DefaultAsyncHttpxClient`` (``sdk_client``), which keeps its socket options and
    proxy mounts, with fanloop's limits.
    """
    timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
    if resolve_transport() == "aiohttp":
        return create_pool(timeout=timeout, transport="aiohttp")
    return sdk_client(limits=DEFAULT_LIMITS, timeout=timeout, verify=ssl_context())


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, else ``retry-after``.

    ``retry-after`` may be seconds (possibly fractional) or an HTTP date. Returns ``None``
    when neither header is present or parseable; negative waits become ``0``.

    Example:
        >>> parse_retry_after({"retry-after-ms": "250"})
        0.25
        >>> parse_retry_after({"retry-after": "2"})
        2.0
    """
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _should_retry(headers: Mapping[str, str]) -> bool | None:
    value = headers.get("x-should-retry")
    if value == "true":
        return True
    if value == "false":
        return False
    return None


def _request_id(headers: Mapping[str, str]) -> str | None:
    return headers.get("request-id") or headers.get("x-request-id")


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
) -> ProviderError:
    """The fanloop error for an HTTP error response."""
    error = _error_object(body)
    message = str(error.get("message") or fallback_message or f"HTTP {status_code}")
    cls = error_for_status(status_code)
    if status_code in (400, 413, 422):
        cls = _classify(cls, error.get("type"), error.get("code"), message)
    return cls(
        message,
        status_code=status_code,
        request_id=_request_id(headers) or _str_or_none(_body_request_id(body)),
        retry_after=parse_retry_after(headers),
        provider=provider,
        body=body,
        transient=_should_retry(headers),
    )


def _body_request_id(body: Any) -> Any:
    return body.get("request_id") if isinstance(body, dict) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def stream_error(body: Any, *, provider: str, request_id: str | None = None) -> ProviderError:
    """The fanloop error for an error sent inside a 200 stream, classified by its type.

    ``status_code`` stays ``None`` (the HTTP status was a success). An unrecognised type is a
    :class:`~fanloop.errors.ServerError` (transient): the server broke off a response it had
    accepted.
    """
    error = _error_object(body)
    message = str(error.get("message") or "error event in the response stream")
    code = error.get("code")
    cls: type[ProviderError] = ServerError
    if isinstance(code, int) and code >= 400:
        cls = error_for_status(code)
    cls = _classify(cls, error.get("type"), code, message)
    return cls(
        message,
        request_id=request_id or _str_or_none(_body_request_id(body)),
        provider=provider,
        body=body,
    )


def transport_error(
    exc: BaseException, *, provider: str, request_id: str | None = None
) -> ProviderError:
    """The fanloop error for a raw ``httpx2`` transport failure."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderTimeout(f"timed out: {text}", provider=provider, request_id=request_id)
    return ProviderConnectionError(
        f"connection failed: {text}", provider=provider, request_id=request_id
    )


@dataclass(frozen=True, slots=True)
class SDKErrors:
    """The exception classes of one SDK that :class:`HTTPProvider` translates."""

    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]
    base: type[Exception]


class HTTPProvider:
    """Base of the SDK-backed providers: request sending, lifecycle and error translation.

    Subclasses set ``_path`` and ``_api`` and implement ``_encode`` (the request body),
    ``_decode`` (a non-streamed JSON response) and ``_parser`` (a streamed one).
    """

    name: str
    model: str
    _path: ClassVar[str]
    _api: ClassVar[str]

    def __init__(self, client: Any, *, owns_client: bool, errors: SDKErrors) -> None:
        self._client = client
        self._owns_client = owns_client
        self._errors = errors
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pool, if this provider created it.

        A pool passed in as ``http_client`` belongs to the caller and stays open.
        """
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.close()

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

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with one non-streamed call."""
        body = self._encode(request, stream=False)
        response = await self._post(body, stream=False)
        request_id = _request_id(response.headers)
        try:
            data = json.loads(response.content)
        except ValueError as exc:
            raise ResponseInvalid(
                f"response body is not JSON: {exc}", provider=self.name, request_id=request_id
            ) from None
        return self._decode(data, request_id)

    def stream(self, request: ModelRequest) -> ProviderStream:
        """Stream the answer to ``request``.

        Use as ``async with provider.stream(request) as events:``; iterating ``events`` yields
        :data:`~fanloop.events.StreamDelta` events as they arrive, then the final
        :class:`~fanloop.providers.ModelResponse`.
        """
        return ProviderStream(self, request)

    async def _post(self, body: bytes, *, stream: bool) -> httpx2.Response:
        errors = self._errors
        try:
            response: httpx2.Response = await self._client.post(
                self._path, content=body, cast_to=httpx2.Response, stream=stream
            )
        except errors.status as exc:
            raise self._from_status(exc) from None
        except errors.timeout as exc:
            raise ProviderTimeout(
                f"request timed out: {exc}", provider=self.name
            ) from exc.__cause__
        except errors.connection as exc:
            cause = exc.__cause__
            if isinstance(cause, httpx2.TimeoutException):
                raise transport_error(cause, provider=self.name) from cause
            raise ProviderConnectionError(
                f"connection failed: {cause or exc}", provider=self.name
            ) from cause
        except httpx2.TransportError as exc:
            raise transport_error(exc, provider=self.name) from exc
        except errors.base as exc:
            raise ProviderError(str(exc), provider=self.name) from None
        return response

    def _from_status(self, exc: Any) -> ProviderError:
        response: httpx2.Response = exc.response
        try:
            body: Any = response.json()
        except ValueError:
            body = getattr(exc, "body", None)
        error = status_error(
            response.status_code,
            response.headers,
            body,
            provider=self.name,
            fallback_message=str(getattr(exc, "message", "")),
        )
        logger.debug(
            "provider_http_error",
            provider=self.name,
            status_code=error.status_code,
            request_id=error.request_id,
            error_class=type(error).__name__,
        )
        return error


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
        self._response: httpx2.Response | None = None

    async def __aenter__(self) -> ProviderStream:
        body = self._provider._encode(self._request, stream=True)
        self._response = await self._provider._post(body, stream=True)
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

    async def _events(
        self, response: httpx2.Response
    ) -> AsyncIterator[StreamDelta | ModelResponse]:
        provider = self._provider
        request_id = _request_id(response.headers)
        parser = provider._parser(request_id)
        decoder = SSEDecoder()
        try:
            async for chunk in response.aiter_bytes():
                for event, data in decoder.feed(chunk):
                    if parser.done:
                        continue
                    out = parser.feed(event, data)
                    if out is None:
                        continue
                    if type(out) is tuple:
                        for delta in out:
                            yield delta
                    else:
                        yield out  # type: ignore[misc]
        except httpx2.TransportError as exc:
            raise transport_error(exc, provider=provider.name, request_id=request_id) from exc
        except (ValueError, KeyError, TypeError) as exc:  # a malformed frame
            raise ResponseInvalid(
                f"malformed event in the response stream: {exc}",
                provider=provider.name,
                request_id=request_id,
            ) from exc
        yield parser.finish()
