"""Sub-agents of a durable run: child workflows on a DBOS queue.

A sub-agent — the ``delegate`` tool's, or an agent given as a tool with ``Agent.as_tool`` —
runs as a workflow of its own, enqueued on the queue of its depth, which has a global
concurrency limit: one parent's fan-out spreads over every worker process connected to the
database and never runs more sub-agents at once than the limit. The enqueue and the wait for
the child's result are one step of the parent, and the child's id is derived from that step's:
a parent recovered mid-batch finds the children it had started (finished, running elsewhere, or
recovered with their own worker) instead of starting them again.

What holds as in one process: the sub-agent is the one ``delegate`` builds (same provider,
read-only tools, the sub-agent system prompt) or the agent given as a tool; its answer comes
back as the tool result, its events reach the parent's stream with their lineage, and its usage
and tool calls roll up into the parent's (in workflow code, from the step's recorded result, so
a replay rebuilds the same result). Limits: the tree's token, cost and tool-call limits are one
account in the database (see ``_budget``), which every child spends from a model call at a
time, so children running side by side on any workers hold to them together; a child lives
within what its parent's deadline leaves, and an agent given as a tool keeps its own limits too.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._config import ContextPolicy
from .._delegate import DelegateTool, Delegation, _outcome
from .._fanout import MAX_ERROR_CHARS, clip
from .._model_types import Usage
from .._settings import ModelSettings
from ..errors import ProviderError
from ..limits import Limits
from ..observers import trace_context_of
from ..tools.base import Tool, ToolResult, current_context
from ._budget import durable_budget, shared_limits
from ._codec import dump_prompt, load_run_output
from ._dbos import dbos, outside_workflow, step
from ._events import wait_output
from ._steps import Lanes, cut

if TYPE_CHECKING:
    from .._agent import Agent
    from .._run import RunState
    from ._events import EventSink

__all__ = ["ChildStarter", "DurableSubAgent", "account_of", "child_agent", "child_limits"]


class ChildStarter(Protocol):
    """What a sub-agent step needs from the level below: enqueue a run under an id."""

    agent: Agent[Any, Any]

    async def enqueue(self, workflow_id: str, payload: dict[str, Any]) -> None:
        """Enqueue the sub-agent's workflow (the existing one when ``workflow_id`` is taken)."""


def child_agent(parent: Agent, tool: DelegateTool, depth: int) -> Agent:
    """The sub-agent that ``tool`` (the ``delegate`` tool of ``parent``) builds at ``depth``,
    the way it builds it in one process."""
    from .._agent import Agent

    deeper = depth < tool._max_depth
    return Agent(
        parent.provider,
        system=tool._system,
        tools=tool._tools_for_children(parent),
        limits=parent.limits,
        retry=parent.retry,
        name="delegate",
        model_settings=ModelSettings(
            max_tokens=parent.max_tokens,
            max_tokens_ceiling=parent.max_tokens_ceiling,
            temperature=parent.temperature,
        ),
        context=ContextPolicy(context_window=parent.context_window or None),
        delegation=Delegation(tools=tool._tools, max_depth=tool._max_depth) if deeper else False,
        auto_approve=parent.auto_approve,
        confirm=parent.confirm,
        workspace=parent.workspace,
        _limiters=parent.limiters,
    )


def child_limits(limits: Limits, parent: RunState) -> dict[str, Any]:
    """A child run's limits as JSON: its agent's own, with a ``timeout`` no later than what
    the parent's deadline leaves. (The tree's shared limits are its account: see
    :func:`account_of`.)"""
    values = dataclasses.asdict(limits)
    if parent.deadline is not None:
        left = max(0.0, parent.deadline[0] - anyio.current_time())
        values["timeout"] = left if limits.timeout is None else min(limits.timeout, left)
    return values


def account_of(run: RunState) -> dict[str, Any] | None:
    """The tree's budget account a child spends from (its id and limits), if any."""
    tree = durable_budget(run.budget)
    if tree is None:
        return None
    return {"id": tree.account_id, "limits": shared_limits(tree.limits)}


