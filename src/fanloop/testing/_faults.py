"""Hostile servers for :class:`~fanloop.testing.FakeLLMServer`: :class:`Hostile` turns.

A :class:`~fanloop.testing.Fault` is a failure a well-behaved server has (a 429, a dropped
connection). A :class:`Hostile` turn is a server that misbehaves: keep-alives forever, one
huge event, a flood of tiny ones, usage numbers that are not numbers, tool calls without ids,
a body of garbage, a gzip bomb. Queue one like any turn::

    server.add(Hostile.huge_frame(64 * 1024 * 1024), Hostile.usage(output_tokens=-5))

Big bodies are generated as they are written, in chunks, never held whole in memory, and a
body that runs forever (:meth:`Hostile.keepalive`) stops when the client goes away.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._model_types import ModelResponse
from . import _render, _responses
from ._script import reply

if TYPE_CHECKING:
    from ._server import FakeLLMServer

__all__ = ["Hostile", "RateLimit", "RateLimitLog"]

_dumps = json.JSONEncoder(separators=(",", ":")).encode

# The usage fields of each API, by fanloop's names (others are sent under the name given).
_USAGE_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "anthropic": {
        "input_tokens": ("input_tokens",),
        "output_tokens": ("output_tokens",),
        "cache_read_tokens": ("cache_read_input_tokens",),
        "cache_write_tokens": ("cache_creation_input_tokens",),
    },
    "responses": {
        "input_tokens": ("input_tokens",),
        "output_tokens": ("output_tokens",),
        "cache_read_tokens": ("input_tokens_details", "cached_tokens"),
        "cache_write_tokens": ("input_tokens_details", "cache_write_tokens"),
        "reasoning_tokens": ("output_tokens_details", "reasoning_tokens"),
    },
    "openai": {
        "input_tokens": ("prompt_tokens",),
        "output_tokens": ("completion_tokens",),
        "cache_read_tokens": ("prompt_tokens_details", "cached_tokens"),
        "cache_write_tokens": ("prompt_tokens_details", "cache_write_tokens"),
    },
}
_WRITE = 64 * 1024  # batch small frames into writes of about this size
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A rate limit for :class:`~fanloop.testing.FakeLLMServer` (``rate_limit=``): at most
    ``requests`` requests in any ``per`` seconds (a sliding window); a request over it is
    answered 429 ``rate_limit_error`` and does not count. Requests to either API count.

    Attributes:
        requests: requests allowed per window.
        per: the window, in seconds.
        retry_after: the ``retry-after`` (seconds) every 429 carries; ``None``: the time until
            a request would be accepted, as ``retry-after-ms`` (and ``retry-after``, rounded
            up to whole seconds).
    """

    requests: int
    per: float = 1.0
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.requests, bool) or not isinstance(self.requests, int):
            raise ValueError("RateLimit.requests must be a whole number")
        if self.requests < 1 or not self.per > 0:
            raise ValueError("RateLimit needs requests >= 1 and per > 0")
        if self.retry_after is not None and not self.retry_after >= 0:
            raise ValueError("RateLimit.retry_after must be >= 0")


