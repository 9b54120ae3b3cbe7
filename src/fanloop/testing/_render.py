"""The Anthropic Messages and OpenAI Chat Completions wire formats, rendered from a
:class:`~fanloop.providers.ModelResponse`: bodies and streams as :class:`FakeLLMServer
<fanloop.testing.FakeLLMServer>` and the hostile servers (``_faults``) send them. The
Responses API has its own module, ``_responses``.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .._model_types import ModelResponse, StopReason, Usage
from ..messages import INVALID_ARGUMENTS_KEY, TextPart, ThinkingPart, ToolCallPart
from . import _citations as _cite
from . import _responses

__all__ = [
    "Frames",
    "anthropic_events",
    "anthropic_message",
    "dumps",
    "error_frame",
    "number",
    "openai_chunks",
    "openai_completion",
    "sse",
]

dumps = json.JSONEncoder(separators=(",", ":")).encode

_ANTHROPIC_STOP = {
    StopReason.END_TURN: "end_turn",
    StopReason.TOOL_USE: "tool_use",
    StopReason.MAX_TOKENS: "max_tokens",
    StopReason.STOP_SEQUENCE: "stop_sequence",
    StopReason.REFUSAL: "refusal",
    StopReason.PAUSED: "pause_turn",
    StopReason.UNKNOWN: "unknown",
}
_OPENAI_STOP = {
    StopReason.END_TURN: "stop",
    StopReason.TOOL_USE: "tool_calls",
    StopReason.MAX_TOKENS: "length",
    StopReason.STOP_SEQUENCE: "stop",
    StopReason.REFUSAL: "content_filter",
    StopReason.PAUSED: "stop",
    StopReason.UNKNOWN: "unknown",
}


@dataclass(slots=True)
class Frames:
    """A rendered stream: its frames, which frames carry deltas, where the ending starts."""

    frames: list[bytes] = field(default_factory=list)
    deltas: list[int] = field(default_factory=list)
    tail: int = 0

    def add(self, frame: bytes, *, delta: bool = False) -> None:
        if delta:
            self.deltas.append(len(self.frames))
        self.frames.append(frame)

    def cut(self, after: int) -> int:
        """Frames to send before a fault that strikes after ``after`` deltas."""
        if after <= 0:
            return 1
        if len(self.deltas) >= after:
            return min(self.deltas[after - 1] + 1, self.tail)
        return self.tail


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _arguments_text(call: ToolCallPart) -> str:
    raw = call.arguments.get(INVALID_ARGUMENTS_KEY)
    if isinstance(raw, str) and len(call.arguments) == 1:
        return raw  # scripted malformed arguments go out verbatim
    return json.dumps(call.arguments)


def _signature(part: ThinkingPart, index: int) -> str:
    return part.signature if part.signature is not None else f"sig-fake-{index}-{len(part.text)}"


def _stop_value(response: ModelResponse, table: dict[StopReason, str]) -> str:
    if response.raw_stop_reason:
        return response.raw_stop_reason
    return table[response.stop_reason]


def _usage_anthropic(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
    }


def _usage_openai(usage: Usage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
    }


# -- Anthropic ------------------------------------------------------------------------------


def _anthropic_blocks(response: ModelResponse) -> list[dict[str, Any]]:
    origin = response.origin
    if origin is not None and origin.provider == "anthropic" and isinstance(origin.raw, list):
        return list(origin.raw)
    blocks: list[dict[str, Any]] = []
    for index, part in enumerate(response.content):
        if isinstance(part, TextPart):
            block: dict[str, Any] = {"type": "text", "text": part.text}
            if part.citations:
                block["citations"] = [_cite.anthropic_citation(c) for c in part.citations]
            blocks.append(block)
        elif isinstance(part, ThinkingPart):
            if part.redacted is not None:
                blocks.append({"type": "redacted_thinking", "data": part.redacted})
            else:
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": part.text,
                        "signature": _signature(part, index),
                    }
                )
        elif isinstance(part, ToolCallPart):
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
            )
    return blocks


def anthropic_message(response: ModelResponse, model: str, request_id: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": f"msg_{request_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(response),
        "stop_reason": _stop_value(response, _ANTHROPIC_STOP),
        "stop_sequence": None,
        "usage": _usage_anthropic(response.usage),
    }
    if response.stop_details is not None:
        message["stop_details"] = response.stop_details
    return message


def sse(event: str, payload: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (event.encode(), dumps(payload).encode())


def anthropic_events(response: ModelResponse, model: str, request_id: str, size: int) -> Frames:
    out = Frames()
    usage = _usage_anthropic(response.usage)
    start_usage = {**usage, "output_tokens": 1}
    out.add(
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{request_id}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    )
    out.add(b": keep-alive comment\n\n")
    out.add(sse("ping", {"type": "ping"}))
    for index, block in enumerate(_anthropic_blocks(response)):
        kind = block.get("type")
        start: dict[str, Any]
        if kind == "text":
            start = {"type": "text", "text": ""}
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind in ("tool_use", "server_tool_use"):
            start = {**block, "input": {}}
        else:
            start = block
        out.add(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            # As the API streams a cited passage: its citations first, then its text.
            deltas = [
                {"type": "citations_delta", "citation": c} for c in block.get("citations", ())
            ]
            deltas += [{"type": "text_delta", "text": c} for c in _chunks(block["text"], size)]
        elif kind == "thinking":
            deltas = [
                {"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"], size)
            ]
        elif kind in ("tool_use", "server_tool_use"):
            raw = block.get("input")
            invalid = raw.get(INVALID_ARGUMENTS_KEY) if isinstance(raw, dict) else None
            text = invalid if isinstance(invalid, str) and len(raw) == 1 else json.dumps(raw)  # type: ignore[arg-type]
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": c} for c in _chunks(text, size)]
        for delta in deltas:
            out.add(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                ),
                delta=True,
            )
        if kind == "thinking":
            out.add(
                sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    },
                )
            )
        out.add(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.tail = len(out.frames)
    ending: dict[str, Any] = {
        "stop_reason": _stop_value(response, _ANTHROPIC_STOP),
        "stop_sequence": None,
    }
    if response.stop_details is not None:
        ending["stop_details"] = response.stop_details
    out.add(sse("message_delta", {"type": "message_delta", "delta": ending, "usage": usage}))
    out.add(sse("message_stop", {"type": "message_stop"}))
    return out


# -- OpenAI ---------------------------------------------------------------------------------


def _openai_refusal(response: ModelResponse) -> str | None:
    if response.stop_reason is StopReason.REFUSAL and not response.raw_stop_reason:
        return response.text or "I can't help with that."
    return None


def _chat_annotations(response: ModelResponse) -> list[dict[str, Any]]:
    text = response.text
    return [
        _cite.chat_annotation(c, text)
        for p in response.content
        if isinstance(p, TextPart)
        for c in p.citations
    ]


def openai_completion(response: ModelResponse, model: str, request_id: str) -> dict[str, Any]:
    refusal = _openai_refusal(response)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if refusal else (response.text or None),
        "refusal": refusal,
    }
    if response.thinking:
        message["reasoning_content"] = response.thinking
    annotations = _chat_annotations(response)
    if annotations:
        message["annotations"] = annotations
    calls = response.tool_calls
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments_text(c)},
            }
            for c in calls
        ]
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop" if refusal else _stop_value(response, _OPENAI_STOP),
                "logprobs": None,
            }
        ],
        "usage": _usage_openai(response.usage),
    }


def openai_chunks(response: ModelResponse, model: str, request_id: str, size: int) -> Frames:
    out = Frames()
    prefix = (
        f'{{"id":"chatcmpl-{request_id}","object":"chat.completion.chunk",'
        f'"created":{int(time.time())},"model":{dumps(model)},'
    )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b'data: %s"choices":[%s]}\n\n' % (prefix.encode(), dumps(choice).encode())

    out.add(chunk({"role": "assistant", "content": ""}))
    refusal = _openai_refusal(response)
    if response.thinking:
        for c in _chunks(response.thinking, size):
            out.add(chunk({"reasoning_content": c}), delta=True)
    if refusal:
        for c in _chunks(refusal, size):
            out.add(chunk({"refusal": c}), delta=True)
    elif response.text:
        for c in _chunks(response.text, size):
            out.add(chunk({"content": c}), delta=True)
        # As OpenRouter streams them: each in a delta of its own, with no index.
        for annotation in _chat_annotations(response):
            out.add(chunk({"content": "", "annotations": [annotation]}))
    # Tool calls: a header per call, then argument pieces interleaved across calls.
    pending = [
        (i, c, deque(_chunks(_arguments_text(c), size))) for i, c in enumerate(response.tool_calls)
    ]
    started: set[int] = set()
    while pending:
        for entry in list(pending):
            index, call, pieces = entry
            if index not in started:
                started.add(index)
                header = {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
                out.add(chunk({"tool_calls": [header]}))
            if pieces:
                piece = pieces.popleft()
                out.add(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    delta=True,
                )
            if not pieces:
                pending.remove(entry)
    out.tail = len(out.frames)
    finish = "stop" if refusal else _stop_value(response, _OPENAI_STOP)
    out.add(chunk({}, finish))
    out.add(
        b'data: %s"choices":[],"usage":%s}\n\n'
        % (prefix.encode(), dumps(_usage_openai(response.usage)).encode())
    )
    out.add(b"data: [DONE]\n\n")
    return out


def error_frame(api: str, error_type: str, message: str) -> bytes:
    if api == "responses":
        return _responses.error_frame(error_type, message)
    if api == "anthropic":
        return sse("error", {"type": "error", "error": {"type": error_type, "message": message}})
    payload = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
    return b"data: %s\n\n" % dumps(payload).encode()
