"""The AG-UI protocol: a ``RunAgentInput`` in, AG-UI events out over SSE (docs/ui.md).

Request → run: ``threadId`` names the session; the trailing user messages after the last
assistant message are the prompt; trailing ``tool`` messages are results of calls the client
ran (tools it declared in ``tools``); ``resume`` answers the interrupts of the previous run
(approvals of dangerous calls); ``state`` is kept with the thread. When the store does not
know the thread yet, the earlier messages seed its session.

Run → events: ``RUN_STARTED``; ``STATE_SNAPSHOT`` / ``MESSAGES_SNAPSHOT`` for a client that
sent no state / no messages on a known thread; ``TEXT_MESSAGE_*`` for text, ``REASONING_*``
for thinking, ``TOOL_CALL_START/ARGS/END`` as a call streams and ``TOOL_CALL_RESULT`` when it
has run;
``STEP_STARTED/FINISHED`` around each model turn; ``SUBAGENT_STARTED/FINISHED`` around a
sub-agent, whose events carry its ``subagentRunId`` (its agent path is in the started
event's ``metadata.fanloop.agentPath``); ``CUSTOM`` events ``fanloop.approval_requested`` /
``fanloop.approval_resolved``; then ``RUN_FINISHED`` — with ``outcome.type == "interrupt"``
and one interrupt per call waiting for a person, ``"success"`` with ``pendingToolCallIds``
when client tools wait for the client, ``"cancelled"`` — or ``RUN_ERROR``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Final

from .._log import logger
from .._result import RunResult, TerminationReason
from ..errors import ApprovalConflict, ApprovalError, FanloopError, ProviderError, RequestInvalid
from ..events import Event
from ..messages import Message, TextPart, ToolCallPart, ToolResultPart
from ..sessions import SessionStore
from ._core import (
    Bridge,
    ClientToolSpec,
    Lineage,
    PromptPart,
    Turn,
    answer_of,
    check_json,
    check_session_id,
    check_tool_name,
    detached,
    lifespan,
    loads,
    media_part,
    parse_off_loop,
    read_body,
    send_json,
    serve_sse,
    sse_frame,
    text_of,
    user_message,
)

__all__ = ["AGUIApp", "agui_events"]

PROTOCOL_VERSION: Final = "1.0"
MAX_MESSAGES = 2_000
MAX_RESUME = 64
MAX_CONTEXT = 64
MAX_STATE_BYTES = 256_000
MAX_STATE_DEPTH = 64
MAX_SCHEMA_BYTES = 32_000
STATE_KEY: Final = "fanloop.ui.state"
"""Session metadata: the AG-UI ``state`` last sent for the thread."""

APPROVAL_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string", "description": "Why the call was declined (optional)."},
    },
    "required": ["approved"],
}


class AGUIApp:
    """An ASGI app serving an agent over the AG-UI protocol::

        from fastapi import FastAPI
        from fanloop.ui import AGUIApp

        app = FastAPI()
        app.mount("/ag-ui", AGUIApp(agent))

    ``POST`` a ``RunAgentInput`` (JSON) to it; the answer is an SSE stream of AG-UI events.
    A malformed request is answered ``400`` with ``{"error": ..., "code": ...}`` before any
    stream starts. The run is cancelled when the client disconnects.

    Args:
        agent: the :class:`~fanloop.Agent` to serve.
        store: where threads' sessions live (default: in memory). Processes that share a
            ``SQLiteStore`` / ``PostgresStore`` can answer each other's approvals.
        ask_browser: dangerous calls become interrupts the browser answers (default);
            ``False`` leaves them to the agent's own ``confirm``.
        max_request_bytes: the largest request body accepted.
        buffer: events buffered between the run and the client.
        deps: a function of the parsed ``RunAgentInput`` (a dict) giving the run's ``deps``
            (e.g. from ``forwardedProps``).
    """

    def __init__(
        self,
        agent: Any,
        *,
        store: SessionStore | None = None,
        ask_browser: bool = True,
        max_request_bytes: int = 4_000_000,
        buffer: int = 64,
        deps: Callable[[Any], Any] | None = None,
    ) -> None:
        self.bridge = Bridge(agent, store=store, ask_browser=ask_browser, buffer=buffer, deps=deps)
        self.max_request_bytes = max_request_bytes

    @property
    def store(self) -> SessionStore:
        """The session store threads live in."""
        return self.bridge.store

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await send_json(send, 405, {"error": "POST a RunAgentInput", "code": "method"})
            return
        try:
            body, (turn, meta) = await parse_off_loop(
                await read_body(receive, self.max_request_bytes), parse_input
            )
        except RequestInvalid as exc:
            if exc.code != "disconnected":
                await send_json(send, 400, {"error": str(exc), "code": exc.code})
            return
        await serve_sse(receive, send, self._frames(turn, meta, body))

    async def _frames(self, turn: Turn, meta: _Meta, body: Any) -> AsyncIterator[bytes]:
        events = self.events_for(turn, meta, body)
        try:
            async for event in events:
                yield sse_frame(event)
        finally:
            await events.aclose()

    def events(
        self, run_input: Mapping[str, Any] | str | bytes
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The AG-UI events (dicts) of one request, for any framework. Close the generator
        (``aclose()``) to cancel a run you stop reading.

        Raises:
            RequestInvalid: ``run_input`` is malformed (raised by this call).
        """
        body = loads(run_input) if isinstance(run_input, str | bytes) else run_input
        turn, meta = parse_input(body)
        return self.events_for(turn, meta, body)

    def events_for(
        self, turn: Turn, meta: _Meta, body: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The events of a parsed request (see :meth:`events`)."""
        return detached(self._events_for(turn, meta, body))

    async def _events_for(
        self, turn: Turn, meta: _Meta, body: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        enc = _Encoder(meta, self.bridge.client_tool_names(turn), turn.client_results)
        yield enc.started()
        try:
            async with self.bridge.start(turn, request=body) as started:
                enc.client_names = self.bridge.client_tool_names(turn)  # as the run has them
                state = await _sync_state(started.session, meta)
                if state is not None:
                    yield {"type": "STATE_SNAPSHOT", "snapshot": state}
                if not meta.has_messages and started.session.messages:
                    yield {"type": "MESSAGES_SNAPSHOT", "messages": snapshot(started.session)}
                if started.stream is None:
                    for event in enc.idle(started.pending):
                        yield event
                    return
                run = started.stream
                try:
                    async for ev in run:
                        for out in enc.feed(ev):
                            yield out
                except Exception as exc:  # a failed run still ends its stream, with the error
                    if not isinstance(exc, FanloopError):
                        logger.exception("ui_run_failed", protocol="ag-ui", session=turn.session_id)
                    for out in enc.failed(exc):
                        yield out
                    return
                for out in enc.finish(run.result, started.session):
                    yield out
        except (RequestInvalid, ApprovalError) as exc:
            for out in enc.failed(exc):
                yield out


async def agui_events(
    agent: Any,
    run_input: Mapping[str, Any] | str | bytes,
    *,
    store: SessionStore | None = None,
    ask_browser: bool = True,
) -> AsyncIterator[str]:
    """The AG-UI answer to ``run_input`` as SSE strings (``"data: {...}\\n\\n"``), for any
    framework that can stream a response::

        @app.post("/ag-ui")
        async def ag_ui(request: Request) -> StreamingResponse:
            return StreamingResponse(
                agui_events(agent, await request.body(), store=store),
                media_type="text/event-stream",
            )

    Closing the iterator early (a client that left) cancels the run. For many requests, make
    one :class:`AGUIApp` and iterate ``app.events(run_input)`` instead: the app keeps what it
    builds from the agent between requests.

    Raises:
        RequestInvalid: ``run_input`` is malformed (before anything is yielded).
    """
    app = AGUIApp(agent, store=store, ask_browser=ask_browser)
    events = app.events(run_input)
    try:
        async for event in events:
            yield sse_frame(event).decode()
    finally:
        await events.aclose()


# -- the request -----------------------------------------------------------------------------


class _Meta:
    __slots__ = ("has_messages", "has_state", "run_id", "state", "thread_id")

    def __init__(
        self, thread_id: str, run_id: str, state: Any, has_state: bool, has_messages: bool
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.state = state
        self.has_state = has_state
        self.has_messages = has_messages


def parse_input(body: Any) -> tuple[Turn, _Meta]:
    """A ``RunAgentInput`` as a :class:`Turn`.

    Raises:
        RequestInvalid: a field is missing, of the wrong type, or over its cap.
    """
    if not isinstance(body, dict):
        raise RequestInvalid("a RunAgentInput is a JSON object", code="bad_input")
    thread_id = check_session_id(body.get("threadId"), "threadId")
    run_id = body.get("runId")
    if not isinstance(run_id, str) or not 0 < len(run_id) <= 200:
        raise RequestInvalid("runId must be a string of 1 to 200 characters", code="bad_input")
    messages = _list(body, "messages", MAX_MESSAGES)
    tools = tuple(_tool(t) for t in _list(body, "tools", 64))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise RequestInvalid("tools declares a name twice", code="bad_tool")
    answers: dict[str, bool | str] = {}
    for entry in _list(body, "resume", MAX_RESUME):
        if not isinstance(entry, dict) or not isinstance(entry.get("interruptId"), str):
            raise RequestInvalid("a resume entry needs an interruptId", code="bad_input")
        status = entry.get("status", "resolved")
        if status not in ("resolved", "cancelled"):
            raise RequestInvalid("resume status is 'resolved' or 'cancelled'", code="bad_input")
        answers[entry["interruptId"][:200]] = answer_of(status, entry.get("payload"))
    history, prompt, input_id, results = _split(messages)
    context = [c for c in _list(body, "context", MAX_CONTEXT) if isinstance(c, dict)]
    if prompt is not None and context:
        notes = "\n".join(
            f"- {str(c.get('description', ''))[:200]}: {str(c.get('value', ''))[:4000]}"
            for c in context
        )
        prompt = [*prompt, f"Context from the application:\n{notes}"]
    state = body.get("state")
    has_state = state is not None and state != {}
    if has_state:
        check_json(state, "state", max_bytes=MAX_STATE_BYTES, max_depth=MAX_STATE_DEPTH)
    turn = Turn(
        session_id=thread_id,
        prompt=prompt,
        input_id=input_id,
        history=tuple(history),
        answers=answers,
        client_results=results,
        client_tools=tools,
    )
    return turn, _Meta(thread_id, run_id, state, has_state, bool(messages))


def _list(body: dict[str, Any], key: str, cap: int) -> list[Any]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RequestInvalid(f"{key} must be a list", code="bad_input")
    if len(value) > cap:
        raise RequestInvalid(f"{key} has more than {cap} entries", code="too_large")
    return value


def _tool(value: Any) -> ClientToolSpec:
    if not isinstance(value, dict):
        raise RequestInvalid("a tool is an object with a name", code="bad_tool")
    name = check_tool_name(value.get("name"))
    params = value.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise RequestInvalid("a tool's parameters are a JSON schema object", code="bad_tool")
    if params is not None:
        check_json(params, f"the parameters of tool {name!r}", max_bytes=MAX_SCHEMA_BYTES)
    description = value.get("description", "")
    return ClientToolSpec(
        name=name,
        description=description[:4000] if isinstance(description, str) else "",
        parameters=params,
    )


def _split(
    messages: list[Any],
) -> tuple[list[Message], list[PromptPart] | None, str | None, dict[str, ToolResultPart]]:
    """Earlier history, the new prompt (and its message id), and client tool results."""
    last_assistant = -1
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestInvalid("a message is an object with a role", code="bad_input")
        if m.get("role") == "assistant":
            last_assistant = i
    tail = messages[last_assistant + 1 :]
    results: dict[str, ToolResultPart] = {}
    prompt: list[PromptPart] = []
    input_id: str | None = None
    for m in tail:
        role = m.get("role")
        if role == "tool":
            part = _result(m)
            results[part.call_id] = part
        elif role == "user":
            parts = _parts(m.get("content"))
            if parts:
                prompt += parts
                mid = m.get("id")
                input_id = mid[:200] if isinstance(mid, str) else None
    history = _history(messages[: last_assistant + 1] if prompt or results else messages)
    return history, prompt or None, input_id, results


MAX_PARTS = 64


def _parts(content: Any) -> list[PromptPart]:
    """A user message's content: text, images and PDFs in order (audio, video and other
    files are left out)."""
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        return []
    if len(content) > MAX_PARTS:
        raise RequestInvalid(f"a message has more than {MAX_PARTS} parts", code="too_large")
    out: list[PromptPart] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
            out.append(part["text"])
        elif kind in ("image", "document"):
            out.append(media_part(kind, part.get("source")))
    return out


def _result(m: dict[str, Any]) -> ToolResultPart:
    call_id = m.get("toolCallId")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
        raise RequestInvalid("a tool message needs a toolCallId", code="bad_input")
    error = m.get("error")
    content = text_of(m.get("content"))
    if isinstance(error, str) and error:
        content = content or error
    return ToolResultPart(call_id=call_id, content=content, is_error=bool(error))


def _history(messages: Iterable[dict[str, Any]]) -> list[Message]:
    """AG-UI messages as fanloop messages (system, developer, reasoning and activity
    messages are left out: the agent's own system prompt governs)."""
    out: list[Message] = []
    results: list[ToolResultPart] = []
    for m in messages:
        role = m.get("role")
        if m.get("subagentRunId") is not None:
            continue  # a sub-agent's own messages are not the conversation's
        if role == "tool":
            results.append(_result(m))
            continue
        if results:
            out.append(Message.tool_results(results))
            results = []
        if role == "user":
            given = _parts(m.get("content"))
            if given:
                out.append(user_message(given))
        elif role == "assistant":
            parts: list[TextPart | ToolCallPart] = []
            content = m.get("content")
            if isinstance(content, str) and content:
                parts.append(TextPart(text=content))
            for call in m.get("toolCalls") or ():
                parts.append(_call(call))
            if parts:
                out.append(Message(role="assistant", content=tuple(parts)))
    if results:
        out.append(Message.tool_results(results))
    return out


def _call(value: Any) -> ToolCallPart:
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict) or not isinstance(value.get("id"), str):
        raise RequestInvalid("a tool call needs an id and a function", code="bad_input")
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except (ValueError, RecursionError, TypeError):
        args = {}
    return ToolCallPart(
        id=value["id"][:200],
        name=str(fn.get("name", ""))[:64],
        arguments=args if isinstance(args, dict) else {},
    )