class DurableSubAgent(Tool):
    """A sub-agent tool of a durable run: each call is a child workflow (module docstring).

    Args:
        original: the tool it stands for (``delegate``, or an ``Agent.as_tool`` tool): its
            name, description, schema and ``concurrent_safe``.
        child: the level below, which enqueues the child workflow.
        sink: the run's event sink (the child's events are relayed into it).
        lanes: the run's lanes (calls of a tool that is not ``concurrent_safe`` take turns).
        cap: the parent's ``max_tool_result_chars`` (the answer is cut inside the step).
    """

    concurrent_safe = True

    def __init__(
        self,
        original: Tool,
        child: ChildStarter,
        sink: EventSink,
        lanes: Lanes,
        cap: int | None,
    ) -> None:
        self.name = original.name
        self.description = original.description
        self.parameters = original.parameters
        self._serial = not original.concurrent_safe
        self._child = child
        self._sink = sink
        self._lanes = lanes
        self._cap = cap
        self._step = f"fanloop.subagent:{original.name}"

    async def run(self, task: str) -> ToolResult:
        ctx = current_context()
        run: RunState = ctx._run
        limits = child_limits(self._child.agent.limits, run)
        account = account_of(run)
        before, mine = self._lanes.join(self.name) if self._serial else (None, None)
        try:
            # The child's spans go under this call's execute_tool span (when traced).
            trace = trace_context_of(run.agent.observer, ctx.call.id)
            out = await step(
                self._step, self._body, before, task, limits, account, ctx.call.id, trace
            )
        finally:
            if mine is not None:
                mine.set()
        _roll_up(run, out)
        return ToolResult(str(out["content"]), is_error=bool(out["is_error"]))

    async def _body(
        self,
        before: anyio.Event | None,
        task: str,
        limits: dict[str, Any],
        account: dict[str, Any] | None,
        call_id: str,
        trace: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        if before is not None:
            await before.wait()
        DBOS = dbos()
        child_id = f"{DBOS.workflow_id}-{DBOS.step_id}"
        payload = {
            "prompt": dump_prompt(task),
            "messages": None,
            "limits": limits,
            "account": account,
        }
        if trace:
            payload["trace"] = trace
        await outside_workflow(lambda: self._child.enqueue(child_id, payload))
        async with anyio.create_task_group() as tg:
            if self._sink.enabled:
                tg.start_soon(self._sink.relay, child_id, call_id)
            try:
                output = await wait_output(child_id)
            except Exception as exc:
                output = {"failed": f"{type(exc).__name__}: {exc}"}
        await self._sink.flushed()  # relayed events are in the stream before the step records
        summary = _summary(self.name, output)
        summary["content"] = cut(summary["content"], self._cap)
        return summary


def _summary(name: str, output: dict[str, Any]) -> dict[str, Any]:
    """The child's outcome for the parent: the tool result, usage and tool calls."""
    if "failed" in output:
        content = clip(f"Tool {name!r} failed: {output['failed']}", MAX_ERROR_CHARS)
        return {"content": content, "is_error": True, "usage": None, "tool_calls": 0}
    try:
        result = load_run_output(output)
    except ProviderError as exc:  # as the loop reports a tool that raised
        partial = exc.partial
        return {
            "content": clip(f"Tool {name!r} failed: {type(exc).__name__}: {exc}", MAX_ERROR_CHARS),
            "is_error": True,
            "usage": None if partial is None else partial.usage.model_dump(mode="json"),
            "tool_calls": 0 if partial is None else partial.tool_calls,
        }
    outcome = _outcome(result)
    return {
        "content": outcome.content,
        "is_error": outcome.is_error,
        "usage": result.usage.model_dump(mode="json"),
        "tool_calls": result.tool_calls,
    }


def _roll_up(run: RunState, out: dict[str, Any]) -> None:
    """Add a child's usage and tool calls to ``run``'s result, as a sub-agent's are in one
    process. (The child charged the tree's account itself, call by call.)"""
    calls = int(out.get("tool_calls") or 0)
    usage = Usage.model_validate(out["usage"]) if out.get("usage") else None
    owner: RunState | None = run
    while owner is not None:
        if usage is not None:
            owner.usage = owner.usage + usage
        owner.tool_calls += calls
        owner = owner.parent
