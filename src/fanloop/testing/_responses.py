"""How :class:`~fanloop.testing.FakeLLMServer` plays a scripted turn on the OpenAI Responses
API (``POST /v1/responses``): the response object, its event stream, its errors.

A scripted :func:`~fanloop.testing.reply` becomes output items in the order of its parts:
thinking → a ``reasoning`` item (its text as one summary, an opaque ``encrypted_content``:
the part's ``signature`` when set, else ``enc-fake-<request id>-<index>``), text → a
``message`` item (a ``refusal`` part for a scripted refusal), tool calls → ``function_call``
items. A turn that carries Responses output items in its ``origin`` (one this provider
received) is played with those items as they are: that is how a test scripts hosted tools
(``web_search_call``, ``file_search_call``, ``code_interpreter_call``,
``image_generation_call``, ``mcp_call``, ``mcp_list_tools`` items), each streamed with the
API's progress events. A text part's citations become its ``output_text`` annotations,
streamed as ``response.output_text.annotation.added``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .._model_types import ModelResponse, StopReason, Usage
from ..messages import INVALID_ARGUMENTS_KEY, TextPart, ThinkingPart, ToolCallPart
from ._citations import responses_annotation

__all__ = ["error_frame", "response_events", "response_object"]

_dumps = json.JSONEncoder(separators=(",", ":")).encode

_INCOMPLETE = {StopReason.MAX_TOKENS: "max_output_tokens"}
_INCOMPLETE_REASONS = frozenset({"max_output_tokens", "content_filter"})
_REFUSAL = "I can't help with that."


def _arguments(call: ToolCallPart) -> str:
    raw = call.arguments.get(INVALID_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(call.arguments) == 1:
        return raw  # scripted malformed arguments go out verbatim
    return json.dumps(call.arguments)


def _refused(response: ModelResponse) -> bool:
    """A refusal scripted as an answer (not as a content filter stopping the response)."""
    return response.stop_reason is StopReason.REFUSAL and response.raw_stop_reason is None


def output_items(response: ModelResponse, request_id: str) -> list[dict[str, Any]]:
    """The output items of ``response`` (see the module docstring)."""
    origin = response.origin
    if origin is not None and origin.api == "responses" and isinstance(origin.raw, dict):
        raw = origin.raw.get("output")
        if isinstance(raw, list):
            return list(raw)
    items: list[dict[str, Any]] = []
    refused = _refused(response)
    texts = [p for p in response.content if isinstance(p, TextPart)]
    if refused and not texts:
        texts = [TextPart(text=_REFUSAL)]
    for index, part in enumerate(response.content):
        if isinstance(part, ThinkingPart):
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{request_id}_{index}",
                    "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
                    "encrypted_content": part.signature or f"enc-fake-{request_id}-{index}",
                }
            )
        elif isinstance(part, ToolCallPart):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{request_id}_{index}",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": _arguments(part),
                    "status": "completed",
                }
            )
        elif isinstance(part, TextPart) and part.text and not refused:
            annotations = [responses_annotation(c, part.text) for c in part.citations]
            items.append(
                _message(f"msg_{request_id}_{index}", part.text, refusal=False, notes=annotations)
            )
    if refused:
        items.append(_message(f"msg_{request_id}_refusal", texts[0].text, refusal=True))
    return items


def _message(
    item_id: str, text: str, *, refusal: bool, notes: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    part: dict[str, Any] = (
        {"type": "refusal", "refusal": text}
        if refusal
        else {"type": "output_text", "text": text, "annotations": notes or [], "logprobs": []}
    )
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def _usage(usage: Usage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": prompt + usage.output_tokens,
    }


def _status(response: ModelResponse) -> tuple[str, dict[str, Any] | None]:
    reason = response.raw_stop_reason
    if reason in _INCOMPLETE_REASONS:
        return "incomplete", {"reason": reason}
    if response.stop_reason in _INCOMPLETE:
        return "incomplete", {"reason": _INCOMPLETE[response.stop_reason]}
    return "completed", None


def response_object(
    response: ModelResponse,
    model: str,
    request_id: str,
    body: dict[str, Any],
    output: list[dict[str, Any]] | None = None,
    *,
    status: str | None = None,
) -> dict[str, Any]:
    """The JSON response object of a non-streamed request (and of the lifecycle events)."""
    final, incomplete = _status(response)
    return {
        "id": f"resp_{request_id}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status or final,
        "error": None,
        "incomplete_details": None if status else incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output_items(response, request_id) if output is None else output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": None if status else _usage(response.usage),
    }


class _Events:
    """The frames of one stream, numbered as the API numbers its events."""

    def __init__(self, frames: Any) -> None:
        self.frames = frames
        self.sequence = 0

    def add(self, payload: dict[str, Any], *, delta: bool = False) -> None:
        payload["sequence_number"] = self.sequence
        self.sequence += 1
        kind = payload["type"]
        self.frames.add(
            b"event: %s\ndata: %s\n\n" % (kind.encode(), _dumps(payload).encode()), delta=delta
        )


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def response_events(
    frames: Any,
    response: ModelResponse,
    model: str,
    request_id: str,
    body: dict[str, Any],
    size: int,
) -> None:
    """Render ``response`` as the API's event stream into ``frames`` (a ``_Frames``)."""
    out = _Events(frames)
    items = output_items(response, request_id)
    start = response_object(response, model, request_id, body, [], status="in_progress")
    out.add({"type": "response.created", "response": start})
    out.add({"type": "response.in_progress", "response": start})
    for index, item in enumerate(items):
        _item_events(out, index, item, size)
    frames.tail = len(frames.frames)
    final = response_object(response, model, request_id, body, items)
    kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
    out.add({"type": kind, "response": final})


