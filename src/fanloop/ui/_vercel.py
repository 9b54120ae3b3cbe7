"""The Vercel AI SDK UI message stream: ``useChat`` requests in, UI message chunks out.

A request is what ``useChat``'s default transport posts: ``{"id": chat id, "messages":
UIMessage[], "trigger": ..., "messageId": ...}``. The chat id names the session; the store is
the conversation's memory, so of the messages only the last one is read: a user message's text
is the new prompt, an assistant message's tool parts in the ``approval-responded`` state answer
the calls that wait for approval (SDK v6). A body field ``approvals`` (``{call_id: true | false |
"reason"}``) answers them for any client, v5 included. The earlier messages seed a session the
store does not know yet (text only).

The response is SSE with the header ``x-vercel-ai-ui-message-stream: v1``: one chunk per
``data:`` line, ending ``data: [DONE]``. Each chunk type and field is the one the ``ai``
package's ``uiMessageChunkSchema`` accepts (v5 and v6):

============================  ================================================================
fanloop event                 chunks
============================  ================================================================
run begins                    ``start`` (``messageId``, ``messageMetadata.sessionId``)
model request                 ``start-step`` (and ``finish-step`` for the step before)
text / thinking deltas        ``text-start/delta/end``, ``reasoning-start/delta/end``
a streamed tool call          ``tool-input-start``, ``tool-input-delta``
the response's tool calls     ``tool-input-available`` (the parsed arguments)
tool result                   ``tool-output-available``, or ``tool-output-error`` (an error
                              result, a declined call with its reason)
run parked for approval       ``data-approval-request`` (tool, input, preview), and in v6
                              ``tool-approval-request`` (``approvalId`` is the call id)
a declined call               v6, answered in its tool part: ``tool-output-denied``;
                              otherwise ``tool-output-error`` with the reason
sub-agent runs                ``data-agent`` (one part per sub-run, updated when it ends) and
                              transient ``data-agent-event`` chunks (its text, reasoning,
                              tool calls), each with ``agentPath`` and ``parentCallId``
run fails                     ``error`` (``errorText``)
run ends                      ``finish`` (``finishReason``, ``messageMetadata``: usage, cost,
                              termination reason)
============================  ================================================================
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .._approvals import PendingApproval
from .._log import logger
from .._model_types import Usage
from .._result import RunResult, TerminationReason
from ..errors import ApprovalError, ConfigurationError, FanloopError, RequestInvalid
from ..events import (
    ApprovalResolved,
    Event,
    ProviderFallback,
    RequestStarted,
    ResponseCompleted,
    RetryScheduled,
    RunFinished,
    RunStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
)
from ..messages import Message, TextPart, ToolCallPart
from ..sessions import SessionStore
from ._core import (
    Bridge,
    Lineage,
    PromptPart,
    Turn,
    answer_of,
    check_session_id,
    detached,
    lifespan,
    media_part,
    parse_off_loop,
    read_body,
    send_json,
    serve_sse,
    sse_frame,
)

__all__ = ["UI_MESSAGE_STREAM_HEADERS", "VercelAIApp", "vercel_chunks"]

UI_MESSAGE_STREAM_HEADERS: Final[Mapping[str, str]] = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}
"""The headers of a UI message stream response (for frameworks that stream the chunks)."""

DONE: Final = b"data: [DONE]\n\n"
_STREAM_HEADER: Final = ((b"x-vercel-ai-ui-message-stream", b"v1"),)

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_MESSAGES = 1_000
MAX_PARTS = 1_000
MAX_PROMPT_CHARS = 200_000
MAX_HISTORY_CHARS = 1_000_000
MAX_ANSWERS = 100
MAX_ID_CHARS = 200
MAX_SUBAGENT_OUTPUT = 4_000
MAX_SUBRUNS = 10_000

Version = Literal[5, 6]

_FINISH_REASONS: Final[Mapping[str, str]] = {
    TerminationReason.COMPLETED: "stop",
    TerminationReason.AWAITING_APPROVAL: "tool-calls",
    TerminationReason.MAX_TOKENS: "length",
    TerminationReason.MODEL_REFUSAL: "content-filter",
    TerminationReason.GUARDRAIL_TRIPPED: "content-filter",
    TerminationReason.PROVIDER_ERROR: "error",
}


# -- the request ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A ``useChat`` request, read.

    Attributes:
        turn: what to run (the protocol-free request).
        assistant_id: the id of the client's last message when it is the assistant's: the
            message a resumed run goes on writing.
        shown: the tool call ids that message already shows.
        answered_in_parts: the calls answered through their tool part (SDK v6).
    """

    turn: Turn
    assistant_id: str | None = None
    shown: frozenset[str] = frozenset()
    answered_in_parts: frozenset[str] = frozenset()


