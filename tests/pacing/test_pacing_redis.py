"""RedisPacing against the real Redis on 127.0.0.1:6379 (skipped with the reason where it is
absent), with real worker processes where the point is sharing across processes.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections import Counter
from typing import Any

import anyio
import pytest
from pacing_workers import REDIS_URL, expect, run_workers, start, stop
from slot_events import waiting_for_a_slot

from fanloop import Agent, ModelSettings, RetryPolicy, TerminationReason
from fanloop.events import PacingUnavailable, PacingWait
from fanloop.pacing import PacingUnreachable, RedisPacing, paced
from fanloop.providers import ModelRequest
from fanloop.testing import FakeLLMServer, Fault, RateLimit, ScriptedProvider
from heartbeat import Stopwatch


async def stream_run(agent: Agent[Any, Any], prompt: str = "hi") -> tuple[Any, list[Any]]:
    events: list[Any] = []
    async with agent.stream(prompt) as run:
        async for event in run:
            events.append(event)
    return run.result, events


def clocked() -> tuple[ScriptedProvider, list[float]]:
    times: list[float] = []

    def respond(request: ModelRequest) -> str:
        times.append(time.monotonic())
        return "ok"

    return ScriptedProvider(respond), times


async def test_two_pacings_on_one_key_share_one_budget(redis_key: str) -> None:
    provider, times = clocked()
    one = RedisPacing(REDIS_URL, key=redis_key, requests_per_minute=1200)  # every 50 ms
    two = RedisPacing(REDIS_URL, key=redis_key, requests_per_minute=1200)
    agents = [Agent(paced(provider, one)), Agent(paced(provider, two))]
    try:
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(stream_run, agents[i % 2])
    finally:
        await one.aclose()
        await two.aclose()
    times.sort()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 8
    # One schedule for both: 50 ms apart. Two schedules (before) send four pairs at once, or
    # all eight 25 ms apart; a busy machine that holds the process sends a call late, so it
    # lands just before the next: two such gaps are allowed.
    assert sum(gap < 0.035 for gap in gaps) <= 2, gaps
    assert times[-1] - times[0] >= 7 * 0.045


async def test_cancelled_waiter_leaves_no_lease_and_tokens_settle(redis_key: str) -> None:
    holding, release = anyio.Event(), anyio.Event()

    async def respond(request: ModelRequest) -> str:
        if request.messages[0].content[0].text == "hold":  # type: ignore[union-attr]
            holding.set()
            await release.wait()
        return "ok"

    pacing = RedisPacing(REDIS_URL, key=redis_key, max_concurrency=1, tokens_per_minute=600_000)
    waiting = waiting_for_a_slot(pacing)
    agent = Agent(
        paced(ScriptedProvider(respond), pacing), model_settings=ModelSettings(max_tokens=100)
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "hold")
            await holding.wait()
            async with anyio.create_task_group() as waiter:
                waiter.start_soon(agent.run, "cancelled while waiting")
                await waiting.wait()
                waiter.cancel_scope.cancel()
            release.set()
        with anyio.fail_after(3):
            assert (await agent.run("after")).text == "ok"
    finally:
        await pacing.aclose()
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.zcard(pacing.keys[1]) == 0  # every lease given back
        assert client.ttl(pacing.keys[0]) > 0  # the state expires by itself
    finally:
        client.close()


async def test_a_lease_held_by_a_killed_process_expires(redis_key: str) -> None:
    holder = start(
        {
            "redis_url": REDIS_URL,
            "redis_key": redis_key,
            "max_concurrency": 1,
            "lease_ttl": 1.0,
            "base_url": "http://127.0.0.1:9",
            "runs": 0,
            "hold": True,
        }
    )
    try:
        expect(holder, "holding")
        stop(holder)  # SIGKILL: nothing gives the slot back
        provider, _times = clocked()
        pacing = RedisPacing(REDIS_URL, key=redis_key, max_concurrency=1, lease_ttl=1.0)
        watch = Stopwatch()
        try:
            with anyio.fail_after(5):
                result, events = await stream_run(Agent(paced(provider, pacing)))
        finally:
            await pacing.aclose()
    finally:
        stop(holder)
    assert result.text == "ok"
    assert watch.wall > 0.3 and watch.own < 3.0, watch  # the dead one's lease_ttl = 1 s ran out
    assert {e.reason for e in events if isinstance(e, PacingWait)} == {"concurrency"}


async def test_a_later_shorter_retry_after_does_not_shorten_the_shared_cooldown(
    redis_key: str,
) -> None:
    """Two processes' 429s: 30 s, then 0.05 s. The key stays cooled for 30 s."""
    provider, times = clocked()
    one = RedisPacing(REDIS_URL, key=redis_key, cooldown_jitter=0)
    two = RedisPacing(REDIS_URL, key=redis_key, cooldown_jitter=0)
    try:
        assert await one.cooldown(30)
        assert await two.cooldown(0.05)
        with anyio.move_on_after(1.0):  # twenty times the shorter cooldown
            await Agent(paced(provider, one)).run("hi")
    finally:
        await one.aclose()
        await two.aclose()
    assert times == []


