"""Where a provider sends its requests, and with which headers: worked out once, at construction.

Two kinds of :class:`~fanloop.providers._http.Endpoint`: a :class:`WireEndpoint` (fanloop's
own) and an :class:`SDKEndpoint` (a vendor SDK client the user passed as ``client=``).

A provider given no SDK client sends its prebuilt JSON straight to the connection pool: the
vendor SDK is not imported at all (``import anthropic`` alone takes a second or more). The
authentication, base URL and headers are the ones the SDK would use, read from the same
arguments and environment variables (see :func:`anthropic_endpoint` and
:func:`openai_endpoint`). On an ``aiohttp`` pool a request is one call into ``aiohttp`` with
the URL, headers and timeout prepared here; on an ``httpx`` pool (or a pool the user made) it
is one ``build_request`` and one ``send``.

A provider given an SDK client sends the same JSON through the client's low-level ``post()``
(its own pool, authentication and, on Vertex AI and Bedrock, request signing) and translates
the SDK's exceptions into fanloop's (:class:`SDKEndpoint`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx2

from .._version import __version__
from ..errors import ConfigurationError, ProviderConnectionError, ProviderError, ProviderTimeout
from ._connect import clip
from ._http import (
    DEFAULT_TIMEOUT,
    MALFORMED,
    MAX_ERROR_BODY_BYTES,
    MAX_ERROR_MESSAGE_CHARS,
    HTTPProvider,
    Response,
    SDKErrors,
    Transport,
    create_pool,
    direct_transport,
    log_status,
    malformed,
    no_trust_context,
    ssl_context,
    status_error,
    transport_error,
)
from ._pools import LoopPools
from ._wire import loads

__all__ = [
    "ANTHROPIC_API_VERSION",
    "SDKEndpoint",
    "TRACE_HEADERS",
    "WireEndpoint",
    "anthropic_endpoint",
    "from_sdk_client",
    "openai_endpoint",
    "openai_sdk_errors",
    "sdk_key_source",
]

ANTHROPIC_API_VERSION = "2026-10-21"
"""The ``anthropic-version`` header the ``anthropic`` SDK sends (``anthropic._constants``)."""

ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"

TRACE_HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar(
    "fanloop_trace_headers", default=None
)
"""Headers added to the model requests sent from the current context: the W3C
``traceparent``/``tracestate`` of the model call's span, set by
``OpenTelemetryObserver(propagate_to_requests=True)`` (:mod:`fanloop.otel`) while the call
is under way. Unset (``None``): nothing is added."""

_USER_AGENT = f"fanloop/{__version__}"
_HTTPX_DEFAULT_TIMEOUT = httpx2.Timeout(5.0)


@dataclass(slots=True)
class WireEndpoint:
    """One provider's request target: URL, headers, timeout and connection pool(s).

    Attributes:
        base_url: the API root, ending in ``/`` (as the SDKs keep it).
        url: the URL every request is posted to.
        headers: every request's headers (authentication included).
        timeout: the per-request timeout.
        borrowed: the pool passed as ``http_client`` (never closed here), else ``None``.
        pools: the provider's own pools, one per event loop, when nothing was borrowed.
        wire_headers: ``headers`` with what an ``httpx2`` client would add (``Accept-Encoding``),
            for requests sent straight to an ``aiohttp`` pool.
        wire_timeout: ``timeout`` as an ``httpx2.Timeout``.
    """

    base_url: httpx2.URL
    url: str
    headers: dict[str, str]
    timeout: httpx2.Timeout | float | None
    borrowed: httpx2.AsyncClient | None
    pools: LoopPools | None
    wire_headers: dict[str, str]
    wire_timeout: httpx2.Timeout

    def post(self, provider: HTTPProvider, body: bytes, *, stream: bool) -> Awaitable[Response]:
        """POST ``body`` (always streamed: the provider reads the body up to its cap): an
        awaitable of the response. When this loop's pool is open and sends over ``aiohttp``,
        it is the transport's own (a run waiting for the response holds no frame of this
        method).

        Raises:
            httpx2.HTTPError: the request failed (when awaited).
            RuntimeError: the pool is closed (:meth:`refused` names the error to raise).
        """
        pool = self.borrowed
        if pool is None:
            assert self.pools is not None
            pool = self.pools.ready()
        if pool is None or direct_transport(pool) is None:
            return self._post(body)
        return self.send(pool, body)

    def refused(self, provider: HTTPProvider, exc: RuntimeError) -> Exception:
        """The error for a request that failed with ``exc`` once under way (the pool closed
        while it waited): a :class:`ConfigurationError` for a closed pool, else ``exc``."""
        pool = self.borrowed
        if pool is None and self.pools is not None:
            pool = self.pools.current()
        if pool is not None and pool.is_closed:
            return ConfigurationError(
                f"the http_client given to {type(provider).__name__} is closed"
            )
        return exc

    async def _post(self, body: bytes) -> Response:
        """:meth:`post` through the ``httpx2`` client, or once this loop's pool is opened."""
        return await self.send(await self.pool(), body)

    async def pool(self) -> httpx2.AsyncClient:
        """The pool for a request sent from the running event loop."""
        if self.borrowed is not None:
            return self.borrowed
        assert self.pools is not None
        return await self.pools.get()

    def send(self, pool: httpx2.AsyncClient, body: bytes) -> Awaitable[Response]:
        """POST ``body`` through ``pool``: an awaitable of the response, its body not yet read.

        On a :func:`~fanloop.providers._http.create_pool` pool of the ``aiohttp`` transport the
        awaitable is the transport's own ``post()`` (no ``httpx2`` request or response is
        built, and a run waiting for a connection holds no frame of this method).

        Raises:
            httpx2.HTTPError: the request failed (when awaited).
            RuntimeError: ``pool`` is closed.
        """
        wire = direct_transport(pool)
        trace = TRACE_HEADERS.get()
        if wire is None:
            return self._send_httpx(pool, body, trace)
        if pool.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        headers = self.wire_headers if trace is None else {**self.wire_headers, **trace}
        return wire.post(self.url, headers, body, self.wire_timeout)

    async def _send_httpx(
        self, pool: httpx2.AsyncClient, body: bytes, trace: Mapping[str, str] | None = None
    ) -> Response:
        headers = self.headers if trace is None else {**self.headers, **trace}
        request = pool.build_request(
            "POST", self.url, content=body, headers=headers, timeout=self.timeout
        )
        response: httpx2.Response = await pool.send(request, stream=True)
        return response

    @property
    def _client(self) -> httpx2.AsyncClient | None:
        """The pool the running loop uses, if there is one yet (as ``sdk_client._client``)."""
        if self.borrowed is not None:
            return self.borrowed
        assert self.pools is not None
        return self.pools.current()

    async def aclose(self) -> None:
        """Close the provider's own pools (a borrowed one stays open)."""
        if self.pools is not None:
            await self.pools.aclose()

    def __repr__(self) -> str:  # never the headers: they carry the key
        return f"WireEndpoint({self.url!r})"