MAX_SNAPSHOT = 1_000
"""The most messages a ``MESSAGES_SNAPSHOT`` carries (the latest ones)."""


def snapshot(session: Any) -> list[dict[str, Any]]:
    """A session's conversation as AG-UI messages, for a client that has none (a reloaded
    page): user and assistant messages (with their tool calls) and tool results. Ids are
    ``<session id>:<index>``; a tool result's is ``<session id>:<index>:<call id>``."""
    out: list[dict[str, Any]] = []
    messages = session.messages
    start = max(0, len(messages) - MAX_SNAPSHOT)
    for index in range(start, len(messages)):
        message = messages[index]
        mid = f"{session.id}:{index}"
        results = message.tool_results_parts
        if results:
            for part in results:
                tool: dict[str, Any] = {
                    "id": f"{mid}:{part.call_id}",
                    "role": "tool",
                    "toolCallId": part.call_id,
                    "content": part.content,
                }
                if part.is_error:
                    tool["error"] = part.content[:2_000] or "error"
                out.append(tool)
            continue
        if message.role == "user":
            out.append({"id": mid, "role": "user", "content": message.text})
            continue
        entry: dict[str, Any] = {"id": mid, "role": "assistant"}
        if message.text:
            entry["content"] = message.text
        calls = message.tool_calls
        if calls:
            entry["toolCalls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in calls
            ]
        out.append(entry)
    return out


