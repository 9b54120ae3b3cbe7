"""Sub-agents: the ``delegate`` tool and ``Agent.as_tool``.

This module sits below :mod:`fanloop._agent`: the agent adds the ``delegate`` tool, and the
tool makes its sub-agents with the class of the agent that runs it (``Agent._subagent_class``),
so nothing here imports the agent.

A sub-agent runs as a task inside its parent's tool batch. It spends from the parent's budget,
its usage rolls up into the parent's, its events reach the parent's stream with their lineage
(agent path and the delegating call's id), and cancelling the parent cancels it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ._config import ContextPolicy
from ._model_types import ModelRequest, Usage
from ._result import RunResult, TerminationReason
from ._settings import ModelSettings
from .errors import ConfigurationError, ToolError
from .events import BudgetKind
from .limits import NO_INPUT, Budget, Denial, InputEstimate, Limits, Reservation, estimate_input
from .messages import Message
from .tools.base import Tool, ToolResult, current_context

if TYPE_CHECKING:
    from ._agent import Agent
    from ._run import RunState

__all__ = ["AgentTool", "DelegateTool", "Delegation"]

SUBAGENT_SYSTEM = (
    "You are a sub-agent working on one self-contained task for another agent. Use your "
    "tools to investigate, then answer with a complete, self-contained report: the other "
    "agent sees only your final answer."
)

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The complete task, with all the context the sub-agent needs.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


def _outcome(result: RunResult) -> ToolResult:
    if result.termination_reason is TerminationReason.COMPLETED:
        return ToolResult(result.text)
    note = f"The sub-agent stopped early ({result.termination_reason}"
    note += f": {result.detail})" if result.detail else ")"
    return ToolResult(f"{note}.\n{result.text}".rstrip(), is_error=not result.text)


async def run_subagent(agent: Agent[Any, Any], task: str) -> ToolResult:
    """Run ``agent`` on ``task`` as a sub-agent of the run calling this tool.

    The sub-agent spends from the caller's budget and lives within the caller's deadline, and
    its own :class:`~fanloop.Limits` hold too: its ``timeout`` is a deadline of its own (a
    cancel scope; the sub-agent ends with ``deadline``), and its token, cost and tool-call
    limits are an allowance of its own, checked and reserved alongside the shared budget.
    """
    try:
        ctx = current_context()
    except LookupError:
        return _outcome(await agent.run(task))
    parent: RunState = ctx._run
    result = await agent._execute(
        None,
        parent=parent,
        parent_call_id=ctx.call.id,
        before=partial(_with_own_limits, agent, task),
        label=parent.subagent_label(agent.name),
    )
    return _outcome(result)


async def _with_own_limits(agent: Agent[Any, Any], task: str, run: RunState) -> RunResult:
    """The sub-agent's run, under its own limits as well as its parent's."""
    if _has_own_budget(agent.limits):
        run.budget = ChildBudget(agent.limits, run.budget)
    await run.append(Message.user(task))
    return await agent._loop(run, deadline=True)


def _has_own_budget(limits: Limits) -> bool:
    return any(
        v is not None
        for v in (
            limits.max_input_tokens,
            limits.max_output_tokens,
            limits.max_total_tokens,
            limits.max_cost_usd,
            limits.max_tool_calls,
        )
    )


@dataclass(slots=True, eq=False)
class _Pair(Reservation):
    """A reservation held in a child's own budget and in the budget above it."""

    own: Reservation | None = None
    outer: Reservation | None = None


