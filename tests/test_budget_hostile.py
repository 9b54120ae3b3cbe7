"""Budgets that hold across parallel sub-agents (docs/limits.md, docs/subagents.md).

Every model call reserves its estimated input, its output allowance and their price before it
is sent, and settles with the real usage after it. The scripted usage here is at most what the
estimate allows (so no overshoot at all is tolerated); a real model that exceeds its estimate
may overshoot by that error only.

One ScriptedProvider serves the parent and its sub-agents; it answers by the system prompt.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from fanloop import (
    Agent,
    Delegation,
    Hooks,
    Limits,
    ModelSettings,
    RetryPolicy,
    TerminationReason,
    Tool,
    ToolResult,
)
from fanloop.catalog import ModelInfo, cost_of, register_model
from fanloop.errors import Overloaded
from fanloop.limits import Budget, InputEstimate, Reservation, estimate_input, text_tokens
from fanloop.messages import Message, ToolCallPart, ToolResultPart
from fanloop.providers import FallbackProvider, ModelRequest, StopReason, Usage
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.tools.base import current_context

LEAD = "You are the lead agent."
PRICED = "claude-sonnet-4-5"  # $3 / $15 per million tokens in fanloop.catalog
PARENT_USAGE = Usage(input_tokens=50, output_tokens=20)
CHILD_USAGE = Usage(input_tokens=60, output_tokens=20)


class Probe(Tool):
    """A read-only tool for the sub-agents."""

    name = "probe"
    description = "Look something up."
    parameters = {"type": "object", "properties": {}}
    concurrent_safe = True

    async def run(self) -> ToolResult:
        return ToolResult("found it")


class Peek(Tool):
    """Hands the test the run tree's budget (to read its reservation counters)."""

    name = "peek"
    description = "Nothing."
    parameters = {"type": "object", "properties": {}}
    concurrent_safe = True

    def __init__(self) -> None:
        self.budget: Budget | None = None

    async def run(self) -> ToolResult:
        self.budget = current_context()._run.budget
        return ToolResult("ok")


def capped(usage: Usage, request: ModelRequest) -> tuple[Usage, bool]:
    """``usage`` with its output cut to the request's max_tokens, as a real model does."""
    out = min(usage.output_tokens, request.max_tokens)
    return usage.model_copy(update={"output_tokens": out}), out < usage.output_tokens


def results_of(messages: tuple[Message, ...]) -> list[ToolResultPart]:
    return [p for m in messages for p in m.content if isinstance(p, ToolResultPart)]


def counters(budget: Budget) -> tuple[int, int, int, float]:
    return budget.outstanding, budget.reserved_input, budget.reserved_output, budget.reserved_cost


# -- ten parallel delegations -----------------------------------------------------------------


def fan_out(n: int) -> tuple[ScriptedProvider, dict[str, int]]:
    """The lead delegates ``n`` tasks at once; each sub-agent calls ``probe``, then answers."""
    stats = {"in_flight": 0, "max_in_flight": 0, "child_calls": 0}

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                tasks = [call("delegate", _id=f"d{i}", task=f"task {i}") for i in range(n)]
                return reply(tool_calls=tasks, usage=PARENT_USAGE)
            usage, _ = capped(PARENT_USAGE, request)
            return reply("summary", usage=usage)
        stats["child_calls"] += 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        for _ in range(5):  # let the siblings reach their own calls meanwhile
            await anyio.lowlevel.checkpoint()
        stats["in_flight"] -= 1
        usage, cut = capped(CHILD_USAGE, request)
        stop = StopReason.MAX_TOKENS if cut else None
        if len(request.messages) == 1:
            return reply(tool_calls=[call("probe")], usage=usage, stop_reason=stop)
        return reply("report", usage=usage, stop_reason=stop)

    return ScriptedProvider(respond, model=PRICED), stats


def spent(kind: str, result: Any) -> float:
    if kind == "input":
        return float(result.usage.total_input_tokens)
    if kind == "total":
        return float(result.usage.total_tokens)
    cost = cost_of(PRICED, result.usage)
    assert cost is not None
    return cost


