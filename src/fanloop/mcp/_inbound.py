"""What an MCP server sends, checked before the MCP SDK decodes and validates it.

The SDK decodes every message on the event loop, in one call that holds the interpreter lock
throughout: an 11 MB tool listing holds every task of the process for over a second, and a
worker thread would not help (it holds the same lock). So a connection's messages pass an
:class:`Inbound` first:

- a message over ``max_message_bytes`` is never decoded;
- a large one (over :data:`BIG_MESSAGE`) is decoded in a worker thread, by the standard
  library's decoder with its structure walked in Python (its strings and numbers still in C):
  the thread lets go of the interpreter lock every few milliseconds, so the event loop keeps
  running while it works, and the run can leave it;
- an answer to a ``tools/list`` request over ``max_listing_bytes``, or listing more than
  ``max_tools`` tools, is replaced by an error answer that names the limit, so the SDK never
  validates it (and neither the tools nor the bytes reach a model request).

Over stdio, fanloop reads the server's stdout itself (:mod:`fanloop.mcp._stdio`) and passes
each line through :meth:`Inbound.decode`. Over HTTP, :meth:`Inbound.on_response` is a response
hook of the connection's ``httpx2`` client: it bounds each response body (content-encoding
decoded here, a MiB at a time) and checks a listing in a worker thread before the SDK reads it.
"""

from __future__ import annotations

import json
import json.scanner
import re
import zlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import httpx2
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from ._limits import MCPLimits

__all__ = ["BIG_MESSAGE", "Inbound", "Refused", "decode_in_steps"]

BIG_MESSAGE = 64 << 10
"""Messages longer than this are decoded in a worker thread."""