class ChildBudget(Budget):
    """A sub-agent's own allowance (its :class:`~fanloop.Limits`), spent alongside the budget
    of the tree above it: every reservation, charge and check applies to both, so the
    tightest limit wins and neither can be overshot."""

    def __init__(self, limits: Limits, outer: Budget) -> None:
        super().__init__(limits)
        self.outer = outer

    @property
    def watching(self) -> bool:
        return self._watching or self.outer.watching

    @property
    def metering(self) -> bool:
        return self._metering or self.outer.metering

    @property
    def counts_input(self) -> bool:
        return self._counts_input or self.outer.counts_input

    def exhausted(self) -> Denial | None:
        return Budget.exhausted(self) or self.outer.exhausted()

    def spent(self) -> Denial | None:
        return Budget.spent(self) or self.outer.spent()

    def estimate(
        self, request: ModelRequest, known_tokens: int, known_messages: int
    ) -> InputEstimate:
        if not self.counts_input:
            return NO_INPUT
        return estimate_input(
            request,
            known_tokens=known_tokens,
            known_messages=known_messages,
            scale=max(self.input_scale, self.outer.input_scale),
        )

    async def reserve(
        self, estimate: InputEstimate, requested: int, model: str
    ) -> Reservation | Denial:
        outer = self.outer
        above: Reservation | None = None
        if outer.metering:
            granted = await outer.reserve(estimate, requested, model)
            if isinstance(granted, tuple):
                return granted
            above = granted
            requested = above.output_tokens
            estimate = estimate.at_least(above.input_tokens)  # as the tree above learned it
        own: Reservation | None = None
        if self._metering:
            try:
                mine = await Budget.reserve(self, estimate, requested, model)
            except BaseException:
                outer.settle(above, None, model)
                raise
            if isinstance(mine, tuple):
                outer.settle(above, None, model)
                return mine
            own = mine
            if above is not None and own.output_tokens < above.output_tokens:
                # Hand the larger share above back and take the smaller one at once (no
                # await comes before its grant, so it fits without waiting).
                outer.settle(above, None, model)
                again = await outer.reserve(estimate, own.output_tokens, model)
                if isinstance(again, tuple):
                    Budget.settle(self, own, None, model)
                    return again
                above = again
        base = own if own is not None else above
        if base is None:
            return _Pair(estimate.tokens, requested, 0.0, estimate.measured)
        return _Pair(
            base.input_tokens,
            base.output_tokens,
            base.cost_usd,
            base.measured,
            own=own,
            outer=above,
        )

    def output_allowance(self, requested: int, model: str) -> Reservation:
        above = self.outer.output_allowance(requested, model)
        own = Budget.output_allowance(self, above.output_tokens, model)
        return _Pair(0, own.output_tokens, own.cost_usd, own=own, outer=above)

    def settle(self, reserved: Reservation | None, usage: Usage | None, model: str) -> None:
        own: Reservation | None = None
        above: Reservation | None = None
        if isinstance(reserved, _Pair):
            if reserved.open:
                reserved.open = False
                own, above = reserved.own, reserved.outer
        elif reserved is not None:
            own = reserved
        Budget.settle(self, own, usage, model)
        self.outer.settle(above, usage, model)

    def take_tool_calls(self, wanted: int) -> int:
        mine = Budget.take_tool_calls(self, wanted)
        granted = self.outer.take_tool_calls(mine)
        self.tool_calls -= mine - granted
        return granted

    def warnings(self) -> list[tuple[BudgetKind, float, float]]:
        return Budget.warnings(self) + self.outer.warnings()


@dataclass(frozen=True, slots=True)
class Delegation:
    """How ``delegate`` sub-agents are made: ``Agent(delegation=Delegation(...))``.

    ``Agent(delegation=True)`` is ``Delegation()``: sub-agents on the parent's provider, with
    the sub-agent system prompt and read-only tools.

    Attributes:
        system: the sub-agents' system prompt.
        provider: the sub-agents' model: a provider, or a ``"vendor:model"`` string (made once,
            and closed with the agent); ``None``: the parent's.
        tools: the sub-agents' tools (default: the parent's own read-only built-in tools, see
            :class:`DelegateTool`).
        model_settings: the sub-agents' model settings (default: the parent run's, without
            its ``tool_choice``).
        max_depth: how deep delegation may nest: 1 (the default) lets the agent delegate and
            its sub-agents not; 2 lets them delegate once more; 0 gives no ``delegate`` tool.
    """

    system: str = SUBAGENT_SYSTEM
    provider: Any = None
    tools: Sequence[Tool] | None = None
    model_settings: Any = None
    max_depth: int = 1

    def __post_init__(self) -> None:
        depth = self.max_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ConfigurationError(f"max_depth must be an int >= 0, not {depth!r}")
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))


