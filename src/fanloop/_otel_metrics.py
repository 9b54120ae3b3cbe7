"""OpenTelemetry metrics for fanloop runs: :class:`OpenTelemetryMetrics` (see ``fanloop.otel``).

An observer fed every event of the run (``on_event``), like the span observer, that records
the GenAI semantic-convention client metrics (token usage, operation duration, time to first
chunk) and fanloop's own (tool duration, retries, pacing waits, runs, runs in flight, cost)
through the OpenTelemetry metrics API. docs/observability.md lists every instrument.

Values that come from outside (model names from the server, tool names from the model) become
attribute values only up to :data:`MAX_VALUES` distinct ones of :data:`MAX_VALUE_CHARS` at
most each; past that they are recorded as ``_OTHER``, so a model that invents tool names
cannot grow the metric's series without bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, get_args

from ._version import __version__
from .catalog import cost_of
from .events import StreamDelta
from .observers import NullObserver

try:
    from opentelemetry import metrics
    from opentelemetry.metrics import NoOpMeter, NoOpMeterProvider
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("fanloop.otel needs OpenTelemetry: pip install 'fanloop[otel]'") from exc
try:  # the global meter provider before one is set: it records nothing
    from opentelemetry.metrics._internal import _ProxyMeterProvider as _Unset
except ImportError:  # pragma: no cover - another API version: always record
    _Unset = ()  # type: ignore[assignment,misc]

__all__ = [
    "DURATION_BUCKETS",
    "MAX_VALUES",
    "MAX_VALUE_CHARS",
    "OTHER",
    "OpenTelemetryMetrics",
    "TOKEN_BUCKETS",
]

TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""The semantic conventions' advised bucket boundaries for ``gen_ai.client.token.usage``."""

DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""The semantic conventions' advised bucket boundaries (seconds) for
``gen_ai.client.operation.duration``; fanloop's duration histograms use them too."""

MAX_VALUES = 256
"""The most distinct values one attribute takes from outside input (tool and model names)."""
MAX_VALUE_CHARS = 128
"""The longest such value; a longer one is recorded as :data:`OTHER`."""
OTHER = "_OTHER"
"""What an attribute value past :data:`MAX_VALUES` (or too long) is recorded as."""

# Attribute names: the GenAI ones spelled out (the semconv package marks them deprecated).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
TOKEN_TYPE = "gen_ai.token.type"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
ERROR_TYPE = "error.type"
TOKEN_CACHE = "fanloop.token.cache"
TOOL_OUTCOME = "fanloop.tool.outcome"
RETRY_REASON = "fanloop.retry.reason"
PACING_REASON = "fanloop.pacing.reason"
PACING_KEY = "fanloop.pacing.key"
TERMINATION = "fanloop.termination_reason"

_FIRST_CHUNK_KINDS = frozenset(kind.kind for kind in get_args(StreamDelta))
_MAX_TOOLS = 10_000  # tool calls of one run timed at once (more are recorded without a clock)


