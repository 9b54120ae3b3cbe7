"""OpenTelemetry GenAI spans for fanloop runs (optional extra: ``pip install 'fanloop[otel]'``).

::

    from fanloop.otel import OpenTelemetryObserver

    agent = Agent(provider, observer=OpenTelemetryObserver())

Spans follow the GenAI semantic conventions:

- ``invoke_agent {agent name}`` (INTERNAL) around each run, a child of the span current when
  the run started; a sub-agent's run is nested under the ``execute_tool`` span of the call that
  delegated to it;
- ``chat {model}`` (CLIENT) per model call attempt, with the request model, max tokens, the
  response's finish reason and token usage; a failed attempt ends with ``error.type``;
- ``execute_tool {tool name}`` (INTERNAL) per tool call, with the tool name and call id.

A paced model call (:mod:`fanloop.pacing`) that waited has a ``fanloop.pacing_wait`` span
event per wait on its ``chat`` span (key, reason, seconds) and its total wait in
``fanloop.pacing.wait_seconds``; an unreachable pacing backend adds a
``fanloop.pacing_unavailable`` event, and shared pacing state found out of bounds a
``fanloop.pacing_capped`` event (key, detail).

The attribute names are the GenAI ones (``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` ...), spelled out here because the
``opentelemetry-semantic-conventions`` package marks its GenAI constants deprecated. Message
contents are not recorded. Combine it with other observers through
:class:`~fanloop.MultiObserver`.

Metrics (token usage, operation duration, time to first chunk, tool duration, retries, pacing
waits, runs, runs in flight, cost) come from a second observer, :class:`OpenTelemetryMetrics`
(``MultiObserver(OpenTelemetryObserver(), OpenTelemetryMetrics())``); docs/observability.md
lists its instruments.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .events import Event
from .observers import NullObserver

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("fanloop.otel needs OpenTelemetry: pip install 'fanloop[otel]'") from exc

from ._otel_metrics import OpenTelemetryMetrics

__all__ = ["OpenTelemetryMetrics", "OpenTelemetryObserver"]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
PACING_KEY = "fanloop.pacing.key"
PACING_REASON = "fanloop.pacing.reason"
PACING_SECONDS = "fanloop.pacing.seconds"
PACING_WAIT = "fanloop.pacing.wait_seconds"

_RunKey = tuple[tuple[str, ...], str | None]


class OpenTelemetryObserver(NullObserver):
    """Turns a run's events into GenAI spans.

    Args:
        tracer_provider: where spans go (default: the global tracer provider).
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        self._tracer = trace.get_tracer("fanloop", tracer_provider=tracer_provider)
        self._runs: dict[_RunKey, tuple[Any, str, str]] = {}  # span, provider, model
        self._chats: dict[_RunKey, Any] = {}
        self._waited: dict[_RunKey, float] = {}  # pacing waits of the open chat span
        self._tools: dict[str, Any] = {}

    def conversation(self) -> AbstractContextManager[None]:
        return nullcontext()

    def on_event(self, event: Event) -> None:
        """Open and close spans as the run's events arrive."""
        key: _RunKey = (event.agent_path, event.parent_call_id)
        if event.kind == "run_started":
            parent = self._tools.get(event.parent_call_id or "")
            ctx = trace.set_span_in_context(parent) if parent else otel_context.get_current()
            span = self._tracer.start_span(
                f"invoke_agent {event.agent_name}",
                context=ctx,
                kind=SpanKind.INTERNAL,
                attributes={
                    OPERATION: "invoke_agent",
                    AGENT_NAME: event.agent_name,
                    AGENT_ID: event.run_id,
                    CONVERSATION_ID: event.run_id,
                    PROVIDER: event.provider,
                    REQUEST_MODEL: event.model,
                },
            )
            self._runs[key] = (span, event.provider, event.model)
        elif event.kind == "request_started":
            self._waited.pop(key, None)
            run = self._runs.get(key)
            if run is None:
                return
            request = event.request
            self._chats[key] = self._tracer.start_span(
                f"chat {run[2]}",
                context=trace.set_span_in_context(run[0]),
                kind=SpanKind.CLIENT,
                attributes={
                    OPERATION: "chat",
                    PROVIDER: run[1],
                    REQUEST_MODEL: run[2],
                    REQUEST_MAX_TOKENS: request.max_tokens,
                    "fanloop.step": event.step,
                    "fanloop.attempt": event.attempt,
                },
            )
        elif event.kind == "response_completed":
            span = self._chats.pop(key, None)
            if span is None:
                return
            response = event.response
            usage = response.usage
            span.set_attribute(RESPONSE_MODEL, response.model)
            if response.response_id:
                span.set_attribute(RESPONSE_ID, response.response_id)
            span.set_attribute(FINISH_REASONS, [str(response.stop_reason)])
            span.set_attribute(INPUT_TOKENS, usage.total_input_tokens)
            span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)
            span.set_attribute(CACHE_READ, usage.cache_read_tokens)
            span.set_attribute(CACHE_CREATION, usage.cache_write_tokens)
            span.end()
        elif event.kind == "retry_scheduled" or event.kind == "model_failed":
            span = self._chats.pop(key, None)
            if span is not None:
                _fail(span, event.error)
        elif event.kind in ("pacing_wait", "pacing_unavailable", "pacing_capped"):
            self._paced(key, event)
        elif event.kind == "tool_started":
            run = self._runs.get(key)
            if run is None:
                return
            call = event.call
            self._tools[call.id] = self._tracer.start_span(
                f"execute_tool {call.name}",
                context=trace.set_span_in_context(run[0]),
                kind=SpanKind.INTERNAL,
                attributes={
                    OPERATION: "execute_tool",
                    TOOL_NAME: call.name,
                    TOOL_CALL_ID: call.id,
                    TOOL_TYPE: "function",
                },
            )
        elif event.kind == "tool_finished":
            span = self._tools.pop(event.call.id, None)
            if span is None:
                return
            if event.result.is_error:
                span.set_attribute(ERROR_TYPE, "tool_error")
                span.set_status(Status(StatusCode.ERROR, event.result.content[:200]))
            span.end()
        elif event.kind == "run_finished":
            self._waited.pop(key, None)
            entry = self._runs.pop(key, None)
            chat = self._chats.pop(key, None)
            if chat is not None:
                chat.end()
            if entry is None:
                return
            span = entry[0]
            result = event.result
            span.set_attribute(INPUT_TOKENS, result.usage.total_input_tokens)
            span.set_attribute(OUTPUT_TOKENS, result.usage.output_tokens)
            span.set_attribute("fanloop.termination_reason", str(result.termination_reason))
            span.set_attribute("fanloop.turns", result.turns)
            error = event.error
            if error is not None:
                _fail(span, error)
            else:
                span.end()

    def _paced(self, key: _RunKey, event: Any) -> None:
        """A pacing wait (or an unreachable pacing backend) inside a model call: an event on
        its ``chat`` span, and the call's total wait as ``fanloop.pacing.wait_seconds``."""
        span = self._chats.get(key)
        if span is None:
            return
        if event.kind == "pacing_capped":
            span.add_event(
                "fanloop.pacing_capped",
                {PACING_KEY: event.key, "fanloop.pacing.detail": event.detail[:500]},
            )
            return
        if event.kind == "pacing_unavailable":
            span.add_event(
                "fanloop.pacing_unavailable",
                {
                    PACING_KEY: event.key,
                    "fanloop.pacing.error": event.error[:200],
                    "fanloop.pacing.fail_open": event.fail_open,
                },
            )
            return
        total = self._waited.get(key, 0.0) + event.seconds
        self._waited[key] = total
        span.add_event(
            "fanloop.pacing_wait",
            {PACING_KEY: event.key, PACING_REASON: event.reason, PACING_SECONDS: event.seconds},
        )
        span.set_attribute(PACING_WAIT, total)


def _fail(span: Any, error: BaseException) -> None:
    span.set_attribute(ERROR_TYPE, type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
    span.end()
