"""The deadline holds whatever the provider's speed (docs/limits.md).

``Limits(timeout=...)`` is a cancel scope, and a cancel scope acts only when the run yields to
the event loop. A provider that answers at once and a tool that blocks the loop (``time.sleep``
in an ``async def``) never yield, so the scope alone let such a run go on for as long as its
script lasted: the run now also checks the deadline before every round, model request and tool
call, and yields to the loop once a round.

Timing: each tool call holds the loop for ``BLOCK`` seconds, so the run must end within one
call's work after the deadline. The bounds are chosen so that a deadline twice as long fails
them: its steps would start at about ``2 * BLOCK`` > ``TIMEOUT + SLACK`` and it would end after
``2 * TIMEOUT`` > ``TIMEOUT + BLOCK + MARGIN``; on a loaded machine a step only starts later,
never earlier.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from fanloop import Agent, Delegation, Limits, TerminationReason, tool
from fanloop.messages import ToolResultPart
from fanloop.providers import ModelRequest, StopReason
from fanloop.testing import ScriptedProvider, call, reply

TIMEOUT = 1.0
BLOCK = 0.45
"""Seconds each tool call holds the event loop."""
SLACK = 0.2
"""The most a step may start after the deadline (the check and the step are microseconds
apart; the rest is the run's own setup before its clock starts)."""
MARGIN = 0.4
"""Scheduling delay allowed on a loaded machine, beyond the one call's work."""
TURNS = 12
"""Rounds the script lasts (a run that ignored its deadline would take TURNS * BLOCK s)."""


class Steps:
    """When each model request and each tool call started, on the monotonic clock."""

    def __init__(self) -> None:
        self.model: list[float] = []
        self.tools: list[float] = []

    def after(self, start: float) -> list[float]:
        """The steps that started later than ``start + TIMEOUT + SLACK``."""
        late = start + TIMEOUT + SLACK
        return [t - start for t in (*self.model, *self.tools) if t > late]


def blocking(steps: Steps) -> Any:
    @tool
    async def crunch(n: int) -> str:
        """Work that never yields to the event loop."""
        steps.tools.append(time.monotonic())
        time.sleep(BLOCK)  # blocks the loop on purpose
        return f"crunched {n}"

    return crunch


def looping(steps: Steps, system: str | None = None, **options: Any) -> ScriptedProvider:
    """A model that asks for ``crunch`` every round, for ``TURNS`` rounds, then answers."""
    seen = {"n": 0}

    def respond(request: ModelRequest) -> Any:
        if system is not None and request.system == system:
            return reply(tool_calls=[call("delegate", task="crunch it")])
        steps.model.append(time.monotonic())
        seen["n"] += 1
        if seen["n"] > TURNS:
            return "finished"
        return reply(tool_calls=[call("crunch", n=seen["n"])])

    return ScriptedProvider(respond, **options)


def check_bounds(steps: Steps, start: float, end: float) -> None:
    elapsed = end - start
    assert elapsed >= TIMEOUT
    # before: 'completed' after TURNS rounds (3.1 s and 7 turns in the issue)
    assert elapsed < TIMEOUT + BLOCK + MARGIN, elapsed
    assert steps.after(start) == []  # nothing started once the deadline had passed
    assert len(steps.model) + len(steps.tools) >= 3  # and the run did work until then


@pytest.mark.parametrize(
    "options",
    [{}, {"delay": 0.01}, {"stream": False}],
    ids=["instant", "10ms-deltas", "complete-only"],
)
async def test_the_deadline_holds_when_nothing_yields(options: dict[str, Any]) -> None:
    steps = Steps()
    agent = Agent(looping(steps, **options), tools=[blocking(steps)], limits=Limits(timeout=1))
    start = time.monotonic()
    result = await agent.run("go")
    check_bounds(steps, start, time.monotonic())
    assert result.termination_reason is TerminationReason.DEADLINE
    assert result.detail == "the run passed its 1 s deadline"
    assert result.messages[-1].role == "user"  # every call has its result: resumable


async def test_calls_of_a_blocking_lane_do_not_start_after_the_deadline() -> None:
    """One turn asks for six calls of a tool that is not concurrent-safe: they run one after
    another without ever yielding, and those due after the deadline are not run."""
    steps = Steps()
    batch = reply(tool_calls=[call("crunch", _id=f"c{i}", n=i) for i in range(6)])
    provider = ScriptedProvider([batch, "never asked"])
    agent = Agent(provider, tools=[blocking(steps)], limits=Limits(timeout=TIMEOUT))
    start = time.monotonic()
    result = await agent.run("go")
    check_bounds(steps, start, time.monotonic())
    assert result.termination_reason is TerminationReason.DEADLINE
    results = [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert [r.call_id for r in results] == [f"c{i}" for i in range(6)]
    ran = [r for r in results if r.content.startswith("crunched")]
    assert 2 <= len(ran) <= 3  # the calls that started before 1 s (at 0, 0.45, 0.9)
    assert all("Not run" in r.content and r.is_error for r in results[len(ran) :])
    assert len(provider.requests) == 1


async def test_a_delegate_stops_at_its_parents_deadline() -> None:
    steps = Steps()
    lead = "You lead."
    provider = looping(steps, system=lead)
    agent = Agent(
        provider,
        system=lead,
        delegation=Delegation(tools=[blocking(steps)]),
        limits=Limits(timeout=TIMEOUT),
    )
    start = time.monotonic()
    result = await agent.run("go")
    check_bounds(steps, start, time.monotonic())
    assert result.termination_reason is TerminationReason.DEADLINE


async def test_a_callers_cancel_scope_reaches_a_run_that_never_waits() -> None:
    """No ``Limits.timeout`` here: the caller's own ``move_on_after`` must still stop the run
    (the loop yields once a round, so the overdue scope is delivered)."""
    steps = Steps()
    agent = Agent(looping(steps), tools=[blocking(steps)])
    start = time.monotonic()
    with anyio.move_on_after(TIMEOUT) as scope:
        await agent.run("go")
    check_bounds(steps, start, time.monotonic())
    assert scope.cancelled_caught


async def test_a_turn_the_provider_keeps_pausing_stops_at_the_deadline() -> None:
    """A provider that pauses its own turn again and again (each part taking ``BLOCK`` s of
    the loop): the continuations are requests like any other, and none is sent late."""
    steps = Steps()

    def respond(request: ModelRequest) -> Any:
        steps.model.append(time.monotonic())
        time.sleep(BLOCK)  # blocks the loop on purpose
        if len(steps.model) > TURNS:
            return "done"
        return reply(f"part {len(steps.model)} ", stop_reason=StopReason.PAUSED)

    agent = Agent(ScriptedProvider(respond), limits=Limits(timeout=TIMEOUT))
    start = time.monotonic()
    result = await agent.run("go")
    check_bounds(steps, start, time.monotonic())
    assert result.termination_reason is TerminationReason.DEADLINE
    assert 2 <= len(steps.model) <= 3
