"""FakeLLMServer: a real HTTP server that speaks the Anthropic and OpenAI wire formats
(Messages, Chat Completions and the Responses API).

It runs its own asyncio event loop in a background thread, so a test on any event loop (or
plain synchronous code) can talk to it with the real SDK clients. Standard library only.

::

    from fanloop.testing import FakeLLMServer, Fault, call, reply

    with FakeLLMServer() as server:
        server.add(reply(tool_calls=[call("get_weather", city="Paris")]), "It is sunny.")
        provider = AnthropicProvider("claude-sonnet-5", api_key="test",
                                     base_url=server.anthropic_base_url)
        ...
        server.requests[-1].body["messages"]     # what the client sent
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import threading
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeAlias, TypeVar

from .._model_types import ModelResponse
from . import _cloud, _responses
from ._faults import Hostile, RateLimit, RateLimitLog, play
from ._render import (
    Frames,
    anthropic_events,
    anthropic_message,
    dumps,
    error_frame,
    number,
    openai_chunks,
    openai_completion,
)
from ._script import Fault, reply
from ._typed import body_asks, typed_answer

__all__ = ["FakeLLMServer", "RecordedRequest", "ServerTurn"]

API: TypeAlias = Literal["anthropic", "openai", "responses"]

ServerTurn: TypeAlias = "ModelResponse | str | Fault | Hostile | Callable[[dict[str, Any]], Any]"
"""What answers one request: a :func:`~fanloop.testing.reply`, a plain text answer, a
:class:`~fanloop.testing.Fault`, a :class:`~fanloop.testing._faults.Hostile` server, or a
function of the parsed request body (sync or async) returning one of those."""

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERRORS = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
}
_ERROR_STATUS = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "invalid_request_error": 400,
    "authentication_error": 401,
}
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}
_DEFAULT_PARTIAL = "This answer is cut off by an injected fault before it can finish."

T = TypeVar("T")


class _ClientGone(Exception):
    """The client closed the connection before its answer was complete."""


class _Hangup:
    """Watches one connection while its answer is held back (a scripted function still
    making the turn, ``latency``, ``Fault.slow``), so a client that gives up is seen at once.

    It reads ahead one byte: the end of the stream means the client is gone. A byte means the
    client sent its next request before this answer (no HTTP/1.1 client of the SDKs does):
    the answer still goes out, and the connection is closed after it (``broken``).
    """

    __slots__ = ("broken", "reader")

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.broken = False

    async def hold(self, work: Awaitable[T]) -> T:
        """``await work``, unless the client goes away first (then :class:`_ClientGone`)."""
        task = asyncio.ensure_future(work)
        if self.broken:
            return await task
        watch = asyncio.ensure_future(self.reader.read(1))
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                if watch.exception() is None and watch.result():
                    self.broken = True
                    return await task
                task.cancel()
                await asyncio.wait({task})
                raise _ClientGone
            return task.result()
        finally:
            unfinished = {t for t in (task, watch) if not t.done()}
            for pending in unfinished:
                pending.cancel()
            if unfinished:  # the reader is free again only once the read has let go
                await asyncio.wait(unfinished)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the server received.

    Attributes:
        api: ``"anthropic"``, ``"openai"`` (Chat Completions) or ``"responses"`` (``""`` for
            an unknown path).
        method: the HTTP method.
        path: the request path, e.g. ``"/v1/messages"``.
        headers: the request headers, names lower-cased.
        body: the parsed JSON body (``None`` if it was not JSON).
        raw_body: the body bytes as sent.
        request_id: the request id the server answered with.
        query: the query parameters (e.g. Azure's ``{"api-version": "2024-10-21"}``).
        platform: ``"vertex"`` or ``"bedrock"`` for a Messages API request on Google Vertex
            AI or Amazon Bedrock (told by its path), else ``""``.
    """

    api: str
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    request_id: str
    query: dict[str, str] = field(default_factory=dict)
    platform: str = ""

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream (on Bedrock, by the path)."""
        if self.platform == "bedrock":
            return self.path.endswith("-with-response-stream")
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of the body."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def input(self) -> list[Any]:
        """The ``input`` items of a Responses API body (a string input is one user message)."""
        items = self.body.get("input") if isinstance(self.body, dict) else None
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return items if isinstance(items, list) else []

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the client asked the answer to follow, if it asked: OpenAI's
        ``response_format.json_schema.schema`` (Responses: ``text.format.schema``) or
        Anthropic's ``output_config.format.schema``.
        (The server does not enforce it: a scripted answer is sent as scripted.)"""
        body = self.body if isinstance(self.body, dict) else {}
        holder = body.get("response_format")
        text = body.get("text")
        if isinstance(holder, dict):
            holder = holder.get("json_schema")
        elif isinstance(text, dict) and isinstance(text.get("format"), dict):
            holder = text["format"]
        else:
            holder = body.get("output_config")
            holder = holder.get("format") if isinstance(holder, dict) else None
        schema = holder.get("schema") if isinstance(holder, dict) else None
        return schema if isinstance(schema, dict) else None


