"""What every browser protocol shares: a request turned into a run, a run turned into SSE.

A protocol adapter (``_agui.py``, and any other) does three things and leaves the rest here:

1. Parse its request into a :class:`Turn`: the session id (AG-UI's thread id, the Vercel chat
   id), the new user input, the history a client holds for a session the store does not know
   yet, the answers to parked approvals, the results of calls the client ran itself, and the
   tools the client declared.
2. Hand it to :meth:`Bridge.start`, which opens the session from the :class:`SessionStore`
   and returns an ``async with`` :class:`~fanloop.RunStream`: a new run on the prompt, or
   ``agent.resume(session, approvals=...)`` when the session waits for answers. Iterating it
   yields fanloop's own events (bounded buffer: a slow consumer slows the run).
3. Map those events to its wire format, using :class:`Lineage` for sub-agents, and write them
   with :func:`serve_sse` (ASGI), which streams with back-pressure and cancels the run when
   the client disconnects.

Approvals. The bridge's agent has a ``confirm`` that returns :data:`~fanloop.DEFER` for every
dangerous call: the run parks with ``awaiting_approval``, the pending calls are persisted in
the session, and the protocol tells the browser. The answer arrives on a later request (to any
process sharing the store) as ``Turn.answers`` and is applied with ``agent.resume``; two
answers racing for one batch end in :class:`~fanloop.errors.ApprovalConflict` for one of them.
With ``ask_browser=False`` the agent's own ``confirm`` (or ``auto_approve``) decides instead.

Client tools. A tool the client declares becomes a :class:`ClientTool` of the run: dangerous,
so a call parks the run exactly as an approval does; the client runs it and sends the result
back (``Turn.client_results``); the resumed run's call then returns that result instead of
running anything. Several client calls of one turn park one after the other, so the client
may answer all of them at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import inspect
import json
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskGroup

from .._agent import _AUTO_TOOLS
from .._approvals import DEFER, pending_approvals
from .._handoff import HandoffTool
from .._log import logger
from .._stream import RunStream
from ..errors import ApprovalError, RequestInvalid
from ..events import Event
from ..messages import DocumentPart, ImagePart, Message, TextPart, ToolCallPart, ToolResultPart
from ..sessions import MemoryStore, Session, SessionStore
from ..tools.base import Tool, ToolResult, current_context

PromptPart = str | ImagePart | DocumentPart

__all__ = [
    "Bridge",
    "ClientTool",
    "ClientToolSpec",
    "Lineage",
    "PromptPart",
    "Started",
    "Turn",
    "answer_of",
    "check_json",
    "check_session_id",
    "check_tool_name",
    "detached",
    "lifespan",
    "loads",
    "media_part",
    "parse_off_loop",
    "read_body",
    "send_body",
    "send_json",
    "serve_sse",
    "sse_frame",
    "text_of",
    "user_message",
]

MAX_TOOL_NAME = 64
MAX_CLIENT_TOOLS = 64
MAX_SESSION_ID = 200
MAX_REASON_CHARS = 2_000
MAX_SCHEMA_BYTES = 32_000
MAX_JSON_DEPTH = 32
# What model APIs accept as a tool name (fullmatch: ``$`` would let a trailing newline in).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,200}")

_T = TypeVar("_T")

LAST_INPUT_KEY: Final = "fanloop.ui.last_input"
"""Session metadata: the id of the last client message turned into a prompt (a client that
sends the same conversation again does not run its last message twice)."""

_NO_RESULTS: Mapping[str, ToolResultPart] = MappingProxyType({})
_client_results: contextvars.ContextVar[Mapping[str, ToolResultPart]] = contextvars.ContextVar(
    "fanloop_ui_client_results", default=_NO_RESULTS
)


@dataclass(frozen=True, slots=True)
class ClientToolSpec:
    """A tool the client declared: it runs in the browser, not on the server."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Turn:
    """One request, protocol-free.

    Attributes:
        session_id: the conversation (thread id, chat id).
        prompt: the new user input (text, or text, images and PDFs in order), or ``None``
            (answers only, or nothing new).
        input_id: the client's id of the message ``prompt`` came from, if it has one.
        history: what the client holds before ``prompt``, used only when the store has no
            message of this session yet.
        answers: answers to parked approvals: ``True``, ``False`` or a reason string.
        client_results: results of calls the client ran itself, by call id.
        client_tools: the tools the client declared for this run.
    """

    session_id: str
    prompt: str | list[PromptPart] | None = None
    input_id: str | None = None
    history: tuple[Message, ...] = ()
    answers: dict[str, bool | str] = field(default_factory=dict)
    client_results: dict[str, ToolResultPart] = field(default_factory=dict)
    client_tools: tuple[ClientToolSpec, ...] = ()