def _item_events(out: _Events, index: int, item: dict[str, Any], size: int) -> None:
    kind = item.get("type")
    item_id = item.get("id")
    where = {"item_id": item_id, "output_index": index}
    if kind == "reasoning":
        out.add(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {"type": "reasoning", "id": item_id, "summary": []},
            }
        )
        for number, summary in enumerate(item.get("summary") or []):
            text = summary.get("text", "")
            empty = {"type": "summary_text", "text": ""}
            at = {**where, "summary_index": number}
            out.add({"type": "response.reasoning_summary_part.added", **at, "part": empty})
            for piece in _chunks(text, size):
                out.add(
                    {"type": "response.reasoning_summary_text.delta", **at, "delta": piece},
                    delta=True,
                )
            out.add({"type": "response.reasoning_summary_text.done", **at, "text": text})
            out.add({"type": "response.reasoning_summary_part.done", **at, "part": summary})
    elif kind == "message":
        out.add(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        )
        for number, part in enumerate(item.get("content") or []):
            at = {**where, "content_index": number}
            refusal = part.get("type") == "refusal"
            field = "refusal" if refusal else "text"
            text = part.get(field, "")
            empty = {**part, field: ""}
            out.add({"type": "response.content_part.added", **at, "part": empty})
            delta_kind = "response.refusal.delta" if refusal else "response.output_text.delta"
            extra: dict[str, Any] = {} if refusal else {"logprobs": []}
            for piece in _chunks(text, size):
                out.add({"type": delta_kind, **at, "delta": piece, **extra}, delta=True)
            for number_, note in enumerate(part.get("annotations") or ()):
                out.add(
                    {
                        "type": "response.output_text.annotation.added",
                        **at,
                        "annotation_index": number_,
                        "annotation": note,
                    }
                )
            done_kind = "response.refusal.done" if refusal else "response.output_text.done"
            out.add({"type": done_kind, **at, field: text, **extra})
            out.add({"type": "response.content_part.done", **at, "part": part})
    elif kind == "function_call":
        out.add(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            }
        )
        arguments = item.get("arguments", "")
        for piece in _chunks(arguments, size):
            out.add(
                {"type": "response.function_call_arguments.delta", **where, "delta": piece},
                delta=True,
            )
        out.add({"type": "response.function_call_arguments.done", **where, "arguments": arguments})
    elif kind in _PROGRESS:
        _progress_events(out, index, item, kind)
    else:
        out.add({"type": "response.output_item.added", "output_index": index, "item": item})
    out.add({"type": "response.output_item.done", "output_index": index, "item": item})


# The progress events the API sends while a hosted tool runs, by output item type: the
# event type's stem and its statuses between ``in_progress`` and ``completed``.
_PROGRESS: dict[str, tuple[str, tuple[str, ...]]] = {
    "web_search_call": ("response.web_search_call", ("searching",)),
    "file_search_call": ("response.file_search_call", ("searching",)),
    "code_interpreter_call": ("response.code_interpreter_call", ("interpreting",)),
    "image_generation_call": ("response.image_generation_call", ("generating",)),
    "mcp_call": ("response.mcp_call", ()),
    "mcp_list_tools": ("response.mcp_list_tools", ()),
}


def _progress_events(out: _Events, index: int, item: dict[str, Any], kind: str) -> None:
    """A hosted tool's item as it streams: added (in progress), its progress events (a code
    interpreter's code and an MCP call's arguments as deltas), completed (or failed)."""
    stem, middle = _PROGRESS[kind]
    where = {"item_id": item.get("id"), "output_index": index}
    out.add(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress"},
        }
    )
    out.add({"type": f"{stem}.in_progress", **where})
    code = item.get("code") if kind == "code_interpreter_call" else None
    if isinstance(code, str):
        code_stem = "response.code_interpreter_call_code"
        out.add({"type": f"{code_stem}.delta", **where, "delta": code}, delta=True)
        out.add({"type": f"{code_stem}.done", **where, "code": code})
    arguments = item.get("arguments") if kind == "mcp_call" else None
    if isinstance(arguments, str):
        out.add(
            {"type": "response.mcp_call_arguments.delta", **where, "delta": arguments}, delta=True
        )
        out.add({"type": "response.mcp_call_arguments.done", **where, "arguments": arguments})
    for status in middle:
        out.add({"type": f"{stem}.{status}", **where})
    failed = item.get("status") == "failed" and kind in ("mcp_call", "mcp_list_tools")
    out.add({"type": f"{stem}.{'failed' if failed else 'completed'}", **where})


def error_frame(error_type: str, message: str) -> bytes:
    """An ``error`` event, as the API sends one mid-stream."""
    payload = {"type": "error", "code": error_type, "message": message, "param": None}
    return b"event: error\ndata: %s\n\n" % _dumps(payload).encode()