def parse_request(body: Any) -> ChatRequest:
    """Read a ``useChat`` request body: of the messages, only the last one is run (the
    session holds the conversation); the earlier ones seed a session the store does not know.

    Raises:
        RequestInvalid: the body is not a chat request, or is over one of its caps.
    """
    if not isinstance(body, dict):
        raise RequestInvalid("the request body must be a JSON object", code="bad_request")
    chat_id = body.get("id")
    session_id = (
        check_session_id(chat_id, "the chat id") if chat_id is not None else _new_id("chat")
    )
    messages = _messages(body.get("messages", []))
    turn = Turn(session_id=session_id, answers=_body_answers(body.get("approvals")))
    last = messages[-1] if messages else {}
    if last.get("role") == "user":
        turn.prompt = _prompt(last.get("parts", []))
        if body.get("trigger") != "regenerate-message":  # regenerate asks the same again
            turn.input_id = _id_or_none(last.get("id"))
        turn.history = _history(messages[:-1])
        return ChatRequest(turn)
    turn.history = _history(messages)
    if last.get("role") != "assistant":
        return ChatRequest(turn)
    parts = [p for p in last.get("parts", []) if isinstance(p, dict)]
    in_parts = _part_answers(parts)
    for call_id, answer in in_parts.items():
        turn.answers.setdefault(call_id, answer)
    return ChatRequest(
        turn,
        assistant_id=_id_or_none(last.get("id")),
        shown=frozenset(p["toolCallId"] for p in parts if isinstance(p.get("toolCallId"), str)),
        answered_in_parts=frozenset(in_parts),
    )


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list):
        raise RequestInvalid("messages must be a list of UI messages", code="bad_messages")
    if len(messages) > MAX_MESSAGES:
        raise RequestInvalid(f"over {MAX_MESSAGES} messages", code="too_many_messages")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("parts", []), list):
            raise RequestInvalid("each message must be an object with parts", code="bad_messages")
        if len(m.get("parts", [])) > MAX_PARTS:
            raise RequestInvalid(f"a message has over {MAX_PARTS} parts", code="too_many_parts")
    return messages


def _body_answers(value: Any) -> dict[str, bool | str]:
    """The ``approvals`` body field: ``{call_id: true | false | "reason"}`` (any SDK version)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ANSWERS:
        raise RequestInvalid(
            f"approvals must map at most {MAX_ANSWERS} call ids to true, false or a reason",
            code="bad_approvals",
        )
    out: dict[str, bool | str] = {}
    for call_id, answer in value.items():
        if len(call_id) > MAX_ID_CHARS or not isinstance(answer, bool | str):
            raise RequestInvalid(
                f"the approval of {call_id[:MAX_ID_CHARS]!r} must be true, false or a reason "
                f"(a call id of at most {MAX_ID_CHARS} characters)",
                code="bad_approvals",
            )
        out[call_id] = answer_of("", answer)
    return out


def _part_answers(parts: Sequence[dict[str, Any]]) -> dict[str, bool | str]:
    """The answers in an assistant message's tool parts in the ``approval-responded`` state
    (what v6's ``addToolApprovalResponse`` leaves there)."""
    out: dict[str, bool | str] = {}
    for p in parts:
        approval, call_id = p.get("approval"), p.get("toolCallId")
        if p.get("state") != "approval-responded" or not isinstance(approval, dict):
            continue
        if not isinstance(call_id, str) or len(call_id) > MAX_ID_CHARS or len(out) >= MAX_ANSWERS:
            raise RequestInvalid("too many or too long approval answers", code="bad_approvals")
        out[call_id] = answer_of("", approval)
    return out


def _prompt(parts: Sequence[Any]) -> str | list[PromptPart] | None:
    """A user message's text parts (and ``file`` parts: images and PDFs, as data URLs or
    URLs), in order."""
    out: list[PromptPart] = []
    size = 0
    for p in parts:
        if not isinstance(p, dict):
            continue
        if p.get("type") == "text" and isinstance(p.get("text"), str):
            out.append(p["text"])
            size += len(p["text"])
        elif p.get("type") == "file":
            out.append(_file(p))
    if size > MAX_PROMPT_CHARS:
        raise RequestInvalid(f"the prompt is over {MAX_PROMPT_CHARS} characters", code="too_large")
    if all(isinstance(p, str) for p in out):
        return "\n".join(p for p in out if isinstance(p, str)) or None
    return out


def _file(part: dict[str, Any]) -> PromptPart:
    """A ``file`` part (``url``: a ``data:`` URL or an http(s) URL; ``mediaType``) as an image
    or a PDF."""
    url, media_type = part.get("url"), part.get("mediaType")
    if not isinstance(url, str) or not isinstance(media_type, str):
        raise RequestInvalid("a file part needs a url and a mediaType", code="bad_part")
    if media_type.startswith("image/"):
        kind = "image"
    elif media_type == "application/pdf":
        kind = "document"
    else:
        raise RequestInvalid(
            f"a file part of type {media_type[:100]!r}: only images and PDFs are taken",
            code="bad_part",
        )
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        if not head.endswith(";base64"):
            raise RequestInvalid("a data URL must be base64", code="bad_part")
        return media_part(kind, {"type": "data", "value": data, "mimeType": media_type})
    return media_part(kind, {"type": "url", "value": url, "mimeType": media_type})


def _text(parts: Sequence[Any]) -> str:
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))


