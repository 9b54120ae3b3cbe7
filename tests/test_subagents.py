"""Sub-agents (docs/subagents.md): the delegate tool and Agent.as_tool run in parallel, stream
into the parent with their lineage, roll their usage up, share the budget, and die with the parent.

One ScriptedProvider serves the parent and its sub-agents; it answers by looking at the
request's system prompt (the sub-agent's differs from the parent's)."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from fanloop import (
    Agent,
    Delegation,
    Hooks,
    Limits,
    ModelSettings,
    TerminationReason,
    Tool,
    ToolResult,
)
from fanloop.errors import AuthenticationError
from fanloop.events import Event
from fanloop.messages import ToolResultPart
from fanloop.providers import ModelRequest, StopReason, Usage
from fanloop.testing import ScriptedProvider, call, reply

LEAD = "You are the lead agent."
HELPER = "You research one topic."
TASKS = ("task-1", "task-2", "task-3")
PARENT_USAGE = Usage(input_tokens=1000, output_tokens=50)
CHILD_USAGE = Usage(input_tokens=100, output_tokens=10)


class Probe(Tool):
    """A read-only tool for sub-agents. Every call waits until ``expected`` calls are in (a
    barrier), so the calls can only finish if they run at the same time. ``forever`` makes
    them wait until cancelled."""

    name = "probe"
    description = "Look something up."
    parameters = {
        "type": "object",
        "properties": {"task": {"type": "string"}},
        "required": ["task"],
    }

    def __init__(self, expected: int = 3, *, forever: bool = False) -> None:
        self.expected = expected
        self.forever = forever
        self.arrived = 0
        self.all_in = anyio.Event()
        self.cancelled = 0
        self.exited = 0
        self.seen: list[str] = []

    async def run(self, task: str) -> ToolResult:
        self.seen.append(task)
        self.arrived += 1
        if self.arrived == self.expected:
            self.all_in.set()
        try:
            await self.all_in.wait()
            if self.forever:
                await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.exited += 1
        return ToolResult(f"facts about {task}")


def lead_and_children(tool_name: str = "delegate", *, child_system: str | None = None) -> Any:
    """The responder: the lead delegates TASKS in one turn, then sums up; each sub-agent calls
    probe once with its task, then reports."""

    def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                return reply(
                    tool_calls=[
                        call(tool_name, _id=f"d{i}", task=task) for i, task in enumerate(TASKS, 1)
                    ],
                    usage=PARENT_USAGE,
                )
            results = [p for p in request.messages[-1].content if isinstance(p, ToolResultPart)]
            return reply("summary: " + " | ".join(r.content for r in results), usage=PARENT_USAGE)
        assert child_system is None or request.system == child_system
        task = request.messages[0].text
        if len(request.messages) == 1:
            return reply(tool_calls=[call("probe", task=task)], usage=CHILD_USAGE)
        return reply(f"report for {task}", usage=CHILD_USAGE)

    return respond


def lead(probe: Probe, max_depth: int = 1) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(lead_and_children())
    agent = Agent(provider, system=LEAD, delegation=Delegation(tools=[probe], max_depth=max_depth))
    return agent, provider


async def streamed(agent: Agent, prompt: str) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    async with agent.stream(prompt) as run:
        async for event in run:
            events.append(event)
    return run.result, events


# -- delegate ---------------------------------------------------------------------------------


async def test_three_delegations_in_one_turn_run_at_the_same_time() -> None:
    probe = Probe(expected=3)
    agent, _ = lead(probe)
    with anyio.fail_after(5):  # serial sub-agents would never get past the barrier
        result = await agent.run("research three things")
    assert sorted(probe.seen) == list(TASKS)
    assert result.termination_reason is TerminationReason.COMPLETED
    # results come back in the order of the calls
    assert result.text == "summary: report for task-1 | report for task-2 | report for task-3"


async def test_subagent_events_reach_the_parent_stream_with_their_lineage() -> None:
    probe = Probe(expected=3)
    agent, _ = lead(probe)
    with anyio.fail_after(5):
        result, events = await streamed(agent, "research three things")
    assert result.termination_reason is TerminationReason.COMPLETED
    root = [e for e in events if e.agent_path == ("agent",)]
    children = [e for e in events if e.agent_path[:1] == ("agent",) and len(e.agent_path) == 2]
    assert len(root) + len(children) == len(events)
    assert all(e.parent_call_id is None for e in root)
    assert {e.parent_call_id for e in children} == {"d1", "d2", "d3"}
    # each sub-agent has a path element of its own, not only its delegating call's id
    paths = {e.parent_call_id: e.agent_path for e in children}
    assert sorted(paths.values()) == [("agent", f"delegate-{i}") for i in (1, 2, 3)]
    assert all(e.agent_path == paths[e.parent_call_id] for e in children)
    assert events[0].kind == "run_started" and events[0].agent_path == ("agent",)
    assert events[-1].kind == "run_finished" and events[-1].agent_path == ("agent",)
    for index, task in enumerate(TASKS, 1):
        mine = [e for e in children if e.parent_call_id == f"d{index}"]
        kinds = [e.kind for e in mine]
        assert kinds[0] == "run_started"
        assert kinds[-1] == "run_finished"
        assert kinds.count("request_started") == 2
        assert "text_delta" in kinds
        (probe_call,) = [e.call for e in mine if e.kind == "tool_started"]  # type: ignore[union-attr]
        assert probe_call.name == "probe"
        assert probe_call.arguments == {"task": task}  # this sub-agent works for that call
        text = "".join(e.text for e in mine if e.kind == "text_delta")  # type: ignore[union-attr]
        assert text == f"report for {task}"
    # a delegation's events come between that call's tool_started and tool_finished at the root
    for call_id in ("d1", "d2", "d3"):
        start = next(
            i for i, e in enumerate(events) if e.kind == "tool_started" and e.call.id == call_id
        )
        end = next(
            i for i, e in enumerate(events) if e.kind == "tool_finished" and e.call.id == call_id
        )
        inside = [i for i, e in enumerate(events) if e.parent_call_id == call_id]
        assert start < min(inside) and max(inside) < end


async def test_subagent_usage_rolls_up_into_the_parent() -> None:
    probe = Probe(expected=3)
    agent, provider = lead(probe)
    with anyio.fail_after(5):
        result = await agent.run("research three things")
    assert len(provider.requests) == 2 + 3 * 2
    expected = PARENT_USAGE + PARENT_USAGE
    for _ in range(6):
        expected = expected + CHILD_USAGE
    assert result.usage == expected
    assert result.tool_calls == 6  # the parent's 3 delegations plus one call per sub-agent


async def test_parallel_subagents_do_not_overshoot_a_shared_output_budget() -> None:
    """Each model call honours the request's max_tokens (as a real model does); the shared
    budget must clamp the calls in flight so that together they stay under the limit."""
    limit = 1000
    want = 400
    in_flight = 0
    all_in = anyio.Event()
    clamped: list[int] = []

    async def respond(request: ModelRequest) -> Any:
        nonlocal in_flight
        if request.system == LEAD:
            if len(request.messages) == 1:
                return reply(
                    tool_calls=[call("delegate", task=t) for t in TASKS],
                    usage=Usage(input_tokens=10, output_tokens=50),
                )
            return reply("done", usage=Usage(input_tokens=10, output_tokens=5))
        in_flight += 1
        if in_flight == 3:
            all_in.set()
        await all_in.wait()  # all three sub-agent calls are in flight at once
        clamped.append(request.max_tokens)
        used = min(want, request.max_tokens)
        return reply(
            "x" * 40,
            usage=Usage(input_tokens=10, output_tokens=used),
            stop_reason=StopReason.END_TURN if used == want else StopReason.MAX_TOKENS,
        )

    provider = ScriptedProvider(respond)
    agent = Agent(
        provider,
        system=LEAD,
        delegation=Delegation(tools=[]),
        model_settings=ModelSettings(max_tokens=want),
        limits=Limits(max_output_tokens=limit),
    )
    with anyio.fail_after(5):
        result = await agent.run("go")
    assert sorted(clamped)[0] < want  # somebody was clamped: 50 + 3 * 400 would be 1250
    assert result.usage.output_tokens <= limit
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET


async def test_cancelling_the_parent_cancels_every_subagent() -> None:
    probe = Probe(expected=3, forever=True)
    agent, _ = lead(probe)
    tasks_before = set(asyncio.all_tasks())
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "research three things")
            await probe.all_in.wait()
            tg.cancel_scope.cancel()
    assert probe.arrived == 3
    assert probe.cancelled == 3
    assert probe.exited == 3
    assert set(asyncio.all_tasks()) == tasks_before


async def test_cancelling_a_streamed_parent_cancels_every_subagent() -> None:
    probe = Probe(expected=3, forever=True)
    agent, _ = lead(probe)
    with anyio.fail_after(5):
        async with agent.stream("research three things") as run:
            async for event in run:
                if event.kind == "tool_started" and probe.all_in.is_set():
                    break
            await probe.all_in.wait()
    assert probe.cancelled == 3
    assert probe.exited == 3
    assert run.result.termination_reason is TerminationReason.CANCELLED
    # the transcript still has a result for every delegate call
    results = run.result.messages[-1].content
    assert [r.call_id for r in results] == ["d1", "d2", "d3"]  # type: ignore[union-attr]
    assert all(r.is_error for r in results)  # type: ignore[union-attr]


async def test_subagents_get_no_delegate_tool_by_default() -> None:
    probe = Probe(expected=3)
    agent, provider = lead(probe)
    with anyio.fail_after(5):
        await agent.run("go")
    lead_tools = {t.name for t in provider.requests[0].tools}
    assert lead_tools == {"delegate"}
    child_requests = [r for r in provider.requests if r.system != LEAD]
    assert len(child_requests) == 6
    assert all({t.name for t in r.tools} == {"probe"} for r in child_requests)


async def test_max_depth_two_lets_subagents_delegate_once_more() -> None:
    probe = Probe(expected=3)
    agent, provider = lead(probe, max_depth=2)
    with anyio.fail_after(5):
        await agent.run("go")
    child_requests = [r for r in provider.requests if r.system != LEAD]
    assert all({t.name for t in r.tools} == {"probe", "delegate"} for r in child_requests)


async def test_a_failing_subagent_does_not_stop_its_siblings() -> None:
    probe = Probe(expected=2)
    inner = lead_and_children()

    def respond(request: ModelRequest) -> Any:
        if request.system != LEAD and request.messages[0].text == "task-2":
            return AuthenticationError("bad key")
        return inner(request)

    agent = Agent(
        ScriptedProvider(respond),
        system=LEAD,
        delegation=Delegation(tools=[probe]),
    )
    with anyio.fail_after(5):
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    tool_results = result.messages[2].content
    assert [r.is_error for r in tool_results] == [False, True, False]  # type: ignore[union-attr]
    assert "bad key" in tool_results[1].content  # type: ignore[union-attr]
    assert sorted(probe.seen) == ["task-1", "task-3"]


# -- Agent.as_tool ------------------------------------------------------------------------------


def lead_with_helper(probe: Probe) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(lead_and_children("research", child_system=HELPER))
    helper = Agent(provider, system=HELPER, tools=[probe], name="researcher")
    research = helper.as_tool("research", "Research one topic and report.")
    return Agent(provider, system=LEAD, tools=[research], name="lead"), provider


async def test_as_tool_exposes_the_name_and_description() -> None:
    probe = Probe(expected=3)
    agent, provider = lead_with_helper(probe)
    with anyio.fail_after(5):
        await agent.run("go")
    (spec,) = provider.requests[0].tools
    assert spec.name == "research"
    assert spec.description == "Research one topic and report."
    assert spec.parameters["required"] == ["task"]


async def test_as_tool_runs_in_parallel_with_lineage_and_usage() -> None:
    probe = Probe(expected=3)
    agent, _ = lead_with_helper(probe)
    with anyio.fail_after(5):
        result, events = await streamed(agent, "go")
    assert result.text == "summary: report for task-1 | report for task-2 | report for task-3"
    children = [e for e in events if e.agent_path != ("lead",)]
    assert {e.parent_call_id for e in children} == {"d1", "d2", "d3"}
    assert all(e.parent_call_id is None for e in events if e.agent_path == ("lead",))
    assert {e.agent_path for e in events} == {("lead",)} | {
        ("lead", f"researcher-{i}") for i in (1, 2, 3)
    }
    expected = PARENT_USAGE + PARENT_USAGE
    for _ in range(6):
        expected = expected + CHILD_USAGE
    assert result.usage == expected


async def test_cancelling_the_parent_cancels_agents_used_as_tools() -> None:
    probe = Probe(expected=3, forever=True)
    agent, _ = lead_with_helper(probe)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "go")
            await probe.all_in.wait()
            tg.cancel_scope.cancel()
    assert probe.cancelled == probe.exited == 3


async def test_an_agent_used_as_a_tool_spends_from_the_callers_budget() -> None:
    probe = Probe(expected=1)
    agent, provider = lead_with_helper(probe)
    # the helper has no limits of its own; the lead allows 100 output tokens in all
    agent = agent.with_options(limits=Limits(max_output_tokens=100))
    with anyio.fail_after(5):
        result = await agent.run("go")
    helper_requests = [r for r in provider.requests if r.system == HELPER]
    assert helper_requests
    assert all(r.max_tokens <= 100 - PARENT_USAGE.output_tokens for r in helper_requests)
    assert result.usage.output_tokens <= 100
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET


@pytest.mark.parametrize("concurrent_safe", [True, False])
async def test_as_tool_outside_a_run_just_runs_the_agent(concurrent_safe: bool) -> None:
    helper = Agent(ScriptedProvider(["plain answer"]), name="helper")
    research = helper.as_tool("research", concurrent_safe=concurrent_safe)
    assert research.concurrent_safe is concurrent_safe
    result = await research.run(task="anything")
    assert result.content == "plain answer"
    assert not result.is_error


async def test_the_parents_text_delta_hook_sees_only_the_parents_answer() -> None:
    chunks: list[str] = []

    def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("delegate", task=t) for t in TASKS])
            return "final answer"
        return f"report on {request.messages[0].text}"

    agent = Agent(
        ScriptedProvider(respond, chunk_size=4),
        system=LEAD,
        delegation=Delegation(tools=[]),
        hooks=Hooks(on_text_delta=chunks.append),
    )
    result = await agent.run("go")
    assert "".join(chunks) == result.text == "final answer"


async def test_the_subagents_system_prompt_and_model_can_be_set_from_the_agent() -> None:
    from fanloop import Delegation

    child_model = ScriptedProvider(["child report"], model="child-model")
    lead_model = ScriptedProvider(
        [reply(tool_calls=[call("delegate", task="look")]), "done"], model="lead-model"
    )
    agent = Agent(
        lead_model,
        delegation=Delegation(system="You are a careful researcher.", provider=child_model),
    )
    result = await agent.run("go")
    assert result.text == "done"
    (request,) = child_model.requests
    assert request.system == "You are a careful researcher."
    assert len(lead_model.requests) == 2  # the lead's model never answered for the child


async def test_subagents_of_an_overridden_agent_keep_the_configured_delegate_tools() -> None:
    probe = Probe(expected=3)
    agent, original = lead(probe)
    replacement = ScriptedProvider(lead_and_children())
    with anyio.fail_after(5), agent.override(provider=replacement):
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert not original.requests
    child_requests = [r for r in replacement.requests if r.system != LEAD]
    assert len(child_requests) == 6
    assert all({t.name for t in r.tools} == {"probe"} for r in child_requests)
    assert sorted(probe.seen) == sorted(TASKS)


async def test_subagents_of_a_copy_keep_the_configured_delegate_tools() -> None:
    probe = Probe(expected=3)
    agent, provider = lead(probe)
    copy = agent.with_options(name="lead-copy")
    with anyio.fail_after(5):
        await copy.run("go")
    child_requests = [r for r in provider.requests if r.system != LEAD]
    assert all({t.name for t in r.tools} == {"probe"} for r in child_requests)
    assert sorted(probe.seen) == sorted(TASKS)
