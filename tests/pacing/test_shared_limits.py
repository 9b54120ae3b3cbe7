"""Limits shared beyond one agent: keyed concurrency limits across separately built agents,
``as_tool`` sub-agents under their own limits as well as their parent's, and budgets held by
parallel sub-agents."""

from __future__ import annotations

import gc
import uuid
from typing import Any

import anyio
import pytest

from fanloop import Agent, Concurrency, Limits, ModelSettings, TerminationReason, tool
from fanloop.catalog import cost_of
from fanloop.errors import ConfigurationError
from fanloop.events import RunFinished
from fanloop.limits import estimate_input
from fanloop.messages import ToolResultPart
from fanloop.providers import ModelRequest, StopReason, Usage
from fanloop.testing import ScriptedProvider, call, reply

PRICED = "claude-sonnet-4-5"  # $3 / $15 per million tokens in fanloop.catalog


def results_of(result: Any) -> list[ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]


def calls_then_done(*calls: Any) -> ScriptedProvider:
    def respond(request: ModelRequest) -> Any:
        return reply(tool_calls=list(calls)) if len(request.messages) == 1 else "done"

    return ScriptedProvider(respond)


# -- keyed limits across separately built agents ----------------------------------------------


async def test_separately_built_agents_share_one_limiter_per_key() -> None:
    key = f"db-{uuid.uuid4().hex[:8]}"
    stats = {"active": 0, "peak": 0}

    @tool(concurrent_safe=True, concurrency_key=key)
    async def query(n: int) -> str:
        """Query."""
        stats["active"] += 1
        stats["peak"] = max(stats["peak"], stats["active"])
        await anyio.sleep(0.01)
        stats["active"] -= 1
        return str(n)

    calls = [call("query", n=i) for i in range(3)]
    first = Agent(
        calls_then_done(*calls), tools=[query], concurrency=Concurrency(concurrency_limits={key: 1})
    )
    second = Agent(
        calls_then_done(*calls), tools=[query], concurrency=Concurrency(concurrency_limits={key: 1})
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run, "go")
        tg.start_soon(second.run, "go")
    assert stats["peak"] == 1  # before: one limiter per agent, so two at once


def test_a_different_limit_for_a_live_key_is_refused_and_freed_with_its_agents() -> None:
    key = f"api-{uuid.uuid4().hex[:8]}"

    @tool(concurrency_key=key)
    def ping() -> str:
        """Ping."""
        return "pong"

    first = Agent(
        ScriptedProvider(), tools=[ping], concurrency=Concurrency(concurrency_limits={key: 2})
    )
    Agent(
        ScriptedProvider(), tools=[ping], concurrency=Concurrency(concurrency_limits={key: 2})
    )  # same limit: fine
    with pytest.raises(ConfigurationError, match=f"{key!r} already has limit 2"):
        Agent(
            ScriptedProvider(), tools=[ping], concurrency=Concurrency(concurrency_limits={key: 3})
        )
    with pytest.raises(ConfigurationError, match="already has limit 2"):
        first.with_options(concurrency=Concurrency(concurrency_limits={key: 5}))
    with pytest.raises(ConfigurationError, match="whole number"):
        Agent(ScriptedProvider(), concurrency=Concurrency(concurrency_limits={f"{key}-x": 0}))
    del first
    gc.collect()
    Agent(
        ScriptedProvider(), tools=[ping], concurrency=Concurrency(concurrency_limits={key: 3})
    )  # the key is free


# -- as_tool sub-agents under their own limits -------------------------------------------------


async def test_an_as_tool_child_ends_at_its_own_timeout_and_the_parent_goes_on() -> None:
    child = Agent(
        ScriptedProvider(["never seen"], first_delay=30),
        name="slow",
        limits=Limits(timeout=0.2),
    )
    parent = Agent(
        calls_then_done(call("slow", _id="c1", task="take your time")),
        tools=[child.as_tool()],
        limits=Limits(timeout=10),
    )
    finished: list[Any] = []
    with anyio.fail_after(5):  # before: the child had no deadline of its own (30 s)
        async with parent.stream("go") as run:
            async for event in run:
                if isinstance(event, RunFinished):
                    finished.append(event)
    assert run.result.termination_reason is TerminationReason.COMPLETED
    [note] = results_of(run.result)
    assert "stopped early (deadline" in note.content
    child_end = [e for e in finished if e.agent_path == ("agent", "slow-1")]
    assert [e.result.termination_reason for e in child_end] == [TerminationReason.DEADLINE]


async def test_an_as_tool_child_keeps_its_own_tool_call_and_token_limits() -> None:
    @tool(concurrent_safe=True)
    def look(n: int) -> str:
        """Look."""
        return "seen"

    def child_turn(request: ModelRequest) -> Any:
        usage = Usage(input_tokens=10, output_tokens=min(40, request.max_tokens))
        return reply(tool_calls=[call("look", n=i) for i in range(3)], usage=usage)

    child = Agent(
        ScriptedProvider(child_turn),
        name="looker",
        tools=[look],
        limits=Limits(max_tool_calls=2, max_output_tokens=100),
        model_settings=ModelSettings(max_tokens=40),
    )
    parent = Agent(
        calls_then_done(call("looker", _id="c1", task="look around")),
        tools=[child.as_tool()],
        limits=Limits(max_tool_calls=50, max_output_tokens=10_000),
    )
    result = await parent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    [note] = results_of(result)[:1]
    # before: only the parent's (roomy) limits applied and the child ran its 25 turns
    assert "stopped early (tool_call_budget" in note.content
    child_results = [r for r in results_of(result) if r.content == "seen"]
    assert child_results == []  # the child's results stay in the child's conversation
    assert result.tool_calls == 1 + 2  # the parent's call and the child's two granted ones
    assert result.usage.output_tokens <= 40 + 10_000


