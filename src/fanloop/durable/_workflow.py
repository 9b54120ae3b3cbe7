"""The workflow of a durable agent: one level of its tree (the agent, its sub-agent levels,
its queue) and the body every run of that level executes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from .._delegate import AgentTool, ChildBudget, DelegateTool
from .._ids import counter_source, id_source
from .._output import FINAL_TOOL
from ..errors import ConfigurationError, ProviderError
from ..limits import Budget, Limits
from ..messages import Message
from ..observers import MultiObserver, tracing_observer
from ._budget import DurableBudget, durable_budget, shared_limits
from ._codec import dump_run_output, load_prompt
from ._dbos import dbos, interrupted_cause, require
from ._delegate import DurableSubAgent, child_agent
from ._events import EventSink
from ._steps import ApprovalGate, DurableProvider, DurableTool, Lanes, OutputCheck

if TYPE_CHECKING:
    from .._agent import Agent
    from .._run import RunState

__all__ = ["MAX_LEVELS", "Level", "QueueSpec"]

MAX_LEVELS = 8
"""How deep sub-agents (``delegate``, ``Agent.as_tool``) may nest in a durable agent."""


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A sub-agent queue as ``DBOS.register_queue`` takes it."""

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    poll_interval: float


class Level:
    """One level of a durable agent tree: the agent it runs, its workflow, the levels of its
    sub-agent tools and, below the root, the queue its runs are enqueued on."""

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        workflow_name: str,
        depth: int,
        queues: Callable[[int], QueueSpec],
        events: bool,
        own_limits: bool = False,
        tracer: Any = None,
    ) -> None:
        if depth > MAX_LEVELS:
            raise ConfigurationError(
                f"sub-agents nest more than {MAX_LEVELS} levels deep under {workflow_name!r} "
                "(does an agent given as a tool contain itself?)"
            )
        self.agent = agent
        self.depth = depth
        self.events = events
        self.own_limits = own_limits  # an agent given as a tool: its limits are its own too
        # The agent's tracing observer (fanloop.otel), else the level above's: the only
        # observer a durable run calls besides its event sink (spans are made where it runs).
        self.tracer = tracing_observer(agent.observer) or tracer
        self.workflow_name = workflow_name
        self.queue_spec = queues(depth) if depth else None
        self.provider = DurableProvider(agent.provider)
        self.output_adapter = None if agent.output.is_text else agent.output.adapter
        self._queue: Any = None
        self.children: dict[str, Level] = {}
        for t in agent.tools.values():
            sub: Agent[Any, Any] | None = None
            if isinstance(t, DelegateTool):
                sub = child_agent(agent, t, depth + 1)
            elif isinstance(t, AgentTool):
                sub = t.agent
            if sub is not None:
                self.children[t.name] = Level(
                    sub,
                    workflow_name=f"{workflow_name}.{t.name}",
                    depth=depth + 1,
                    queues=queues,
                    events=events,
                    own_limits=isinstance(t, AgentTool),
                    tracer=self.tracer,
                )
        level = self

        async def fanloop_run(payload: dict[str, Any]) -> dict[str, Any]:
            return await level.execute(payload)

        self.workflow = dbos().workflow(name=workflow_name)(fanloop_run)

    def walk(self) -> Iterator[Level]:
        """This level and every level below it."""
        yield self
        for child in self.children.values():
            yield from child.walk()

    # -- the workflow ------------------------------------------------------------------------

    async def execute(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The workflow's body: the event pump (its first step), then the agent's loop."""
        sink = EventSink(
            (self.agent.name,), enabled=self.events, output_adapter=self.output_adapter
        )
        agent = self.build(sink, payload.get("limits"))
        budget = self.budget(agent, payload.get("account"))
        prompt = load_prompt(payload.get("prompt"))
        # The trace context the run was started (or its parent's tool call enqueued it) under:
        # every execution of the workflow, a recovered one included, goes on in that trace.
        trace = payload.get("trace") if self.tracer is not None else None
        messages = [Message.model_validate(m) for m in payload.get("messages") or ()]
        failure: BaseException | None = None
        output: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            await tg.start(sink.pump)
            try:
                # Ids the loop makes (the run's, invented call ids) are the same on a replay.
                with id_source(counter_source(dbos().workflow_id or "")):
                    output = await _run(
                        agent,
                        prompt,
                        messages,
                        self.output_adapter,
                        budget,
                        trace if isinstance(trace, dict) else None,
                    )
            except BaseException as exc:
                failure = interrupted_cause(exc)
                if failure is None:
                    raise
                tg.cancel_scope.cancel()  # no more writes: DBOS itself is failing
            finally:
                sink.close()
        if failure is not None:
            raise failure  # DBOS's own error (cancelled, database gone...): DBOS handles it
        return output

    def build(self, sink: EventSink, limits: dict[str, Any] | None) -> Agent:
        """The agent one execution runs: this level's, on durable steps."""
        base = self.agent
        lanes = Lanes()
        cap = base.max_tool_result_chars
        tools: list[Any] = []
        for t in base.tools.values():
            if t.name == FINAL_TOOL:
                continue  # the loop adds its own (it settles the run's answer)
            child = self.children.get(t.name)
            if child is not None:
                tools.append(DurableSubAgent(t, child, sink, lanes, cap))
            else:
                tools.append(DurableTool(t, base, lanes))
        tools.extend(base.hosted_tools)  # run by the provider, inside its durable step
        confirm = base.confirm
        gate = ApprovalGate(confirm, can_wait=self.depth == 0) if confirm is not None else None
        return base.with_options(
            provider=self.provider,
            tools=tools,
            system=base.system_for_run(),
            delegation=False,
            memory=False,
            skills=False,
            observer=sink if self.tracer is None else MultiObserver(sink, self.tracer),
            hooks=None,
            confirm=gate,
            # The caps apply inside the tool steps (see _steps); the keyed limits and threads
            # stay, so the copy keeps this agent's limiter pool.
            concurrency=replace(base.concurrency, max_concurrency=None, tool_concurrency={}),
            # Cut inside the tool steps, so checkpoints are capped.
            context=replace(base.context, max_tool_result_chars=None),
            limits=Limits(**limits) if limits else base.limits,
            output_validators=[
                OutputCheck(fn, takes_context, base.output.adapter)
                for takes_context, fn in base.output.validators
            ],
        )

    def budget(self, agent: Agent, account: dict[str, Any] | None) -> Budget | None:
        """The run's budget: its tree's account in the database when the tree has shared
        limits (the root's run opens it; a sub-agent's payload names it), under an agent
        given as a tool's own limits, as in one process; ``None``: the run's own."""
        DBOS = dbos()
        if account is None and self.depth == 0:
            shared = shared_limits(agent.limits)
            if shared is not None:
                account = {"id": DBOS.workflow_id, "limits": shared}
        if account is None:
            return None
        tree = DurableBudget(
            Limits(max_turns=None, **account["limits"]), account_id=str(account["id"])
        )
        if self.own_limits and shared_limits(agent.limits) is not None:
            return ChildBudget(agent.limits, tree)
        return tree

    # -- the queue ---------------------------------------------------------------------------

    async def queue(self) -> Any:
        """This level's DBOS queue, registered (or updated) on first use in this process."""
        spec = self.queue_spec
        assert spec is not None
        if self._queue is None:
            self._queue = await dbos().register_queue_async(
                spec.name,
                global_concurrency=spec.concurrency,
                worker_concurrency=spec.worker_concurrency,
                polling_interval_sec=spec.poll_interval,
            )
        return self._queue

    async def enqueue(self, workflow_id: str, payload: dict[str, Any]) -> None:
        """Enqueue a run of this level under ``workflow_id`` (the existing run if taken)."""
        queue = await self.queue()
        with require().SetWorkflowID(workflow_id):
            await queue.enqueue_async(self.workflow, payload)


async def _run(
    agent: Agent[Any, Any],
    prompt: str | Message | None,
    messages: list[Message],
    adapter: Any,
    budget: Budget | None,
    trace: dict[str, str] | None = None,
) -> Any:
    before = None if budget is None else partial(_spend_from, budget)
    try:
        result = await agent._execute(
            prompt, messages=messages or None, before=before, trace_context=trace
        )
    except ProviderError as exc:
        await _close(budget)
        return dump_run_output(exc.partial, exc, adapter)
    await _close(budget)
    return dump_run_output(result, None, adapter)


async def _spend_from(budget: Budget, run: RunState) -> None:
    """The run spends from ``budget``; a tree's root opens its account first."""
    run.budget = budget
    tree = durable_budget(budget)
    if tree is not None and tree.account_id == dbos().workflow_id:
        await tree.open()


async def _close(budget: Budget | None) -> None:
    tree = durable_budget(budget)
    if tree is not None:
        await tree.close()
