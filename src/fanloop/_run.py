"""The state of one run: the conversation, its accounting, and the small steps on it."""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ._dispatch import Emitter
from ._ids import new_id
from ._model_types import (
    JOIN_FROM,
    JoinedTexts,
    ModelRequest,
    ModelResponse,
    Usage,
    no_joined,
    zero_usage,
)
from ._result import RunResult, TerminationReason
from ._slots import slot_of
from ._unicode import forget_valid, valid_models, valid_now
from .catalog import cost_of
from .errors import ConfigurationError
from .events import (
    BudgetWarning,
    ContextUsage,
    Event,
    MessageAppended,
    ResponseCompleted,
    TurnCompleted,
    UsageUpdated,
)
from .limits import Budget, Reservation, StallDetector, clean_usage
from .messages import Message, Origin, Part, TextPart, ToolCallPart, _build
from .tools.base import RunContext

_set_joined = slot_of(ModelRequest, "__fanloop_joined__").__set__

if TYPE_CHECKING:
    from ._agent import Agent
    from ._approvals import Claim, Parked, PendingApproval
    from .sessions import Session

_NO_OUTPUT: Any = object()
_RESULT_SET = set(RunResult.model_fields) - {"guardrail"}  # (set by a tripped guardrail only)

CLEANUP_GRACE = 5.0
"""Seconds that work shielded from a run's cancellation (persisting the last results, the
final event) may take: past it the run ends anyway, so nothing can make it uncancellable."""

__all__ = ["RunState", "dynamic_system"]


