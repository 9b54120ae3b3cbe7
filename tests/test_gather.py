"""fanloop.gather: many runs at once, results in input order, bounded, fail-fast or not."""

from __future__ import annotations

import gc
import inspect
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import fanloop
from fanloop import Agent, TerminationReason
from fanloop.errors import AuthenticationError, ConfigurationError
from fanloop.providers import ModelRequest
from fanloop.testing import ScriptedProvider


class InFlight:
    """Counts runs in flight and remembers the peak."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []

    def job(self, index: int, *, steps: int = 10, fail: bool = False) -> Awaitable[int]:
        async def run() -> int:
            self.started.append(index)
            self.now += 1
            self.peak = max(self.peak, self.now)
            try:
                for _ in range(steps):
                    await anyio.lowlevel.checkpoint()
                if fail:
                    raise ValueError(f"job {index} failed")
                self.finished.append(index)
                return index
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(index)
                raise
            finally:
                self.now -= 1

        return run()

    def factory(self, index: int, **kwargs: Any) -> Callable[[], Awaitable[int]]:
        return lambda: self.job(index, **kwargs)


def echo_agent() -> Agent:
    def respond(request: ModelRequest) -> Any:
        prompt = request.messages[0].text
        if prompt == "fail":
            return AuthenticationError("bad key")
        return f"echo: {prompt}"

    return Agent(ScriptedProvider(respond))


async def test_results_come_back_in_input_order() -> None:
    gates = [anyio.Event() for _ in range(4)]
    finished: list[int] = []

    async def job(index: int) -> str:
        await gates[index].wait()
        finished.append(index)
        if index > 0:
            gates[index - 1].set()  # finish in reverse order: 3, 2, 1, 0
        return f"r{index}"

    gates[3].set()
    with anyio.fail_after(5):
        results = await fanloop.gather(*(job(i) for i in range(4)))
    assert finished == [3, 2, 1, 0]
    assert results == ["r0", "r1", "r2", "r3"]


async def test_agent_runs_in_input_order() -> None:
    agent = echo_agent()
    questions = [f"q{i}" for i in range(20)]
    results = await fanloop.gather(*(agent.run(q) for q in questions), limit=5)
    assert [r.text for r in results] == [f"echo: {q}" for q in questions]  # type: ignore[union-attr]


async def test_exceptions_come_back_in_their_slots_without_cancelling_the_others() -> None:
    failed = anyio.Event()

    async def fails() -> str:
        failed.set()
        raise ValueError("nope")

    async def after_the_failure() -> str:
        await failed.wait()
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        return "still here"

    with anyio.fail_after(5):
        results = await fanloop.gather(after_the_failure(), fails(), after_the_failure())
    assert results[0] == results[2] == "still here"
    assert isinstance(results[1], ValueError)
    assert str(results[1]) == "nope"


async def test_a_failed_agent_run_comes_back_in_its_slot() -> None:
    agent = echo_agent()
    results = await fanloop.gather(agent.run("a"), agent.run("fail"), agent.run("b"))
    assert results[0].text == "echo: a"  # type: ignore[union-attr]
    assert isinstance(results[1], AuthenticationError)
    assert results[1].partial is not None
    assert results[1].partial.termination_reason is TerminationReason.PROVIDER_ERROR
    assert results[2].text == "echo: b"  # type: ignore[union-attr]


@pytest.mark.parametrize("limit", [1, 3])
async def test_limit_caps_the_runs_in_flight(limit: int) -> None:
    counter = InFlight()
    results = await fanloop.gather(*(counter.job(i) for i in range(10)), limit=limit)
    assert results == list(range(10))
    assert counter.peak == limit


async def test_without_a_limit_everything_runs_at_once() -> None:
    counter = InFlight()
    await fanloop.gather(*(counter.job(i) for i in range(10)))
    assert counter.peak == 10


async def test_fail_fast_cancels_the_rest_and_raises() -> None:
    counter = InFlight()
    forever = anyio.Event()

    async def waits() -> None:
        try:
            await forever.wait()
        except anyio.get_cancelled_exc_class():
            counter.cancelled.append(-1)
            raise

    with anyio.fail_after(5), pytest.raises(ValueError, match="job 1 failed"):
        await fanloop.gather(waits(), counter.job(1, steps=3, fail=True), waits(), fail_fast=True)
    assert counter.cancelled == [-1, -1]
    assert counter.now == 0


async def test_fail_fast_does_not_start_what_is_still_queued() -> None:
    counter = InFlight()
    runs = [counter.factory(0, fail=True), *(counter.factory(i) for i in range(1, 5))]
    with pytest.raises(ValueError, match="job 0 failed"):
        await fanloop.gather(*runs, limit=1, fail_fast=True)
    assert counter.started == [0]


async def test_callables_are_started_lazily() -> None:
    counter = InFlight()
    in_flight_when_made: list[int] = []

    def make(index: int) -> Callable[[], Awaitable[int]]:
        def start() -> Awaitable[int]:
            in_flight_when_made.append(counter.now)
            return counter.job(index)

        return start

    results = await fanloop.gather(*(make(i) for i in range(6)), limit=2)
    assert results == list(range(6))
    # a callable is only called when a slot is free: never with 2 runs already in flight
    assert max(in_flight_when_made) <= 1
    assert counter.peak == 2


def _never_awaited(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_no_coroutine_is_left_unawaited_when_fail_fast_cancels_the_queue() -> None:
    counter = InFlight()
    coros = [counter.job(0, fail=True), *(counter.job(i) for i in range(1, 5))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="job 0 failed"):
            await fanloop.gather(*coros, limit=1, fail_fast=True)
        gc.collect()
    assert counter.started == [0]
    assert all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in coros)  # type: ignore[arg-type]
    assert _never_awaited(caught) == []


async def test_cancelling_gather_cancels_every_run_and_closes_the_queue() -> None:
    counter = InFlight()
    forever = anyio.Event()
    running = anyio.Event()

    async def waits(index: int) -> None:
        counter.started.append(index)
        running.set()
        try:
            await forever.wait()
        except anyio.get_cancelled_exc_class():
            counter.cancelled.append(index)
            raise

    coros = [waits(i) for i in range(5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: fanloop.gather(*coros, limit=2))
                await running.wait()
                await anyio.lowlevel.checkpoint()
                tg.cancel_scope.cancel()
        gc.collect()
    assert sorted(counter.cancelled) == sorted(counter.started) == [0, 1]
    assert all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in coros)  # type: ignore[arg-type]
    assert _never_awaited(caught) == []


async def test_empty_gather() -> None:
    assert await fanloop.gather() == []


async def test_an_invalid_limit_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="limit"):
        await fanloop.gather(lambda: anyio.sleep(0), limit=0)


async def test_an_invalid_limit_closes_the_coroutines_it_was_given() -> None:
    coro = anyio.sleep(0)
    with pytest.raises(ConfigurationError, match="limit"):
        await fanloop.gather(coro, limit=0)
    state = inspect.getcoroutinestate(coro)  # type: ignore[arg-type]
    coro.close()  # type: ignore[attr-defined]  # (keep the test itself free of the warning)
    assert state == inspect.CORO_CLOSED
