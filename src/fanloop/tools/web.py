"""Web tools: ``web_fetch`` (read a page as text) and ``http_request`` (call an HTTP API).

Both use an :class:`httpx2.AsyncClient`: pass one to share a connection pool (the tool never
closes a client it did not create), or let the tool open one per call. Every call is bounded
in time (``timeout``, for the whole exchange) and in size (``max_bytes`` read from the wire,
``max_chars`` returned to the model).

Neither tool restricts which hosts it reaches: ``web_fetch`` can read services on the local
network, so give an agent it only where that is acceptable.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from html.parser import HTMLParser
from typing import Any

import anyio
import httpx2

from ..errors import ToolError
from ._workspace import arg_str, truncate
from .base import Tool, ToolResult

__all__ = ["HttpRequestTool", "WebFetchTool", "html_to_text"]

_USER_AGENT = "fanloop (+https://github.com/fanloop/fanloop)"

_DROP = frozenset(
    {"script", "style", "noscript", "template", "svg", "head", "title", "iframe", "canvas"}
)
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "ul",
    }
)  # fmt: skip
_LINE = frozenset({"br", "dd", "dt", "li", "tr"})  # start a line, no blank line around
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
     "track", "wbr"}
)  # fmt: skip


class _TextExtractor(HTMLParser):
    """Collects the readable text of an HTML document and its title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._drop_depth = 0
        self._in_title = False
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _DROP:
            if tag not in _VOID:
                self._drop_depth += 1
            return
        if tag == "pre":
            self._pre += 1
        if tag in _BLOCK or tag in _LINE:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        if tag in ("td", "th"):
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _DROP:
            self._drop_depth = max(self._drop_depth - 1, 0)
            return
        if tag == "pre":
            self._pre = max(self._pre - 1, 0)
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        if self._drop_depth:
            return
        self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> tuple[str, str]:
    """The readable text of an HTML document and its title (scripts and styles dropped).

    Example:
        >>> html_to_text("<title>T</title><p>Hello <b>world</b></p><script>x()</script>")
        ('Hello world', 'T')
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    lines = [line.strip() for line in text.splitlines()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return text, " ".join("".join(parser.title).split())


def _check_url(url: str) -> httpx2.URL:
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"Invalid URL {url!r}: {exc}.") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ToolError(f"Invalid URL {url!r}: only absolute http:// and https:// URLs work.")
    return parsed


class _HttpTool(Tool):
    def __init__(
        self,
        *,
        client: httpx2.AsyncClient | None = None,
        timeout: float = 30.0,
        max_bytes: int = 2_000_000,
        max_chars: int = 50_000,
    ) -> None:
        self.client = client
        self.http_timeout = timeout
        self.max_bytes = max_bytes
        self.max_chars = max_chars

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx2.AsyncClient]:
        if self.client is not None:
            yield self.client
            return
        async with httpx2.AsyncClient(
            timeout=self.http_timeout,
            follow_redirects=True,
            max_redirects=10,
            headers={"User-Agent": _USER_AGENT},
        ) as client:
            yield client

    async def _exchange(self, request: httpx2.Request) -> tuple[httpx2.Response, bytes, bool]:
        """Send ``request``; return the response, its body (bounded) and whether it was cut."""
        try:
            with anyio.fail_after(self.http_timeout):
                async with self._client() as client:
                    response = await client.send(request, stream=True)
                    try:
                        body = bytearray()
                        cut = False
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            if len(body) > self.max_bytes:
                                del body[self.max_bytes :]
                                cut = True
                                break
                    finally:
                        await response.aclose()
        except TimeoutError:
            raise ToolError(
                f"{request.method} {request.url} timed out after {self.http_timeout:g} s."
            ) from None
        except httpx2.TimeoutException:
            raise ToolError(f"{request.method} {request.url} timed out.") from None
        except httpx2.TooManyRedirects:
            raise ToolError(f"{request.method} {request.url}: too many redirects.") from None
        except httpx2.HTTPError as exc:
            detail = str(exc) or type(exc).__name__
            raise ToolError(f"{request.method} {request.url} failed: {detail}.") from None
        return response, bytes(body), cut

    @staticmethod
    def _decode(response: httpx2.Response, body: bytes) -> str:
        encoding = response.charset_encoding or "utf-8"
        try:
            return body.decode(encoding, errors="replace")
        except LookupError:
            return body.decode("utf-8", errors="replace")


class WebFetchTool(_HttpTool):
    """``web_fetch``: GET a URL and return its readable text.

    HTML is reduced to its text (scripts, styles and markup dropped); other text types (plain,
    JSON, XML...) are returned as they are; binary content is refused.

    Args:
        client: an :class:`httpx2.AsyncClient` to use (default: a new one per call, following
            redirects).
        timeout: seconds for the whole fetch.
        max_bytes: bytes read from the response at most.
        max_chars: characters returned to the model at most.
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
        url = _check_url(arg_str(kwargs, "url"))
        request = httpx2.Request("GET", url, headers={"User-Agent": _USER_AGENT})
        response, body, cut = await self._exchange(request)
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        head = f"{response.status_code} {response.reason_phrase} {response.url}"
        is_html = ctype in ("text/html", "application/xhtml+xml") or (
            not ctype and body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
        )
        if is_html:
            text, title = html_to_text(self._decode(response, body))
            if title:
                head += f"\nTitle: {title}"
        elif _is_textual(ctype) or (not ctype and b"\x00" not in body[:8192]):
            text = self._decode(response, body)
        else:
            raise ToolError(
                f"{url} returned {ctype or 'binary'} content, which web_fetch cannot show as text."
            )
        if cut:
            text += f"\n[response cut at {self.max_bytes:,} bytes]"
        text = truncate(text, self.max_chars, what="page text")
        return ToolResult(
            f"{head}\n\n{text}" if text else f"{head}\n\n(no text content)",
            is_error=response.status_code >= 400,
            metadata={"status_code": response.status_code, "url": str(response.url)},
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

    Args:
        client: an :class:`httpx2.AsyncClient` to use (default: a new one per call; redirects
            are followed).
        timeout: seconds for the whole exchange.
        max_bytes: bytes read from the response at most.
        max_chars: characters returned to the model at most.
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
            except (TypeError, ValueError):
                lines.append(repr(kwargs["body"]))
        return truncate("\n".join(lines), 20_000, what="preview")

    async def run(self, **kwargs: Any) -> ToolResult:
        """Send the request; see the class docstring."""
        method = arg_str(kwargs, "method").upper()
        allowed = self.parameters["properties"]["method"]["enum"]
        if method not in allowed:
            raise ToolError(f"Unsupported method {method!r}; use one of {', '.join(allowed)}.")
        url = _check_url(arg_str(kwargs, "url"))
        headers = kwargs.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ToolError("Argument 'headers' must be an object of string values.")
        content: bytes | None = None
        headers = {"User-Agent": _USER_AGENT, **headers}
        if kwargs.get("body") is not None:
            try:
                content = json.dumps(kwargs["body"], ensure_ascii=False).encode()
            except (TypeError, ValueError) as exc:
                raise ToolError(f"The body is not JSON-serialisable: {exc}.") from None
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        try:
            request = httpx2.Request(method, url, headers=headers, content=content)
        except (httpx2.HTTPError, ValueError, TypeError) as exc:
            raise ToolError(f"Cannot build the request: {exc}.") from None
        response, body, cut = await self._exchange(request)
        return ToolResult(
            self._render(response, body, cut),
            is_error=response.status_code >= 400,
            metadata={"status_code": response.status_code},
        )

    def _render(self, response: httpx2.Response, body: bytes, cut: bool) -> str:
        lines = [f"HTTP {response.status_code} {response.reason_phrase}"]
        lines += [f"{k}: {v}" for k, v in response.headers.items()]
        text = self._decode(response, body)
        ctype = response.headers.get("content-type", "")
        if "json" in ctype and not cut:
            with suppress(ValueError):
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        elif body and b"\x00" in body[:8192]:
            text = f"({len(body):,} bytes of binary content)"
        if cut:
            text += f"\n[response cut at {self.max_bytes:,} bytes]"
        out = "\n".join(lines) + "\n\n" + (text or "(empty body)")
        return truncate(out, self.max_chars, what="response")