_DECODE_CHUNK = 1 << 20
_ID = rb'(-?\d{1,20}|"[^"\\]{0,200}")'
_HEAD = re.compile(
    rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID + rb'\s*,\s*"result"\s*:'
)
_TAIL = re.compile(rb'"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*$")
_SSE_EVENTS = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_SSE_LINES = re.compile(rb"\r\n|\n|\r")


class Refused(Exception):
    """A message from the server broke a limit of :class:`~fanloop.mcp.MCPLimits`.

    Attributes:
        limit: the name of the limit (``"max_tools"``, ``"max_listing_bytes"``, ...).
    """

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class _RefusedBody(Refused, httpx2.StreamError):
    """A response body the SDK reads as a failed answer to its request (JSON)."""

    def __init__(self, message: str, *, limit: str) -> None:
        httpx2.StreamError.__init__(self, message)
        self.limit = limit


class _RefusedEvents(Refused, httpx2.SSEError):
    """A response stream the SDK reads as a failed answer to its request (SSE)."""

    def __init__(self, message: str, *, limit: str) -> None:
        httpx2.SSEError.__init__(self, message)
        self.limit = limit


def decode_in_steps(data: bytes) -> Any:
    """``json.loads(data)``, with the structure walked by Python code, so that a worker thread
    doing it gives the interpreter lock back every few milliseconds.

    Raises:
        ValueError: not UTF-8, not JSON, or nested too deeply to decode.
    """
    decoder = json.JSONDecoder()
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        return decoder.decode(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


class Inbound:
    """One connection's checks on what its server sends (see the module docstring).

    Attributes:
        limits: the server's :class:`~fanloop.mcp.MCPLimits`.
        server: the server's display name, for messages.
        listing_bytes: bytes of tool listing pages received so far on this connection.
        refused: the last limit a message broke, for the caller to report (``None``: none).
    """

    def __init__(self, limits: MCPLimits, server: str) -> None:
        self.limits = limits
        self.server = server
        self.listing_bytes = 0
        self.refused: Refused | None = None
        self._listings: set[Any] = set()

    def reset(self) -> None:
        """A new session starts (request ids start over)."""
        self._listings.clear()

    def sent(self, message: JSONRPCMessage) -> None:
        """Note a message the client sends (the answers to ``tools/list`` are checked)."""
        if isinstance(message, JSONRPCRequest) and message.method == "tools/list":
            self._listings.add(message.id)

    def take_refused(self) -> Refused | None:
        """The last limit broken, once."""
        refused, self.refused = self.refused, None
        return refused

    def too_large(self) -> Refused:
        """The refusal of a message over ``max_message_bytes`` (noted as :attr:`refused`)."""
        limit = self.limits.max_message_bytes
        refused = Refused(
            f"MCP server {self.server!r} sent a message of over {limit:,} bytes; raise "
            f"MCPLimits(max_message_bytes=...) to accept it",
            limit="max_message_bytes",
        )
        self.refused = refused
        return refused

    # -- stdio: one line, one message ------------------------------------------------------

    async def decode(self, line: bytes) -> SessionMessage | Exception:
        """One line from the server as the SDK's message (or the error that decoding it
        raised, which the SDK logs and skips). A large line is decoded in a worker thread."""
        if len(line) <= BIG_MESSAGE:
            return self._decode(line, steps=False)
        if len(line) > self.limits.max_listing_bytes and self._listings:
            refusal = self._refuse_unread(line)
            if refusal is not None:
                return refusal
        return await anyio.to_thread.run_sync(self._decode, line, True, abandon_on_cancel=True)

    def _refuse_unread(self, line: bytes) -> SessionMessage | None:
        """The error answer to a listing over ``max_listing_bytes``, when the line's envelope
        says which request it answers (its first or last bytes): it is then not decoded."""
        found = _HEAD.match(line, 0, 512) or _TAIL.search(line, max(0, len(line) - 512))
        if found is None:
            return None
        request_id = json.loads(found.group(1))
        if request_id not in self._listings:
            return None
        self._listings.discard(request_id)
        self.listing_bytes += len(line)
        refused = self.refused = self._long_listing(len(line))
        return SessionMessage(
            JSONRPCError(
                jsonrpc="2.0",
                id=request_id,
                error=ErrorData(code=INTERNAL_ERROR, message=str(refused)),
            )
        )

    def _decode(self, line: bytes, steps: bool) -> SessionMessage | Exception:
        try:
            if steps:
                message = jsonrpc_message_adapter.validate_python(
                    decode_in_steps(line), by_name=False
                )
            else:
                message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:  # pydantic's ValidationError and JSON errors are ValueErrors
            return exc
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id in self._listings:
            self._listings.discard(message.id)
            if isinstance(message, JSONRPCResponse):
                refused = self._check_listing(len(line), message.result)
                if refused is not None:
                    self.refused = refused
                    message = JSONRPCError(
                        jsonrpc="2.0",
                        id=message.id,
                        error=ErrorData(code=INTERNAL_ERROR, message=str(refused)),
                    )
        return SessionMessage(message)

    def _check_listing(self, size: int, result: Any) -> Refused | None:
        """Why a ``tools/list`` answer of ``size`` bytes is refused, or ``None``."""
        limits = self.limits
        self.listing_bytes += size
        if size > limits.max_listing_bytes:
            return self._long_listing(size)
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list) and len(tools) > limits.max_tools:
            return Refused(
                f"MCP server {self.server!r} lists {len(tools):,} tools "
                f"(MCPLimits(max_tools={limits.max_tools})); raise it to load them (and pick "
                "the ones to use with include=)",
                limit="max_tools",
            )
        return None

    def _long_listing(self, size: int) -> Refused:
        return Refused(
            f"MCP server {self.server!r} sent a tool listing of {size:,} bytes "
            f"(MCPLimits(max_listing_bytes={self.limits.max_listing_bytes:,})); raise it to "
            "load this server's tools",
            limit="max_listing_bytes",
        )

    # -- HTTP: a response hook --------------------------------------------------------------

    async def on_response(self, response: httpx2.Response) -> None:
        """``httpx2`` response hook: bound the body of every answer to a POST (the GET event
        stream is bounded per event by the SDK), and check a listing before it is read."""
        request = response.request
        if request.method != "POST":
            return
        codings = [
            c.strip().lower()
            for value in response.headers.get_list("content-encoding")
            for c in value.split(",")
            if c.strip() and c.strip().lower() != "identity"
        ]
        events = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        response.stream = _Body(self, response.stream, codings, _is_listing(request), events)
        if "content-encoding" in response.headers:
            del response.headers["content-encoding"]

    def check_listing_body(self, body: bytes, events: bool) -> Refused | None:
        """Why a ``tools/list`` answer is refused, or ``None`` (run in a worker thread)."""
        payloads = _sse_data(body) if events else [body]
        for payload in payloads:
            try:
                message = decode_in_steps(payload)
            except ValueError:
                continue  # the SDK reports what it cannot decode
            if isinstance(message, dict) and "result" in message:
                return self._check_listing(len(payload), message["result"])
        return None


def _is_listing(request: httpx2.Request) -> bool:
    method = request.headers.get("mcp-method")
    if method is not None:
        return method == "tools/list"
    try:
        content = request.content
    except httpx2.RequestNotRead:
        return False
    if len(content) > BIG_MESSAGE:
        return False
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("method") == "tools/list"


def _sse_data(body: bytes) -> list[bytes]:
    """The ``data`` of each event of a ``text/event-stream`` body."""
    out = []
    for event in _SSE_EVENTS.split(body):
        data = [
            line[5:].removeprefix(b" ")
            for line in _SSE_LINES.split(event)
            if line.startswith(b"data:")
        ]
        if data:
            out.append(b"\n".join(data))
    return out


class _Body(httpx2.AsyncByteStream):
    """A response body, decoded here and bounded: over the limit, reading it fails (the SDK
    then fails the request it answers). An answer to ``tools/list`` is checked before the SDK
    reads it: a JSON body whole, an event stream event by event."""

    def __init__(
        self, inbound: Inbound, stream: Any, codings: list[str], listing: bool, events: bool
    ) -> None:
        self._inbound = inbound
        self._stream = stream
        self._codings = codings
        self._listing = listing
        self._events = events

    def _refuse(self, message: str, limit: str) -> Refused:
        cls = _RefusedEvents if self._events else _RefusedBody
        refused = cls(message, limit=limit)
        self._inbound.refused = refused
        return refused

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not self._listing:
            async for piece in self._pieces():
                yield piece
            return
        pending = bytearray()
        async for piece in self._pieces():
            pending += piece
            while self._events and (end := _SSE_EVENTS.search(pending)) is not None:
                event = bytes(pending[: end.end()])
                del pending[: end.end()]
                yield await self._checked(event)
        if pending:
            yield await self._checked(bytes(pending))

    async def _checked(self, data: bytes) -> bytes:
        """``data`` (a JSON body, or one event) once a listing in it passed the checks."""
        refused = await anyio.to_thread.run_sync(
            self._inbound.check_listing_body, data, self._events, abandon_on_cancel=True
        )
        if refused is not None:
            raise self._refuse(str(refused), refused.limit)
        return data

    async def _pieces(self) -> AsyncIterator[bytes]:
        """The body, decoded a MiB at a time (a small bomb never becomes a big block), up to
        the limit; past it, the body is refused."""
        inbound = self._inbound
        limits = inbound.limits
        limit = limits.max_listing_bytes if self._listing else limits.max_message_bytes
        decoder: Any = None
        if self._codings:
            coding = self._codings[0]
            if len(self._codings) > 1 or coding not in ("gzip", "x-gzip", "deflate"):
                raise self._refuse(
                    f"MCP server {inbound.server!r} sent a body in an encoding fanloop does "
                    f"not decode ({', '.join(self._codings)})",
                    "content-encoding",
                )
            decoder = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in coding else 32))
        left = limit
        async for raw in self._stream:
            pending = raw
            while pending:
                if decoder is None:
                    piece, pending = pending, b""
                else:
                    try:
                        piece = decoder.decompress(pending, _DECODE_CHUNK)
                    except zlib.error as exc:
                        raise self._refuse(
                            f"MCP server {inbound.server!r} sent a body that does not decode "
                            f"({exc})",
                            "content-encoding",
                        ) from None
                    pending = decoder.unconsumed_tail
                left -= len(piece)
                if left < 0:
                    raise self._over(limit)
                if piece:
                    yield piece

    def _over(self, limit: int) -> Refused:
        inbound = self._inbound
        if not self._listing:
            return self._refuse(str(inbound.too_large()), "max_message_bytes")
        inbound.listing_bytes += limit
        return self._refuse(
            f"MCP server {inbound.server!r} sent a tool listing of more than {limit:,} bytes "
            f"(MCPLimits(max_listing_bytes={limit:,})); raise it to load this server's tools",
            "max_listing_bytes",
        )

    async def aclose(self) -> None:
        await self._stream.aclose()