@pytest.mark.parametrize(
    ("kind", "limits", "reason"),
    [
        ("input", Limits(max_input_tokens=600), TerminationReason.TOKEN_BUDGET),
        ("total", Limits(max_total_tokens=900), TerminationReason.TOKEN_BUDGET),
        ("cost", Limits(max_cost_usd=0.004), TerminationReason.COST_BUDGET),
    ],
)
async def test_ten_parallel_delegations_do_not_overshoot_the_shared_budget(
    kind: str, limits: Limits, reason: TerminationReason
) -> None:
    provider, stats = fan_out(10)
    agent = Agent(
        provider,
        system=LEAD,
        delegation=Delegation(tools=[Probe()]),
        model_settings=ModelSettings(max_tokens=100),
        limits=limits,
    )
    with anyio.fail_after(10):
        result = await agent.run("go")
    limit = {"input": limits.max_input_tokens, "total": limits.max_total_tokens}.get(
        kind, limits.max_cost_usd
    )
    assert limit is not None
    # before: 10 sub-agents passed the check together and spent ~2.2x (input) the limit
    assert spent(kind, result) <= limit
    assert stats["max_in_flight"] >= 2  # the sub-agents still ran side by side
    results = [r.content for r in results_of(result.messages) if r.call_id.startswith("d")]
    assert len(results) == 10  # the parent saw every delegation's result
    assert any("report" in r and "stopped early" not in r for r in results)  # some finished
    assert any(f"stopped early ({reason}" in r for r in results)  # the rest hit the budget
    assert result.termination_reason in (reason, TerminationReason.COMPLETED)


# -- waiting for siblings, and not starving the ones that fit ---------------------------------

BIG = "You read long reports. " + "Background. " * 250  # about 1000 estimated tokens
SMALL = "You answer briefly."


async def test_a_sibling_that_fits_runs_while_another_holds_a_big_reservation() -> None:
    """Two big calls cannot both fit, a big and a small one can: the small one runs while a
    big one is in flight, the second big one waits for the first to settle."""
    small_done = anyio.Event()
    big = {"in_flight": 0, "max": 0, "seen": 0}
    order: list[str] = []

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                calls = [
                    call("big", _id="b1", task="one"),
                    call("small", _id="s1", task="two"),
                    call("big", _id="b2", task="three"),
                ]
                return reply(tool_calls=calls, usage=Usage(input_tokens=10, output_tokens=20))
            return reply("done", usage=Usage(input_tokens=10, output_tokens=5))
        if request.system == SMALL:
            order.append("small")
            small_done.set()
            return reply("small report", usage=Usage(input_tokens=20, output_tokens=5))
        big["seen"] += 1
        big["in_flight"] += 1
        big["max"] = max(big["max"], big["in_flight"])
        order.append("big")
        if big["seen"] == 1:
            await small_done.wait()  # the small sibling must get through meanwhile
        big["in_flight"] -= 1
        return reply("big report", usage=Usage(input_tokens=300, output_tokens=20))

    provider = ScriptedProvider(respond)
    tools = [
        Agent(provider, system=BIG, name="big").as_tool("big"),
        Agent(provider, system=SMALL, name="small").as_tool("small"),
    ]
    big_call = estimate_input(provider_request(BIG)).tokens
    limits = Limits(max_input_tokens=10 + big_call + 200 + big_call // 2)
    agent = Agent(
        provider,
        system=LEAD,
        tools=tools,
        model_settings=ModelSettings(max_tokens=50),
        limits=limits,
    )
    with anyio.fail_after(10):
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert big["max"] == 1  # the second big call waited for the first to settle
    assert order.index("small") < order.index("big", order.index("big") + 1)
    assert result.usage.total_input_tokens <= limits.max_input_tokens  # type: ignore[operator]
    assert [r.content for r in results_of(result.messages)] == [
        "big report",
        "small report",
        "big report",
    ]


def provider_request(system: str) -> ModelRequest:
    """The first request a sub-agent with ``system`` sends (no tools, a short task)."""
    return ModelRequest(system=system, messages=(Message.user("one"),))


async def test_cancelled_while_waiting_for_the_budget_holds_nothing() -> None:
    """A sub-agent waiting for a sibling's reservation is cancelled (its tool timed out): it
    leaves nothing reserved, and the rest of the run spends the budget normally."""
    waiter_gave_up = anyio.Event()
    peek = Peek()

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                calls = [
                    call("peek", _id="p"),
                    call("hold", _id="h", task="a"),
                    call("wait", _id="w", task="b"),
                ]
                return reply(tool_calls=calls, usage=Usage(input_tokens=10, output_tokens=20))
            return reply("done", usage=Usage(input_tokens=10, output_tokens=5))
        await waiter_gave_up.wait()  # only the first big call gets here: the other waits
        return reply("held", usage=Usage(input_tokens=300, output_tokens=20))

    def on_tool_result(name: str, text: str, is_error: bool) -> None:
        if name == "wait":
            waiter_gave_up.set()

    provider = ScriptedProvider(respond)
    hold = Agent(provider, system=BIG, name="hold").as_tool("hold")
    wait = Agent(provider, system=BIG, name="wait").as_tool("wait")
    wait.timeout = 0.5
    big_call = estimate_input(provider_request(BIG)).tokens
    agent = Agent(
        provider,
        system=LEAD,
        tools=[peek, hold, wait],
        model_settings=ModelSettings(max_tokens=50),
        hooks=Hooks(on_tool_result=on_tool_result),
        limits=Limits(max_input_tokens=10 + big_call + big_call // 2),
    )
    with anyio.fail_after(10):
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    by_id = {r.call_id: r for r in results_of(result.messages)}
    assert by_id["w"].is_error and "timed out" in by_id["w"].content
    assert by_id["h"].content == "held"
    assert sum(1 for r in provider.requests if r.system == BIG) == 1  # the waiter never sent
    assert peek.budget is not None
    assert counters(peek.budget) == (0, 0, 0, 0.0)


async def test_cancelling_the_run_while_calls_hold_and_wait_leaves_nothing_reserved() -> None:
    peek = Peek()
    holding = anyio.Event()

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            calls = [
                call("peek", _id="p"),
                call("hold", _id="h", task="a"),
                call("wait", _id="w", task="b"),
            ]
            return reply(tool_calls=calls, usage=Usage(input_tokens=10, output_tokens=20))
        holding.set()
        await anyio.sleep_forever()
        return None

    provider = ScriptedProvider(respond, model=PRICED)
    hold = Agent(provider, system=BIG, name="hold").as_tool("hold")
    wait = Agent(provider, system=BIG, name="wait").as_tool("wait")
    big_call = estimate_input(provider_request(BIG)).tokens
    agent = Agent(
        provider,
        system=LEAD,
        tools=[peek, hold, wait],
        model_settings=ModelSettings(max_tokens=50),
        limits=Limits(max_input_tokens=10 + big_call + big_call // 2, max_cost_usd=5.0),
    )
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "go")
            await holding.wait()
            assert peek.budget is not None
            while peek.budget._settled is None:  # the waiter is parked on the budget
                await anyio.lowlevel.checkpoint()
            assert peek.budget.outstanding == 1
            tg.cancel_scope.cancel()
    assert peek.budget is not None
    assert counters(peek.budget) == (0, 0, 0, 0.0)
    assert sum(1 for r in provider.requests if r.system == BIG) == 1


# -- calls that can never fit are not sent ----------------------------------------------------


class Dump(Tool):
    """Returns a huge result, as a hostile page or file would."""

    name = "dump"
    description = "Read a big file."
    parameters = {"type": "object", "properties": {}}

    def __init__(self, text: str) -> None:
        self.text = text

    async def run(self) -> ToolResult:
        return ToolResult(self.text)


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (Limits(max_input_tokens=20_000), TerminationReason.TOKEN_BUDGET),
        (Limits(max_total_tokens=20_000), TerminationReason.TOKEN_BUDGET),
        (Limits(max_cost_usd=0.10), TerminationReason.COST_BUDGET),
    ],
)
@pytest.mark.parametrize("text", ["x" * 90_000, "漢" * 90_000], ids=["ascii", "cjk"])
async def test_a_call_that_cannot_fit_is_never_sent(
    limits: Limits, reason: TerminationReason, text: str
) -> None:
    provider = ScriptedProvider(
        [reply(tool_calls=[call("dump")], usage=Usage(input_tokens=50, output_tokens=10))],
        model=PRICED,
    )
    agent = Agent(provider, tools=[Dump(text)], limits=limits)
    result = await agent.run("read it")
    assert result.termination_reason is reason
    assert len(provider.requests) == 1  # the request carrying the dump never went out
    assert "next model call" in (result.detail or "")