async def _sync_state(session: Any, meta: _Meta) -> Any:
    """Keep the client's state with the thread; give it back to a client that sent none."""
    stored = session.metadata.get(STATE_KEY)
    if meta.has_state:
        if stored != meta.state:
            await session.set_metadata(**{STATE_KEY: meta.state})
        return None
    return stored


# -- the events ------------------------------------------------------------------------------


def _id() -> str:
    return uuid.uuid4().hex


class _Encoder:
    """fanloop events → AG-UI events, one run's worth; keeps what is open so the stream
    always closes what it opened."""

    def __init__(
        self, meta: _Meta, client_names: frozenset[str], client_results: Mapping[str, Any]
    ) -> None:
        self.meta = meta
        self.client_names = client_names
        self.client_results = client_results
        self.lineage = Lineage()
        self.assistant: dict[str | None, str] = {}  # the current model answer's message id
        self.text: dict[str | None, str] = {}  # open text message
        self.reasoning: dict[str | None, str] = {}  # open reasoning span
        self.calls: dict[str, str | None] = {}  # open tool calls -> owner
        self.seen_calls: set[str] = set()
        self.steps: dict[str | None, str] = {}  # open step per owner
        self.subs: dict[str, list[str]] = {}  # open sub-runs -> agent path

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _tag(out: dict[str, Any], sub: str | None) -> dict[str, Any]:
        if sub is not None:
            out["subagentRunId"] = sub
        return out

    def _message_id(self, sub: str | None) -> str:
        mid = self.assistant.get(sub)
        if mid is None:
            mid = self.assistant[sub] = _id()
        return mid

    def _close_text(self, sub: str | None) -> list[dict[str, Any]]:
        out = []
        mid = self.text.pop(sub, None)
        if mid is not None:
            out.append(self._tag({"type": "TEXT_MESSAGE_END", "messageId": mid}, sub))
        rid = self.reasoning.pop(sub, None)
        if rid is not None:
            out.append(self._tag({"type": "REASONING_MESSAGE_END", "messageId": rid}, sub))
            out.append(self._tag({"type": "REASONING_END", "messageId": rid}, sub))
        return out

    def _close_calls(self, sub: str | None) -> list[dict[str, Any]]:
        ids = [cid for cid, owner in self.calls.items() if owner == sub]
        for cid in ids:
            del self.calls[cid]
        return [self._tag({"type": "TOOL_CALL_END", "toolCallId": cid}, sub) for cid in ids]

    def _close_step(self, sub: str | None) -> list[dict[str, Any]]:
        name = self.steps.pop(sub, None)
        if name is None:
            return []
        return [self._tag({"type": "STEP_FINISHED", "stepName": name}, sub)]

    def _close_all(self, sub: str | None) -> list[dict[str, Any]]:
        return [*self._close_text(sub), *self._close_calls(sub), *self._close_step(sub)]

    def _close_everything(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for sub in reversed(list(self.subs)):
            out += self._close_all(sub)
            out.append({"type": "SUBAGENT_FINISHED", "subagentRunId": sub})
        self.subs.clear()
        out += self._close_all(None)
        for cid, owner in list(self.calls.items()):
            out.append(self._tag({"type": "TOOL_CALL_END", "toolCallId": cid}, owner))
        self.calls.clear()
        return out

    # -- the run ---------------------------------------------------------------------------

    def started(self) -> dict[str, Any]:
        return {
            "type": "RUN_STARTED",
            "threadId": self.meta.thread_id,
            "runId": self.meta.run_id,
            "protocolVersion": PROTOCOL_VERSION,
        }

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        kind = ev.kind
        handler = _HANDLERS.get(kind)
        if handler is None:
            return []
        return handler(self, ev)

    def _text(self, ev: Any) -> list[dict[str, Any]]:
        if not ev.text:
            return []
        sub = self.lineage.of(ev)
        out: list[dict[str, Any]] = []
        rid = self.reasoning.pop(sub, None)
        if rid is not None:
            out.append(self._tag({"type": "REASONING_MESSAGE_END", "messageId": rid}, sub))
            out.append(self._tag({"type": "REASONING_END", "messageId": rid}, sub))
        mid = self.text.get(sub)
        if mid is None:
            mid = self.text[sub] = self._message_id(sub)
            out.append(
                self._tag(
                    {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}, sub
                )
            )
        out.append(
            self._tag({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": ev.text}, sub)
        )
        return out

    def _thinking(self, ev: Any) -> list[dict[str, Any]]:
        if not ev.text:
            return []
        sub = self.lineage.of(ev)
        out: list[dict[str, Any]] = []
        mid = self.text.pop(sub, None)
        if mid is not None:
            out.append(self._tag({"type": "TEXT_MESSAGE_END", "messageId": mid}, sub))
            self.assistant.pop(sub, None)  # text after this thinking is a new message
        rid = self.reasoning.get(sub)
        if rid is None:
            rid = self.reasoning[sub] = _id()
            out.append(self._tag({"type": "REASONING_START", "messageId": rid}, sub))
            out.append(
                self._tag(
                    {"type": "REASONING_MESSAGE_START", "messageId": rid, "role": "reasoning"}, sub
                )
            )
        out.append(
            self._tag(
                {"type": "REASONING_MESSAGE_CONTENT", "messageId": rid, "delta": ev.text}, sub
            )
        )
        return out

    def _call_start(self, sub: str | None, call_id: str, name: str) -> list[dict[str, Any]]:
        out = self._close_text(sub)
        self.calls[call_id] = sub
        self.seen_calls.add(call_id)
        out.append(
            self._tag(
                {
                    "type": "TOOL_CALL_START",
                    "toolCallId": call_id,
                    "toolCallName": name,
                    "parentMessageId": self._message_id(sub),
                },
                sub,
            )
        )
        return out

    def _tool_call_started(self, ev: Any) -> list[dict[str, Any]]:
        sub = self.lineage.of(ev)
        self.lineage.own_call(ev.call_id, ev)
        if ev.call_id in self.calls:
            return []
        return self._call_start(sub, ev.call_id, ev.name)

    def _tool_call_delta(self, ev: Any) -> list[dict[str, Any]]:
        if ev.call_id not in self.calls or not ev.arguments_delta:
            return []
        sub = self.calls[ev.call_id]
        return [
            self._tag(
                {"type": "TOOL_CALL_ARGS", "toolCallId": ev.call_id, "delta": ev.arguments_delta},
                sub,
            )
        ]

    def _response(self, ev: Any) -> list[dict[str, Any]]:
        sub = self.lineage.of(ev)
        out = self._close_text(sub)
        for part in ev.response.content:
            if isinstance(part, ToolCallPart) and part.id not in self.seen_calls:
                self.lineage.own_call(part.id, ev)
                out += self._call_start(sub, part.id, part.name)
                args = json.dumps(part.arguments, ensure_ascii=False)
                out.append(
                    self._tag({"type": "TOOL_CALL_ARGS", "toolCallId": part.id, "delta": args}, sub)
                )
        out += self._close_calls(sub)
        self.assistant.pop(sub, None)
        return out

    def _request(self, ev: Any) -> list[dict[str, Any]]:
        if ev.attempt != 1:
            return []
        sub = self.lineage.of(ev)
        out = self._close_step(sub)
        name = f"turn {ev.turn}"
        self.steps[sub] = name
        out.append(self._tag({"type": "STEP_STARTED", "stepName": name}, sub))
        return out

    def _retry(self, ev: Any) -> list[dict[str, Any]]:
        if not ev.discard_partial:
            return []
        sub = self.lineage.of(ev)
        out = [*self._close_text(sub), *self._close_calls(sub)]
        self.assistant.pop(sub, None)
        return out

    def _tool_finished(self, ev: Any) -> list[dict[str, Any]]:
        call_id = ev.call.id
        if call_id in self.client_results and ev.call.name in self.client_names:
            return []  # the client's own result: it has it already
        sub = self.lineage.of(ev)
        out: list[dict[str, Any]] = []
        if call_id in self.calls:
            out.append(
                self._tag({"type": "TOOL_CALL_END", "toolCallId": call_id}, self.calls.pop(call_id))
            )
        out.append(
            self._tag(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": _id(),
                    "toolCallId": call_id,
                    "content": ev.result.content,
                    "role": "tool",
                },
                sub,
            )
        )
        return out

    def _approval(self, ev: Any) -> list[dict[str, Any]]:
        if ev.call.name in self.client_names:
            return []
        sub = self.lineage.of(ev)
        value: dict[str, Any] = {
            "toolCallId": ev.call.id,
            "toolName": ev.call.name,
            "agentPath": list(ev.agent_path),
        }
        if ev.kind == "approval_requested":
            value["arguments"] = ev.call.arguments
            value["preview"] = ev.preview
            name = "fanloop.approval_requested"
        else:
            value["approved"] = ev.approved
            value["reason"] = ev.reason
            name = "fanloop.approval_resolved"
        return [self._tag({"type": "CUSTOM", "name": name, "value": value}, sub)]

    def _run_started(self, ev: Any) -> list[dict[str, Any]]:
        if self.lineage.is_root(ev):
            return []
        sub, parent = self.lineage.open(ev, ev.run_id)
        self.subs[sub] = list(ev.agent_path)
        out: dict[str, Any] = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": sub,
            "name": ev.agent_path[-1] if ev.agent_path else ev.agent_name,
            "metadata": {"fanloop": {"agentPath": list(ev.agent_path)}},
        }
        if parent is not None:
            out["parentSubagentRunId"] = parent
        if ev.parent_call_id is not None:
            out["parentToolCallId"] = ev.parent_call_id
        return [out]

    def _run_finished(self, ev: Any) -> list[dict[str, Any]]:
        if self.lineage.is_root(ev):
            return []
        sub = self.lineage.close(ev)
        if sub is None or sub not in self.subs:
            return []
        del self.subs[sub]
        out = self._close_all(sub)
        result: RunResult[Any] = ev.result
        out.append({"type": "SUBAGENT_FINISHED", "subagentRunId": sub, "result": result.text})
        return out

    # -- endings ---------------------------------------------------------------------------

    def finish(self, result: RunResult[Any], session: Any) -> list[dict[str, Any]]:
        out = self._close_everything()
        reason = result.termination_reason
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.meta.thread_id,
            "runId": self.meta.run_id,
            "usage": [_usage(result)],
            "metadata": {
                "fanloop": {
                    "terminationReason": str(reason),
                    "detail": result.detail,
                    "costUsd": result.cost_usd,
                    "turns": result.turns,
                    "toolCalls": result.tool_calls,
                }
            },
        }
        if reason is TerminationReason.AWAITING_APPROVAL:
            interrupts = [
                _interrupt(p) for p in result.pending_approvals if p.name not in self.client_names
            ]
            if interrupts:
                finished["outcome"] = {"type": "interrupt", "interrupts": interrupts}
            else:
                finished["outcome"] = {
                    "type": "success",
                    "pendingToolCallIds": self._client_pending(session),
                }
        elif reason is TerminationReason.CANCELLED:
            finished["outcome"] = {"type": "cancelled"}
        else:
            finished["outcome"] = {"type": "success"}
            finished["result"] = _output(result)
        out.append(finished)
        return out

    def _client_pending(self, session: Any) -> list[str]:
        messages = session.messages
        if not messages or messages[-1].role != "assistant":
            return []
        return [
            c.id
            for c in messages[-1].tool_calls
            if c.name in self.client_names and c.id not in self.client_results
        ]

    def idle(self, pending: tuple[Any, ...]) -> list[dict[str, Any]]:
        """No run: nothing new, or calls still wait (their interrupts are offered again)."""
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.meta.thread_id,
            "runId": self.meta.run_id,
        }
        interrupts = [_interrupt(p) for p in pending if p.name not in self.client_names]
        if interrupts:
            finished["outcome"] = {"type": "interrupt", "interrupts": interrupts}
        elif pending:
            finished["outcome"] = {
                "type": "success",
                "pendingToolCallIds": [p.call_id for p in pending],
            }
        else:
            finished["outcome"] = {"type": "success"}
        return [finished]

    def failed(self, exc: BaseException) -> list[dict[str, Any]]:
        out = self._close_everything()
        if isinstance(exc, ApprovalConflict):
            code = "approval_conflict"
        elif isinstance(exc, ApprovalError):
            code = "approval_invalid"
        elif isinstance(exc, RequestInvalid):
            code = exc.code
        elif isinstance(exc, ProviderError):
            code = "provider_error"
        else:
            code = type(exc).__name__
        # Only fanloop's own messages reach the browser: another's may hold server internals.
        message = str(exc)[:4000] if isinstance(exc, FanloopError) else ""
        out.append(
            {
                "type": "RUN_ERROR",
                "message": message or f"the run failed ({type(exc).__name__})",
                "code": code,
            }
        )
        return out


