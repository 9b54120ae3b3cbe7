"""Observers and hooks: two callback-shaped views of a run's event stream.

An **observer** (``Agent(observer=...)``) implements the :class:`LoopObserver` protocol.
Subclass :class:`NullObserver` and override what you need::

    class ResponseCounter(NullObserver):
        def __init__(self) -> None:
            self.count = 0

        def on_response(self, response: ModelResponse) -> None:
            self.count += 1

**Hooks** (``Agent(hooks=Hooks(...))``) are plain callbacks, sync or async, one per moment of
the run (see :class:`Hooks`).

Both are fed from the same events that ``agent.stream()`` yields. A callback that raises is
logged and never ends the run; only an observer's ``conversation()`` context propagates its
errors.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from ._log import logger
from ._record import record
from .events import BudgetKind
from .messages import ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from ._model_types import ModelRequest, ModelResponse, Usage
    from ._result import GuardrailTrip, TerminationReason
    from .limits import Limits

__all__ = [
    "ConsoleObserver",
    "ConversationContext",
    "ConversationSummary",
    "GuardedObserver",
    "Hooks",
    "LoopObserver",
    "MultiObserver",
    "NullObserver",
    "guarded",
]

OPTIONAL_CALLBACKS = (
    "on_conversation_start",
    "on_conversation_end",
    "on_budget_warning",
    "on_stall",
    "on_model_error",
    "on_text_delta",
    "on_guardrail_tripped",
    "on_handoff",
)
REQUIRED_CALLBACKS = ("on_request", "on_response", "on_retry", "on_tool_start", "on_tool_end")


@record(frozen=True)
class ConversationContext:
    """Handed to ``on_conversation_start``: who is running, with which limits."""

    run_id: str
    agent_name: str
    provider: str
    model: str
    limits: Limits
    session_id: str | None = None


@record(frozen=True)
class ConversationSummary:
    """Handed to ``on_conversation_end``, once per conversation, on success or failure."""

    run_id: str
    termination_reason: TerminationReason
    turns: int
    usage: Usage
    elapsed: float
    tool_calls: int
    error: BaseException | None = None


@runtime_checkable
class LoopObserver(Protocol):
    """The observer protocol. The optional callbacks (``on_conversation_start``,
    ``on_conversation_end``, ``on_budget_warning``, ``on_stall``, ``on_model_error``,
    ``on_text_delta``, ``on_guardrail_tripped``: see :class:`NullObserver`) may be left out."""

    def conversation(self) -> AbstractContextManager[None]:
        """A context covering one complete conversation; its errors propagate."""
        ...

    def on_request(self, request: ModelRequest) -> None:
        """Immediately before a provider call."""
        ...

    def on_response(self, response: ModelResponse) -> None:
        """After a successful provider call."""
        ...

    def on_retry(self, attempt: int, error: Exception) -> None:
        """Before retrying a provider failure; ``attempt`` is the failed attempt number."""
        ...

    def on_tool_start(self, call: ToolCallPart) -> None:
        """Before a tool call is handled, including a call to an unknown tool."""
        ...

    def on_tool_end(self, call: ToolCallPart, result: ToolResultPart) -> None:
        """After that call produced a result, including an error result."""
        ...


class NullObserver:
    """Every callback as a no-op; ``conversation()`` is a ``nullcontext()``. Subclass it."""

    def conversation(self) -> AbstractContextManager[None]:
        return nullcontext()

    def on_request(self, request: ModelRequest) -> None:
        pass

    def on_response(self, response: ModelResponse) -> None:
        pass

    def on_retry(self, attempt: int, error: Exception) -> None:
        pass

    def on_tool_start(self, call: ToolCallPart) -> None:
        pass

    def on_tool_end(self, call: ToolCallPart, result: ToolResultPart) -> None:
        pass

    def on_conversation_start(self, context: ConversationContext) -> None:
        pass

    def on_conversation_end(self, summary: ConversationSummary) -> None:
        pass

    def on_budget_warning(self, kind: BudgetKind, used: float, limit: float) -> None:
        pass

    def on_stall(self, tool_name: str, count: int) -> None:
        pass

    def on_model_error(self, error: Exception) -> None:
        pass

    def on_text_delta(self, text: str) -> None:
        pass

    def on_guardrail_tripped(self, trip: GuardrailTrip) -> None:
        pass

    def on_handoff(self, from_agent: str, to_agent: str) -> None:
        """The run was handed from one agent to another (docs/handoffs.md)."""


# An observer may also define ``on_event(event)``: it then receives every event of the run —
# sub-agents' included, with their lineage — as the typed objects of :mod:`fanloop.events`.
# The OpenTelemetry observer (:mod:`fanloop.otel`) is built on it.
#
# And ``trace_context(key)``: the W3C trace context (``traceparent``, ``tracestate``) of the
# span it keeps for a run id or a tool call id, as a dict, or ``None``. fanloop stores it where
# the run goes on in another process (a parked batch's state in the session, a durable
# sub-agent's workflow input) and hands it back as ``RunStarted.trace_context``.


def tracing_observer(observer: object) -> Any:
    """The first observer of ``observer`` (through :class:`GuardedObserver` and
    :class:`MultiObserver`) that traces (has ``trace_context``), or ``None``."""
    if observer is None:
        return None
    if isinstance(observer, GuardedObserver):
        return tracing_observer(observer.inner)
    if isinstance(observer, MultiObserver):
        for inner in observer.observers:
            found = tracing_observer(inner)
            if found is not None:
                return found
        return None
    return observer if callable(getattr(observer, "trace_context", None)) else None


def trace_context_of(observer: object, key: str) -> dict[str, str] | None:
    """The trace context the tracing observer of ``observer`` keeps for ``key`` (a run id or
    a tool call id); ``None`` when no observer traces (the common case: one attribute lookup
    per wrapped observer)."""
    tracer = tracing_observer(observer)
    if tracer is None:
        return None
    try:
        found = tracer.trace_context(key)
    except Exception:
        logger.exception(
            "observer_callback_failed", observer=type(tracer).__name__, callback="trace_context"
        )
        return None
    return dict(found) if found else None


class ConsoleObserver(NullObserver):
    """Prints the run: nonblank answers, tool activity and retries.

    Because it prints the final answer, do not also print ``Agent.run()``'s text unless you
    want it twice.
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file

    def _print(self, text: str) -> None:
        print(text, file=self._file or sys.stdout, flush=True)

    def on_response(self, response: ModelResponse) -> None:
        text = response.text
        if text.strip():
            self._print(text)

    def on_tool_start(self, call: ToolCallPart) -> None:
        args = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
        self._print(f"-> {call.name}({args})")

    def on_tool_end(self, call: ToolCallPart, result: ToolResultPart) -> None:
        status = "error" if result.is_error else "ok"
        first = result.content.strip().splitlines()[0] if result.content.strip() else ""
        if len(first) > 100:
            first = first[:97] + "..."
        self._print(f"<- {call.name} [{status}] {first}")

    def on_retry(self, attempt: int, error: Exception) -> None:
        self._print(f"!! attempt {attempt} failed: {type(error).__name__}: {error}; retrying")