# -- hostile usage numbers --------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -1_000_000, "output_tokens": -5},
        {"input_tokens": 10**400},
        {"input_tokens": 1.5e308, "output_tokens": float("inf")},
        {"input_tokens": "100", "output_tokens": None},
    ],
    ids=["negative", "huge", "float", "not-a-number"],
)
async def test_server_usage_cannot_refund_or_break_the_budget(bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0}
    fields.update(bad)
    usage = Usage.model_construct(cache_write_tokens=0, **fields)
    provider = ScriptedProvider(
        [
            reply(tool_calls=[call("probe")], usage=usage),
            reply("done", usage=Usage(input_tokens=100, output_tokens=10)),
        ],
        model=PRICED,
    )
    agent = Agent(provider, tools=[Probe()], limits=Limits(max_input_tokens=10_000))
    result = await agent.run("go")
    u = result.usage
    counts = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
    assert all(type(v) is int and v >= 0 for v in counts)
    if u.input_tokens > 10_000:  # a huge claim is charged, and ends the run
        assert result.termination_reason is TerminationReason.TOKEN_BUDGET
    else:
        assert result.termination_reason is TerminationReason.COMPLETED
        assert u.input_tokens >= 100  # nothing was refunded


# -- the estimate -----------------------------------------------------------------------------