def _interrupt(p: Any) -> dict[str, Any]:
    return {
        "id": p.call_id,
        "reason": "tool_approval",
        "message": p.preview[:20_000],
        "toolCallId": p.call_id,
        "responseSchema": APPROVAL_SCHEMA,
        "metadata": {"fanloop": {"toolName": p.name, "arguments": p.arguments}},
    }


def _usage(result: RunResult[Any]) -> dict[str, Any]:
    u = result.usage
    out: dict[str, Any] = {
        "inputTokens": u.total_input_tokens,
        "outputTokens": u.output_tokens,
        "totalTokens": u.total_input_tokens + u.output_tokens,
    }
    if u.reasoning_tokens:
        out["reasoningTokens"] = u.reasoning_tokens
    if u.cache_read_tokens:
        out["cachedInputTokens"] = u.cache_read_tokens
    if u.cache_write_tokens:
        out["cacheWriteInputTokens"] = u.cache_write_tokens
    return out


def _output(result: RunResult[Any]) -> Any:
    output = result.output
    if output is None or isinstance(output, str | int | float | bool):
        return output
    dump = getattr(output, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    try:
        return json.loads(json.dumps(output, default=str))
    except (TypeError, ValueError):
        return str(output)


_HANDLERS: dict[str, Callable[[_Encoder, Any], list[dict[str, Any]]]] = {
    "text_delta": _Encoder._text,
    "thinking_delta": _Encoder._thinking,
    "tool_call_started": _Encoder._tool_call_started,
    "tool_call_delta": _Encoder._tool_call_delta,
    "response_completed": _Encoder._response,
    "request_started": _Encoder._request,
    "retry_scheduled": _Encoder._retry,
    "tool_finished": _Encoder._tool_finished,
    "approval_requested": _Encoder._approval,
    "approval_resolved": _Encoder._approval,
    "run_started": _Encoder._run_started,
    "run_finished": _Encoder._run_finished,
}
