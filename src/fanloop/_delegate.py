"""Sub-agents: the ``delegate`` tool and ``Agent.as_tool``.

A sub-agent runs as a task inside its parent's tool batch. It spends from the parent's budget,
its usage rolls up into the parent's, its events reach the parent's stream with their lineage
(agent path and the delegating call's id), and cancelling the parent cancels it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._result import RunResult, TerminationReason
from .errors import ToolError
from .tools.base import Tool, ToolResult, current_context

if TYPE_CHECKING:
    from ._agent import Agent
    from ._run import RunState

__all__ = ["AgentTool", "DelegateTool"]

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
    """Run ``agent`` on ``task`` as a sub-agent of the run calling this tool."""
    try:
        ctx = current_context()
    except LookupError:
        return _outcome(await agent.run(task))
    parent: RunState = ctx._run
    result = await agent._execute(task, parent=parent, parent_call_id=ctx.call.id)
    return _outcome(result)


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

    def __init__(self, tools: Iterable[Tool] | None = None, system: str = SUBAGENT_SYSTEM) -> None:
        self._tools = tuple(tools) if tools is not None else None
        self._system = system
        self._fallback: dict[str | None, tuple[Tool, ...]] = {}

    def _tools_for_children(self, parent: Agent[Any, Any]) -> tuple[Tool, ...]:
        """The sub-agent's tools: never more reach than the parent has.

        Explicit ``delegate_tools`` win. Otherwise the parent's own read-only built-in tools
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
    def _read_only_kinds() -> frozenset[type[Tool]]:
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
        from ._agent import Agent

        child = Agent(
            pa.provider,
            system=self._system,
            tools=self._tools_for_children(pa),
            limits=pa.limits,
            retry=pa.retry,
            name="delegate",
            max_tokens=pa.max_tokens,
            max_tokens_ceiling=pa.max_tokens_ceiling,
            temperature=pa.temperature,
            context_window=pa.context_window,
            delegation=depth < pa.max_depth,
            max_depth=pa.max_depth,
            delegate_tools=self._tools,
            auto_approve=pa.auto_approve,
            confirm=pa.confirm,
            workspace=pa.workspace,
            _limiters=pa.limiters,
        )
        result = await child._execute(task, parent=parent, parent_call_id=ctx.call.id)
        return _outcome(result)


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
