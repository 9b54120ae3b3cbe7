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

One observer serves any number of agents and concurrent runs: the run an event belongs to is
found through a context variable set as the run starts (concurrent runs of one agent have the
same lineage), so each run, each of several sub-agents running at once, and a run after a
handoff (a ``fanloop.handoff`` event on its span; the agent taking over goes on in the same
``invoke_agent`` span) has its own span tree. With no tracer provider given and none set
globally, a run is not tracked at all and its events cost a lookup each.

A paced model call (:mod:`fanloop.pacing`) that waited has a ``fanloop.pacing_wait`` span
event per wait on its ``chat`` span (key, reason, seconds) and its total wait in
``fanloop.pacing.wait_seconds``; an unreachable pacing backend adds a
``fanloop.pacing_unavailable`` event, and shared pacing state found out of bounds a
``fanloop.pacing_capped`` event (key, detail).

The attribute names are the GenAI ones (``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` ...), spelled out here because the
``opentelemetry-semantic-conventions`` package marks its GenAI constants deprecated. Combine it
with other observers through :class:`~fanloop.MultiObserver`.

**Traces across processes.** A run that parks a call for approval stores its span's W3C trace
context (``traceparent``, ``tracestate``) with the parked batch in the session; the run that
``agent.resume`` starts, in any process, is a child of that span, so the whole conversation is
one trace (a span current in the resuming process, e.g. the request that approved, is added
as a link). The stored value is read back from a database: it is validated strictly (a
``traceparent`` of version ``00`` and exactly 55 characters, non-zero ids; a ``tracestate`` of
at most 512 printable characters) and ignored, with a debug log, when it is not valid. Nothing
is stored when no tracing observer is active. With ``propagate_to_requests=True`` every model
request carries the ``traceparent`` of its ``chat`` span, for LLM gateways that read it.

**Content capture** (off by default; ``capture_content=True`` or the environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``): ``chat`` spans get
``gen_ai.system_instructions``, ``gen_ai.input.messages`` and ``gen_ai.output.messages`` in the
semantic conventions' JSON structure, ``execute_tool`` spans ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result``. Every value is cut to ``max_content_chars`` and then masked with
the rules of the ``env`` tool (:mod:`fanloop.tools._secrets`: vendor tokens, bearer
credentials, URL passwords, key-like fields) plus the literal values of the environment's
secret variables, so a credential in a prompt or a tool result does not reach the exporter.
See ``docs/observability.md``.

Metrics (token usage, operation duration, time to first chunk, tool duration, retries, pacing
waits, runs, runs in flight, cost) come from a second observer, :class:`OpenTelemetryMetrics`
(``MultiObserver(OpenTelemetryObserver(), OpenTelemetryMetrics())``); docs/observability.md
lists its instruments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

from ._log import logger
from .errors import ConfigurationError
from .events import Event
from .messages import (
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from .observers import NullObserver
from .providers._endpoint import TRACE_HEADERS
from .tools._secrets import MASK, is_secret_variable, redact

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
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
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that turns content capture on (``true``) when the observer's
``capture_content`` is left at ``None``."""

DEFAULT_MAX_CONTENT_CHARS = 16_384
"""The default cap of one captured value (characters)."""

MAX_CONTENT_CHARS = 1_048_576
"""The largest ``max_content_chars`` accepted."""

TRUNCATED = "…[truncated {n} characters]"
"""What ends a captured value that was cut."""

MAX_INPUT_MESSAGES = 256
"""The most messages (the newest) recorded in ``gen_ai.input.messages``."""

MAX_TRACEPARENT = 55
MAX_TRACESTATE = 512

_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
_MARGIN = 4096  # characters masked past the cap, then dropped: a secret cut at the cap goes too
_MIN_SECRET_VALUE = 6  # shorter environment values are not masked literally (too common)
_MAX_SECRET_VALUE = 4096
_PROPAGATOR = TraceContextTextMapPropagator()

_MAX_TOOLS = 10_000  # tool spans of one run open at once (more calls are not traced)
_UNSET = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)  # the API's no-op providers


class _Run:
    """One traced run in flight: its ``invoke_agent`` span, its open ``chat`` span and
    ``execute_tool`` spans, and the run that was current where it started (current again
    when it ends). Found through a context variable, not the run's lineage: concurrent runs
    of one agent have the same lineage."""

    __slots__ = (
        "chat",
        "last",
        "model",
        "outer",
        "parent_call_id",
        "path",
        "provider",
        "run_id",
        "span",
        "tools",
        "waited",
    )

    def __init__(self, event: Any, span: Any, outer: _Run | None) -> None:
        self.run_id: str = event.run_id
        self.path: tuple[str, ...] = event.agent_path
        self.parent_call_id: str | None = event.parent_call_id
        self.provider: str = event.provider
        self.model: str = event.model
        self.span = span
        self.outer = outer
        self.chat: Any = None
        self.waited = 0.0  # pacing waits of the open chat span
        self.tools: dict[str, Any] = {}  # call id -> its execute_tool span
        self.last: object = None  # the last event seen (one delivered twice is skipped)

    def owns(self, event: Event) -> bool:
        """Whether ``event`` has this run's lineage: its agent path, or a longer one after a
        handoff (the agents it handed to), and its parent call."""
        if event.parent_call_id != self.parent_call_id:
            return False
        path = event.agent_path
        return path == self.path or path[: len(self.path)] == self.path


class OpenTelemetryObserver(NullObserver):
    """Turns a run's events into GenAI spans.

    Args:
        tracer_provider: where spans go (default: the global tracer provider).
        propagate_to_requests: send the W3C ``traceparent`` (and ``tracestate``) of each
            model call's ``chat`` span as request headers, for an LLM gateway that reads them
            (providers built on fanloop's own HTTP client; a vendor SDK client passed as
            ``client=`` does its own propagation, if any).
        capture_content: record prompts, answers, tool arguments and results on the spans
            (masked, capped). ``None`` (default): on when the environment variable
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``.
        max_content_chars: the cap of one captured value (a message part, tool arguments, a
            tool result; the whole of ``gen_ai.input.messages``); a longer value is cut and
            ends with ``…[truncated N characters]``.

    Raises:
        ConfigurationError: ``max_content_chars`` is not between 64 and 1 MiB.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        *,
        propagate_to_requests: bool = False,
        capture_content: bool | None = None,
        max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS,
    ) -> None:
        if (
            isinstance(max_content_chars, bool)
            or not isinstance(max_content_chars, int)
            or not 64 <= max_content_chars <= MAX_CONTENT_CHARS
        ):
            raise ConfigurationError(
                f"max_content_chars must be an int from 64 to {MAX_CONTENT_CHARS:,}, "
                f"not {max_content_chars!r}"
            )
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"
        self._tracer = trace.get_tracer("fanloop", tracer_provider=tracer_provider)
        # Whether spans go anywhere: never with a no-op tracer; with the global provider,
        # once one is set (checked as each run starts). A run started with nowhere to record
        # is not tracked, and its events cost a lookup each.
        self._global = tracer_provider is None and not isinstance(self._tracer, trace.NoOpTracer)
        self._live = not isinstance(self._tracer, trace.NoOpTracer) and (
            tracer_provider is not None or not isinstance(trace.get_tracer_provider(), _UNSET)
        )
        # The run an event belongs to: a context variable set as the run starts, so that
        # concurrent runs of one agent (same lineage) and the tasks a run spawns (its tool
        # calls, its sub-agents) each see their own.
        self._current: ContextVar[_Run | None] = ContextVar(
            f"fanloop_spans_{id(self)}", default=None
        )
        self._by_id: dict[str, _Run] = {}  # run id -> the run, while it is traced
        self._handlers: dict[str, Callable[[_Run, Any], None]] = {
            "run_started": _ignore,  # handled apart: it makes the run
            "run_finished": self._run_finished,
            "request_started": self._request_started,
            "response_completed": self._response_completed,
            "retry_scheduled": self._call_failed,
            "model_failed": self._call_failed,
            "pacing_wait": self._paced,
            "pacing_unavailable": self._paced,
            "pacing_capped": self._paced,
            "tool_started": self._tool_started,
            "tool_finished": self._tool_finished,
            "guardrail_tripped": self._guardrail_tripped,
            "handoff": self._handoff,
        }
        self.propagate_to_requests = bool(propagate_to_requests)
        self.capture_content = bool(capture_content)
        self.max_content_chars = max_content_chars
        self._mask = _Masker(os.environ) if self.capture_content else None

    def conversation(self) -> AbstractContextManager[None]:
        return nullcontext()

    def trace_context(self, key: str) -> dict[str, str] | None:
        """The W3C trace context of the open span of the run ``key`` (a run id) or of the
        tool call ``key`` (a call id), as a ``traceparent``/``tracestate`` dict; ``None``
        when there is none. fanloop stores it where the run goes on in another process."""
        span = None
        run = self._current.get()
        while run is not None and span is None:  # this run's, or a run it runs under
            span = run.span if run.run_id == key else run.tools.get(key)
            run = run.outer
        if span is None:
            found = self._by_id.get(key)
            span = found.span if found is not None else None
        if span is None or not span.get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier or None

    def remote_trace_context(self, agent_name: str) -> dict[str, str] | None:
        """Start and end an ``invoke_agent {agent_name}`` CLIENT span (a child of the current
        span) for a run handed to another process, and return its trace context: a durable
        run's workers make their ``invoke_agent`` spans children of it, so a run recovered
        on another worker stays in the same trace."""
        span = self._tracer.start_span(
            f"invoke_agent {agent_name}",
            kind=SpanKind.CLIENT,
            attributes={OPERATION: "invoke_agent", AGENT_NAME: agent_name},
        )
        try:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
            return carrier or None
        finally:
            span.end()

    def on_event(self, event: Event) -> None:
        """Open and close spans as the run's events arrive."""
        handler = self._handlers.get(event.kind)
        if handler is None:
            return
        current = self._current
        run = current.get()
        if run is not None and run.last is event:
            return  # the same event again: a sub-agent whose agent has this observer too
        if event.kind == "run_started":
            self._run_started(run, event)
        elif run is not None and run.owns(event):
            handler(run, event)
        else:
            return
        now = current.get()
        if now is not None:
            now.last = event

    def _run_started(self, outer: _Run | None, event: Any) -> None:
        if not self._live:
            if not self._global or isinstance(trace.get_tracer_provider(), _UNSET):
                return  # nothing to record into: the run's other events cost a lookup each
            self._live = True
        # a sub-agent's run (its parent's run is current where it starts) goes under the
        # execute_tool span of the call that delegated to it
        parent = outer.tools.get(event.parent_call_id) if outer and event.parent_call_id else None
        ctx = trace.set_span_in_context(parent) if parent else otel_context.get_current()
        links: list[Link] = []
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: event.agent_name,
            AGENT_ID: event.run_id,
            CONVERSATION_ID: event.run_id,
            PROVIDER: event.provider,
            REQUEST_MODEL: event.model,
        }
        if parent is None and event.trace_context is not None:
            resumed = continued_context(event.trace_context)
            if resumed is not None:  # goes on in the trace of the run it resumes
                here = trace.get_current_span().get_span_context()
                theirs = trace.get_current_span(resumed).get_span_context()
                if here.is_valid and here.trace_id != theirs.trace_id:
                    links.append(Link(here, {"fanloop.link": "resumed_by"}))
                ctx = resumed
                attributes["fanloop.resumed"] = True
        span = self._tracer.start_span(
            f"invoke_agent {event.agent_name}",
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        run = _Run(event, span, outer)
        self._current.set(run)
        self._by_id[run.run_id] = run

    def _request_started(self, run: _Run, event: Any) -> None:
        run.waited = 0.0
        if run.chat is not None:  # a call the run never closed (not expected): close it
            run.chat.end()
        request = event.request
        chat = self._tracer.start_span(
            f"chat {run.model}",
            context=trace.set_span_in_context(run.span),
            kind=SpanKind.CLIENT,
            attributes={
                OPERATION: "chat",
                PROVIDER: run.provider,
                REQUEST_MODEL: run.model,
                REQUEST_MAX_TOKENS: request.max_tokens,
                "fanloop.step": event.step,
                "fanloop.attempt": event.attempt,
            },
        )
        run.chat = chat
        if self._mask is not None:
            self._capture_request(chat, request)
        if self.propagate_to_requests:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(chat))
            TRACE_HEADERS.set(carrier or None)

    def _response_completed(self, run: _Run, event: Any) -> None:
        if self.propagate_to_requests:
            TRACE_HEADERS.set(None)
        span = run.chat
        if span is None:
            return
        run.chat = None
        response = event.response
        if self._mask is not None:
            out = {
                "role": "assistant",
                "parts": self._parts(response.content, self.max_content_chars)[0],
                "finish_reason": str(response.stop_reason),
            }
            span.set_attribute(OUTPUT_MESSAGES, _dumps([out]))
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

    def _call_failed(self, run: _Run, event: Any) -> None:
        if self.propagate_to_requests:
            TRACE_HEADERS.set(None)
        span = run.chat
        if span is not None:
            run.chat = None
            _fail(span, event.error)

    def _tool_started(self, run: _Run, event: Any) -> None:
        call = event.call
        if len(run.tools) >= _MAX_TOOLS:
            return
        tool = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=trace.set_span_in_context(run.span),
            kind=SpanKind.INTERNAL,
            attributes={
                OPERATION: "execute_tool",
                TOOL_NAME: call.name,
                TOOL_CALL_ID: call.id,
                TOOL_TYPE: "function",
            },
        )
        old = run.tools.get(call.id)
        if old is not None:  # a call id the model used twice in one turn: close the first
            old.end()
        run.tools[call.id] = tool
        if self._mask is not None:
            text = self._mask(_arguments(call), self.max_content_chars)
            tool.set_attribute(TOOL_ARGUMENTS, text)

    def _tool_finished(self, run: _Run, event: Any) -> None:
        span = run.tools.pop(event.call.id, None)
        if span is None:
            return
        if self._mask is not None:
            text = self._mask(event.result.content, self.max_content_chars)
            span.set_attribute(TOOL_RESULT, text)
        if event.result.is_error:
            span.set_attribute(ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR, event.result.content[:200]))
        span.end()

    def _guardrail_tripped(self, run: _Run, event: Any) -> None:
        trip = event.trip
        run.span.add_event(
            "fanloop.guardrail_tripped",
            {
                "fanloop.guardrail.name": trip.name,
                "fanloop.guardrail.kind": trip.kind,
                "fanloop.guardrail.message": (trip.message or "")[:500],
            },
        )

    def _handoff(self, run: _Run, event: Any) -> None:
        run.span.add_event(
            "fanloop.handoff",
            {
                "fanloop.handoff.from_agent": event.from_agent,
                "fanloop.handoff.to_agent": event.to_agent,
            },
        )

    def _run_finished(self, run: _Run, event: Any) -> None:
        if self.propagate_to_requests:
            TRACE_HEADERS.set(None)
        self._current.set(run.outer)
        if self._by_id.get(run.run_id) is run:
            del self._by_id[run.run_id]
        error = event.error
        if run.chat is not None:  # it ended mid-call: cancelled, or past its deadline
            run.chat.end()
            run.chat = None
        for tool in run.tools.values():  # or mid-tool
            if error is not None:
                _fail(tool, error)
            else:
                tool.end()
        run.tools.clear()
        span = run.span
        result = event.result
        span.set_attribute(INPUT_TOKENS, result.usage.total_input_tokens)
        span.set_attribute(OUTPUT_TOKENS, result.usage.output_tokens)
        span.set_attribute("fanloop.termination_reason", str(result.termination_reason))
        span.set_attribute("fanloop.turns", result.turns)
        if error is not None:
            _fail(span, error)
        else:
            span.end()

    # -- content capture ---------------------------------------------------------------------

    def _capture_request(self, span: Any, request: Any) -> None:
        """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a model call: the
        newest messages first until ``max_content_chars`` is spent (the older ones are
        counted in ``fanloop.input_messages_dropped``)."""
        budget = self.max_content_chars
        mask = self._mask
        assert mask is not None
        if request.system:
            system = mask(request.system, budget)
            span.set_attribute(SYSTEM_INSTRUCTIONS, _dumps([{"type": "text", "content": system}]))
        messages: list[dict[str, Any]] = []
        history: tuple[Message, ...] = request.messages
        for message in reversed(history[-MAX_INPUT_MESSAGES:]):
            if budget <= 0:
                break
            parts, spent = self._parts(message.content, budget)
            budget -= spent
            messages.append({"role": _role(message), "parts": parts})
        messages.reverse()
        span.set_attribute(INPUT_MESSAGES, _dumps(messages))
        dropped = len(history) - len(messages)
        if dropped:
            span.set_attribute("fanloop.input_messages_dropped", dropped)

    def _parts(self, content: Any, budget: int) -> tuple[list[dict[str, Any]], int]:
        """The semantic conventions' parts of a message's content, their text capped (to
        ``budget`` characters in all) and masked; and the characters spent."""
        mask = self._mask
        assert mask is not None
        parts: list[dict[str, Any]] = []
        spent = 0
        for part in content:
            left = max(budget - spent, 0)
            if isinstance(part, TextPart):
                text = mask(part.text, left)
                parts.append({"type": "text", "content": text})
            elif isinstance(part, ThinkingPart):
                text = mask(part.text, left)
                parts.append({"type": "reasoning", "content": text})
            elif isinstance(part, ToolCallPart):
                text = mask(_arguments(part), left)
                parts.append(
                    {"type": "tool_call", "id": part.id, "name": part.name, "arguments": text}
                )
            elif isinstance(part, ToolResultPart):
                text = mask(part.content, left)
                parts.append({"type": "tool_call_response", "id": part.call_id, "response": text})
            elif isinstance(part, ImagePart | DocumentPart):  # never the bytes
                text = ""
                modality = "image" if isinstance(part, ImagePart) else "document"
                parts.append({"type": "blob", "modality": modality, "mime_type": part.media_type})
            else:
                text = ""
                parts.append({"type": str(getattr(part, "kind", "unknown"))})
            spent += len(text)
        return parts, spent

    def _paced(self, run: _Run, event: Any) -> None:
        """A pacing wait (or an unreachable pacing backend) inside a model call: an event on
        its ``chat`` span, and the call's total wait as ``fanloop.pacing.wait_seconds``."""
        span = run.chat
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
        total = run.waited + event.seconds
        run.waited = total
        span.add_event(
            "fanloop.pacing_wait",
            {PACING_KEY: event.key, PACING_REASON: event.reason, PACING_SECONDS: event.seconds},
        )
        span.set_attribute(PACING_WAIT, total)


def _ignore(run: _Run, event: Any) -> None:
    pass


def _fail(span: Any, error: BaseException) -> None:
    span.set_attribute(ERROR_TYPE, type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
    span.end()


def continued_context(raw: object) -> Any:
    """The OpenTelemetry context of a stored W3C trace context (``RunStarted.trace_context``),
    or ``None`` (with a debug log) when it is not a valid one. The value was read back from a
    session or a workflow, so it is untrusted: a ``traceparent`` must be version ``00``, exactly
    55 characters, lowercase hex, with non-zero ids; a ``tracestate`` longer than 512
    characters or with characters outside printable ASCII is dropped."""
    if not isinstance(raw, Mapping):
        logger.debug("trace_context_ignored", reason="not a mapping")
        return None
    parent = raw.get("traceparent")
    if (
        not isinstance(parent, str)
        or len(parent) != MAX_TRACEPARENT
        or _TRACEPARENT.fullmatch(parent) is None
    ):
        shown = parent[:80] if isinstance(parent, str) else type(parent).__name__
        logger.debug("trace_context_ignored", reason="invalid traceparent", value=shown)
        return None
    carrier = {"traceparent": parent}
    state = raw.get("tracestate")
    if isinstance(state, str) and state:
        if len(state) <= MAX_TRACESTATE and _TRACESTATE.fullmatch(state):
            carrier["tracestate"] = state
        else:
            logger.debug("trace_context_tracestate_ignored", length=len(state))
    ctx = _PROPAGATOR.extract(carrier, context=otel_context.Context())
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        logger.debug("trace_context_ignored", reason="not extracted", value=parent)
        return None
    return ctx


class _Masker:
    """Caps a value, then masks its secrets: the ``env`` tool's rules
    (:func:`fanloop.tools._secrets.redact`) and the literal values of the environment's secret
    variables (snapshot when the observer is made)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        values = {
            v
            for n, v in environ.items()
            if _MIN_SECRET_VALUE <= len(v) <= _MAX_SECRET_VALUE and is_secret_variable(n, v)
        }
        ordered = sorted(values, key=len, reverse=True)
        self._literal = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, text: str, cap: int) -> str:
        """``text`` cut to ``cap`` characters (with a marker), its secrets masked. Only
        ``cap`` plus a margin is scanned (the margin is dropped after masking, so a secret cut
        in two at the cap is not half shown); the work is linear in that."""
        size = len(text)
        cut = size > cap
        if cut:
            text = text[: cap + _MARGIN]
        if self._literal is not None:
            text = self._literal.sub(MASK, text)
        text = redact(text)
        if cut:
            text = text[: max(len(text) - _MARGIN, 0)][:cap] if size > cap + _MARGIN else text[:cap]
            text += TRUNCATED.format(n=f"{size - cap:,}")
        return text


def _arguments(call: ToolCallPart) -> str:
    try:
        return json.dumps(call.arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return "{}"


def _role(message: Message) -> str:
    if (
        message.role == "user"
        and message.content
        and all(isinstance(p, ToolResultPart) for p in message.content)
    ):
        return "tool"
    return str(message.role)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
