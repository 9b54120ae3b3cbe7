"""The vocabulary of scripted turns, shared by ScriptedProvider and FakeLLMServer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .._model_types import ModelResponse, StopReason, Usage
from ..messages import Citation, Part, TextPart, ThinkingPart, ToolCallPart

__all__ = ["Fault", "call", "reply"]


def call(name: str, /, _id: str | None = None, **arguments: Any) -> ToolCallPart:
    """A scripted tool call; the id is random (``call_…``, unique like a provider's) unless
    ``_id`` is given."""
    return ToolCallPart(id=_id or f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=arguments)


def reply(
    text: str | None = None,
    *,
    tool_calls: tuple[ToolCallPart, ...] | list[ToolCallPart] = (),
    thinking: str | None = None,
    signature: str | None = None,
    stop_reason: StopReason | str | None = None,
    usage: Usage | None = None,
    raw_stop_reason: str | None = None,
    stop_details: dict[str, Any] | None = None,
    model: str = "",
    citations: tuple[Citation, ...] | list[Citation] = (),
) -> ModelResponse:
    """A scripted model turn.

    The stop reason defaults to ``TOOL_USE`` when there are tool calls, else ``END_TURN``.
    Usage defaults to a rough count of characters / 4. ``citations`` are kept on the text
    (``TextPart.citations``); :class:`~fanloop.testing.FakeLLMServer` sends them in each
    API's own form (a citation with a ``raw`` object sends that object).
    """
    parts: list[Part] = []
    if thinking is not None:
        parts.append(ThinkingPart(text=thinking, signature=signature))
    if text is not None:
        parts.append(TextPart(text=text, citations=tuple(citations)))
    parts.extend(tool_calls)
    if stop_reason is None:
        stop = StopReason.TOOL_USE if tool_calls else StopReason.END_TURN
    else:
        stop = StopReason(stop_reason)
    if usage is None:
        usage = Usage(
            input_tokens=10, output_tokens=max(1, len(text or "") // 4 + 5 * len(tool_calls))
        )
    return ModelResponse(
        content=tuple(parts),
        stop_reason=stop,
        usage=usage,
        model=model,
        raw_stop_reason=raw_stop_reason,
        stop_details=stop_details,
    )


@dataclass(frozen=True, slots=True)
class Fault:
    """A failure for :class:`~fanloop.testing.FakeLLMServer` to inject instead of (or into) a turn.

    Build one with the class methods: ``Fault.http(429, retry_after=0.2)``,
    ``Fault.stream_error()``, ``Fault.drop()``, ``Fault.truncate()``, ``Fault.slow(0.5)``.
    A fault with ``then`` set plays that turn after the fault's effect (slow first byte, partial
    stream); otherwise the fault takes the whole turn.
    """

    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: float | None = None
    error_type: str | None = None
    message: str = "injected fault"
    error_in_stream: bool = False
    drop_connection: bool = False
    cut_before_end: bool = False
    after_events: int = 2
    delay: float = 0.0
    then: ModelResponse | None = None

    @classmethod
    def http(
        cls,
        status: int,
        *,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        error_type: str | None = None,
        message: str = "injected fault",
    ) -> Fault:
        """Answer with HTTP ``status`` and an error body (and ``Retry-After`` if given)."""
        return cls(
            status=status,
            retry_after=retry_after,
            retry_after_ms=retry_after_ms,
            error_type=error_type,
            message=message,
        )

    @classmethod
    def stream_error(
        cls,
        turn: ModelResponse | None = None,
        *,
        error_type: str = "overloaded_error",
        after_events: int = 2,
    ) -> Fault:
        """Start streaming ``turn`` (status 200), then send an error event mid-stream."""
        return cls(
            error_in_stream=True, error_type=error_type, then=turn, after_events=after_events
        )

    @classmethod
    def drop(cls, turn: ModelResponse | None = None, *, after_events: int = 2) -> Fault:
        """Start streaming ``turn``, then drop the connection without finishing the body."""
        return cls(drop_connection=True, then=turn, after_events=after_events)

    @classmethod
    def truncate(cls, turn: ModelResponse | None = None, *, after_events: int = 2) -> Fault:
        """Start streaming ``turn``, then end the body cleanly but before the end marker."""
        return cls(cut_before_end=True, then=turn, after_events=after_events)

    @classmethod
    def slow(cls, delay: float, turn: ModelResponse | None = None) -> Fault:
        """Wait ``delay`` seconds before the first byte, then play ``turn``."""
        return cls(delay=delay, then=turn)