class _Bounded:
    """Attribute values from outside input, capped in number and length."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        text = value if isinstance(value, str) else str(value)
        if text in self._seen:
            return text
        if len(text) > MAX_VALUE_CHARS or len(self._seen) >= MAX_VALUES:
            return OTHER
        self._seen.add(text)
        return text


class _Attempt:
    """One model call attempt in flight."""

    __slots__ = ("first", "provider", "started")

    def __init__(self, started: float, provider: str) -> None:
        self.started = started
        self.provider = provider
        self.first = False  # a delta has arrived


class _Run:
    """One run in flight: its lineage, its model call and tool calls in flight, and the run
    that was current where it started (current again when it ends)."""

    __slots__ = (
        "agent",
        "attempt",
        "last",
        "model",
        "outer",
        "parent_call_id",
        "path",
        "provider",
        "tools",
    )

    def __init__(self, event: Any, outer: _Run | None) -> None:
        self.path: tuple[str, ...] = event.agent_path
        self.parent_call_id: str | None = event.parent_call_id
        self.last: object = None  # the last event seen (one delivered twice is skipped)
        self.provider: str = event.provider
        self.model: str = event.model
        self.agent: str = event.agent_name
        self.outer = outer
        self.attempt: _Attempt | None = None
        self.tools: dict[str, tuple[float, str]] = {}  # call id -> when it started, tool name


class OpenTelemetryMetrics(NullObserver):
    """Records a run's metrics through the OpenTelemetry metrics API.

    ::

        from fanloop import Agent, MultiObserver
        from fanloop.otel import OpenTelemetryMetrics, OpenTelemetryObserver

        observer = MultiObserver(OpenTelemetryObserver(), OpenTelemetryMetrics())
        agent = Agent(provider, observer=observer)

    Args:
        meter_provider: where the measurements go (default: the global meter provider; with
            none configured the API's no-op meter records nothing, at almost no cost).

    One observer serves any number of agents and concurrent runs; sub-agents' runs are
    recorded too (with their own ``gen_ai.agent.name``).
    """

    def __init__(self, meter_provider: Any = None) -> None:
        meter = metrics.get_meter("fanloop", __version__, meter_provider=meter_provider)
        # Whether measurements go anywhere: never with a no-op meter; with the global
        # provider, once one is set (checked as each run starts).
        self._global = meter_provider is None and not isinstance(meter, NoOpMeter)
        self._live = not isinstance(meter, NoOpMeter) and (
            meter_provider is not None or not isinstance(metrics.get_meter_provider(), _Unset)
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time from sending a model request to its first streamed delta.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._tool_duration = meter.create_histogram(
            "fanloop.tool.duration",
            unit="s",
            description="Duration of a tool call, by tool name and outcome.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._retries = meter.create_counter(
            "fanloop.retries",
            unit="{retry}",
            description="Model calls retried, by reason.",
        )
        self._pacing = meter.create_histogram(
            "fanloop.pacing.wait",
            unit="s",
            description="Time a paced model call waited before it was sent (one record per wait).",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._runs = meter.create_counter(
            "fanloop.runs",
            unit="{run}",
            description="Runs ended, by termination reason.",
        )
        self._active = meter.create_up_down_counter(
            "fanloop.runs.active",
            unit="{run}",
            description="Runs in flight.",
        )
        self._cost = meter.create_counter(
            "fanloop.cost.usd",
            unit="{USD}",
            description="Estimated cost of the model calls, from fanloop's model price table.",
        )
        self._models = _Bounded()
        self._tool_names = _Bounded()
        # The run an event belongs to: a context variable set as the run starts, so that
        # concurrent runs of one agent (same lineage) and the tasks a run spawns (its tool
        # calls, its sub-agents) each see their own.
        self._current: ContextVar[_Run | None] = ContextVar(
            f"fanloop_metrics_{id(self)}", default=None
        )
        self._handlers: dict[str, Callable[[Any], None]] = {
            "run_started": self._run_started,
            "run_finished": self._run_finished,
            "request_started": self._request_started,
            "response_completed": self._response_completed,
            "retry_scheduled": self._retry_scheduled,
            "model_failed": self._model_failed,
            "provider_fallback": self._provider_fallback,
            "pacing_wait": self._pacing_wait,
            "pacing_unavailable": self._restart,
            "tool_started": self._tool_started,
            "tool_finished": self._tool_finished,
        }
        for kind in _FIRST_CHUNK_KINDS:
            self._handlers[kind] = self._delta

    def on_event(self, event: Any) -> None:
        """Record what ``event`` measures (most events measure nothing)."""
        handler = self._handlers.get(event.kind)
        if handler is None:
            return
        current = self._current
        run = current.get()
        if run is not None and run.last is event:
            return  # the same event again: a sub-agent whose agent has this observer too
        handler(event)
        run = current.get()
        if run is not None:
            run.last = event

    def _run(self, event: Any) -> _Run | None:
        """The run ``event`` belongs to (``None``: not recorded): the current run, when the
        event has its lineage (its agent path, or a longer one after a handoff)."""
        run = self._current.get()
        if run is None or event.parent_call_id != run.parent_call_id:
            return None
        path = event.agent_path
        if path != run.path and path[: len(run.path)] != run.path:
            return None
        return run

    # -- runs ---------------------------------------------------------------------------------

    def _run_started(self, event: Any) -> None:
        if not self._live:
            if not self._global:
                return
            provider = metrics.get_meter_provider()
            if isinstance(provider, _Unset | NoOpMeterProvider):
                return  # nothing to record into: the run's other events cost a lookup each
            self._live = True
        run = _Run(event, self._current.get())
        self._current.set(run)
        self._active.add(1, {AGENT_NAME: run.agent})

    def _run_finished(self, event: Any) -> None:
        run = self._run(event)
        if run is None:
            return
        self._current.set(run.outer)
        error = event.error
        reason = str(event.result.termination_reason)
        failed = type(error).__name__ if error is not None else reason
        now = time.perf_counter()
        if run.attempt is not None:  # it ended mid-call: cancelled, or past its deadline
            self._record_attempt(run.attempt, run, now, failed)
            run.attempt = None
        for started, name in run.tools.values():  # or mid-tool
            self._tool_duration.record(now - started, {TOOL_NAME: name, TOOL_OUTCOME: "cancelled"})
        run.tools.clear()
        attributes = {AGENT_NAME: run.agent, TERMINATION: reason}
        if error is not None:
            attributes[ERROR_TYPE] = type(error).__name__
        self._runs.add(1, attributes)
        self._active.add(-1, {AGENT_NAME: run.agent})

    # -- model calls --------------------------------------------------------------------------

    def _request_started(self, event: Any) -> None:
        run = self._run(event)
        if run is not None:
            run.attempt = _Attempt(time.perf_counter(), run.provider)

    def _restart(self, event: Any) -> None:
        """The request goes out after a pacing wait: its clocks start now."""
        run = self._run(event)
        if run is not None and run.attempt is not None:
            run.attempt.started = time.perf_counter()

    def _pacing_wait(self, event: Any) -> None:
        if self._run(event) is None:
            return
        self._pacing.record(event.seconds, {PACING_REASON: event.reason, PACING_KEY: event.key})
        self._restart(event)

    def _delta(self, event: Any) -> None:
        run = self._run(event)
        if run is None:
            return
        attempt = run.attempt
        if attempt is None or attempt.first:
            return
        attempt.first = True
        self._first_chunk.record(
            max(time.perf_counter() - attempt.started, 0.0),
            {OPERATION: "chat", PROVIDER: attempt.provider, REQUEST_MODEL: run.model},
        )

    def _response_completed(self, event: Any) -> None:
        run = self._run(event)
        if run is None:
            return
        attempt = run.attempt
        run.attempt = None
        response = event.response
        provider = attempt.provider if attempt is not None else run.provider
        attributes = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: run.model,
            RESPONSE_MODEL: self._models(response.model) if response.model else run.model,
        }
        if attempt is not None:
            self._duration.record(max(time.perf_counter() - attempt.started, 0.0), attributes)
        usage = response.usage
        tokens = self._tokens.record
        tokens(usage.input_tokens, {**attributes, TOKEN_TYPE: "input", TOKEN_CACHE: "none"})
        if usage.cache_read_tokens:
            tokens(
                usage.cache_read_tokens, {**attributes, TOKEN_TYPE: "input", TOKEN_CACHE: "read"}
            )
        if usage.cache_write_tokens:
            tokens(
                usage.cache_write_tokens, {**attributes, TOKEN_TYPE: "input", TOKEN_CACHE: "write"}
            )
        tokens(usage.output_tokens, {**attributes, TOKEN_TYPE: "output", TOKEN_CACHE: "none"})
        cost = cost_of(run.model, usage)
        if cost:
            self._cost.add(cost, {PROVIDER: provider, REQUEST_MODEL: run.model})

    def _record_attempt(
        self, attempt: _Attempt, run: _Run, now: float, error: str, provider: str = ""
    ) -> None:
        # never negative: a FallbackProvider's attempt is timed from the end of its backoff,
        # and the event loop may wake a sleeper a clock tick early
        self._duration.record(
            max(now - attempt.started, 0.0),
            {
                OPERATION: "chat",
                PROVIDER: provider or attempt.provider,
                REQUEST_MODEL: run.model,
                ERROR_TYPE: error,
            },
        )

    def _retry_scheduled(self, event: Any) -> None:
        run = self._run(event)
        if run is None:
            return
        attempt = run.attempt
        if attempt is None:
            # No call open: the loop asks again with more room after an answer cut off at
            # max_tokens (that answer was recorded as it came).
            reason = "max_tokens"
            provider = run.provider
        else:
            reason = type(event.error).__name__
            # the provider that failed (a FallbackProvider's error names which of its own)
            provider = _provider_of(event.error) or attempt.provider
            now = time.perf_counter()
            self._record_attempt(attempt, run, now, reason, provider)
            if event.step:  # the loop's retry: the next attempt starts with a new request
                run.attempt = None
            else:  # a FallbackProvider's own retry, inside the loop's call, after the delay
                attempt.started = now + event.delay
                attempt.first = False
        self._retries.add(1, {RETRY_REASON: reason, PROVIDER: provider, REQUEST_MODEL: run.model})

    def _model_failed(self, event: Any) -> None:
        run = self._run(event)
        if run is not None and run.attempt is not None:
            error = event.error
            now = time.perf_counter()
            self._record_attempt(run.attempt, run, now, type(error).__name__, _provider_of(error))
            run.attempt = None

    def _provider_fallback(self, event: Any) -> None:
        run = self._run(event)
        if run is None or run.attempt is None:
            return
        attempt = run.attempt
        now = time.perf_counter()
        self._record_attempt(attempt, run, now, type(event.error).__name__, event.from_provider)
        attempt.started = now
        attempt.first = False
        attempt.provider = event.to_provider

    # -- tools --------------------------------------------------------------------------------

    def _tool_started(self, event: Any) -> None:
        run = self._run(event)
        if run is not None and len(run.tools) < _MAX_TOOLS:
            run.tools[event.call.id] = (time.perf_counter(), self._tool_names(event.call.name))

    def _tool_finished(self, event: Any) -> None:
        run = self._run(event)
        if run is None:
            return
        started = run.tools.pop(event.call.id, None)
        if event.duration:
            seconds = event.duration
        elif started is not None:
            seconds = time.perf_counter() - started[0]
        else:
            seconds = 0.0  # answered without running (declined at the approval gate)
        self._tool_duration.record(
            seconds,
            {
                TOOL_NAME: self._tool_names(event.call.name),
                TOOL_OUTCOME: "error" if event.result.is_error else "ok",
            },
        )


def _provider_of(error: BaseException) -> str:
    """The provider a :class:`~fanloop.errors.ProviderError` names (``""``: none)."""
    name = getattr(error, "provider", None)
    return name if isinstance(name, str) else ""