def test_the_estimate_errs_high_for_any_script() -> None:
    # real tokenizers: ~4 chars/token for English, ~1 token per CJK character, 2-3 per emoji
    assert text_tokens("word " * 300) >= 1500 / 3.5
    assert text_tokens("漢字" * 500) >= 1000
    assert text_tokens("😀" * 100) >= 180
    assert text_tokens("\ud800" * 10) >= 10  # a lone surrogate does not break it
    big = Message.assistant(
        ToolCallPart(id="c", name="write", arguments={"text": "é" * 3000, "n": [1] * 1000})
    )
    estimate = estimate_input(ModelRequest(messages=(big,)))
    assert estimate.tokens >= 3000
    assert estimate.tokens == estimate_input(ModelRequest(messages=(big,))).tokens


async def test_no_limit_no_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a token or cost limit the loop's hot path neither estimates nor reserves."""

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("estimated without a limit")

    monkeypatch.setattr("fanloop.limits.estimate_input", boom)
    for limits in (Limits(), Limits(max_tool_calls=5, timeout=30), Limits(max_output_tokens=999)):
        provider = ScriptedProvider([reply(tool_calls=[call("probe")]), "done"])
        result = await Agent(provider, tools=[Probe()], limits=limits).run("go")
        assert result.termination_reason is TerminationReason.COMPLETED


# -- a server that reports far more than the estimate -----------------------------------------
#
# The bound: once a report crosses a limit, no new call starts anywhere in the run tree (a
# retry or a continuation neither); the calls already in flight may finish, and the first call
# of each kind of request goes alone, so that only one underestimated call of a kind is ever in
# flight before its report. In one kind of sub-agent fanned out ten times, the overshoot is at
# most what was in flight when the first report crossed.


class Watch:
    """Watches the run tree's budget: when a report first spends a token or cost limit, how
    many calls were in flight then, and how many reservations were granted after."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.crossed = anyio.Event()
        self.in_flight = 0
        self.spent_then = Usage()
        self.granted_after = 0
        settle, hold = Budget.settle, Budget._hold

        def watched_settle(budget: Budget, reserved: Any, usage: Any, model: str) -> None:
            settle(budget, reserved, usage, model)
            if type(budget) is Budget and not self.crossed.is_set() and budget.spent():
                self.in_flight = budget.outstanding
                self.spent_then = budget.usage
                self.crossed.set()

        def watched_hold(budget: Budget, reserved: Any) -> None:
            if type(budget) is Budget and self.crossed.is_set():
                self.granted_after += 1
            hold(budget, reserved)

        monkeypatch.setattr(Budget, "settle", watched_settle)
        monkeypatch.setattr(Budget, "_hold", watched_hold)


ISSUE_LIMITS = {
    "input": Limits(max_input_tokens=10_000),
    "total": Limits(max_total_tokens=10_000),
    "cost": Limits(max_cost_usd=0.04),
}


def limit_of(kind: str) -> float:
    limits = ISSUE_LIMITS[kind]
    value = {"input": limits.max_input_tokens, "total": limits.max_total_tokens}.get(
        kind, limits.max_cost_usd
    )
    assert value is not None
    return value


def ten_sub_agents(
    how: str, respond_child: Any, limits: Limits
) -> tuple[Agent[Any, Any], ScriptedProvider]:
    """A lead that starts ten sub-agents of one kind at once (``delegate`` or ``as_tool``)."""

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                name = "delegate" if how == "delegate" else "helper"
                tasks = [call(name, _id=f"d{i}", task=f"task {i}") for i in range(10)]
                return reply(tool_calls=tasks, usage=PARENT_USAGE)
            return reply("summary", usage=Usage(input_tokens=50, output_tokens=5))
        return await respond_child(request)

    provider = ScriptedProvider(respond, model=PRICED)
    if how == "delegate":
        agent = Agent(provider, system=LEAD, delegation=Delegation(tools=[Probe()]), limits=limits)
    else:
        helper = Agent(provider, system="You help.", tools=[Probe()], name="helper")
        agent = Agent(provider, system=LEAD, tools=[helper.as_tool("helper")], limits=limits)
    return agent.with_options(model_settings=ModelSettings(max_tokens=100)), provider


@pytest.mark.parametrize("how", ["delegate", "as_tool"])
@pytest.mark.parametrize("kind", ["input", "total", "cost"])
async def test_ten_sub_agents_whose_server_reports_far_more_than_estimated(
    kind: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: every sub-agent call reports about two thirds of the limit (some
    60 times its estimate). Before: all ten went at once and spent 6.4x (cost) and 6.7x
    (input) the limit. Now the first goes alone, and its report tells the others they
    cannot fit."""
    watch = Watch(monkeypatch)
    child_calls: list[int] = []
    huge = Usage(input_tokens=6_700, output_tokens=20)
    if kind == "cost":
        huge = Usage(input_tokens=8_500, output_tokens=20)  # about $0.026, two thirds of $0.04

    async def respond_child(request: ModelRequest) -> Any:
        child_calls.append(len(request.messages))
        for _ in range(5):  # let the siblings reach their own calls meanwhile
            await anyio.lowlevel.checkpoint()
        return reply(tool_calls=[call("probe")], usage=huge)

    agent, _ = ten_sub_agents(how, respond_child, ISSUE_LIMITS[kind])
    with anyio.fail_after(10):
        result = await agent.run("go")
    used = spent(kind, result)
    assert used <= limit_of(kind), used / limit_of(kind)
    assert len(child_calls) == 1  # the others learned from its report that they cannot fit
    notes = [r.content for r in results_of(result.messages) if r.call_id.startswith("d")]
    assert len(notes) == 10
    assert sum("stopped early" in n for n in notes) >= 9
    assert watch.granted_after == 0