def _endpoint(
    base_url: str,
    path: str,
    headers: dict[str, str],
    timeout: httpx2.Timeout | float | None,
    http_client: httpx2.AsyncClient | None,
    vendor: str,
    transport: Transport,
) -> WireEndpoint:
    try:
        url = httpx2.URL(base_url)
    except (httpx2.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"{vendor} base_url {base_url!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(
            f"{vendor} base_url must be an http:// or https:// URL with a host, not {base_url!r}"
        )
    raw, sep, query = url.raw_path.partition(b"?")
    if not raw.endswith(b"/"):
        url = url.copy_with(raw_path=raw + b"/" + sep + query)
        raw += b"/"
    target = url.copy_with(raw_path=raw + path.lstrip("/").encode() + sep + query)
    if transport not in ("auto", "aiohttp", "httpx"):
        raise ConfigurationError(
            f"transport must be 'auto', 'aiohttp' or 'httpx', not {transport!r}"
        )
    if http_client is not None and not isinstance(http_client, httpx2.AsyncClient):
        raise ConfigurationError(
            f"http_client must be an httpx2.AsyncClient, not {type(http_client).__name__}"
        )
    if timeout is None:
        # As the SDKs do: a borrowed pool's own timeout, unless it is httpx2's 5 s default.
        own = http_client.timeout if http_client is not None else None
        timeout = own if own is not None and own != _HTTPX_DEFAULT_TIMEOUT else DEFAULT_TIMEOUT
    pools = None
    if http_client is None:
        pool_timeout = timeout
        https = url.scheme == "https"

        def factory() -> httpx2.AsyncClient:
            # A plain-http endpoint needs no trust store (building fanloop's costs ~40 ms at
            # start-up): its pools trust no certificate, so a redirect to https fails closed.
            verify = ssl_context() if https else no_trust_context()
            return create_pool(timeout=pool_timeout, transport=transport, verify=verify)

        pools = LoopPools(factory)
    wire_headers = dict(headers)
    if not any(name.lower() == "accept-encoding" for name in headers):
        wire_headers["Accept-Encoding"] = "gzip, deflate"
    return WireEndpoint(
        base_url=url,
        url=str(target),
        headers=headers,
        timeout=timeout,
        borrowed=http_client,
        pools=pools,
        wire_headers=wire_headers,
        wire_timeout=timeout if isinstance(timeout, httpx2.Timeout) else httpx2.Timeout(timeout),
    )