def _history(messages: Sequence[Any]) -> tuple[Message, ...]:
    """The text of the client's earlier user and assistant messages (tool parts are not
    taken from the client), capped in total size."""
    out: list[Message] = []
    size = 0
    for m in messages:
        role = m.get("role")
        if role not in ("user", "assistant"):
            continue  # a client does not set the system prompt
        text = _text(m.get("parts", []))
        if not text:
            continue
        size += len(text)
        if size > MAX_HISTORY_CHARS:
            raise RequestInvalid(
                f"the history is over {MAX_HISTORY_CHARS} characters", code="too_large"
            )
        out.append(Message(role=role, content=(TextPart(text=text),)))
    return tuple(out)


def _id_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS else None


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


# -- the chunks --------------------------------------------------------------------------------


class _Chunks:
    """Maps one run's events to UI message chunks (one instance per response)."""

    def __init__(self, version: Version, shown: frozenset[str], answered: frozenset[str]) -> None:
        self.version = version
        self.shown = set(shown)  # tool calls the client's message already holds
        self.answered = answered  # calls the client answered through their tool part
        self.lineage = Lineage()
        self.step_open = False
        self.text_id: str | None = None
        self.reasoning_id: str | None = None
        self.streaming: set[str] = set()  # tool-input-start sent, not yet available
        self.denied: set[str] = set()
        self.subruns: dict[str, dict[str, Any]] = {}  # sub-runs still going

    def on(self, event: Event) -> list[dict[str, Any]]:
        """The chunks for one event of the run."""
        if not Lineage.is_root(event):
            return self._subagent(event)
        if isinstance(event, TextDelta):
            return self._text_delta(event.text)
        if isinstance(event, ThinkingDelta):
            return self._reasoning_delta(event.text)
        if isinstance(event, RequestStarted):
            if event.attempt > 1:
                return self._close_parts()
            return [*self._close_step(), *self._open_step()]
        if isinstance(event, RetryScheduled | ProviderFallback):
            return self._close_parts()  # what streamed stays shown: chunks cannot be retracted
        if isinstance(event, ToolCallStarted):
            self.streaming.add(event.call_id)
            start = {
                "type": "tool-input-start",
                "toolCallId": event.call_id,
                "toolName": event.name,
            }
            return [*self._close_parts(), start]
        if isinstance(event, ToolCallDelta):
            if event.call_id not in self.streaming:
                return []
            delta = event.arguments_delta
            return [
                {"type": "tool-input-delta", "toolCallId": event.call_id, "inputTextDelta": delta}
            ]
        if isinstance(event, ResponseCompleted):
            out = self._close_parts()
            for call in event.response.tool_calls:
                out += self._available(call)
            return out
        if isinstance(event, ApprovalResolved):
            return self._resolved(event)
        if isinstance(event, ToolFinished):
            call, result = event.call, event.result
            if call.id in self.denied:
                return []
            if result.is_error:
                end = {
                    "type": "tool-output-error",
                    "toolCallId": call.id,
                    "errorText": result.content,
                }
            else:
                end = {
                    "type": "tool-output-available",
                    "toolCallId": call.id,
                    "output": result.content,
                }
            return [*self._available(call), end]
        return []

    def _resolved(self, event: ApprovalResolved) -> list[dict[str, Any]]:
        """The answer recorded on the call's approval part; in v6 a call the browser declined
        through its tool part ends ``output-denied`` (its reason is in that part)."""
        call = event.call
        answer = {
            "toolCallId": call.id,
            "toolName": call.name,
            "input": dict(call.arguments),
            "approved": event.approved,
            "reason": event.reason,
        }
        out = [{"type": "data-approval-request", "id": f"approval-{call.id}", "data": answer}]
        if not event.approved and self.version >= 6 and call.id in self.answered:
            self.denied.add(call.id)
            out += [*self._available(call), {"type": "tool-output-denied", "toolCallId": call.id}]
        return out  # otherwise a declined call's reason comes as its error result

    def _text_delta(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.text_id is None:
            out += self._close_reasoning()
            self.text_id = _new_id("text")
            out.append({"type": "text-start", "id": self.text_id})
        out.append({"type": "text-delta", "id": self.text_id, "delta": text})
        return out

    def _reasoning_delta(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.reasoning_id is None:
            out += self._close_text()
            self.reasoning_id = _new_id("reasoning")
            out.append({"type": "reasoning-start", "id": self.reasoning_id})
        if text:
            out.append({"type": "reasoning-delta", "id": self.reasoning_id, "delta": text})
        return out

    def _open_step(self) -> list[dict[str, Any]]:
        self.step_open = True
        return [{"type": "start-step"}]

    def _available(self, call: ToolCallPart | PendingApproval) -> list[dict[str, Any]]:
        """``tool-input-available`` once per call (a resumed run's call the client's message
        does not show gets it too: the output chunks need the part)."""
        call_id, name = (
            (call.id, call.name) if isinstance(call, ToolCallPart) else (call.call_id, call.name)
        )
        self.streaming.discard(call_id)
        if call_id in self.shown:
            return []
        self.shown.add(call_id)
        return [
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": name,
                "input": dict(call.arguments),
            }
        ]

    def approval_requests(self, pending: Sequence[PendingApproval]) -> list[dict[str, Any]]:
        """The chunks asking the browser about the calls that wait for approval."""
        out = self._close_parts()
        for p in pending:
            out += self._available(p)
            out.append(
                {
                    "type": "data-approval-request",
                    "id": f"approval-{p.call_id}",
                    "data": {
                        "toolCallId": p.call_id,
                        "toolName": p.name,
                        "input": p.arguments,
                        "preview": p.preview,
                    },
                }
            )
            if self.version >= 6:
                out.append(
                    {
                        "type": "tool-approval-request",
                        "approvalId": p.call_id,
                        "toolCallId": p.call_id,
                    }
                )
        return out

    def _subagent(self, event: Event) -> list[dict[str, Any]]:
        base: dict[str, Any] = {
            "agentPath": list(event.agent_path),
            "parentCallId": event.parent_call_id,
        }
        if isinstance(event, RunStarted):
            run_id, parent = self.lineage.open(event, event.run_id)
            state = {**base, "runId": run_id, "parentRunId": parent, "status": "running"}
            if len(self.subruns) < MAX_SUBRUNS:
                self.subruns[run_id] = state
            return [{"type": "data-agent", "id": run_id, "data": state}]
        if isinstance(event, RunFinished):
            closed = self.lineage.close(event)
            opened = self.subruns.pop(closed or "", None)
            if closed is None or opened is None:
                return []
            run = event.result
            output = run.output if isinstance(run.output, str) else ""
            state = {
                **opened,
                "status": str(run.termination_reason),
                "output": output[:MAX_SUBAGENT_OUTPUT],
                "usage": _usage(run.usage),
            }
            return [{"type": "data-agent", "id": closed, "data": state}]
        data: dict[str, Any]
        if isinstance(event, TextDelta | ThinkingDelta):
            data = {"kind": event.kind, "text": event.text}
        elif isinstance(event, ToolStarted):
            call = event.call
            self.lineage.own_call(call.id, event)
            data = {
                "kind": event.kind,
                "toolCallId": call.id,
                "toolName": call.name,
                "input": dict(call.arguments),
            }
        elif isinstance(event, ToolFinished):
            call, result = event.call, event.result
            data = {
                "kind": event.kind,
                "toolCallId": call.id,
                "toolName": call.name,
                "output": result.content[:MAX_SUBAGENT_OUTPUT],
                "isError": result.is_error,
            }
        else:
            return []
        data = {**base, "runId": self.lineage.of(event), **data}
        return [{"type": "data-agent-event", "data": data, "transient": True}]

    def end(
        self, result: RunResult[Any] | None, error: BaseException | None
    ) -> list[dict[str, Any]]:
        """The closing chunks: open parts and step closed, approvals asked, ``finish``."""
        out = self._close_parts()
        if result is not None and result.pending_approvals:
            out += self.approval_requests(result.pending_approvals)
        out += self._close_step()
        if error is not None:
            out.append({"type": "error", "errorText": _error_text(error)})
        metadata: dict[str, Any] = {}
        reason = "error" if error is not None else "other"
        if result is not None:
            reason = _FINISH_REASONS.get(result.termination_reason, reason)
            metadata = {
                "terminationReason": str(result.termination_reason),
                "usage": _usage(result.usage),
                "costUsd": result.cost_usd,
            }
        return [*out, {"type": "finish", "finishReason": reason, "messageMetadata": metadata}]

    def _close_text(self) -> list[dict[str, Any]]:
        if self.text_id is None:
            return []
        chunk = {"type": "text-end", "id": self.text_id}
        self.text_id = None
        return [chunk]

    def _close_reasoning(self) -> list[dict[str, Any]]:
        if self.reasoning_id is None:
            return []
        chunk = {"type": "reasoning-end", "id": self.reasoning_id}
        self.reasoning_id = None
        return [chunk]

    def _close_parts(self) -> list[dict[str, Any]]:
        return [*self._close_text(), *self._close_reasoning()]

    def _close_step(self) -> list[dict[str, Any]]:
        out = self._close_parts()
        if self.step_open:
            self.step_open = False
            out.append({"type": "finish-step"})
        return out


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
        "reasoningTokens": usage.reasoning_tokens,
    }