class FakeLLMServer:
    """A scripted HTTP server for the Anthropic Messages, OpenAI Chat Completions and OpenAI
    Responses APIs.

    It serves ``POST /v1/messages``, ``POST /v1/chat/completions`` and ``POST /v1/responses``
    (and the same under other roots: Azure OpenAI's ``/openai/deployments/{deployment}/...``
    and ``/openai/v1/...``; Claude on Vertex AI's ``...:rawPredict`` /
    ``...:streamRawPredict`` and on Bedrock's ``/model/{model}/invoke`` /
    ``invoke-with-response-stream``, the latter in AWS event-stream framing)
    (reasoning items with summaries and an opaque ``encrypted_content``, function calls,
    ``response.incomplete`` for a ``MAX_TOKENS`` turn), streamed and not,
    over HTTP/1.1 with keep-alive, on ``127.0.0.1`` and an ephemeral port. It accepts an API
    key as ``Authorization: Bearer``, ``x-api-key`` or ``api-key`` (any key, unless
    ``api_key`` is set).

    Each request is answered by the next scripted turn: first from the queue of its API (see
    :meth:`add` with ``api=``), then from the shared queue, then by ``responder``. A turn is a
    :func:`~fanloop.testing.reply` (text, tool calls, thinking, stop reason, usage), a string,
    a :class:`~fanloop.testing.Fault`, or a function of the parsed request body returning one
    of those. With no turn left the server answers 400 ``FakeLLMServer has no scripted turn
    left``.

    Faults: ``Fault.http(status, retry_after=...)`` answers with that status, an error body in
    the API's format and ``retry-after`` / ``retry-after-ms`` headers;
    ``Fault.stream_error(turn, after_events=n)``, ``Fault.drop(...)`` and
    ``Fault.truncate(...)`` stream ``turn`` for ``n`` content deltas, then send an error event,
    drop the connection, or end the body cleanly before its end marker;
    ``Fault.slow(delay, turn)`` waits before the first byte. (For a request that is not
    streamed, an error event becomes the matching HTTP error, and a drop or truncation cuts
    the JSON body short.)

    Hostile servers (:class:`~fanloop.testing._faults.Hostile`): keep-alives forever, a huge
    event, a flood of tiny ones, malformed usage, tool calls without ids, no end marker,
    garbage, raw bytes, error responses with hostile headers or huge (or gzip-bomb) bodies.

    Args:
        script: turns for the shared queue.
        responder: answers requests when the queues are empty (e.g. for benchmarks).
        latency: seconds to wait before the first byte of every response (model latency).
        chars_per_delta: characters of text, thinking or tool arguments per streamed delta.
        delta_delay: seconds between streamed frames (0: the whole stream in one write).
        api_key: when set, any other key is answered with 401.
        rate_limit: a :class:`~fanloop.testing._faults.RateLimit`: at most ``requests``
            requests per ``per`` seconds, the rest answered 429 with a ``Retry-After``;
            :attr:`rate_log` keeps what it saw.
        record: keep every request in :attr:`requests`.

    Attributes:
        requests: every request received (:class:`RecordedRequest`), when ``record``.
        aborted: the request ids of requests whose client went away before their answer was
            complete: while it was held back (a scripted function, ``latency``,
            ``Fault.slow``) or mid-stream. :meth:`wait_aborted` waits for them.
        host: the interface to bind.
        port: the port (0: an ephemeral one).

    Example:
        >>> from fanloop.testing import FakeLLMServer
        >>> with FakeLLMServer(["Hello!"]) as server:
        ...     server.openai_base_url.endswith("/v1")
        True
    """

    def __init__(
        self,
        script: Iterable[ServerTurn] = (),
        *,
        responder: Callable[[dict[str, Any]], Any] | None = None,
        latency: float = 0.0,
        chars_per_delta: int = 12,
        delta_delay: float = 0.0,
        api_key: str | None = None,
        rate_limit: RateLimit | None = None,
        record: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder = responder
        self.rate_log = None if rate_limit is None else RateLimitLog(rate_limit)
        self.latency = latency
        self.chars_per_delta = max(1, chars_per_delta)
        self.delta_delay = delta_delay
        self.api_key = api_key
        self.record = record
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []
        self.aborted: list[str] = []
        self._aborts = threading.Condition()
        self._host = host
        self._port = port
        self._queues: dict[str | None, deque[Any]] = {
            None: deque(script),
            "anthropic": deque(),
            "openai": deque(),
            "responses": deque(),
        }
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- script -----------------------------------------------------------------------------

    def add(self, *turns: ServerTurn, api: API | None = None) -> None:
        """Queue turns: for any API (the default) or only for ``"anthropic"``, ``"openai"``
        (Chat Completions) or ``"responses"``."""
        self._queues[api].extend(turns)

    @property
    def remaining(self) -> int:
        """Scripted turns not yet played, over all queues."""
        return sum(len(q) for q in self._queues.values())

    def clear(self) -> None:
        """Forget queued turns, recorded requests and aborted ones."""
        for queue in self._queues.values():
            queue.clear()
        self.requests.clear()
        with self._aborts:
            self.aborted.clear()

    def wait_aborted(self, count: int = 1, timeout: float | None = None) -> bool:
        """Block until ``count`` requests were abandoned by their client (see
        :attr:`aborted`); ``False`` if ``timeout`` seconds pass first. From async code, call
        it in a worker thread (``await anyio.to_thread.run_sync(server.wait_aborted)``)."""
        with self._aborts:
            return self._aborts.wait_for(lambda: len(self.aborted) >= count, timeout)

    def _abort(self, request_id: str) -> None:
        with self._aborts:
            self.aborted.append(request_id)
            self._aborts.notify_all()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if not self._port:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self._host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` for Anthropic clients (no ``/v1``)."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for OpenAI clients (ends in ``/v1``)."""
        return f"{self.url}/v1"

    def start(self) -> FakeLLMServer:
        """Start serving in a background thread; returns once the port is bound."""
        if self._thread is not None:
            return self
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="FakeLLMServer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def stop(self) -> None:
        """Stop serving, close every connection, and join the thread."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeLLMServer:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.stop)

    def __repr__(self) -> str:
        state = f"port={self._port}" if self._thread else "stopped"
        return f"<FakeLLMServer {state} requests={len(self.requests)}>"

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()
            self._loop = None

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        try:
            server = await asyncio.start_server(
                self._handle, self._host, self._port, backlog=4096, reuse_address=True
            )
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            return
        self._port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    # -- HTTP -------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await self._read_body(reader, headers)
                keep_alive = headers.get("connection", "").lower() != "close"
                hangup = _Hangup(reader)
                if not await self._respond(method, target, headers, body, writer, hangup):
                    return
                if not keep_alive or hangup.broken:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, _ClientGone):
            return
        except asyncio.CancelledError:
            # Only stop() cancels handlers. Finishing normally keeps asyncio from logging the
            # cancelled task.
            return
        except Exception as exc:  # a bug here must not kill the server; tests can inspect it
            self.errors.append(exc)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _read_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        length = headers.get("content-length")
        if length is not None:
            return await reader.readexactly(int(length)) if int(length) else b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    return b"".join(chunks)
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
        return b""

    async def _respond(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        raw_body: bytes,
        writer: asyncio.StreamWriter,
        hangup: _Hangup,
    ) -> bool:
        """Answer one request; ``False`` when the connection must be closed."""
        path, _, query = target.partition("?")
        request_id = f"req_fake_{next(self._ids):06d}"
        cloud = _cloud.route(path) if not path.startswith("/v1/messages") else None
        api: str
        if path == "/v1/messages" or cloud is not None:
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "openai"
        elif path.endswith("/responses"):  # also Azure's /openai/responses
            api = "responses"
        else:
            api = ""
        try:
            body: Any = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = None
        if self.record:
            self.requests.append(
                RecordedRequest(
                    api,
                    method,
                    path,
                    headers,
                    body,
                    raw_body,
                    request_id,
                    dict(urllib.parse.parse_qsl(query)),
                    cloud.platform if cloud is not None else "",
                )
            )
        if not api:
            await self._send_error(
                writer, "anthropic", 404, "not_found_error", "no such path", request_id
            )
            return True
        if method != "POST":
            await self._send_error(writer, api, 405, None, "use POST", request_id)
            return True
        if not isinstance(body, dict):
            await self._send_error(
                writer, api, 400, None, "the body is not a JSON object", request_id
            )
            return True
        if self.api_key is not None:
            auth = headers.get("authorization", "")
            key = auth[7:] if auth.lower().startswith("bearer ") else None
            key = key or headers.get("x-api-key") or headers.get("api-key")  # api-key: Azure
            if key != self.api_key:
                await self._send_error(writer, api, 401, None, "invalid x-api-key", request_id)
                return True
        if self.rate_log is not None:
            wait = self.rate_log.admit()
            if wait is not None:
                retry_after, retry_after_ms = self.rate_log.retry_headers(wait)
                await self._send_error(
                    writer,
                    api,
                    429,
                    None,
                    "rate limit exceeded (FakeLLMServer rate_limit)",
                    request_id,
                    retry_after=retry_after,
                    retry_after_ms=retry_after_ms,
                )
                return True
        try:
            return await self._answer(api, body, cloud, request_id, writer, hangup)
        except (ConnectionError, _ClientGone):
            self._abort(request_id)
            raise

    async def _answer(
        self,
        api: str,
        body: dict[str, Any],
        cloud: Any,
        request_id: str,
        writer: asyncio.StreamWriter,
        hangup: _Hangup,
    ) -> bool:
        """Play the next scripted turn for one request."""
        turn = await hangup.hold(self._next_turn(api, body))
        if turn is None:
            await self._send_error(
                writer, api, 400, None, "FakeLLMServer has no scripted turn left", request_id
            )
            return True
        if self.latency:
            await hangup.hold(asyncio.sleep(self.latency))
        fault: Fault | None = None
        if isinstance(turn, Hostile):
            stream = body.get("stream") is True or (cloud is not None and cloud.stream)
            model = cloud.model if cloud is not None else str(body.get("model") or "fake-model")
            return await play(self, turn, writer, api, model, request_id, stream)
        if isinstance(turn, Fault):
            fault = turn
            if fault.delay:
                await hangup.hold(asyncio.sleep(fault.delay))
            if fault.status is not None:
                await self._send_error(
                    writer,
                    api,
                    fault.status,
                    fault.error_type,
                    fault.message,
                    request_id,
                    retry_after=fault.retry_after,
                    retry_after_ms=fault.retry_after_ms,
                )
                return True
            is_stream_fault = fault.error_in_stream or fault.drop_connection or fault.cut_before_end
            response = fault.then or (reply(_DEFAULT_PARTIAL) if is_stream_fault else None)
            if response is None:
                await self._send_error(writer, api, 400, None, "Fault has no turn", request_id)
                return True
            if not is_stream_fault:
                fault = None
        else:
            response = turn
        model = cloud.model if cloud is not None else str(body.get("model") or "fake-model")
        if cloud is not None and cloud.platform == "bedrock" and cloud.stream:
            return await self._send_stream(
                writer, api, response, model, request_id, fault, body, bedrock=True
            )
        if body.get("stream") is True or (cloud is not None and cloud.stream):
            return await self._send_stream(writer, api, response, model, request_id, fault, body)
        return await self._send_json(writer, api, response, model, request_id, fault, body)

    async def _next_turn(
        self, api: str, body: dict[str, Any]
    ) -> ModelResponse | Fault | Hostile | None:
        item: Any
        own, shared = self._queues[api], self._queues[None]
        if own:
            item = own.popleft()
        elif shared:
            item = shared.popleft()
        elif self.responder is not None:
            item = self.responder
        else:
            return None
        while True:
            if isinstance(item, str):
                item = reply(item)
            if isinstance(item, ModelResponse):
                native, final_tool = body_asks(api, body)
                return typed_answer(item, native=native, final_tool=final_tool)
            if isinstance(item, Fault | Hostile):
                return item
            if callable(item):
                item = item(body)
                if inspect.isawaitable(item):
                    item = await item
                continue
            raise TypeError(f"FakeLLMServer cannot play script item {item!r}")

    # -- writing ----------------------------------------------------------------------------

    @staticmethod
    def _head(status: int, content_type: str, request_id: str, extra: str = "") -> str:
        return (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"content-type: {content_type}\r\n"
            f"request-id: {request_id}\r\nx-request-id: {request_id}\r\n{extra}"
        )

    async def _send_error(
        self,
        writer: asyncio.StreamWriter,
        api: str,
        status: int,
        error_type: str | None,
        message: str,
        request_id: str,
        *,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
    ) -> None:
        extra = ""
        if retry_after is not None:
            extra += f"retry-after: {number(retry_after)}\r\n"
        if retry_after_ms is not None:
            extra += f"retry-after-ms: {number(retry_after_ms)}\r\n"
        if api == "openai" or api == "responses":
            etype = error_type or _OPENAI_ERRORS.get(
                status, "server_error" if status >= 500 else "invalid_request_error"
            )
            code = "invalid_api_key" if status == 401 else (etype if status == 429 else None)
            payload: dict[str, Any] = {
                "error": {"message": message, "type": etype, "param": None, "code": code}
            }
        else:
            etype = error_type or _ANTHROPIC_ERRORS.get(
                status, "api_error" if status >= 500 else "invalid_request_error"
            )
            payload = {
                "type": "error",
                "error": {"type": etype, "message": message},
                "request_id": request_id,
            }
        data = dumps(payload).encode()
        head = self._head(status, "application/json", request_id, extra)
        writer.write(f"{head}content-length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()

    async def _send_json(
        self,
        writer: asyncio.StreamWriter,
        api: str,
        response: ModelResponse,
        model: str,
        request_id: str,
        fault: Fault | None,
        body: dict[str, Any] | None = None,
    ) -> bool:
        if fault is not None and fault.error_in_stream:
            etype = fault.error_type or "overloaded_error"
            status = _ERROR_STATUS.get(etype, 500)
            await self._send_error(writer, api, status, etype, fault.message, request_id)
            return True
        if api == "anthropic":
            payload = anthropic_message(response, model, request_id)
        elif api == "responses":
            payload = _responses.response_object(response, model, request_id, body or {})
        else:
            payload = openai_completion(response, model, request_id)
        data = dumps(payload).encode()
        head = self._head(200, "application/json", request_id)
        head_bytes = f"{head}content-length: {len(data)}\r\n\r\n".encode()
        if fault is not None:  # drop or truncate: send half the body, then close
            writer.write(head_bytes + data[: len(data) // 2])
            await writer.drain()
            writer.transport.abort()
            return False
        writer.write(head_bytes + data)
        await writer.drain()
        return True

    async def _send_stream(
        self,
        writer: asyncio.StreamWriter,
        api: str,
        response: ModelResponse,
        model: str,
        request_id: str,
        fault: Fault | None,
        body: dict[str, Any] | None = None,
        *,
        bedrock: bool = False,
    ) -> bool:
        if api == "anthropic":
            rendered = anthropic_events(response, model, request_id, self.chars_per_delta)
        elif api == "responses":
            rendered = Frames()
            _responses.response_events(
                rendered, response, model, request_id, body or {}, self.chars_per_delta
            )
        else:
            rendered = openai_chunks(response, model, request_id, self.chars_per_delta)
        frames = rendered.frames
        close = False
        if fault is not None:
            frames = frames[: rendered.cut(fault.after_events)]
            if fault.error_in_stream:
                frames.append(
                    error_frame(api, fault.error_type or "overloaded_error", fault.message)
                )
            elif fault.drop_connection:
                close = True
        if bedrock:  # AWS event-stream messages, not SSE
            frames = _cloud.bedrock_frames(frames)
        head = self._head(
            200,
            "application/vnd.amazon.eventstream" if bedrock else "text/event-stream",
            request_id,
            "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        write = writer.write
        if self.delta_delay and frames:
            write(head.encode())
            for frame in frames:
                await asyncio.sleep(self.delta_delay)
                write(b"%x\r\n%s\r\n" % (len(frame), frame))
                await writer.drain()
        else:
            payload = b"".join(frames)
            write(head.encode() + (b"%x\r\n%s\r\n" % (len(payload), payload) if payload else b""))
        if close:
            await writer.drain()
            writer.transport.abort()
            return False
        write(b"0\r\n\r\n")
        await writer.drain()
        return True