@dataclass(slots=True)
class RateLimitLog:
    """What a rate-limited :class:`~fanloop.testing.FakeLLMServer` saw
    (``server.rate_log``); times are the server's ``time.monotonic()`` at arrival.

    Attributes:
        limit: the :class:`RateLimit`.
        accepted: arrival times of the requests it let through.
        rejected: arrival times of the requests it answered 429.
    """

    limit: RateLimit
    accepted: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)
    _window: deque[float] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, now: float | None = None) -> float | None:
        """Count a request arriving ``now``: ``None`` if it is let through, else the seconds
        until one would be."""
        now = time.monotonic() if now is None else now
        limit = self.limit
        with self._lock:
            window = self._window
            while window and window[0] <= now - limit.per:
                window.popleft()
            if len(window) >= limit.requests:
                self.rejected.append(now)
                return window[0] + limit.per - now
            window.append(now)
            self.accepted.append(now)
            return None

    @property
    def arrivals(self) -> list[float]:
        """Every request's arrival time, accepted or not, in order."""
        with self._lock:
            return sorted(self.accepted + self.rejected)

    def max_in_window(self, per: float | None = None, *, accepted_only: bool = False) -> int:
        """The most requests that arrived within any ``per`` seconds (default: the limit's
        window); all arrivals, or only the accepted ones."""
        per = self.limit.per if per is None else per
        with self._lock:
            times = list(self.accepted) if accepted_only else self.accepted + self.rejected
        times.sort()
        best = 0
        for i, t in enumerate(times):
            j = bisect.bisect_left(times, t + per, lo=i)  # [t, t + per)
            best = max(best, j - i)
        return best

    def retry_headers(self, wait: float) -> tuple[float | None, float | None]:
        """The ``(retry-after, retry-after-ms)`` values of a 429 after a wait of ``wait``."""
        if self.limit.retry_after is not None:
            return self.limit.retry_after, None
        wait = max(wait, 0.0)
        return float(math.ceil(wait)), math.ceil(wait * 1000)


