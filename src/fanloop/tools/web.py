"""Web tools: ``web_fetch`` (read a page as text) and ``http_request`` (call an HTTP API).

Every URL is untrusted (the model writes it, a server redirects it), and so is every byte that
comes back. The boundaries:

* **Where**: only public internet addresses by default. The tools' own client connects through
  :func:`guarded_transport`, which resolves each host once, checks every address it got against
  the :class:`NetworkPolicy` and connects to a checked one (no second look-up for DNS rebinding
  to exploit). Each redirect hop is checked again, at most ``max_redirects`` are followed, and
  headers the caller set are not carried to another origin. Only ``http``/``https`` URLs
  without credentials are accepted. ``allowed_networks``, ``allowed_hosts`` and
  ``allow_private`` (or a shared ``network=NetworkPolicy(...)``) widen the policy.
* **How much**: ``timeout`` bounds the whole call, parsing included; ``max_bytes`` bounds both
  the bytes read from the wire and the bytes after decompression (a gzip bomb is cut at the
  cap, never inflated in full); response headers are capped by the HTTP parser (100 KiB);
  ``max_chars`` bounds the text returned.
* **How long**: the body is decoded and parsed in a worker thread the call can leave
  (:func:`~._blocking.run_blocking`), by a scanner whose time is linear in the capped input.

A ``client=`` you pass is used as it is: it makes its own connections, so the tools can only
check what the URLs show (IP addresses in any spelling, ``localhost`` names, every redirect
hop), and **a host name that resolves to a private address gets through**. Build such a client
on ``guarded_transport(policy)`` to keep the full guard.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from .._lazy import lazy
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._netguard import BlockedAddressError, NetworkPolicy
from ._workspace import arg_str, truncate
from .base import Tool, ToolResult

if TYPE_CHECKING:
    from ._guarded import guarded_transport
    from ._html import html_to_text

__all__ = [
    "BlockedAddressError",
    "HttpRequestTool",
    "NetworkPolicy",
    "WebFetchTool",
    "guarded_transport",
    "html_to_text",
]


# ``html_to_text`` (and the ``regex`` module under it) is imported when a page is rendered;
# ``guarded_transport`` (and httpcore2 under it) when a tool makes its first client.
__getattr__, __dir__ = lazy(__name__, {"html_to_text": "._html", "guarded_transport": "._guarded"})


_USER_AGENT = "fanloop (+https://github.com/fanloop/fanloop)"
_ACCEPT_ENCODING = "gzip, deflate"
_SHOWN_URL = 2_000  # characters of a URL shown in a result or an error
_SHOWN_TITLE = 300
_SHOWN_REASON = 200
# Headers carried to another origin on a redirect; the others (credentials, API keys) are not.
_CROSS_ORIGIN_HEADERS = frozenset(
    {"host", "user-agent", "accept", "accept-encoding", "accept-language", "content-type",
     "content-length", "transfer-encoding", "cache-control", "pragma"}
)  # fmt: skip
# Text codecs that are not charsets, or that take more than linear time.
_REFUSED_CODECS = frozenset(
    {"punycode", "idna", "undefined", "unicode-escape", "raw-unicode-escape"}
)


def _shown(value: object, limit: int = _SHOWN_URL) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_url(url: str | httpx2.URL, policy: NetworkPolicy, *, hop: str = "") -> httpx2.URL:
    """Parse ``url`` and refuse it unless it is http(s), credential-free and allowed by policy.

    ``hop`` prefixes the error message (the redirect that led here).
    """
    bad = f"{hop}Invalid URL {_shown(url)!r}"
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"{bad}: {exc}.") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ToolError(f"{bad}: only absolute http:// and https:// URLs work.")
    if parsed.userinfo:
        raise ToolError(f"{bad}: URLs with credentials (user:password@) are not accepted.")
    try:
        policy.check_url(parsed)
    except BlockedAddressError as exc:
        raise ToolError(f"{hop}{exc}") from None
    return parsed


class _Reply:
    """A finished response: status, headers, final URL and the (capped, decoded) body."""

    def __init__(self, response: httpx2.Response, body: bytes, cut: bool) -> None:
        self.status_code = response.status_code
        self.reason = _shown(response.reason_phrase, _SHOWN_REASON)
        self.url = _shown(response.url)
        self.headers = response.headers
        self.charset = response.charset_encoding
        self.body = body
        self.cut = cut

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        encoding = "utf-8"
        with suppress(LookupError, ValueError):
            name = codecs.lookup(self.charset or "utf-8").name
            if name not in _REFUSED_CODECS:
                encoding = name
        try:
            return self.body.decode(encoding, errors="replace")
        except LookupError:  # not a text encoding
            return self.body.decode("utf-8", errors="replace")


class _HttpTool(Tool):
    def __init__(
        self,
        *,
        client: httpx2.AsyncClient | None = None,
        timeout: float = 30.0,
        max_bytes: int = 2_000_000,
        max_chars: int = 50_000,
        max_redirects: int = 5,
        network: NetworkPolicy | None = None,
        allowed_networks: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        allow_private: bool = False,
    ) -> None:
        shortcuts = (tuple(allowed_networks), tuple(allowed_hosts), allow_private)
        if network is None:
            network = NetworkPolicy(
                allowed_networks=shortcuts[0],
                allowed_hosts=shortcuts[1],
                allow_private=allow_private,
            )
        elif any(shortcuts):
            raise ValueError(
                "Pass either network= or allowed_networks/allowed_hosts/allow_private, not both."
            )
        self.client = client
        self.network = network
        self.http_timeout = timeout
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self.max_redirects = max_redirects

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx2.AsyncClient]:
        if self.client is not None:
            yield self.client
            return
        from anyio import to_thread

        from ._guarded import default_ssl_context, guarded_transport

        context = await to_thread.run_sync(default_ssl_context)  # built once, off the loop
        async with httpx2.AsyncClient(
            transport=guarded_transport(self.network, verify=context),
            timeout=self.http_timeout,
            trust_env=False,
        ) as client:
            yield client

    async def _call(
        self,
        method: str,
        url: httpx2.URL,
        headers: dict[str, str],
        content: bytes | None,
        render: Callable[[Stop, _Reply], ToolResult],
    ) -> ToolResult:
        """Send the request (following checked redirects), read the body and render it.

        The whole of it runs under ``timeout``; rendering runs in a worker thread.
        """
        what = f"{method} {_shown(url)}"
        try:
            with anyio.fail_after(self.http_timeout):
                async with self._client() as client:
                    try:
                        request = client.build_request(
                            method, url, headers=headers, content=content
                        )
                    except (httpx2.HTTPError, ValueError, TypeError) as exc:
                        raise ToolError(f"Cannot build the request: {exc}.") from None
                    reply = await self._exchange(client, request)
                return await run_blocking(render, reply)
        except TimeoutError:
            raise ToolError(f"{what} timed out after {self.http_timeout:g} s.") from None
        except BlockedAddressError as exc:
            raise ToolError(str(exc)) from None
        except httpx2.TimeoutException:
            raise ToolError(f"{what} timed out.") from None
        except httpx2.HTTPError as exc:
            detail = _shown(exc, 500) or type(exc).__name__
            raise ToolError(f"{what} failed: {detail}.") from None

    async def _exchange(self, client: httpx2.AsyncClient, request: httpx2.Request) -> _Reply:
        """Send ``request``, following redirects hop by hop, each one checked; read the body."""
        hops = 0
        while True:
            response = await client.send(request, stream=True, follow_redirects=False)
            next_request = response.next_request
            if next_request is None:
                break
            await response.aclose()
            hops += 1
            if hops > self.max_redirects:
                raise ToolError(
                    f"{request.method} {_shown(request.url)}: too many redirects (more than "
                    f"{self.max_redirects})."
                )
            hop = f"Redirected from {_shown(request.url)}: "
            _check_url(next_request.url, self.network, hop=hop)
            if next_request.url.origin != request.url.origin:
                for name in {k.lower() for k in next_request.headers}:
                    if name not in _CROSS_ORIGIN_HEADERS:
                        del next_request.headers[name]
            request = next_request
        try:
            body, cut = await self._read(response)
        finally:
            await response.aclose()
        return _Reply(response, body, cut)

    async def _read(self, response: httpx2.Response) -> tuple[bytes, bool]:
        """The body, cut at ``max_bytes`` read from the wire or ``max_bytes`` decompressed.

        httpx2 inflates a compressed body at most 1 MiB at a time, so a compression bomb
        costs at most ``max_bytes`` plus 1 MiB before it is cut.
        """
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes or response.num_bytes_downloaded > self.max_bytes:
                del body[self.max_bytes :]
                return bytes(body), True
        return bytes(body), False


class WebFetchTool(_HttpTool):
    """``web_fetch``: GET a URL and return its readable text.

    HTML is reduced to its text (scripts, styles and markup dropped); other text types (plain,
    JSON, XML...) are returned as they are; binary content is refused. Only public internet
    addresses are reachable unless the policy allows more (see the module docstring).

    Args:
        client: an :class:`httpx2.AsyncClient` to use (default: a new one per call, on
            :func:`guarded_transport`). A client you pass makes its own connections: the
            address guard then sees only the URLs, not the addresses host names resolve to.
        timeout: seconds for the whole fetch, parsing included.
        max_bytes: bytes read from the response at most, and bytes after decompression.
        max_chars: characters of page text returned to the model at most.
        max_redirects: redirects followed at most (each one checked like the first URL).
        network: the :class:`NetworkPolicy` deciding which addresses are reachable (default:
            public addresses only); or use the three shortcuts below instead.
        allowed_networks: networks reachable although not public (``["127.0.0.1/32"]``).
        allowed_hosts: host names reachable whatever they resolve to (``["wiki.corp"]``).
        allow_private: reach every address, the host itself and the cloud metadata endpoint
            included. For trusted setups only.
    """

    name = "web_fetch"
    description = (
        "Fetch a web page or document with HTTP GET and return its text (HTML is converted to "
        "readable text). Use for reading documentation, articles and plain-text resources."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "An absolute http:// or https:// URL."},
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    concurrent_safe = True

    async def run(self, **kwargs: Any) -> ToolResult:
        """Fetch the URL; see the class docstring."""
        url = _check_url(arg_str(kwargs, "url"), self.network)
        headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": _ACCEPT_ENCODING}
        return await self._call("GET", url, headers, None, self._render)

    def _render(self, stop: Stop, reply: _Reply) -> ToolResult:
        ctype, body = reply.content_type, reply.body
        head = f"{reply.status_code} {reply.reason} {reply.url}"
        is_html = ctype in ("text/html", "application/xhtml+xml") or (
            not ctype and body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
        )
        if is_html:
            from ._html import html_to_text

            text, title = html_to_text(reply.text(), stop)
            if title:
                head += f"\nTitle: {_shown(title, _SHOWN_TITLE)}"
        elif _is_textual(ctype) or (not ctype and b"\x00" not in body[:8192]):
            text = reply.text()
        else:
            raise ToolError(
                f"{reply.url} returned {_shown(ctype, 100) or 'binary'} content, which "
                "web_fetch cannot show as text."
            )
        stop.check()
        if reply.cut:
            text += f"\n[response cut at {self.max_bytes:,} bytes]"
        text = truncate(text, self.max_chars, what="page text")
        return ToolResult(
            f"{head}\n\n{text}" if text else f"{head}\n\n(no text content)",
            is_error=reply.status_code >= 400,
            metadata={"status_code": reply.status_code, "url": reply.url},
        )


def _is_textual(ctype: str) -> bool:
    return (
        ctype.startswith("text/")
        or ctype.endswith(("+json", "+xml"))
        or ctype
        in ("application/json", "application/xml", "application/javascript", "application/x-yaml")
    )


class HttpRequestTool(_HttpTool):
    """``http_request``: call an HTTP API with any method, headers and JSON body (dangerous).

    Reaches public internet addresses only unless the policy allows more; headers the model
    sets are not carried to another origin on a redirect (see the module docstring).

    Args:
        client: an :class:`httpx2.AsyncClient` to use (default: a new one per call, on
            :func:`guarded_transport`). A client you pass makes its own connections: the
            address guard then sees only the URLs, not the addresses host names resolve to.
        timeout: seconds for the whole exchange.
        max_bytes: bytes read from the response at most, and bytes after decompression.
        max_chars: characters returned to the model at most.
        max_redirects: redirects followed at most (each one checked like the first URL).
        network: the :class:`NetworkPolicy` deciding which addresses are reachable (default:
            public addresses only); or use the three shortcuts below instead.
        allowed_networks: networks reachable although not public (``["127.0.0.1/32"]``).
        allowed_hosts: host names reachable whatever they resolve to (``["api.corp"]``).
        allow_private: reach every address, the host itself and the cloud metadata endpoint
            included. For trusted setups only.
    """

    name = "http_request"
    description = (
        "Send an HTTP request to a JSON API: any method, optional headers and a JSON body. "
        "Returns the status, the response headers and the body (JSON pretty-printed)."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "method": {
                "type": "string",
                "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                "description": "The HTTP method.",
            },
            "url": {"type": "string", "description": "An absolute http:// or https:// URL."},
            "headers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Request headers.",
            },
            "body": {"description": "A JSON value sent as the request body (application/json)."},
        },
        "required": ["method", "url"],
        "additionalProperties": False,
    }
    dangerous = True

    def preview(self, **kwargs: Any) -> str:
        """The request as it would go out: method, URL, headers and JSON body."""
        lines = [f"{str(kwargs.get('method', '?')).upper()} {kwargs.get('url', '?')}"]
        headers = kwargs.get("headers")
        if isinstance(headers, dict):
            lines += [f"{k}: {v}" for k, v in headers.items()]
        if "body" in kwargs and kwargs["body"] is not None:
            lines.append("")
            try:
                lines.append(json.dumps(kwargs["body"], indent=2, ensure_ascii=False))
            except (TypeError, ValueError, RecursionError):
                lines.append(repr(kwargs["body"]))
        return truncate("\n".join(lines), 20_000, what="preview")

    async def run(self, **kwargs: Any) -> ToolResult:
        """Send the request; see the class docstring."""
        method = arg_str(kwargs, "method").upper()
        allowed = self.parameters["properties"]["method"]["enum"]
        if method not in allowed:
            raise ToolError(
                f"Unsupported method {_shown(method, 50)!r}; use one of {', '.join(allowed)}."
            )
        url = _check_url(arg_str(kwargs, "url"), self.network)
        headers = kwargs.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ToolError("Argument 'headers' must be an object of string values.")
        content: bytes | None = None
        headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": _ACCEPT_ENCODING, **headers}
        if kwargs.get("body") is not None:
            try:
                content = json.dumps(kwargs["body"], ensure_ascii=False).encode()
            except (TypeError, ValueError, RecursionError) as exc:
                raise ToolError(f"The body is not JSON-serialisable: {exc}.") from None
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        return await self._call(method, url, headers, content, self._render)

    def _render(self, stop: Stop, reply: _Reply) -> ToolResult:
        lines = [f"HTTP {reply.status_code} {reply.reason}"]
        lines += [f"{k}: {v}" for k, v in reply.headers.items()]
        text = reply.text()
        if "json" in reply.headers.get("content-type", "") and not reply.cut:
            with suppress(ValueError, RecursionError):
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        elif reply.body and b"\x00" in reply.body[:8192]:
            text = f"({len(reply.body):,} bytes of binary content)"
        stop.check()
        if reply.cut:
            text += f"\n[response cut at {self.max_bytes:,} bytes]"
        out = "\n".join(lines) + "\n\n" + (text or "(empty body)")
        return ToolResult(
            truncate(out, self.max_chars, what="response"),
            is_error=reply.status_code >= 400,
            metadata={"status_code": reply.status_code},
        )