@pytest.mark.parametrize("how", ["delegate", "as_tool"])
async def test_after_a_report_crosses_the_limit_no_new_call_starts_anywhere(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sub-agent's first call reports its estimate honestly; the calls after report far
    more. The first report past the limit stops every new call in the tree: the overshoot is
    what was in flight then, and nothing more."""
    watch = Watch(monkeypatch)
    limit = 30_000  # room for the ten first calls (under 2,000 tokens each) and a few more
    late = Usage(input_tokens=4_000, output_tokens=20)
    sent: list[bool] = []

    async def respond_child(request: ModelRequest) -> Any:
        sent.append(watch.crossed.is_set())
        first = len(request.messages) == 1
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        if first:
            honest = Usage(input_tokens=estimate_input(request).measured, output_tokens=20)
            return reply(tool_calls=[call("probe")], usage=honest)
        return reply(tool_calls=[call("probe")], usage=late)

    agent, _ = ten_sub_agents(how, respond_child, Limits(max_input_tokens=limit))
    with anyio.fail_after(10):
        result = await agent.run("go")
    assert watch.crossed.is_set()
    assert watch.granted_after == 0  # no reservation after the crossing report ...
    assert not any(sent)  # ... and no request sent after it
    bound = watch.spent_then.total_input_tokens + watch.in_flight * late.total_input_tokens
    assert result.usage.total_input_tokens <= bound
    assert watch.in_flight < 10  # the calls in flight were a few, not one per sub-agent
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET


async def test_a_retry_is_not_sent_once_a_siblings_report_spent_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sub-agent's call fails with a transient error; before its retry is due, a sibling's
    report crosses the limit: the retry is never sent (before: it was)."""
    watch = Watch(monkeypatch)
    first_sent = anyio.Event()
    calls = {"flaky": 0, "greedy": 0}

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                tasks = [call("flaky", _id="f", task="a"), call("greedy", _id="g", task="b")]
                return reply(tool_calls=tasks, usage=PARENT_USAGE)
            return reply("summary", usage=Usage(input_tokens=50, output_tokens=5))
        if request.system == "You are flaky.":
            calls["flaky"] += 1
            if calls["flaky"] == 1:
                first_sent.set()
                await watch.crossed.wait()  # fail only once the sibling has spent the budget
                raise Overloaded("busy, try again")
            return reply("flaky report", usage=Usage(input_tokens=100, output_tokens=5))
        calls["greedy"] += 1
        await first_sent.wait()
        return reply("greedy report", usage=Usage(input_tokens=20_000, output_tokens=5))

    provider = ScriptedProvider(respond, model=PRICED)
    retry = RetryPolicy(max_retries=3, base_delay=0.01, jitter=False)
    flaky = Agent(provider, system="You are flaky.", name="flaky", retry=retry)
    greedy = Agent(provider, system="You are greedy.", name="greedy")
    agent = Agent(
        provider,
        system=LEAD,
        tools=[flaky.as_tool("flaky"), greedy.as_tool("greedy")],
        limits=Limits(max_input_tokens=10_000),
        model_settings=ModelSettings(max_tokens=50),
    )
    with anyio.fail_after(10):
        result = await agent.run("go")
    assert calls == {"flaky": 1, "greedy": 1}  # before: the flaky retry went out after
    by_id = {r.call_id: r.content for r in results_of(result.messages)}
    assert by_id["f"].startswith("The sub-agent stopped early (token_budget: input token")
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET


async def test_no_fallback_is_asked_once_a_siblings_report_spent_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fallback provider is a new call too: not made once the budget is spent."""
    watch = Watch(monkeypatch)
    first_sent = anyio.Event()
    asked = {"primary": 0, "backup": 0}

    async def primary(request: ModelRequest) -> Any:
        asked["primary"] += 1
        first_sent.set()
        await watch.crossed.wait()
        raise Overloaded("busy")

    def backup(request: ModelRequest) -> Any:
        asked["backup"] += 1
        return reply("backup report", usage=Usage(input_tokens=100, output_tokens=5))

    async def respond(request: ModelRequest) -> Any:
        if request.system == LEAD:
            if len(request.messages) == 1:
                tasks = [call("flaky", _id="f", task="a"), call("greedy", _id="g", task="b")]
                return reply(tool_calls=tasks, usage=PARENT_USAGE)
            return reply("summary", usage=Usage(input_tokens=50, output_tokens=5))
        await first_sent.wait()
        return reply("greedy report", usage=Usage(input_tokens=20_000, output_tokens=5))

    provider = ScriptedProvider(respond, model=PRICED)
    chain = FallbackProvider(
        ScriptedProvider(primary, model=PRICED), ScriptedProvider(backup, model=PRICED)
    )
    no_retries = RetryPolicy(max_retries=0)
    flaky = Agent(chain, system="You are flaky.", name="flaky", retry=no_retries)
    greedy = Agent(provider, system="You are greedy.", name="greedy")
    agent = Agent(
        provider,
        system=LEAD,
        tools=[flaky.as_tool("flaky"), greedy.as_tool("greedy")],
        limits=Limits(max_input_tokens=10_000),
        model_settings=ModelSettings(max_tokens=50),
    )
    with anyio.fail_after(10):
        result = await agent.run("go")
    assert asked == {"primary": 1, "backup": 0}  # before: the backup was asked
    by_id = {r.call_id: r.content for r in results_of(result.messages)}
    assert by_id["f"].startswith("The sub-agent stopped early (token_budget: input token")


# == the account's arithmetic at its edges ==================================================
# These call Budget directly, so each limit is checked one token (or one millionth of a
# dollar) either side of where it bites, and a call in flight either waits for room or is
# refused at once.

register_model("test-priced", ModelInfo(context_window=10**6, input_price=3.0, output_price=15.0))
register_model("test-cheap-output", ModelInfo(context_window=10**6, output_price=0.5))
register_model("test-free-output", ModelInfo(context_window=10**6, input_price=3.0))
TEST_PRICED, UNPRICED = "test-priced", "test-unpriced-model"
TOKEN = TerminationReason.TOKEN_BUDGET
COST = TerminationReason.COST_BUDGET


def est(tokens: int, measured: int = 0) -> InputEstimate:
    return InputEstimate(tokens, tokens, measured)


def charged(budget: Budget, model: str = UNPRICED, **usage: int) -> None:
    budget.settle(None, Usage(**usage), model)


def granted(result: Any) -> Reservation:
    assert isinstance(result, Reservation), result
    return result


# -- each limit, one token either side -------------------------------------------------------


async def test_input_tokens_fit_to_the_last_one() -> None:
    limits = Limits(max_input_tokens=100)
    assert granted(await Budget(limits).reserve(est(100), 10, UNPRICED)).input_tokens == 100
    assert await Budget(limits).reserve(est(101), 10, UNPRICED) == (
        TOKEN,
        "input token budget too small for the next model call (it needs about 101 input "
        "tokens; 100 of 100 left)",
    )
    overspent = Budget(limits)
    charged(overspent, input_tokens=150)
    assert await overspent.reserve(est(1), 10, UNPRICED) == (
        TOKEN,
        "input token budget too small for the next model call (it needs about 1 input "
        "tokens; 0 of 100 left)",
    )


async def test_output_tokens_are_clamped_to_what_is_left() -> None:
    budget = Budget(Limits(max_output_tokens=100))
    first = granted(await budget.reserve(est(0), 30, UNPRICED))
    second = granted(await budget.reserve(est(0), 100, UNPRICED))
    assert (first.output_tokens, second.output_tokens) == (30, 70)  # beside the one in flight
    assert (budget.outstanding, budget.reserved_output) == (2, 100)
    assert (first.cost_usd, second.cost_usd) == (0.0, 0.0)  # no cost limit: nothing priced

    last = Budget(Limits(max_output_tokens=100))
    charged(last, output_tokens=99)
    assert granted(await last.reserve(est(0), 50, UNPRICED)).output_tokens == 1
    none_left = Budget(Limits(max_output_tokens=100))
    charged(none_left, output_tokens=100)
    assert await none_left.reserve(est(0), 50, UNPRICED) == (
        TOKEN,
        "output token budget spent (100 used and 0 reserved of 100)",
    )


async def test_total_tokens_leave_room_for_some_output() -> None:
    limits = Limits(max_total_tokens=100)
    assert granted(await Budget(limits).reserve(est(40), 1000, UNPRICED)).output_tokens == 60
    assert granted(await Budget(limits).reserve(est(99), 1000, UNPRICED)).output_tokens == 1
    assert await Budget(limits).reserve(est(100), 1000, UNPRICED) == (
        TOKEN,
        "token budget too small for the next model call (it needs about 100 input tokens "
        "and some output; 100 of 100 left)",
    )
    overspent = Budget(limits)
    charged(overspent, input_tokens=70, output_tokens=50)
    denial = await overspent.reserve(est(1), 10, UNPRICED)
    assert isinstance(denial, tuple) and denial[1].endswith("; 0 of 100 left)")


# -- the cost limit, one millionth of a dollar either side ----------------------------------


async def test_the_output_allowance_is_what_the_dollars_left_buy() -> None:
    small = granted(await Budget(Limits(max_cost_usd=0.015)).reserve(est(0), 5000, TEST_PRICED))
    assert small.output_tokens == 1000  # $0.015 at $15 per million
    assert small.cost_usd == pytest.approx(0.015, rel=1e-12)
    large = Budget(Limits(max_cost_usd=15.0000075))
    assert granted(await large.reserve(est(0), 10**7, TEST_PRICED)).output_tokens == 1_000_000
    with_input = granted(
        await Budget(Limits(max_cost_usd=0.5)).reserve(est(1000), 10**6, TEST_PRICED)
    )
    assert with_input.output_tokens == 33133  # ($0.5 - $0.003 of input) at $15 per million
    assert with_input.cost_usd == pytest.approx(0.003 + 33133 * 15 / 1e6, rel=1e-12)
    cheap = Budget(Limits(max_cost_usd=0.0001))
    assert granted(await cheap.reserve(est(0), 1000, "test-cheap-output")).output_tokens == 200


async def test_a_cost_limit_too_small_for_one_output_token_is_refused() -> None:
    one = granted(await Budget(Limits(max_cost_usd=0.00002)).reserve(est(0), 50, TEST_PRICED))
    assert one.output_tokens == 1
    assert await Budget(Limits(max_cost_usd=0.00001)).reserve(est(0), 50, TEST_PRICED) == (
        COST,
        "cost budget too small for the next model call (its input alone may cost about "
        "$0.0000, and its output more; $0.0000 of $0.0000 left)",
    )
    spent_some = Budget(Limits(max_cost_usd=1.0))
    charged(spent_some, TEST_PRICED, input_tokens=250_000)  # $0.75
    assert await spent_some.reserve(est(100_000), 50, TEST_PRICED) == (
        COST,
        "cost budget too small for the next model call (its input alone may cost about "
        "$0.3000, and its output more; $0.2500 of $1.0000 left)",
    )


async def test_free_output_is_limited_by_the_input_alone() -> None:
    exact = granted(
        await Budget(Limits(max_cost_usd=0.003)).reserve(est(1000), 50, "test-free-output")
    )
    assert (exact.output_tokens, exact.cost_usd) == (50, pytest.approx(0.003))
    over = await Budget(Limits(max_cost_usd=0.002)).reserve(est(1000), 50, "test-free-output")
    assert isinstance(over, tuple) and over[0] is COST
    unpriced = granted(await Budget(Limits(max_cost_usd=0.001)).reserve(est(10**6), 50, UNPRICED))
    assert (unpriced.output_tokens, unpriced.cost_usd) == (50, 0.0)  # cannot be held ahead


# -- calls in flight: wait for room, or refuse what can never fit ----------------------------


async def _waits_then_fits(budget: Budget, holder: Reservation, call: Any) -> Reservation:
    """``call`` must wait while ``holder`` is held, and be granted once it settles."""
    results: list[Any] = []

    async def attempt() -> None:
        results.append(await call())

    async with anyio.create_task_group() as tg:
        tg.start_soon(attempt)
        await anyio.wait_all_tasks_blocked()
        assert results == []  # waiting for room, not refused
        budget.settle(holder, Usage(), UNPRICED)
    return granted(results[0])


async def test_a_call_that_fits_alone_to_the_last_input_token_waits() -> None:
    budget = Budget(Limits(max_input_tokens=100))
    holder = granted(await budget.reserve(est(50), 1, UNPRICED))
    later = await _waits_then_fits(budget, holder, lambda: budget.reserve(est(100), 1, UNPRICED))
    assert later.input_tokens == 100


async def test_a_call_that_fits_alone_to_the_last_output_token_waits() -> None:
    budget = Budget(Limits(max_output_tokens=100))
    charged(budget, output_tokens=99)
    holder = granted(await budget.reserve(est(0), 1, UNPRICED))
    later = await _waits_then_fits(budget, holder, lambda: budget.reserve(est(0), 5, UNPRICED))
    assert later.output_tokens == 1


async def test_a_call_that_fits_alone_in_the_cost_limit_waits() -> None:
    budget = Budget(Limits(max_cost_usd=0.5))
    holder = granted(await budget.reserve(est(0), 20_000, TEST_PRICED))  # $0.30 held
    later = await _waits_then_fits(
        budget, holder, lambda: budget.reserve(est(70_000), 20_000, TEST_PRICED)
    )
    assert later.output_tokens == 19_333  # ($0.5 - $0.21 of input) at $15 per million


async def test_a_call_that_cannot_fit_even_alone_is_refused_at_once() -> None:
    budget = Budget(Limits(max_input_tokens=100))
    granted(await budget.reserve(est(50), 1, UNPRICED))
    with anyio.fail_after(5):
        denial = await budget.reserve(est(101), 1, UNPRICED)
    assert denial == (
        TOKEN,
        "input token budget too small for the next model call (it needs about 101 input "
        "tokens; 100 of 100 left)",  # what is left once the call in flight settles
    )


def test_output_allowance_clamps_holds_and_never_refuses() -> None:
    budget = Budget(Limits(max_output_tokens=100))
    first = budget.output_allowance(150, UNPRICED)
    second = budget.output_allowance(10, UNPRICED)
    assert (first.output_tokens, second.output_tokens) == (100, 0)
    assert (budget.outstanding, budget.reserved_output) == (2, 100)
    budget.settle(first, None, UNPRICED)
    budget.settle(second, None, UNPRICED)
    assert (budget.outstanding, budget.reserved_output) == (0, 0)
    unwatched = Budget(Limits())
    assert unwatched.output_allowance(50, UNPRICED).output_tokens == 50
    assert unwatched.outstanding == 0
    priced = Budget(Limits(max_cost_usd=0.015))
    assert priced.output_allowance(5000, TEST_PRICED).output_tokens == 1000


def test_tool_calls_are_granted_up_to_the_limit_and_never_past_it() -> None:
    budget = Budget(Limits(max_tool_calls=3))
    assert [budget.take_tool_calls(2), budget.take_tool_calls(2), budget.take_tool_calls(1)] == [
        2,
        1,
        0,
    ]
    assert budget.tool_calls == 3
    assert Budget(Limits()).take_tool_calls(50) == 50


# -- settling: charging, pricing, calibrating -----------------------------------------------


def test_usage_of_a_model_without_a_price_marks_the_cost_unknown() -> None:
    budget = Budget(Limits(max_cost_usd=1.0))
    charged(budget, TEST_PRICED, input_tokens=1000)
    assert budget.priced and budget.cost_usd == pytest.approx(0.003)
    charged(budget, UNPRICED)  # no tokens: nothing to price
    assert budget.priced
    charged(budget, UNPRICED, output_tokens=1)
    assert budget.priced is False
    assert budget.cost_usd == pytest.approx(0.003)


async def test_the_input_scale_learns_from_the_first_call_and_never_shrinks() -> None:
    budget = Budget(Limits(max_input_tokens=10**6))

    async def call(measured: int, seen: int) -> float:
        reservation = granted(await budget.reserve(est(measured, measured), 1, UNPRICED))
        assert reservation.measured == measured
        budget.settle(reservation, Usage(input_tokens=seen), UNPRICED)
        return budget.input_scale

    assert await call(80, 120) == 1.5
    assert await call(100, 100) == 1.5  # under the scale already learnt
    assert await call(100, 150) == 1.5  # at it
    assert await call(100, 160) == 1.6
    assert await call(100, 10**5) == 2.0  # capped


def test_the_estimate_uses_the_known_count_and_the_learnt_scale() -> None:
    budget = Budget(Limits(max_input_tokens=10**6))
    budget.input_scale = 1.5
    request = ModelRequest(
        system="Be brief.", messages=(Message.user("one " * 50), Message.user("two " * 50))
    )
    assert budget.estimate(request, 0, 0) == estimate_input(request, scale=1.5)
    assert budget.estimate(request, 0, 0).tokens > estimate_input(request).tokens
    known = budget.estimate(request, 500, 1)
    assert known == estimate_input(request, known_tokens=500, known_messages=1)
    assert known.tokens < estimate_input(request, known_tokens=500, known_messages=0).tokens
    assert Budget(Limits(max_output_tokens=10)).estimate(request, 0, 0).tokens == 0