async def test_unreachable_redis_fails_open_with_a_warning_event() -> None:
    pacing = RedisPacing("redis://127.0.0.1:1/0", key="nowhere", requests_per_minute=1)
    agent = Agent(paced(ScriptedProvider(lambda r: "unpaced"), pacing))
    watch = Stopwatch()
    try:
        for _ in range(3):  # rpm=1 would make the second wait a minute if it were paced
            result, events = await stream_run(agent)
            assert result.text == "unpaced"
            [event] = [e for e in events if isinstance(e, PacingUnavailable)]
            assert event.fail_open and event.key == "nowhere" and "Connection" in event.error
    finally:
        await pacing.aclose()
    assert watch.own < 2, watch


async def test_unreachable_redis_fails_closed_with_a_transient_error() -> None:
    pacing = RedisPacing(
        "redis://127.0.0.1:1/0", key="nowhere", on_unavailable="closed", retry_interval=0.05
    )
    provider, times = clocked()
    agent = Agent(paced(provider, pacing), retry=RetryPolicy(max_retries=2, base_delay=0.01))
    try:
        with pytest.raises(PacingUnreachable) as caught:
            await agent.run("hi")
    finally:
        await pacing.aclose()
    assert caught.value.transient and caught.value.attempts == 3
    assert times == []  # nothing was sent


async def test_a_redis_that_never_answers_cannot_hang_a_call() -> None:
    """A server that accepts connections and never replies: bounded by the timeouts."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    pacing = RedisPacing(
        f"redis://127.0.0.1:{port}/0", key="silent", max_concurrency=1, timeout=0.3
    )
    try:
        watch = Stopwatch()
        result, events = await stream_run(Agent(paced(ScriptedProvider(["ok"]), pacing)))
        assert watch.own < 2.0, watch
        assert result.text == "ok"
        assert any(isinstance(e, PacingUnavailable) for e in events)
    finally:
        await pacing.aclose()
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_four_processes_share_one_rate_limit_without_429s(redis_key: str) -> None:
    """4 worker processes x 125 concurrent runs, one RedisPacing key, a server that allows
    250 requests in any second (a sliding window) and answers 429 past it.

    The pacing is set to half the server's limit: the margin for the time between the pacing's
    check and the request's arrival. On a busy 2-core machine (CPU burners and other test runs
    beside it) a process falls behind another by hundreds of milliseconds; at 80 % of the limit,
    11 % of the requests were refused there. At half, a process may fall a whole second behind
    the others and the server still sees no more than 250 in any second; without one shared
    schedule, four processes at 125 a second would send 500 a second and half would be refused.

    The claim is a rate, checked in every 1 s window, so the number of runs only sets how many
    windows there are: 500 runs at the shared 125 a second fill four seconds (1,000 took eight),
    and each of those windows would be overflowed twice over by four unshared schedules. Each
    worker still has far more runs waiting than the pace lets through (all 125 start at once)."""
    limit = RateLimit(requests=250, per=1.0, retry_after=1.0)
    with FakeLLMServer(responder=lambda body: "done", rate_limit=limit, record=False) as server:
        config = {
            "base_url": server.openai_base_url,
            "redis_url": REDIS_URL,
            "redis_key": redis_key,
            "rpm": 250 * 60 * 0.5,
            "runs": 125,
        }
        reports = run_workers([{**config, "worker": i} for i in range(4)])
    log = server.rate_log
    assert log is not None
    assert [r["failed"] for r in reports] == [0, 0, 0, 0], reports
    assert sum(r["completed"] for r in reports) == 500
    requests = len(log.accepted) + len(log.rejected)
    assert len(log.rejected) < 0.01 * requests, (len(log.rejected), requests)
    assert log.max_in_window() <= 250  # in every 1 s window, 429s included: within the limit
    waits: Counter[str] = Counter()
    for report in reports:
        waits.update(report["waits"])
    assert waits["requests"] > 450  # they did wait for one another
    assert "unavailable" not in waits


def test_a_429_cools_down_every_process_of_the_group(redis_key: str) -> None:
    """One call gets a 429 with Retry-After: 2; no request of any process reaches the server
    in the 2 s after it but the few already on their way (let through before the group learned
    of the 429): they land within 57 ms on a loaded 2-core machine, 163 ms with CPU burners
    beside it. At the group's pace, 5 a second, ten requests would land in those 2 s without
    the cooldown; three are allowed, each within a second."""
    arrivals: list[tuple[float, str, int]] = []
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Any:
        with lock:
            arrivals.append((time.monotonic(), "", len(arrivals)))
            if len(arrivals) == 6:
                return Fault.http(429, retry_after=2)
        return "done"

    with FakeLLMServer(responder=respond) as server:
        config = {
            "base_url": server.openai_base_url,
            "redis_url": REDIS_URL,
            "redis_key": redis_key,
            "rpm": 300,  # 5 a second across the group
            "jitter": 0.2,
            "runs": 6,
        }
        reports = run_workers([{**config, "worker": i} for i in range(3)])
        workers = [r.headers.get("x-worker") for r in server.requests]
    assert [r["failed"] for r in reports] == [0, 0, 0], reports
    times = [t for t, _, _ in arrivals]
    hit = times[5]
    after = [t - hit for t in times[6:]]
    early = [d for d in after if d < 2.0]
    assert len(early) <= 3 and all(d < 1.0 for d in early), after
    assert sum(1 for d in after if d >= 2.0) >= 10  # the group went on after the cooldown
    cooled = [r for r in reports if r["waits"].get("cooldown")]
    assert len(cooled) >= 2  # processes other than the one that got the 429 waited too
    assert len(set(workers)) == 3
    assert TerminationReason.COMPLETED == "completed"