class ClientTool(Tool):
    """A tool the browser runs: a call parks the run until the client sends its result."""

    dangerous = True

    def __init__(self, spec: ClientToolSpec) -> None:
        self.name = spec.name
        self.description = spec.description or f"{spec.name} (runs in the user's browser)"
        params = spec.parameters
        self.parameters = dict(params) if params else {"type": "object", "properties": {}}

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        # The client checks its own schema: a schema sent over the wire is not compiled here.
        return dict(arguments)

    def preview(self, **kwargs: Any) -> str:
        return f"{self.name} runs in the browser"

    async def run(self, **kwargs: Any) -> ToolResult:
        part = _client_results.get().get(current_context().call.id)
        if part is None:
            return ToolResult("Not run: the client sent no result for this call.", is_error=True)
        return ToolResult(part.content, is_error=part.is_error)


class Bridge:
    """Runs an agent for requests that arrive over a browser protocol.

    Build one per application (it caches the agent variants it makes) and call
    :meth:`start` per request.

    Args:
        agent: the :class:`~fanloop.Agent`.
        store: where sessions live (default: a new in-memory store). Share a
            :class:`~fanloop.sessions.SQLiteStore` or ``PostgresStore`` between processes
            to answer approvals anywhere.
        ask_browser: dangerous calls wait for the browser's answer (``DEFER``); ``False``
            leaves them to the agent's own ``confirm``.
        buffer: events buffered between the run and the client.
        deps: a function of the parsed request giving the run's ``deps``.
    """

    def __init__(
        self,
        agent: Any,
        *,
        store: SessionStore | None = None,
        ask_browser: bool = True,
        buffer: int = 64,
        deps: Callable[[Any], Any] | None = None,
    ) -> None:
        self.agent = agent
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.ask_browser = ask_browser
        self.buffer = buffer
        self.deps = deps
        self._own_confirm = agent.confirm
        self._own_auto = agent.auto_approve
        self._variants: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._base = self._variant(())
        self._busy: set[str] = set()

    # -- agent variants --------------------------------------------------------------------

    def _variant(self, specs: tuple[ClientToolSpec, ...]) -> Any:
        key = tuple(
            (s.name, s.description, json.dumps(s.parameters, sort_keys=True, default=str))
            for s in specs
        )
        found = self._variants.get(key)
        if found is not None:
            self._variants.move_to_end(key)
            return found
        own = set(self.agent.tools)
        tools = [ClientTool(s) for s in specs if s.name not in own]
        names = frozenset(t.name for t in tools)
        changes: dict[str, Any] = {"confirm": self._confirm_for(names), "auto_approve": False}
        if tools:
            changes["tools"] = [
                *(
                    t
                    for t in self.agent.tools.values()
                    if t.name not in _AUTO_TOOLS and not isinstance(t, HandoffTool)
                ),
                *tools,
            ]
        variant = self.agent.with_options(**changes)
        self._variants[key] = variant
        if len(self._variants) > 32:
            self._variants.popitem(last=False)
        return variant

    def _confirm_for(self, client_names: frozenset[str]) -> Callable[..., Awaitable[Any]]:
        own = self._own_confirm
        auto = self._own_auto
        browser = self.ask_browser
        takes_call = own is not None and _takes_call(own)

        async def confirm(name: str, preview: str, call: ToolCallPart) -> Any:
            if name in client_names:  # the client runs it: wait for its result
                return True if call.id in _client_results.get() else DEFER
            if browser:
                return DEFER
            if auto:
                return True
            if own is None:
                return False
            answer = own(name, preview, call) if takes_call else own(name, preview)
            if inspect.isawaitable(answer):
                answer = await answer
            return answer

        return confirm

    def agent_for(self, turn: Turn) -> Any:
        """The agent a run of ``turn`` uses: the bridge's, plus the client's tools."""
        return self._variant(turn.client_tools) if turn.client_tools else self._base

    def client_tool_names(self, turn: Turn) -> frozenset[str]:
        """The names of the tools of ``turn`` that the client runs."""
        own = set(self.agent.tools)
        return frozenset(s.name for s in turn.client_tools if s.name not in own)

    # -- runs ------------------------------------------------------------------------------

    @asynccontextmanager
    async def start(self, turn: Turn, *, request: Any = None) -> AsyncIterator[Started]:
        """Open the session of ``turn`` and start its run (or nothing, when there is
        nothing to do); leaving the block cancels a run still going.

        Raises:
            RequestInvalid: the turn cannot run (the session is busy in this process, it
                waits for answers that were not given, or there is nothing to run).
            ApprovalError: answers that do not match what the session waits for.
            ApprovalConflict: another request is answering, or has answered, them.
        """
        sid = turn.session_id
        if sid in self._busy:
            raise RequestInvalid(
                f"session {sid!r} is running another request; wait for it to finish",
                code="session_busy",
            )
        self._busy.add(sid)
        try:
            session = await self.store.open(sid)
            started = await self._plan(session, turn, request)
            async with AsyncExitStack() as stack:
                if started.stream is not None:
                    # The run's task copies the context as it starts: the client's results
                    # are set for it (and its tools) only.
                    token = _client_results.set(turn.client_results)
                    try:
                        await stack.enter_async_context(started.stream)
                    finally:
                        _client_results.reset(token)
                yield started
        finally:
            self._busy.discard(sid)

    async def _plan(self, session: Session, turn: Turn, request: Any) -> Started:
        deps = self.deps(request) if self.deps is not None else None
        pending = pending_approvals(session)
        if pending:
            # A client's result answers a call to a tool the client runs (one the agent does
            # not have), declared again in this request or not.
            declared = {s.name for s in turn.client_tools}
            answered = [
                p
                for p in pending
                if p.call_id in turn.client_results and p.name not in self.agent.tools
            ]
            turn.client_tools = (
                *turn.client_tools,
                *(ClientToolSpec(p.name) for p in answered if p.name not in declared),
            )
            waiting = {p.call_id for p in pending}
            unknown = sorted(set(turn.answers) - waiting)
            if unknown:
                from .._approvals import check_not_answered

                check_not_answered(session, unknown)  # ApprovalConflict(answered=True)
                raise ApprovalError(
                    f"no call of session {session.id!r} waits for the answers to "
                    f"{', '.join(unknown)}; waiting: {', '.join(sorted(waiting))}"
                )
            answers = dict(turn.answers)
            answers.update(dict.fromkeys((p.call_id for p in answered), True))
            missing = [p for p in pending if p.call_id not in answers]
            if missing:
                return Started(session, None, pending=tuple(missing))
            stream = self.agent_for(turn).stream(
                session=session, resume=True, approvals=answers, deps=deps, buffer=self.buffer
            )
            return Started(session, stream, resumed=True)
        if turn.answers:
            from .._approvals import check_not_answered

            check_not_answered(session, turn.answers)  # ApprovalConflict(answered=True)
            raise RequestInvalid(
                f"session {session.id!r} waits for no approval", code="nothing_pending"
            )
        prompt = turn.prompt
        if turn.input_id is not None and session.metadata.get(LAST_INPUT_KEY) == turn.input_id:
            prompt = None  # the same message again: it has run
        if not session.messages and turn.history:
            await session.extend(_closed(turn.history))
        if prompt is None:
            return Started(session, None)
        if turn.input_id is not None:
            await session.set_metadata(**{LAST_INPUT_KEY: turn.input_id})
        stream = self.agent_for(turn).stream(prompt, session=session, deps=deps, buffer=self.buffer)
        return Started(session, stream)