def _call_guarded(owner: object, name: str, fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        logger.exception("observer_callback_failed", observer=type(owner).__name__, callback=name)


class GuardedObserver(NullObserver):
    """Wraps an observer so that its ``on_*`` errors are logged instead of raised.

    ``conversation()`` is the wrapped observer's own, so its exceptions propagate. Optional
    callbacks the wrapped observer lacks are skipped; it has ``on_event`` only when the wrapped
    observer has it.
    """

    def __init__(self, inner: LoopObserver) -> None:
        self.inner = inner

    def conversation(self) -> AbstractContextManager[None]:
        return self.inner.conversation()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            inner = object.__getattribute__(self, "inner")
            fn = getattr(inner, name, None)
            if fn is None:
                if name in _NULL_CALLBACKS:
                    return _noop
                raise _missing(self, name)
            return lambda *args: _call_guarded(inner, name, fn, *args)
        return object.__getattribute__(self, name)


def _noop(*args: Any) -> None:
    pass


# The callbacks every observer answers (NullObserver's): a wrapper always has them, as a no-op
# when what it wraps lacks one. Any other ``on_*`` (``on_event``) it has only when something it
# wraps has it: the loop makes every event for an observer with ``on_event``, so a wrapper
# answering it for nothing would cost each run the events nobody reads.
_NULL_CALLBACKS = frozenset(n for n in vars(NullObserver) if n.startswith("on_"))


def _missing(wrapper: object, name: str) -> AttributeError:
    return AttributeError(
        f"{type(wrapper).__name__!r} object has no attribute {name!r} "
        "(no observer it wraps has one)"
    )


class MultiObserver(NullObserver):
    """Calls each observer in argument order.

    ``conversation()`` enters them in argument order and closes them in reverse order; an
    exception from one of those contexts propagates. A failed ``on_*`` callback in one observer
    is logged and does not keep the others from the event. It has ``on_event`` only when one of
    its observers has it (an observer with ``on_event`` makes the loop build every event).
    """

    def __init__(self, *observers: LoopObserver) -> None:
        self.observers = observers

    @contextmanager
    def _conversation(self) -> Iterator[None]:
        with ExitStack() as stack:
            for obs in self.observers:
                stack.enter_context(obs.conversation())
            yield

    def conversation(self) -> AbstractContextManager[None]:
        return self._conversation()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            found = [
                (obs, fn)
                for obs in object.__getattribute__(self, "observers")
                if (fn := getattr(obs, name, None)) is not None
            ]
            if not found and name not in _NULL_CALLBACKS:
                raise _missing(self, name)

            def fan(*args: Any) -> None:
                for obs, fn in found:
                    _call_guarded(obs, name, fn, *args)

            return fan
        return object.__getattribute__(self, name)


def guarded(observer: LoopObserver | None) -> LoopObserver:
    """Make ``observer`` safe to call from the loop.

    Returns a :class:`NullObserver` for ``None``; leaves a :class:`GuardedObserver` or an exact
    :class:`NullObserver` unchanged; wraps anything else. Calling it twice adds no second wrapper.
    """
    if observer is None:
        return NullObserver()
    if isinstance(observer, GuardedObserver) or type(observer) is NullObserver:
        return observer
    return GuardedObserver(observer)


MaybeAwaitable = Awaitable[None] | None


@record(frozen=True)
class Hooks:
    """Callbacks for the moments of a run. Each may be a plain function or ``async def``.

    Attributes:
        on_request: ``(message_count, tool_count)`` right before each provider call.
        on_tool_call: ``(name, arguments)`` right before a tool call is attempted.
        on_tool_result: ``(name, result_text, is_error)`` after a call finishes or is declined.
        on_text_delta: ``(chunk)`` for every streamed text chunk.
        confirm: ``(name, preview) -> bool | str`` before a dangerous tool runs, when the agent
            has no ``confirm`` of its own. ``False`` or a string declines.
        on_usage: ``(turn_usage, total_usage, elapsed)`` after every provider call.
        on_context: ``(used_tokens, limit_tokens)`` after every provider call.
        on_compact_start: ``()`` when auto-compaction begins.
        on_compact_end: ``(before_count, after_count)`` when it finishes.
        on_retry: ``(attempt, delay, exc)`` before retrying a transient provider failure.
        on_message: ``()`` after every message is appended to the conversation.
        on_guardrail_tripped: ``(trip)`` when one of the agent's guardrails trips (a
            :class:`~fanloop.GuardrailTrip`; the run then ends with ``guardrail_tripped``).
        on_handoff: ``(from_agent, to_agent)`` when the run is handed to another agent
            (docs/handoffs.md).
    """

    on_request: Callable[[int, int], MaybeAwaitable] | None = None
    on_tool_call: Callable[[str, dict[str, Any]], MaybeAwaitable] | None = None
    on_tool_result: Callable[[str, str, bool], MaybeAwaitable] | None = None
    on_text_delta: Callable[[str], MaybeAwaitable] | None = None
    confirm: Callable[[str, str], Awaitable[bool | str] | bool | str] | None = None
    on_usage: Callable[[Usage, Usage, float], MaybeAwaitable] | None = None
    on_context: Callable[[int, int], MaybeAwaitable] | None = None
    on_compact_start: Callable[[], MaybeAwaitable] | None = None
    on_compact_end: Callable[[int, int], MaybeAwaitable] | None = None
    on_retry: Callable[[int, float, Exception], MaybeAwaitable] | None = None
    on_message: Callable[[], MaybeAwaitable] | None = None
    on_guardrail_tripped: Callable[[GuardrailTrip], MaybeAwaitable] | None = None
    on_handoff: Callable[[str, str], MaybeAwaitable] | None = None