class DelegateTool(Tool):
    """``delegate``: spawn a fresh sub-agent (same provider, read-only tools) for a subtask.

    ``concurrent_safe``, so several delegations in one turn run at the same time.
    """

    name = "delegate"
    description = (
        "Hand an independent subtask to a fresh sub-agent with read-only tools. It starts "
        "with no memory of this conversation, so describe the task completely. Several "
        "delegations in one turn run in parallel. Returns the sub-agent's final answer."
    )
    parameters = _TASK_SCHEMA
    concurrent_safe = True

    def __init__(
        self,
        tools: Iterable[Tool] | None = None,
        system: str = SUBAGENT_SYSTEM,
        *,
        provider: Any = None,
        model_settings: Any = None,
        max_depth: int = 1,
    ) -> None:
        self._tools = tuple(tools) if tools is not None else None
        self._max_depth = max_depth
        self._system = system
        self._fallback: dict[str | None, tuple[Tool, ...]] = {}
        self.owns_provider = isinstance(provider, str)
        if isinstance(provider, str):
            from .providers._resolve import resolve_provider

            provider = resolve_provider(provider)
        self._provider = provider
        self._settings = model_settings

    @classmethod
    def from_config(cls, config: Delegation) -> DelegateTool:
        """The tool for ``Agent(delegation=config)``."""
        return cls(
            tools=config.tools,
            system=config.system,
            provider=config.provider,
            model_settings=config.model_settings,
            max_depth=config.max_depth,
        )

    async def aclose(self) -> None:
        """Close the sub-agents' provider if this tool made it from a model string."""
        close = getattr(self._provider, "aclose", None) if self.owns_provider else None
        if close is not None:
            await close()

    def _config(self) -> Delegation:
        """This tool's settings, for the sub-agents' own ``delegate`` tool."""
        return Delegation(
            system=self._system,
            provider=self._provider,
            tools=self._tools,
            model_settings=self._settings,
            max_depth=self._max_depth,
        )

    def _tools_for_children(self, parent: Agent[Any, Any]) -> tuple[Tool, ...]:
        """The sub-agent's tools: never more reach than the parent has.

        Explicit ``Delegation(tools=...)`` win. Otherwise the parent's own read-only built-in tools
        (the same instances, so the same workspace root and read cache); a parent that has
        none gets fresh read-only tools rooted at its ``workspace`` (the current directory
        when it has none).
        """
        if self._tools is not None:
            return self._tools
        from .tools import READ_ONLY_NAMES, read_only_tools

        kinds = self._read_only_kinds()
        own = tuple(
            t for t in parent.tools.values() if t.name in READ_ONLY_NAMES and type(t) in kinds
        )
        if own:
            return own
        cached = self._fallback.get(parent.workspace)
        if cached is None:
            cached = self._fallback[parent.workspace] = read_only_tools(root=parent.workspace)
        return cached

    @staticmethod
    @functools.cache
    def _read_only_kinds() -> frozenset[type[Tool]]:
        """The classes of the read-only built-in tools (worked out once)."""
        from .tools import READ_ONLY_TOOLS

        return frozenset(type(t) for t in READ_ONLY_TOOLS)

    async def run(self, task: str) -> ToolResult:
        try:
            ctx = current_context()
        except LookupError:
            raise ToolError("delegate can only run inside an agent run") from None
        parent: RunState = ctx._run
        pa = parent.agent
        depth = parent.depth + 1
        own_model = self._provider is not None
        if self._settings is not None:
            settings = self._settings
        else:
            settings = parent.settings.model_copy(update={"tool_choice": None})
        if not own_model and getattr(settings, "max_tokens_ceiling", None) is None:
            settings = as_model_settings(settings).model_copy(
                update={"max_tokens_ceiling": pa.max_tokens_ceiling}
            )
        child = pa._subagent_class(
            self._provider if own_model else pa.provider,
            system=self._system,
            tools=self._tools_for_children(pa),
            limits=pa.limits,
            retry=pa.retry,
            name="delegate",
            model_settings=settings,
            context=None if own_model else same_window(pa.context_window),
            delegation=self._config() if depth < self._max_depth else False,
            auto_approve=pa.auto_approve,
            confirm=pa.confirm,
            workspace=pa.workspace,
            _limiters=pa.limiters,
        )
        result = await child._execute(
            task,
            parent=parent,
            parent_call_id=ctx.call.id,
            label=parent.subagent_label(child.name),
        )
        return _outcome(result)


def same_window(context_window: int) -> ContextPolicy | None:
    """The context policy of a sub-agent on its parent's model: the parent's window (as
    resolved from the model table), the other fields their defaults."""
    return ContextPolicy(context_window=context_window) if context_window else None


def as_model_settings(value: Any) -> ModelSettings:
    """``Delegation.model_settings`` (a :class:`~fanloop.ModelSettings` or a mapping of
    its fields) as settings."""
    return value if isinstance(value, ModelSettings) else ModelSettings(**value)


class AgentTool(Tool):
    """Any agent as a tool, called with a ``task`` string (see :meth:`Agent.as_tool`)."""

    parameters = _TASK_SCHEMA

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        description: str | None = None,
        concurrent_safe: bool = True,
    ) -> None:
        self.agent = agent
        self.name = name or agent.name
        self.description = description or (
            f"Ask the {agent.name!r} agent to carry out a task and return its answer."
        )
        self.concurrent_safe = concurrent_safe

    async def run(self, task: str) -> ToolResult:
        return await run_subagent(self.agent, task)