@dataclass(slots=True)
class Started:
    """What :meth:`Bridge.start` started.

    Attributes:
        session: the run's session.
        stream: the run's events (``None``: no run, see ``pending``).
        resumed: the run goes on with a parked batch.
        pending: with no run, the calls that still wait for an answer.
    """

    session: Session
    stream: RunStream[Any] | None
    resumed: bool = False
    pending: tuple[Any, ...] = ()


def _closed(history: Sequence[Message]) -> list[Message]:
    """``history`` without a trailing assistant message whose calls have no results (a
    session must not start on an open turn)."""
    out = list(history)
    if out and out[-1].role == "assistant" and out[-1].tool_calls:
        out.pop()
    return out


def _takes_call(confirm: Any) -> bool:
    try:
        params = list(inspect.signature(confirm).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)


# -- lineage ---------------------------------------------------------------------------------


class Lineage:
    """Names the sub-agent runs of a run's events, for protocols that group them.

    The root agent's events have no sub-run (``None``). Each sub-agent invocation gets the id
    of its ``run_started`` event; the sub-run that made a delegating call is its parent.
    """

    __slots__ = ("_call_owner", "_runs")

    def __init__(self) -> None:
        self._runs: dict[tuple[tuple[str, ...], str | None], str] = {}
        self._call_owner: dict[str, str | None] = {}

    @staticmethod
    def is_root(event: Event) -> bool:
        """Whether ``event`` comes from the root agent."""
        return event.parent_call_id is None and len(event.agent_path) <= 1

    def open(self, event: Event, run_id: str) -> tuple[str, str | None]:
        """Record a sub-agent's ``run_started``: its sub-run id and its parent sub-run."""
        self._runs[(event.agent_path, event.parent_call_id)] = run_id
        parent = self._call_owner.get(event.parent_call_id or "")
        return run_id, parent

    def of(self, event: Event) -> str | None:
        """The sub-run ``event`` belongs to (``None`` for the root agent)."""
        if self.is_root(event):
            return None
        return self._runs.get((event.agent_path, event.parent_call_id))

    def own_call(self, call_id: str, event: Event) -> None:
        """Record who made a tool call (for a delegation's parent)."""
        if len(self._call_owner) < 100_000:
            self._call_owner[call_id] = self.of(event)

    def close(self, event: Event) -> str | None:
        """Forget a sub-agent whose run finished; its sub-run id."""
        return self._runs.pop((event.agent_path, event.parent_call_id), None)