@dataclass(frozen=True, slots=True)
class Hostile:
    """A misbehaving server's answer, for :class:`~fanloop.testing.FakeLLMServer` to play.

    Build one with the class methods; each documents what a streamed and a non-streamed
    request get. A hostile turn that carries a ``turn`` plays that turn, damaged; without one
    it damages a short text answer (or one with a tool call, for :meth:`missing_ids`).
    """

    mode: str
    turn: ModelResponse | None = None
    size: int = 0
    count: int = 0
    interval: float = 0.0
    chunk_size: int = 1024 * 1024
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | tuple[bytes, ...] = b""
    content_type: str | None = None
    gzip: bool = False
    ping: bool = False
    kind: str = "text"
    patch: Callable[[dict[str, Any]], Any] | None = None

    @classmethod
    def keepalive(
        cls,
        interval: float = 0.05,
        *,
        ping: bool = False,
        after: ModelResponse | str | None = None,
    ) -> Hostile:
        """A 200 stream of nothing but keep-alives, one every ``interval`` seconds, forever
        (until the client disconnects): SSE comments (``: ping``), or Anthropic ``ping``
        events with ``ping=True``. With ``after``, that turn is streamed whole first, end
        marker included, and the body never ends. A non-streamed request gets a body of
        spaces, forever."""
        return cls(
            "keepalive", interval=interval, ping=ping, turn=None if after is None else _turn(after)
        )

    @classmethod
    def huge_frame(
        cls, size: int = 64 * 1024 * 1024, *, chunk_size: int = 1024 * 1024, gzip: bool = False
    ) -> Hostile:
        """A valid stream whose one text delta is ``size`` bytes, written ``chunk_size`` at a
        time (with ``gzip=True``, compressed: a few hundred KiB on the wire). A non-streamed
        request gets a JSON body whose text is ``size`` bytes."""
        return cls("huge_frame", size=size, chunk_size=chunk_size, gzip=gzip)

    @classmethod
    def flood(cls, count: int = 100_000, *, kind: str = "text") -> Hostile:
        """``count`` tiny frames. ``kind``: ``"text"`` (a valid answer of ``count``
        one-character deltas), ``"keepalive"`` (``count`` SSE comments, then a short answer)
        or ``"tool_calls"`` (a turn of ``count`` tool calls). A non-streamed request gets the
        same content in one body."""
        if kind not in ("text", "keepalive", "tool_calls"):
            raise ValueError("kind must be 'text', 'keepalive' or 'tool_calls'")
        return cls("flood", count=count, kind=kind)

    @classmethod
    def patched(
        cls, patch: Callable[[dict[str, Any]], Any], turn: ModelResponse | str | None = None
    ) -> Hostile:
        """Play ``turn`` with every JSON payload (each stream event, or the body) passed
        through ``patch`` first: it edits the dict in place (returning ``None``) or returns
        the value to send instead (``bytes`` are sent verbatim)."""
        return cls("patched", turn=_turn(turn), patch=patch)

    @classmethod
    def usage(
        cls, turn: ModelResponse | str | None = None, *, raw: Any = _UNSET, **fields: Any
    ) -> Hostile:
        """Play ``turn`` with its usage changed: ``fields`` by fanloop's names
        (``output_tokens="5"``, ``input_tokens=-3``; other names are sent as given), or the
        whole usage object replaced by ``raw`` (e.g. ``raw="lots"``)."""

        def patch(payload: dict[str, Any]) -> None:
            kind = payload.get("type")
            holder = payload.get("message") if kind == "message_start" else payload
            if kind in ("response.completed", "response.incomplete"):
                holder = payload.get("response")  # the Responses API's final event
            if not isinstance(holder, dict) or "usage" not in holder:
                return
            if raw is not _UNSET:
                holder["usage"] = raw
                return
            usage = holder["usage"]
            if not isinstance(usage, dict):
                return
            api = (
                "openai"
                if "completion_tokens" in usage
                else "responses"
                if "input_tokens_details" in usage
                else "anthropic"
            )
            for name, value in fields.items():
                path = _USAGE_NAMES[api].get(name, (name,))
                target: dict[str, Any] = usage
                for key in path[:-1]:
                    target = target.setdefault(key, {})
                target[path[-1]] = value

        return cls("patched", turn=_turn(turn), patch=patch)

    @classmethod
    def missing_ids(cls, turn: ModelResponse | None = None) -> Hostile:
        """Play ``turn`` (by default one tool call, ``get_weather``) with every tool-call id
        left out, as some OpenAI-compatible servers do."""
        if turn is None:
            from ._script import call  # (a loop below names its variable ``call``)

            turn = reply(tool_calls=[call("get_weather", city="Paris")])

        def patch(payload: dict[str, Any]) -> None:
            for holder in _tool_call_holders(payload):
                holder.pop("id", None)
            for item in _function_call_items(payload):
                item.pop("call_id", None)

        return cls("patched", turn=turn, patch=patch)

    @classmethod
    def no_end_marker(cls, turn: ModelResponse | str | None = None) -> Hostile:
        """Stream ``turn`` whole but without its end marker (``message_stop`` /
        ``[DONE]``); the body ends cleanly. A non-streamed request gets half the body."""
        return cls("no_end_marker", turn=_turn(turn))

    @classmethod
    def garbage(
        cls, data: bytes | None = None, *, size: int = 4096, seed: int = 0, status: int = 200
    ) -> Hostile:
        """A body of ``data`` (default: ``size`` random bytes) with status ``status``."""
        body = data if data is not None else random.Random(seed).randbytes(size)
        return cls("raw", body=body, status=status)

    @classmethod
    def raw(
        cls,
        body: bytes | Iterable[bytes],
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> Hostile:
        """Exactly ``body`` (bytes, or chunks of it) as the response body, chunked. The
        content type defaults to ``text/event-stream`` for a streamed request, else JSON."""
        chunks = body if isinstance(body, bytes) else tuple(body)
        return cls(
            "raw",
            body=chunks,
            status=status,
            headers=tuple((headers or {}).items()),
            content_type=content_type,
        )

    @classmethod
    def raw_http(cls, data: bytes) -> Hostile:
        """Exactly ``data`` on the connection, status line and headers included (e.g. a
        garbage status line, a header of megabytes), then the connection closes."""
        return cls("raw_http", body=data)

    @classmethod
    def error(
        cls,
        status: int = 429,
        *,
        headers: dict[str, str] | None = None,
        size: int = 0,
        gzip: bool = False,
    ) -> Hostile:
        """An HTTP error with raw ``headers`` (e.g. ``{"retry-after": "nan"}``) and an error
        body in the API's format whose message is ``size`` bytes long (0: a short one),
        generated as it is written (``gzip=True``: compressed on the wire)."""
        return cls(
            "error", status=status, headers=tuple((headers or {}).items()), size=size, gzip=gzip
        )


def _turn(turn: ModelResponse | str | None) -> ModelResponse:
    if turn is None:
        return reply("A short answer from a hostile server.")
    return reply(turn) if isinstance(turn, str) else turn


def _tool_call_holders(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The dicts that carry a tool call's id, in any payload of either API."""
    block = payload.get("content_block")
    if isinstance(block, dict) and block.get("type") == "tool_use":
        yield block
    for block in payload.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "tool_use":
            yield block
    for choice in payload.get("choices") or ():
        for key in ("delta", "message"):
            holder = choice.get(key) if isinstance(choice, dict) else None
            if isinstance(holder, dict):
                yield from (c for c in holder.get("tool_calls") or () if isinstance(c, dict))


def _function_call_items(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Responses API's ``function_call`` items in a payload (an event or a body)."""
    holders = [payload.get("item"), payload]
    final = payload.get("response")
    if isinstance(final, dict):
        holders.append(final)
    for holder in holders:
        if not isinstance(holder, dict):
            continue
        items = [holder] if holder is payload.get("item") else holder.get("output") or ()
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call":
                yield item


def render_stream(
    api: str, response: ModelResponse, model: str, request_id: str, size: int
) -> list[bytes]:
    """The frames of ``response`` streamed on ``api``, deltas of ``size`` characters."""
    if api == "anthropic":
        return _render.anthropic_events(response, model, request_id, size).frames
    if api == "responses":
        frames = _render.Frames()
        _responses.response_events(frames, response, model, request_id, {}, size)
        return frames.frames
    return _render.openai_chunks(response, model, request_id, size).frames


def render_body(api: str, response: ModelResponse, model: str, request_id: str) -> dict[str, Any]:
    """The JSON body of ``response`` on ``api``, not streamed."""
    if api == "anthropic":
        return _render.anthropic_message(response, model, request_id)
    if api == "responses":
        return _responses.response_object(response, model, request_id, {})
    return _render.openai_completion(response, model, request_id)


# -- playing --------------------------------------------------------------------------------


async def play(
    server: FakeLLMServer,
    hostile: Hostile,
    writer: asyncio.StreamWriter,
    api: str,
    model: str,
    request_id: str,
    stream: bool,
) -> bool:
    """Answer one request with ``hostile``; ``False`` when the connection must close."""
    mode = hostile.mode
    if mode == "error":
        return await _error(server, hostile, writer, api, request_id)
    if mode == "raw_http":
        body = hostile.body
        writer.write(body if isinstance(body, bytes) else b"".join(body))
        await writer.drain()
        return False
    content_type = hostile.content_type or ("text/event-stream" if stream else "application/json")
    extra = "".join(f"{k}: {v}\r\n" for k, v in hostile.headers)
    if hostile.gzip:
        extra += "content-encoding: gzip\r\n"
    head = server._head(hostile.status, content_type, request_id, extra)
    writer.write(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
    if mode == "keepalive":
        if hostile.turn is not None and stream:
            frames = render_stream(api, hostile.turn, model, request_id, server.chars_per_delta)
            await _chunk(writer, b"".join(frames))
        await _forever(writer, hostile, api, stream)
        return False
    pieces: Iterable[bytes]
    if mode == "raw":
        pieces = (hostile.body,) if isinstance(hostile.body, bytes) else hostile.body
    elif mode == "huge_frame":
        pieces = _huge(api, model, request_id, hostile, stream)
    elif mode == "flood":
        pieces = _batched(_flood(api, model, request_id, hostile, stream))
    else:
        response = hostile.turn or _turn(None)
        if stream:
            frames = render_stream(api, response, model, request_id, server.chars_per_delta)
            if mode == "no_end_marker":
                frames = frames[:-1]
            elif hostile.patch is not None:
                frames = [_patch_frame(frame, hostile.patch) for frame in frames]
            pieces = [b"".join(frames)]
        else:
            payload = render_body(api, response, model, request_id)
            data = _patched(payload, hostile.patch) if hostile.patch else _dumps(payload).encode()
            pieces = [data[: len(data) // 2] if mode == "no_end_marker" else data]
    await _write(writer, pieces, hostile.gzip)
    return True


async def _write(writer: asyncio.StreamWriter, pieces: Iterable[bytes], gzip: bool) -> None:
    """Write ``pieces`` as chunks (compressed when ``gzip``), then the body's end."""
    compress = zlib.compressobj(wbits=31) if gzip else None
    for piece in pieces:
        if compress is not None:
            piece = compress.compress(piece)
        await _chunk(writer, piece)
    if compress is not None:
        await _chunk(writer, compress.flush())
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, piece: bytes) -> None:
    if not piece:
        return
    if writer.transport.is_closing():
        raise ConnectionResetError("the client went away")
    writer.write(b"%x\r\n" % len(piece))
    writer.write(piece)
    writer.write(b"\r\n")
    await writer.drain()


async def _forever(writer: asyncio.StreamWriter, hostile: Hostile, api: str, stream: bool) -> None:
    if not stream:
        frame = b" "
    elif hostile.ping and api == "anthropic":
        frame = b'event: ping\ndata: {"type":"ping"}\n\n'
    else:
        frame = b": ping\n\n"
    while True:
        await _chunk(writer, frame)
        await asyncio.sleep(hostile.interval)


def _huge(api: str, model: str, request_id: str, hostile: Hostile, stream: bool) -> Iterator[bytes]:
    """A turn whose text is ``hostile.size`` bytes of ``x``, in ``chunk_size`` pieces (in
    every place the API repeats the text: the Responses API's stream has it five times)."""
    marker = "\x00MARK\x00"
    response = reply(marker)
    if stream:
        body = b"".join(render_stream(api, response, model, request_id, len(marker)))
    else:
        body = _dumps(render_body(api, response, model, request_id)).encode()
    first, *rest = body.split(_dumps(marker)[1:-1].encode())
    yield first
    piece = b"x" * min(hostile.chunk_size, hostile.size)
    for after in rest:
        left = hostile.size
        while left >= len(piece) > 0:
            yield piece
            left -= len(piece)
        if left:
            yield piece[:left]
        yield after


def _flood(
    api: str, model: str, request_id: str, hostile: Hostile, stream: bool
) -> Iterator[bytes]:
    count = hostile.count
    if hostile.kind == "tool_calls":
        yield from _many_calls(api, model, request_id, count, stream)
        return
    if hostile.kind == "keepalive":
        response = _turn(None)
        if stream:
            yield from (b": ping\n\n" for _ in range(count))
    else:
        response = reply("x" * count)
    if stream:
        yield from render_stream(api, response, model, request_id, 1)
    else:
        yield _dumps(render_body(api, response, model, request_id)).encode()


def _many_calls(api: str, model: str, request_id: str, count: int, stream: bool) -> Iterator[bytes]:
    """A turn of ``count`` tool calls, rendered without building ``count`` parts."""
    if api == "anthropic":
        if not stream:
            blocks = (
                {"type": "tool_use", "id": f"toolu_{i}", "name": "noop", "input": {}}
                for i in range(count)
            )
            message = {
                "id": f"msg_{request_id}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": _LIST,
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
            yield from _json_with_list(message, blocks)
            return
        frames = _render.anthropic_events(reply("go"), model, request_id, 12).frames
        yield frames[0]  # message_start
        for i in range(count):
            block = {"type": "tool_use", "id": f"toolu_{i}", "name": "noop", "input": {}}
            yield _render.sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": block},
            )
            yield _render.sse("content_block_stop", {"type": "content_block_stop", "index": i})
        yield _render.sse(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        )
        yield _render.sse("message_stop", {"type": "message_stop"})
        return
    if api == "responses":
        yield from _many_function_calls(model, request_id, count, stream)
        return
    calls: Iterator[dict[str, Any]] = (
        {"index": i, "id": f"call_{i}", "type": "function",
         "function": {"name": "noop", "arguments": "{}"}}
        for i in range(count)
    )  # fmt: skip
    if not stream:
        answer = {"role": "assistant", "content": None, "tool_calls": _LIST}
        completion = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": answer, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        yield from _json_with_list(completion, calls)
        return
    for call in calls:
        choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
        yield b"data: %s\n\n" % _dumps({"id": request_id, "choices": [choice]}).encode()
    choice = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    yield b"data: %s\n\ndata: [DONE]\n\n" % _dumps({"id": request_id, "choices": [choice]}).encode()


def _many_function_calls(model: str, request_id: str, count: int, stream: bool) -> Iterator[bytes]:
    """The Responses API's turn of ``count`` function calls."""

    def items() -> Iterator[dict[str, Any]]:
        for i in range(count):
            yield {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}",
                   "name": "noop", "arguments": "{}", "status": "completed"}  # fmt: skip

    final = _responses.response_object(reply("go"), model, request_id, {}, output=[])
    final["output"] = _LIST
    if not stream:
        yield from _json_with_list(final, items())
        return
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    yield _render.sse("response.created", {"type": "response.created", "response": start})
    for i, item in enumerate(items()):
        for kind in ("response.output_item.added", "response.output_item.done"):
            yield _render.sse(kind, {"type": kind, "output_index": i, "item": item})
    yield b"event: response.completed\ndata: "
    yield from _json_with_list({"type": "response.completed", "response": final}, items())
    yield b"\n\n"


_LIST = "\x00LIST\x00"


def _json_with_list(payload: dict[str, Any], items: Iterable[Any]) -> Iterator[bytes]:
    """The JSON of ``payload`` with its :data:`_LIST` value replaced by the list of
    ``items``, in pieces: no single encoding call holds the GIL long (the server shares its
    process with the tests' heartbeats)."""
    before, _, after = _dumps(payload).encode().partition(_dumps(_LIST).encode())
    yield before + b"["
    yield from _batched(
        (b"," if i else b"") + _dumps(item).encode() for i, item in enumerate(items)
    )
    yield b"]" + after


def _batched(frames: Iterable[bytes]) -> Iterator[bytes]:
    batch: list[bytes] = []
    size = 0
    for frame in frames:
        batch.append(frame)
        size += len(frame)
        if size >= _WRITE:
            yield b"".join(batch)
            batch.clear()
            size = 0
    if batch:
        yield b"".join(batch)


def _patched(payload: Any, patch: Callable[[dict[str, Any]], Any] | None) -> bytes:
    if patch is not None and isinstance(payload, dict):
        replaced = patch(payload)
        if replaced is not None:
            payload = replaced
    return payload if isinstance(payload, bytes) else _dumps(payload).encode()


def _patch_frame(frame: bytes, patch: Callable[[dict[str, Any]], Any]) -> bytes:
    """``frame`` with the JSON of its ``data:`` line passed through ``patch``."""
    lines = frame.rstrip(b"\n").split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            lines[i] = b"data: " + _patched(json.loads(line[6:]), patch)
    return b"\n".join(lines) + b"\n\n"


async def _error(
    server: FakeLLMServer,
    hostile: Hostile,
    writer: asyncio.StreamWriter,
    api: str,
    request_id: str,
) -> bool:
    extra = "".join(f"{k}: {v}\r\n" for k, v in hostile.headers)
    if hostile.gzip:
        extra += "content-encoding: gzip\r\n"
    head = server._head(hostile.status, "application/json", request_id, extra)
    writer.write(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
    if api == "openai" or api == "responses":
        payload: dict[str, Any] = {
            "error": {"message": "\x00", "type": "server_error", "param": None, "code": None}
        }
    else:
        payload = {"type": "error", "error": {"type": "api_error", "message": "\x00"}}
    before, _, after = _dumps(payload).encode().partition(b"\\u0000")

    def pieces() -> Iterator[bytes]:
        yield before
        if not hostile.size:
            yield b"a hostile server's error"
        piece = b"e" * min(hostile.chunk_size, max(hostile.size, 1))
        left = hostile.size
        while left > 0:
            yield piece[:left]
            left -= len(piece)
        yield after

    await _write(writer, pieces(), hostile.gzip)
    return True