def _error_text(error: BaseException) -> str:
    """What the browser is told about a failed run: fanloop's own errors by class and message,
    anything else by class only (its message may hold server internals)."""
    if isinstance(error, FanloopError):
        return f"{type(error).__name__}: {error}"[:2_000]
    return f"the run failed ({type(error).__name__})"


# -- the stream ------------------------------------------------------------------------------


async def _chunks(
    bridge: Bridge, chat: ChatRequest, version: Version, request: Any = None
) -> AsyncGenerator[dict[str, Any], None]:
    turn = chat.turn
    mapper = _Chunks(version, chat.shown, chat.answered_in_parts if version >= 6 else frozenset())
    resuming = bool(turn.answers) and chat.assistant_id is not None
    yield {
        "type": "start",
        "messageId": chat.assistant_id if resuming else _new_id("msg"),
        "messageMetadata": {"sessionId": turn.session_id},
    }
    try:
        async with bridge.start(turn, request=request) as started:
            run = started.stream
            if run is None:  # nothing to run: ask again about what still waits
                for chunk in mapper.approval_requests(started.pending):
                    yield chunk
                reason = "tool-calls" if started.pending else "stop"
                yield {"type": "finish", "finishReason": reason}
                return
            error: Exception | None = None
            try:
                async for event in run:
                    for chunk in mapper.on(event):
                        yield chunk
            except Exception as exc:  # a failed run still ends its stream, with the error
                if not isinstance(exc, FanloopError):
                    logger.exception("ui_run_failed", protocol="vercel", session=turn.session_id)
                error = exc
            result = run.result if run.done else None
            for chunk in mapper.end(result, error):
                yield chunk
    except (RequestInvalid, ApprovalError) as exc:  # refused before the run started
        for chunk in mapper.end(None, exc):
            yield chunk


