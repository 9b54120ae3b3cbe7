"""Event dispatch: one stream of events, three kinds of consumers.

The dispatch table (event kind -> callbacks) is built once per agent from its observer and
hooks, trio-instrument style: a kind nobody listens to costs one dict lookup, and an observer
callback left as :class:`~fanloop.NullObserver`'s no-op is not called at all. A callback that
raises is logged and the run goes on.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ._log import logger
from .events import Event
from .observers import GuardedObserver, Hooks, LoopObserver, MultiObserver, NullObserver

__all__ = ["DELTA_KINDS", "Emitter", "Handler", "StreamSink", "build_table"]

Handler = Callable[[Any], Any]
Table = dict[str, tuple[Handler, ...]]

# Which of a sub-agent's events reach the parent's observer and hooks. Every one of them reaches
# the parent's stream and ``on_event`` with its lineage; the lineage-less callbacks get only the
# tool activity, approvals, retries and warnings, so that a sub-agent's text, requests and
# conversation bookkeeping are never mistaken for the parent's own.
_FORWARDED_TO_CALLBACKS = frozenset(
    {
        "tool_started",
        "tool_finished",
        "approval_requested",
        "approval_resolved",
        "retry_scheduled",
        "stall_detected",
        "budget_warning",
    }
)

_OBSERVER_MAP: dict[str, tuple[str, Callable[[Any], tuple[Any, ...]]]] = {
    "request_started": ("on_request", lambda e: (e.request,)),
    "response_completed": ("on_response", lambda e: (e.response,)),
    "retry_scheduled": ("on_retry", lambda e: (e.attempt, e.error)),
    "tool_started": ("on_tool_start", lambda e: (e.call,)),
    "tool_finished": ("on_tool_end", lambda e: (e.call, e.result)),
    "budget_warning": ("on_budget_warning", lambda e: (e.budget, e.used, e.limit)),
    "stall_detected": ("on_stall", lambda e: (e.tool_name, e.count)),
    "model_failed": ("on_model_error", lambda e: (e.error,)),
    "text_delta": ("on_text_delta", lambda e: (e.text,)),
    "guardrail_tripped": ("on_guardrail_tripped", lambda e: (e.trip,)),
    "handoff": ("on_handoff", lambda e: (e.from_agent, e.to_agent)),
}

_HOOK_MAP: dict[str, tuple[str, Callable[[Any], tuple[Any, ...]]]] = {
    "request_started": ("on_request", lambda e: (len(e.request.messages), len(e.request.tools))),
    "tool_started": ("on_tool_call", lambda e: (e.call.name, e.call.arguments)),
    "tool_finished": (
        "on_tool_result",
        lambda e: (e.call.name, e.result.content, e.result.is_error),
    ),
    "text_delta": ("on_text_delta", lambda e: (e.text,)),
    "usage_updated": ("on_usage", lambda e: (e.turn_usage, e.total_usage, e.elapsed)),
    "context_usage": ("on_context", lambda e: (e.used, e.limit)),
    "compaction_started": ("on_compact_start", lambda e: ()),
    "compaction_finished": ("on_compact_end", lambda e: (e.before_count, e.after_count)),
    "retry_scheduled": ("on_retry", lambda e: (e.attempt, e.delay, e.error)),
    "message_appended": ("on_message", lambda e: ()),
    "guardrail_tripped": ("on_guardrail_tripped", lambda e: (e.trip,)),
    "handoff": ("on_handoff", lambda e: (e.from_agent, e.to_agent)),
}


def _is_noop(observer: object, name: str) -> bool:
    """True when ``observer.name`` is missing or NullObserver's own no-op."""
    if isinstance(observer, GuardedObserver):
        return _is_noop(observer.inner, name)
    if isinstance(observer, MultiObserver):
        return all(_is_noop(o, name) for o in observer.observers)
    if name in getattr(observer, "__dict__", ()):
        return False  # set on the instance
    impl = getattr(type(observer), name, None)
    if impl is None:
        return getattr(observer, name, None) is None
    return impl is getattr(NullObserver, name, None)


def _guard(
    owner: str, name: str, fn: Callable[..., Any], args: Callable[[Any], tuple[Any, ...]]
) -> Handler:
    async def call_async(event: Any) -> None:
        try:
            await fn(*args(event))
        except Exception:
            logger.exception("callback_failed", owner=owner, callback=name)

    def call_sync(event: Any) -> Awaitable[None] | None:
        try:
            out = fn(*args(event))
        except Exception:
            logger.exception("callback_failed", owner=owner, callback=name)
            return None
        if inspect.isawaitable(out):
            return _await_guarded(out, owner, name)
        return None

    return call_async if inspect.iscoroutinefunction(fn) else call_sync


async def _await_guarded(aw: Awaitable[Any], owner: str, name: str) -> None:
    try:
        await aw
    except Exception:
        logger.exception("callback_failed", owner=owner, callback=name)