class RunState:
    """Everything one run of one agent knows; a sub-agent's run has its own.

    The conversation lives here (and in the session, when there is one), never on the agent.
    """

    __slots__ = (
        "__weakref__",  # the current-run context variable holds a weak reference (_scope)
        "agent",
        "budget",
        "call_ids",
        "claim",
        "context_base",
        "context_tokens",
        "deadline",
        "decisions",
        "deps",
        "depth",
        "emitter",
        "ending",
        "gate",
        "handoffs",
        "joined",
        "max_tokens",
        "max_turns",
        "messages",
        "new_message_index",
        "output",
        "output_failures",
        "parent",
        "parked",
        "pending",
        "run_id",
        "session",
        "settings",
        "stall",
        "started",
        "step",
        "subagents",
        "system",
        "tool_calls",
        "trace_context",
        "turns",
        "usage",
        "warned_turns",
    )

    def __init__(
        self,
        agent: Agent[Any, Any],
        emitter: Emitter,
        budget: Budget,
        *,
        messages: list[Message],
        session: Session | None = None,
        deps: Any = None,
        depth: int = 0,
        parent: RunState | None = None,
    ) -> None:
        self.agent = agent
        self.emitter = emitter
        self.budget = budget
        self.messages = messages
        self.new_message_index = len(messages)
        self.session = session
        self.deps = deps
        self.depth = depth
        self.parent = parent
        self.run_id = new_id("run")
        self.system = agent.system_for_run()
        self.started = time.monotonic()
        # The earliest deadline over this run and its ancestors: (when, on anyio's clock; the
        # timeout it came from). Enforced by a cancel scope and checked before every step.
        self.deadline: tuple[float, float] | None = parent.deadline if parent is not None else None
        self.turns = 0
        self.step = 0  # model requests sent, retries included (see RequestStarted)
        self.subagents = 0  # sub-agents started, for their own path elements
        self.tool_calls = 0
        self.usage = zero_usage()
        self.stall: StallDetector | None = None  # built on the first tool call (_fanout)
        self.max_tokens = agent.max_tokens
        self.settings = agent.model_settings  # a run's own settings: see Agent._execute
        self.context_tokens = 0
        self.context_base = 0
        self.ending: tuple[TerminationReason, str | None] | None = None
        self.max_turns = agent.limits.max_turns  # a handoff may tighten it (see _handoff)
        self.warned_turns = not self.max_turns
        self.call_ids: set[str] | None = None  # built on first use (see _callids)
        self.parked: Parked | None = None  # a batch stopped for a person (see _approvals)
        self.pending: tuple[PendingApproval, ...] = ()
        self.decisions: dict[str, bool | str] = {}  # approvals a resumed batch was given
        self.claim: Claim | None = None  # this run's hold on a parked batch it resumed
        # The W3C trace context stored by the run this one goes on from (see RunStarted)
        self.trace_context: dict[str, str] | None = None
        self.output: Any = _NO_OUTPUT  # the validated typed answer, once there is one
        self.output_failures = 0
        # Set while input guardrails still check the prompt: no tool call starts before it is
        # (see _guardrails and docs/guardrails.md).
        self.gate: anyio.Event | None = None
        self.handoffs = 0  # handoffs taken; ``agent`` is the one in charge (see _handoff)
        # The conversation's wire texts as the providers last read them, carried (weakly) by
        # each request this run makes once its conversation is long enough to keep them
        # (see providers._wire.joined_memo): made then, not for every run.
        self.joined: JoinedTexts | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def output_set(self) -> bool:
        """Whether a valid typed answer was accepted."""
        return self.output is not _NO_OUTPUT

    # -- conversation ----------------------------------------------------------------------

    def append_now(self, message: Message) -> bool:
        """:meth:`append` when it has nothing to wait for (no session to write, nobody
        listening, text valid as it stands): done here, with no coroutine to make; ``False``
        when :meth:`append` is needed instead (nothing was done)."""
        if (
            self.session is None
            and not self.emitter.wants("message_appended")
            and valid_now((message,))
        ):
            self.messages.append(message)
            return True
        return False

    async def append(self, message: Message) -> None:
        """Add a message to the conversation (its text made valid Unicode, as a session
        stores it: docs/sessions.md), persist it, and announce it."""
        (message,) = await valid_models((message,))
        if self.session is not None:
            await self.session.append(message)
        self.messages.append(message)
        if self.emitter.wants("message_appended"):
            await self.emitter.emit(MessageAppended(message, len(self.messages) - 1))

    def request(
        self, pending: Sequence[Part], max_tokens: int, origin: Origin | None = None
    ) -> ModelRequest:
        """The model request for the conversation so far (plus a paused turn's content)."""
        agent = self.agent
        messages = tuple(self.messages)
        if pending:
            paused = {"role": "assistant", "content": tuple(pending), "origin": origin}
            messages += (_build(Message, paused),)
        settings = self.settings
        request = _build(
            ModelRequest,
            {
                "system": self.system,
                "messages": messages,
                "tools": agent.tool_specs,
                "max_tokens": max_tokens,
                "temperature": settings.temperature,
                "stop_sequences": settings.stop or (),
                "thinking_budget": settings.thinking_budget,
                "hosted_tools": agent.hosted_tools,
                "extra": {},
                "settings": settings,
                "output": agent.output_format,
            },
        )
        joined = self.joined
        if joined is None and len(messages) >= JOIN_FROM:
            joined = self.joined = JoinedTexts()
        # (a weak reference: the one plain reference to the memo, reused by every request)
        _set_joined(request, no_joined if joined is None else weakref.ref(joined))
        return request

    # -- accounting ------------------------------------------------------------------------

    async def account(self, response: ModelResponse, reserved: Reservation | None) -> None:
        """Settle the call's reservation, charge its usage to this run, its ancestors and the
        budget, and announce usage and context (the server's counts are cleaned first)."""
        if (announce := self.account_now(response, reserved)) is not None:
            await announce

    def account_now(
        self, response: ModelResponse, reserved: Reservation | None
    ) -> Coroutine[Any, Any, None] | None:
        """:meth:`account`'s work, done here; what is left to announce is returned to be
        awaited (``None``, and no coroutine made, when nothing listens and no limit warns)."""
        usage = clean_usage(response.usage)
        self.budget.settle(reserved, usage, self.agent.model)
        if self.emitter.wants("response_completed"):
            # An observer or hook sees it before it is appended: what it may write into its
            # dicts (the origin's raw form, a call's arguments) is checked on append again.
            forget_valid(response)
        if usage is not response.usage:
            response = response.model_copy(update={"usage": usage})
        self.usage = self.usage + usage
        parent = self.parent
        while parent is not None:  # a sub-agent's usage rolls up into every ancestor's
            parent.usage = parent.usage + usage
            parent = parent.parent
        if usage.total_input_tokens:
            self.context_tokens = usage.total_input_tokens + usage.output_tokens
            self.context_base = len(self.messages)
        emitter = self.emitter
        if (
            emitter.wants("response_completed")
            or emitter.wants("usage_updated")
            or emitter.wants("context_usage")
        ):
            return self._announce_usage(response, usage)
        due = self.warnings_due()
        return self.announce(due) if due else None

    async def _announce_usage(self, response: ModelResponse, usage: Usage) -> None:
        """:meth:`account`'s events, each made as it goes out (a listener's time counts in the
        next one's figures), then the warnings due."""
        emitter = self.emitter
        turn = self.turns
        if emitter.wants("response_completed"):
            await emitter.emit(ResponseCompleted(response, turn, self.step))
        if emitter.wants("usage_updated"):
            await emitter.emit(UsageUpdated(usage, self.usage, self.elapsed))
        if emitter.wants("context_usage"):
            await emitter.emit(ContextUsage(self.context_tokens, self.agent.context_window))
        await self.warn()

    async def announce(self, events: Sequence[Event]) -> None:
        """Emit ``events`` (warnings :meth:`warnings_due` gave)."""
        emitter = self.emitter
        for event in events:
            await emitter.emit(event)

    def context(self, call: ToolCallPart | None = None, *, what: str = "") -> RunContext[Any]:
        """The :class:`RunContext` tools, ``system`` functions and output validators see.

        Outside a tool call (``call`` is ``None``) it carries an empty placeholder call named
        ``what``, so ``ctx.call`` keeps its type.
        """
        if call is None:
            call = ToolCallPart(id="", name=what, arguments={})
        session_id = self.session.id if self.session is not None else None
        return RunContext(
            self.deps, self.run_id, self.emitter.path, call, self.depth, session_id, self
        )

    def subagent_label(self, name: str) -> str:
        """The path element of the next sub-agent this run starts: ``name-1``, ``name-2``..."""
        self.subagents += 1
        return f"{name}-{self.subagents}"

    async def turn_completed(self, tool_calls: int) -> None:
        """Announce the end of a round."""
        if self.emitter.wants("turn_completed"):
            await self.emitter.emit(TurnCompleted(self.turns, tool_calls, self.elapsed))

    async def warn(self) -> None:
        """Announce limits that crossed their warning share."""
        for warning in self.warnings_due():
            await self.emitter.emit(warning)

    def warnings_due(self) -> list[BudgetWarning]:
        """The warnings :meth:`warn` announces, each counted as given (usually none: a caller
        with none to announce makes no coroutine)."""
        if self.warned_turns and not self.budget.watching:
            return []
        due: list[BudgetWarning] = []
        if (
            not self.warned_turns
            and self.max_turns
            and self.turns >= self.max_turns * self.agent.limits.warn_at
        ):
            self.warned_turns = True
            due.append(BudgetWarning("turns", self.turns, self.max_turns))
        for kind, used, limit in self.budget.warnings():
            due.append(BudgetWarning(kind, used, limit))
        return due

    # -- ending ----------------------------------------------------------------------------

    def past_deadline(self) -> str | None:
        """Why no new step may start: the deadline has passed (``None`` while it has not).

        The cancel scope alone cannot hold a deadline when nothing yields to the event loop (a
        provider that answers at once, a tool that blocks the loop): the steps ask this first.
        """
        deadline = self.deadline
        if deadline is None or anyio.current_time() < deadline[0]:
            return None
        return f"the run passed its {deadline[1]:g} s deadline"

    def set_deadline(self, timeout: float) -> float:
        """Start a deadline ``timeout`` seconds from now; return when it falls (anyio's clock).

        An ancestor's earlier deadline still holds: a run ends at whichever comes first.
        """
        when = anyio.current_time() + timeout
        if self.deadline is None or when < self.deadline[0]:
            self.deadline = (when, timeout)
        return when

    def end(self, reason: TerminationReason, detail: str | None = None) -> None:
        """Mark the run as ending with ``reason`` (the loop stops at its next step)."""
        if self.ending is None:
            self.ending = (reason, detail)

    def result(
        self, reason: TerminationReason, *, text: str | None = None, detail: str | None = None
    ) -> RunResult:
        """The :class:`RunResult` of this run as it stands."""
        if self.joined is not None:
            self.joined.clear()  # (a finished run keeps no conversation texts, whoever holds it)
        spec = self.agent.output
        if text is None:
            if self.output_set and not spec.is_text:
                text = spec.dump(self.output)
            else:
                text = _last_text(self.messages, self.new_message_index)
        if spec.is_text:
            output: Any = text
        else:
            output = self.output if self.output_set else None
        values = {
            "output": output,
            "text": text,
            "messages": tuple(self.messages),
            "usage": self.usage,
            "turns": self.turns,
            "elapsed": self.elapsed,
            "termination_reason": reason,
            "run_id": self.run_id,
            "new_message_index": self.new_message_index,
            "tool_calls": self.tool_calls,
            "cost_usd": cost_of(self.agent.model, self.usage),
            "detail": detail,
            "pending_approvals": self.pending,
            "guardrail": None,
            "last_agent": self.agent.name,
        }
        return _build(RunResult, values, _RESULT_SET)


async def dynamic_system(fn: Callable[..., Any], run: RunState) -> str | None:
    """The system prompt of a run whose ``system`` is a function of its context."""
    text = fn(run.context(what="system"))
    if inspect.isawaitable(text):
        text = await text
    if text is not None and not isinstance(text, str):
        raise ConfigurationError(f"the system function returned {type(text).__name__}, not str")
    parts = [p for p in (text, run.system) if p]
    return "\n\n".join(parts) or None


def _last_text(messages: list[Message], start: int) -> str:
    for message in reversed(messages[start:]):
        if message.role == "assistant":
            text = "".join(p.text for p in message.content if isinstance(p, TextPart))
            if text:
                return text
    return ""