async def test_the_parents_budget_still_binds_a_child_with_roomier_limits() -> None:
    def child_turn(request: ModelRequest) -> Any:
        out = min(300, request.max_tokens)
        stop = StopReason.MAX_TOKENS if out < 300 else None
        return reply("x" * 10, usage=Usage(input_tokens=10, output_tokens=out), stop_reason=stop)

    child = Agent(
        ScriptedProvider(child_turn),
        name="writer",
        limits=Limits(max_output_tokens=100_000),
        model_settings=ModelSettings(max_tokens=300),
    )
    parent = Agent(
        calls_then_done(call("writer", _id="c1", task="write")),
        tools=[child.as_tool()],
        limits=Limits(max_output_tokens=250),
    )
    result = await parent.run("go")
    assert result.usage.output_tokens <= 250


# -- budgets across four parallel sub-agents ---------------------------------------------------


def four_children(child_limits: Limits | None = None) -> tuple[Agent[Any, Any], dict[str, int]]:
    """A lead that calls four ``as_tool`` sub-agents at once; each child makes one model call
    whose input is exactly its estimate and whose output is its allowance, up to 50."""
    stats = {"in_flight": 0, "max_in_flight": 0, "child_input": 0, "lead_input": 0}

    async def child_turn(request: ModelRequest) -> Any:
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        stats["in_flight"] -= 1
        out = min(50, request.max_tokens)
        stats["child_input"] = estimate_input(request).tokens
        usage = Usage(input_tokens=stats["child_input"], output_tokens=out)
        return reply("report", usage=usage)

    children = [
        Agent(
            ScriptedProvider(child_turn, model=PRICED),
            name=f"helper{i}",
            limits=child_limits or Limits(),
            model_settings=ModelSettings(max_tokens=50),
        )
        for i in range(4)
    ]

    def lead(request: ModelRequest) -> Any:
        usage = Usage(input_tokens=estimate_input(request).tokens, output_tokens=10)
        if len(request.messages) == 1:
            stats["lead_input"] = usage.input_tokens
            calls = [call(f"helper{i}", _id=f"h{i}", task=f"part {i}") for i in range(4)]
            return reply(tool_calls=calls, usage=usage)
        return reply("summary", usage=usage)

    parent = Agent(
        ScriptedProvider(lead, model=PRICED),
        tools=[c.as_tool() for c in children],
        model_settings=ModelSettings(max_tokens=10),
    )
    return parent, stats


@pytest.mark.parametrize("kind", ["max_input_tokens", "max_cost_usd"])
async def test_four_parallel_children_do_not_overshoot_the_parents_budget(kind: str) -> None:
    probe, sizes = four_children()  # a dry run measures the calls
    await probe.run("go")
    lead = Usage(input_tokens=sizes["lead_input"], output_tokens=10)
    child = Usage(input_tokens=sizes["child_input"], output_tokens=50)
    # Room for the lead's first call and three and a bit children: not for all four. (The
    # first child's call goes alone, the first of its kind; two more then fit side by side;
    # the output allowance shrinks to fit the cost left, so a cost limit leaves only a bit.)
    limits: Limits
    if kind == "max_input_tokens":
        limits = Limits(max_input_tokens=lead.input_tokens + child.input_tokens * 7 // 2)
        reason = "token_budget"
    else:
        lead_cost, child_cost = cost_of(PRICED, lead), cost_of(PRICED, child)
        assert lead_cost is not None and child_cost is not None
        limits = Limits(max_cost_usd=lead_cost + child_cost * 3.05)
        reason = "cost_budget"
    parent, stats = four_children()
    parent = parent.with_options(limits=limits)
    with anyio.fail_after(10):
        result = await parent.run("go")
    if kind == "max_input_tokens":
        assert limits.max_input_tokens is not None
        assert result.usage.total_input_tokens <= limits.max_input_tokens
    else:
        spent = cost_of(PRICED, result.usage)
        assert spent is not None and limits.max_cost_usd is not None
        assert spent <= limits.max_cost_usd
    notes = [r.content for r in results_of(result)]
    assert len(notes) == 4  # the parent saw every child's outcome
    assert "report" in notes  # some fitted and finished ...
    assert any(f"stopped early ({reason}" in n for n in notes)  # ... the rest were refused
    assert stats["max_in_flight"] >= 2


async def test_four_parallel_children_that_fit_in_max_total_tokens_all_complete() -> None:
    parent, stats = four_children(Limits(max_total_tokens=2_000))
    parent = parent.with_options(limits=Limits(max_total_tokens=3_000))
    with anyio.fail_after(10):
        result = await parent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert [r.content for r in results_of(result)] == ["report"] * 4
    assert stats["max_in_flight"] >= 2  # side by side, not one after another
    assert result.usage.total_tokens <= 3_000