def _custom_headers(variable: str) -> dict[str, str]:
    """``Name: value`` lines of an environment variable (the SDKs' ``*_CUSTOM_HEADERS``)."""
    parsed: dict[str, str] = {}
    for line in os.environ.get(variable, "").split("\n"):
        name, colon, value = line.partition(":")
        if colon and name.strip():
            parsed[name.strip()] = value.strip()
    return parsed


def _base_headers(key: str | None) -> dict[str, str]:
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        "User-Agent": _USER_AGENT,
        # What the SDKs send on a first attempt: their retries are off, fanloop owns them.
        "X-Stainless-Retry-Count": "0",
    }
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _merge(headers: dict[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    if extra:
        lowered = {name.lower() for name in extra}
        headers = {k: v for k, v in headers.items() if k.lower() not in lowered}
        headers.update(extra)
    return headers


def anthropic_endpoint(
    *,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: httpx2.Timeout | float | None,
    default_headers: Mapping[str, str] | None,
    transport: Transport = "auto",
) -> tuple[WireEndpoint, str]:
    """The Messages API endpoint, and where its key came from (for error messages).

    The key: ``api_key``, else ``ANTHROPIC_API_KEY``, else ``ANTHROPIC_AUTH_TOKEN``, sent as
    ``Authorization: Bearer`` (as the SDK does). The base URL: ``base_url``, else
    ``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``. Headers: ``anthropic-version``,
    then ``ANTHROPIC_CUSTOM_HEADERS``, then ``default_headers``.

    Raises:
        ConfigurationError: no key, or a base URL that is not an http(s) URL.
    """
    source = "the api_key passed to AnthropicProvider"
    if api_key is None:
        for variable in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
            api_key = os.environ.get(variable) or None
            if api_key:
                source = f"the key in {variable}"
                break
        else:
            raise ConfigurationError(
                "AnthropicProvider needs an API key: pass api_key= or set ANTHROPIC_API_KEY"
            )
    headers = _base_headers(api_key)
    headers["anthropic-version"] = ANTHROPIC_API_VERSION
    headers = _merge(headers, _custom_headers("ANTHROPIC_CUSTOM_HEADERS"))
    headers = _merge(headers, default_headers)
    url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL
    return _endpoint(
        url, "/v1/messages", headers, timeout, http_client, "Anthropic", transport
    ), source


def openai_sdk_errors() -> SDKErrors:
    """The ``openai`` SDK's error classes, for a provider built on an SDK client (both OpenAI
    wires: Chat Completions and Responses)."""
    import openai

    return SDKErrors(
        status=openai.APIStatusError,
        timeout=openai.APITimeoutError,
        connection=openai.APIConnectionError,
        base=openai.OpenAIError,
    )


def openai_endpoint(
    *,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: httpx2.Timeout | float | None,
    default_headers: Mapping[str, str] | None,
    name: str,
    transport: Transport = "auto",
    path: str = "/chat/completions",
    owner: str = "OpenAIProvider",
) -> tuple[WireEndpoint, str]:
    """An OpenAI endpoint (``path``: Chat Completions unless told), and where its key came
    from (for error messages; ``owner`` is the provider class they name).

    The key: ``api_key``, else ``OPENAI_API_KEY``, sent as ``Authorization: Bearer``. The base
    URL: ``base_url``, else ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``. For the
    plain provider (``name="openai"``), ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` and
    ``OPENAI_CUSTOM_HEADERS`` add headers, as the SDK does; presets (OpenRouter, vLLM,
    Ollama) do not send OpenAI's environment to another server. ``default_headers`` come last.

    Raises:
        ConfigurationError: no key, or a base URL that is not an http(s) URL.
    """
    source = f"the api_key passed to {owner}"
    if api_key is None:
        api_key = os.environ.get("OPENAI_API_KEY") or None
        if not api_key:
            raise ConfigurationError(
                f"{owner} needs an API key: pass api_key= or set OPENAI_API_KEY"
            )
        source = "the key in OPENAI_API_KEY"
    headers = _base_headers(api_key)
    if name == "openai":
        if organization := os.environ.get("OPENAI_ORG_ID"):
            headers["OpenAI-Organization"] = organization
        if project := os.environ.get("OPENAI_PROJECT_ID"):
            headers["OpenAI-Project"] = project
        headers = _merge(headers, _custom_headers("OPENAI_CUSTOM_HEADERS"))
    headers = _merge(headers, default_headers)
    url = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
    return _endpoint(url, path, headers, timeout, http_client, "OpenAI", transport), source


# The SDK clients of Azure OpenAI, Vertex AI and Bedrock: they read the model from the body.
_PLATFORM_CLIENTS = ("openai.lib.azure", "anthropic.lib.vertex", "anthropic.lib.bedrock")


class SDKEndpoint:
    """A vendor SDK client the user passed as ``client=``: requests go through its ``post()``,
    and its exceptions come out as fanloop's.

    Attributes:
        sdk: the client (with fanloop's options: its retries off); never closed here.
        errors: the SDK's exception classes.
        path: the API path posted to (relative to the client's base URL).
        json_body: whether the client gets the body as JSON data (``body=``) rather than
            bytes: the clients of the cloud platforms (Azure, Vertex AI, Bedrock) route and sign
            by the body.
    """

    __slots__ = ("errors", "json_body", "path", "sdk")

    def __init__(self, sdk: Any, errors: SDKErrors, path: str) -> None:
        self.sdk = sdk
        self.errors = errors
        self.path = path
        self.json_body = type(sdk).__module__.startswith(_PLATFORM_CLIENTS)

    def refused(self, provider: HTTPProvider, exc: RuntimeError) -> Exception:
        """``exc`` itself (the SDK client reports its own state)."""
        return exc

    async def post(self, provider: HTTPProvider, body: bytes, *, stream: bool) -> Response:
        """POST ``body`` through the SDK client.

        Raises:
            ProviderError: what the SDK raised, translated (an HTTP error status included:
                the SDK raises on any status but 2xx).
            httpx2.TransportError: a connection failure the SDK let through.
        """
        errors = self.errors
        name = provider.name
        try:
            if self.json_body:
                response: httpx2.Response = await self.sdk.post(
                    self.path, body=loads(body), cast_to=httpx2.Response, stream=stream
                )
            else:
                response = await self.sdk.post(
                    self.path, content=body, cast_to=httpx2.Response, stream=stream
                )
        except errors.status as exc:
            raise _status_error(exc, provider) from None
        except errors.timeout as exc:
            raise ProviderTimeout(f"request timed out: {exc}", provider=name) from exc.__cause__
        except errors.connection as exc:
            cause = exc.__cause__
            if isinstance(cause, httpx2.TransportError):
                raise transport_error(cause, provider=name) from cause
            raise ProviderConnectionError(
                f"connection failed: {clip(str(cause or exc), 300)}", provider=name
            ) from cause
        except httpx2.DecodingError as exc:
            # The SDK reads an error body whole; one that does not decode (or lists too many
            # codings) fails inside its handling of the status.
            failed = exc.__context__
            if failed is not None and not isinstance(failed, httpx2.HTTPStatusError):
                failed = failed.__context__  # the decoder's own error in between
            if isinstance(failed, httpx2.HTTPStatusError):
                error = status_error(
                    failed.response.status_code,
                    failed.response.headers,
                    None,
                    provider=name,
                    key_source=provider._key_source,
                )
                log_status(error)
                raise error from None
            raise malformed(
                exc, "the response cannot be decoded", provider=name, request_id=None
            ) from None
        except errors.base as exc:
            raise ProviderError(clip(str(exc), MAX_ERROR_MESSAGE_CHARS), provider=name) from None
        return response

    async def aclose(self) -> None:
        """Nothing: the client is the caller's."""


def _status_error(exc: Any, provider: HTTPProvider) -> ProviderError:
    """The error for an SDK's status exception ``exc``, from its response and body."""
    response: httpx2.Response = exc.response
    body: Any = getattr(exc, "body", None)
    try:
        content = response.content
    except httpx2.ResponseNotRead:
        content = b""
    if len(content) > MAX_ERROR_BODY_BYTES:  # read whole by a pool without the hook
        body = None
    elif content:
        with contextlib.suppress(ProviderError, *MALFORMED):
            body = loads(content)
    error = status_error(
        response.status_code,
        response.headers,
        body,
        provider=provider.name,
        fallback_message=str(getattr(exc, "message", "")),
        key_source=provider._key_source,
    )
    log_status(error)
    return error


def sdk_key_source(key: object, variables: tuple[str, ...], owner: str) -> str:
    """Where the key of an SDK client passed as ``client=`` came from, in words."""
    for variable in variables:
        if isinstance(key, str) and key and key == os.environ.get(variable):
            return f"the key in {variable} (read by the client passed to {owner})"
    return f"the credentials of the client passed to {owner}"


def from_sdk_client(
    client: Any,
    sdk_class: type[Any],
    *,
    errors: SDKErrors,
    path: str,
    key: Callable[[Any], object],
    variables: tuple[str, ...],
    owner: str,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: float | httpx2.Timeout | None,
    default_headers: dict[str, str] | None,
) -> tuple[SDKEndpoint, str]:
    """The endpoint of an SDK client passed as ``client=`` (``errors``: its exception
    classes; ``path``: the API path), the client with fanloop's options (its retries off),
    and where its key came from (``key`` reads it from the client; see
    :func:`sdk_key_source`).

    Raises:
        ConfigurationError: ``client`` is not a ``sdk_class``, or options that the client
            brings itself (key, base URL, pool) were given too.
    """
    if api_key is not None or base_url is not None or http_client is not None:
        raise ConfigurationError(
            "client= brings its own key, base URL and pool: leave out api_key=, base_url= "
            "and http_client= (give them to the client)"
        )
    sdk: Any = client
    if not isinstance(sdk, sdk_class):
        name = f"{sdk_class.__module__.split('.')[0]}.{sdk_class.__name__}"
        raise ConfigurationError(f"client= takes an {name}, not {type(client).__name__}")
    options: dict[str, Any] = {"max_retries": 0}
    if timeout is not None:
        options["timeout"] = timeout
    if default_headers:
        options["default_headers"] = default_headers
    endpoint = SDKEndpoint(sdk.with_options(**options), errors, path)
    return endpoint, sdk_key_source(key(sdk), variables, owner)