# -- the wire --------------------------------------------------------------------------------


# Made once. ASCII-escaped: a lone surrogate (from a model or a client) stays valid JSON
# instead of failing the UTF-8 encoding of the frame.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def sse_frame(data: Any) -> bytes:
    """One SSE event: ``data: {json}`` and a blank line."""
    return f"data: {_encode(data)}\n\n".encode("ascii")


async def read_body(receive: Callable[[], Awaitable[dict[str, Any]]], limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes.

    Raises:
        RequestInvalid: the body is larger than ``limit``, or the client left.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestInvalid("the client disconnected", code="disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestInvalid(f"the request body is over {limit} bytes", code="too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def loads(body: bytes | str) -> Any:
    """JSON from a request body, as :class:`RequestInvalid` when it is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RequestInvalid(f"the request body is not JSON: {exc}", code="bad_json") from None


_PARSE_IN_THREAD = 64 * 1024


async def parse_off_loop(raw: bytes, parse: Callable[[Any], _T]) -> tuple[Any, _T]:
    """A request body as JSON, and ``parse`` of it; in a worker thread when the body is
    large (parsing megabytes, decoding base64 images, must not stall every other stream).

    Raises:
        RequestInvalid: the body is not JSON, or ``parse`` refuses it.
    """

    def work() -> tuple[Any, _T]:
        body = loads(raw)
        return body, parse(body)

    if len(raw) < _PARSE_IN_THREAD:
        return work()
    return await anyio.to_thread.run_sync(work)


async def send_json(
    send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: Any
) -> None:
    """A plain JSON response (for requests refused before a stream starts)."""
    await send_body(send, status, json.dumps(body).encode(), b"application/json")


async def send_body(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    status: int,
    body: bytes,
    content_type: bytes,
) -> None:
    """A whole response in one piece, with its length."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


async def serve_sse(
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
    frames: AsyncIterator[bytes],
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Stream ``frames`` as an SSE response.

    Each frame is written as it comes; the server's ``send`` waits while the client's
    socket is full, so a client that does not read stops the run at its bounded buffer
    instead of growing memory. A client that disconnects cancels the frames' producer
    (and with it the run) at once, even while the run is quiet.

    The frames are read, and closed, in a task of their own: whatever cancel scope their
    generator holds is entered and left in that task with no scope of ours in between (a
    server's forced shutdown cancels us anywhere, even mid-``send``).
    """
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]})
    gone = False

    async def pump(tg: TaskGroup) -> None:
        nonlocal gone
        try:
            async for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the server found the socket closed before the disconnect message
            gone = True
        finally:
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()
            tg.cancel_scope.cancel()  # done: stop watching for the disconnect

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, tg)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
                tg.cancel_scope.cancel()
                break
    if gone:
        logger.info("ui_client_disconnected")


async def detached(
    source: AsyncGenerator[_T, None], *, buffer: int = 8, grace: float = 30.0
) -> AsyncGenerator[_T, None]:
    """``source``'s items, produced in a task of its own.

    A generator that holds a run (its task group, its cancel scopes) must be closed by the
    task that opened it. Frameworks do not promise that: Starlette's ``StreamingResponse``
    drops an iterator it cancelled, and Python then closes it from a new task. Here the
    run stays in its own task; this generator holds no scope across a ``yield``, and closing
    it, from any task, cancels the producer and waits (at most ``grace`` seconds) for the
    run to end.

    Raises:
        Exception: what ``source`` raised, after the items it gave before.
    """
    send, recv = anyio.create_memory_object_stream[_T](buffer)
    failure: list[BaseException] = []

    async def produce() -> None:
        try:
            async with send:
                async for item in source:
                    await send.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the reader left
        except Exception as exc:
            failure.append(exc)
        finally:
            await source.aclose()

    task = asyncio.get_running_loop().create_task(produce())
    try:
        async with recv:
            async for item in recv:
                yield item
        await asyncio.wait({task})  # the run's own ending (its session saved) is part of it
        if failure:
            raise failure[0]
    finally:
        recv.close()
        if not task.done():
            task.cancel()
            with anyio.move_on_after(grace, shield=True):
                await asyncio.wait({task})


async def lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI lifespan (the apps have nothing to start or stop)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def check_session_id(value: Any, what: str) -> str:
    """A session id from the client: printable ASCII, at most 200 characters."""
    if not isinstance(value, str) or not _SESSION_ID.fullmatch(value):
        raise RequestInvalid(
            f"{what} must be 1 to {MAX_SESSION_ID} printable ASCII characters", code="bad_id"
        )
    return value


def check_tool_name(value: Any) -> str:
    """A client tool's name: letters, digits, ``_`` and ``-``, at most 64 characters (what
    model APIs accept)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise RequestInvalid(
            "a tool name must be 1 to 64 letters, digits, '_' or '-'", code="bad_tool"
        )
    return value


def check_json(value: Any, what: str, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a client's JSON value nested deeper than ``max_depth`` or larger than
    ``max_bytes`` once encoded (walked without recursion).

    Raises:
        RequestInvalid: the value is too deep or too large.
    """
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    for _ in range(max_depth):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
    if level:
        raise RequestInvalid(f"{what} is nested over {max_depth} levels deep", code="too_large")
    if len(_encode(value)) > max_bytes:
        raise RequestInvalid(f"{what} is over {max_bytes} bytes", code="too_large")


def answer_of(status: str, payload: Any) -> bool | str:
    """An approval answer from a client's reply: ``True``, or a reason for declining."""
    if status == "cancelled":
        return "The user cancelled this call."
    if payload is True:
        return True
    if isinstance(payload, dict):
        if payload.get("approved") is True:
            return True
        reason = payload.get("reason")
        if isinstance(reason, str) and reason.strip():
            return "Declined by the user: " + reason[:MAX_REASON_CHARS]
        return "The user declined this call."
    if isinstance(payload, str) and payload.strip():
        return "Declined by the user: " + payload[:MAX_REASON_CHARS]
    return "The user declined this call."


def user_message(parts: str | Sequence[PromptPart]) -> Message:
    """A user message holding ``parts`` (plain strings become text parts)."""
    if isinstance(parts, str):
        parts = [parts]
    return Message(
        role="user", content=tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts)
    )


def media_part(kind: str, source: Any) -> ImagePart | DocumentPart:
    """An image or PDF from a client's ``{"type": "data" | "url", "value", "mimeType"}``.

    Raises:
        RequestInvalid: the source is malformed, not base64, too large, or of a media type
            the model cannot take.
    """
    if not isinstance(source, dict) or not isinstance(source.get("value"), str):
        raise RequestInvalid(f"an {kind} part needs a source with a value", code="bad_part")
    value, mime = source["value"], source.get("mimeType")
    try:
        if source.get("type") == "url":
            fields: dict[str, Any] = {"url": value}
        elif source.get("type") == "data":
            fields = {"data": base64.b64decode(value, validate=True)}
        else:
            raise RequestInvalid(f"an {kind} part's source is data or url", code="bad_part")
        if kind == "image":
            if isinstance(mime, str):
                fields["media_type"] = mime
            return ImagePart(**fields)
        return DocumentPart(**fields)
    except (ValueError, binascii.Error) as exc:  # pydantic's ValidationError is a ValueError
        raise RequestInvalid(f"an {kind} part is invalid: {exc}"[:500], code="bad_part") from None