async def _sse(chunks: AsyncGenerator[dict[str, Any], None]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield sse_frame(chunk)
        yield DONE
    finally:
        await chunks.aclose()


async def vercel_chunks(
    agent: Any,
    body: Mapping[str, Any],
    *,
    store: SessionStore | None = None,
    version: Version = 6,
    ask_browser: bool = True,
) -> AsyncIterator[dict[str, Any]]:
    """The UI message chunks answering one ``useChat`` request, for any framework.

    ::

        async for chunk in vercel_chunks(agent, await request.json(), store=store):
            ...  # write f"data: {json.dumps(chunk)}\\n\\n", then "data: [DONE]\\n\\n"

    A :class:`VercelAIApp` does this (and the SSE framing) per request with the agent
    variants it builds once; prefer its :meth:`VercelAIApp.chunks` when serving many requests.

    Args:
        agent: the :class:`~fanloop.Agent`.
        body: the parsed request body (``id``, ``messages``, optionally ``approvals``).
        store: where sessions live; share one between requests (and processes) for history
            and approvals. ``None``: a new in-memory store, for this request only.
        version: the ``ai`` SDK major version of the client (5 or 6).
        ask_browser: dangerous calls wait for the browser's answer.

    Raises:
        RequestInvalid: the body is not a chat request (before any chunk).
    """
    chat = parse_request(body)  # a bad body is refused before the first chunk
    bridge = Bridge(agent, store=store, ask_browser=ask_browser)
    chunks = detached(_chunks(bridge, chat, version))
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()


# -- the ASGI app ----------------------------------------------------------------------------


class VercelAIApp:
    """An ASGI app answering ``useChat`` (Vercel AI SDK v5 and v6) with a UI message stream.

    ::

        from fanloop.ui import VercelAIApp

        app = FastAPI()
        app.mount("/api/chat", VercelAIApp(agent, store=SQLiteStore("chats.db")))

    Each ``POST`` runs the agent on the chat's session (its ``id``) and streams the run as UI
    message chunks. A dangerous call parks the run and asks the browser (v6: the tool part's
    approval buttons, ``addToolApprovalResponse``; v5: a ``data-approval-request`` part and an
    ``approvals`` field in the next request's body); the answer, sent to any process sharing
    the store, resumes it. A client that disconnects cancels its run; a client that reads
    slowly slows the run down (bounded buffers).

    Args:
        agent: the :class:`~fanloop.Agent`.
        store: where sessions live (default: an in-memory store of this app).
        version: the ``ai`` SDK major version of the clients (5 or 6): v5 has no approval
            chunks, so approvals travel as data parts.
        ask_browser: dangerous calls wait for the browser's answer; ``False`` leaves them to
            the agent's own ``confirm``.
        buffer: events buffered between the run and the client.
        max_request_bytes: the largest request body accepted.
        deps: a function of the ASGI scope giving each run's ``deps``.
    """

    def __init__(
        self,
        agent: Any,
        *,
        store: SessionStore | None = None,
        version: Version = 6,
        ask_browser: bool = True,
        buffer: int = 64,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        deps: Callable[[Any], Any] | None = None,
    ) -> None:
        if version not in (5, 6):
            raise ConfigurationError("version must be 5 or 6")
        self.version: Version = version
        self.max_request_bytes = max_request_bytes
        self.bridge = Bridge(agent, store=store, ask_browser=ask_browser, buffer=buffer, deps=deps)

    @property
    def store(self) -> SessionStore:
        """The session store the app's runs use."""
        return self.bridge.store

    def chunks(
        self, body: Mapping[str, Any], *, request: Any = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The UI message chunks answering one request body (see :func:`vercel_chunks`)."""
        return detached(_chunks(self.bridge, parse_request(body), self.version, request))

    def sse(self, body: Mapping[str, Any], *, request: Any = None) -> AsyncIterator[bytes]:
        """:meth:`chunks` as SSE bytes ending ``data: [DONE]``, for a framework's streaming
        response with :data:`UI_MESSAGE_STREAM_HEADERS`."""
        return _sse(self.chunks(body, request=request))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await send_json(
                send, 405, {"error": "method_not_allowed", "message": "POST a chat request"}
            )
            return
        try:
            raw = await read_body(receive, self.max_request_bytes)
            _, chat = await parse_off_loop(raw, parse_request)
        except RequestInvalid as exc:
            if exc.code != "disconnected":
                status = 413 if exc.code == "too_large" else 400
                await send_json(send, status, {"error": exc.code, "message": str(exc)})
            return
        chunks = detached(_chunks(self.bridge, chat, self.version, scope))
        await serve_sse(receive, send, _sse(chunks), headers=_STREAM_HEADER)