def build_table(observer: LoopObserver | None, hooks: Hooks | None) -> Table:
    """Map each event kind to the callbacks that want it, observer first, then hooks."""
    if observer is None and hooks is None:
        return {}
    table: dict[str, list[Handler]] = {}
    if observer is not None:
        owner = type(observer).__name__
        on_event = getattr(observer, "on_event", None)
        if on_event is not None:  # sees every event, with lineage, sub-agents' included
            table["*"] = [_guard(owner, "on_event", on_event, lambda e: (e,))]
        for kind, (name, args) in _OBSERVER_MAP.items():
            if not _is_noop(observer, name):
                table.setdefault(kind, []).append(
                    _guard(owner, name, getattr(observer, name), args)
                )
    if hooks is not None:
        for kind, (name, args) in _HOOK_MAP.items():
            fn = getattr(hooks, name)
            if fn is not None:
                table.setdefault(kind, []).append(_guard("Hooks", name, fn, args))
    return {kind: tuple(handlers) for kind, handlers in table.items()}


DELTA_KINDS = (
    "text_delta",
    "thinking_delta",
    "tool_call_started",
    "tool_call_delta",
    "citation_added",
    "hosted_tool_progress",
)
"""The events a streaming provider yields (made only when something consumes one)."""


class StreamSink:
    """Where a model call's stream items go when a run's stream is their only consumer (no
    callbacks, no parent run): stamped and handed to the stream with no coroutine while its
    buffer has room. ``channel`` is the stream's buffer when the consumer can read the model's
    stream itself, in its own task (see ``fanloop._model.Handed``), else ``None``.
    """

    __slots__ = ("_send", "channel", "parent_call_id", "path")

    def __init__(
        self,
        send: Callable[[Event], Awaitable[None] | None],
        path: tuple[str, ...],
        parent_call_id: str | None,
    ) -> None:
        self._send = send
        self.path = path
        self.parent_call_id = parent_call_id
        channel = getattr(send, "__self__", None)
        self.channel: Any = channel if getattr(channel, "can_hand_over", False) else None

    def __call__(self, event: Event) -> Awaitable[None] | None:
        """``None`` once the stream took ``event``, else an awaitable that waits for room."""
        event.agent_path = self.path
        event.parent_call_id = self.parent_call_id
        return self._send(event)


class Emitter:
    """Delivers a run's events: stamps lineage, calls the table, feeds the stream, and hands
    a sub-agent's events up to its parent's emitter.

    ``send`` (the stream's) returns ``None`` once it has taken the event, or an awaitable that
    waits for room (backpressure), which the emitter awaits."""

    __slots__ = (
        "_everything",
        "_send",
        "_sink",
        "parent",
        "parent_call_id",
        "path",
        "table",
        "wants_deltas",
    )

    def __init__(
        self,
        table: Table,
        *,
        path: tuple[str, ...],
        parent_call_id: str | None = None,
        send: Callable[[Event], Awaitable[None] | None] | None = None,
        parent: Emitter | None = None,
    ) -> None:
        self.table = table
        self.path = path
        self.parent_call_id = parent_call_id
        self._send = send
        self._sink: StreamSink | None = None
        self.parent = parent
        self._everything = send is not None or parent is not None or "*" in table
        self.wants_deltas = self._everything or not table.keys().isdisjoint(DELTA_KINDS)

    @property
    def send(self) -> Callable[[Event], Awaitable[None] | None] | None:
        """Where events go besides the table (a stream's queue), if anywhere: it returns
        ``None`` once it took the event, or an awaitable that waits for room."""
        return self._send

    def wants(self, kind: str) -> bool:
        """Whether anything at all consumes events of ``kind`` (skip making unwanted ones)."""
        return self._everything or kind in self.table

    def deltas_sink(self) -> Callable[[Event], Awaitable[None] | None]:
        """What a model call hands its stream items to: a :class:`StreamSink` when the stream
        is the only consumer, else :meth:`emit`."""
        if self.table or self.parent is not None or self._send is None:
            return self.emit
        sink = self._sink
        if sink is None:
            sink = self._sink = StreamSink(self._send, self.path, self.parent_call_id)
        return sink

    async def emit(self, event: Event) -> None:
        """Stamp ``event`` with this agent's lineage and deliver it."""
        event.agent_path = self.path
        event.parent_call_id = self.parent_call_id
        if self.table:
            await self._deliver(event, local=True)
            return
        # Nothing but the stream (the common case of a consumer of ``agent.stream``): one
        # coroutine per event, not two, and none at all for the stream while it has room.
        send = self._send
        if send is not None:
            out = send(event)
            if out is not None:
                await out
        if self.parent is not None:
            await self.parent._deliver(event, local=False)

    async def _deliver(self, event: Event, *, local: bool) -> None:
        every = self.table.get("*")
        if every:
            for handler in every:
                out = handler(event)
                if out is not None:
                    await out
        if local or event.kind in _FORWARDED_TO_CALLBACKS:
            handlers = self.table.get(event.kind)
            if handlers:
                for handler in handlers:
                    out = handler(event)
                    if out is not None:
                        await out
        send = self._send
        if send is not None:
            out = send(event)
            if out is not None:
                await out
        if self.parent is not None:
            await self.parent._deliver(event, local=False)
