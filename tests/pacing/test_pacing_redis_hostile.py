"""RedisPacing with corrupted or hostile shared state, against the real Redis on 127.0.0.1:6379.

Each test writes bad values into its own key with redis-py, then paces a call: the call goes
within the caps (never waits what the key says), never fails with a raw Redis or value error,
reports what it found in a ``pacing_capped`` event, and the key is repaired for the others.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from pacing_workers import REDIS_URL

from fanloop import Agent
from fanloop.events import PacingCapped, PacingUnavailable, PacingWait
from fanloop.pacing import RedisPacing, paced
from fanloop.pacing._gate import Hold
from fanloop.testing import ScriptedProvider


@pytest.fixture
def client(redis_key: str) -> Any:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def keys(key: str) -> tuple[str, str]:
    tag = f"fanloop:pacing:{{{key}}}"
    return f"{tag}:state", f"{tag}:leases"


def server_now(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


async def paced_run(pacing: RedisPacing, *, within: float = 10.0) -> tuple[list[Any], float]:
    """One streamed run through ``pacing``: its pacing events and how long it took."""
    agent = Agent(paced(ScriptedProvider(lambda request: "ok"), pacing))
    events: list[Any] = []
    started = time.monotonic()
    try:
        with anyio.fail_after(within):  # unbounded, the call would wait what the key says
            async with agent.stream("hi") as run:
                async for event in run:
                    if isinstance(event, PacingWait | PacingCapped | PacingUnavailable):
                        events.append(event)
    finally:
        await pacing.aclose()
    assert run.result.text == "ok"
    return events, time.monotonic() - started


def capped(events: list[Any]) -> str:
    found = [e.detail for e in events if isinstance(e, PacingCapped)]
    assert found, events
    return "; ".join(found)


async def test_a_far_off_cooldown_in_redis_is_capped_at_max_cooldown(
    redis_key: str, client: Any
) -> None:
    state, _ = keys(redis_key)
    client.hset(state, "cool", f"{server_now(client) + 1e9:.6f}")  # 31 years
    pacing = RedisPacing(
        REDIS_URL, key=redis_key, max_cooldown=0.4, cooldown_jitter=0, on_unavailable="closed"
    )
    events, took = await paced_run(pacing)
    assert 0.3 < took < 3.0
    assert "cool was 1e+09 s ahead (capped at max_cooldown = 0.4 s)" in capped(events)
    [wait] = [e for e in events if isinstance(e, PacingWait)]
    assert wait.reason == "cooldown" and wait.seconds < 1.0
    assert float(client.hget(state, "cool")) < server_now(client) + 1  # repaired for all


@pytest.mark.parametrize("value", ["inf", "1e999", "nan", "-nan", "garbage \xff\n", ""])
async def test_a_cooldown_that_is_not_a_finite_number_is_dropped(
    redis_key: str, client: Any, value: str
) -> None:
    state, _ = keys(redis_key)
    client.hset(state, mapping={"cool": value, "rtat": value, "ttat": value, "sent": value})
    pacing = RedisPacing(
        REDIS_URL,
        key=redis_key,
        requests_per_minute=600,
        tokens_per_minute=10**7,
        on_unavailable="closed",  # a corrupt key is not an outage: the call is not refused
    )
    events, took = await paced_run(pacing)
    assert took < 3.0
    detail = capped(events)
    assert "cool held" in detail and "not a finite number (dropped)" in detail
    assert not [e for e in events if isinstance(e, PacingUnavailable)]
    stored = client.hgetall(state)
    assert stored.get(b"cool") is None  # dropped where it lay
    assert all(float(v) < server_now(client) + 60 for v in stored.values())


async def test_a_far_off_request_schedule_is_capped_at_max_wait(
    redis_key: str, client: Any
) -> None:
    state, _ = keys(redis_key)
    ahead = server_now(client) + 1e9
    client.hset(state, mapping={"rtat": f"{ahead:.6f}", "sent": f"{ahead:.6f}"})
    pacing = RedisPacing(REDIS_URL, key=redis_key, requests_per_minute=6000, max_wait=0.4)
    events, took = await paced_run(pacing)
    assert 0.3 < took < 3.0
    detail = capped(events)
    assert "rtat was 1e+09 s ahead (capped at max_wait = 0.4 s)" in detail
    assert "sent was" in detail
    assert all(e.seconds < 1.0 for e in events if isinstance(e, PacingWait))


async def test_a_far_off_token_schedule_is_capped_at_max_wait(redis_key: str, client: Any) -> None:
    state, _ = keys(redis_key)
    client.hset(state, "ttat", "1e300")
    pacing = RedisPacing(REDIS_URL, key=redis_key, tokens_per_minute=10**8, max_wait=0.4)
    events, took = await paced_run(pacing)
    assert took < 3.0
    assert "ttat was" in capped(events)
    assert float(client.hget(state, "ttat")) < server_now(client) + 60


async def test_forged_leases_cannot_hold_the_concurrency_slots(redis_key: str, client: Any) -> None:
    _, leases = keys(redis_key)
    client.zadd(leases, {f"forged-{i}": float("inf") for i in range(500)})
    client.zadd(leases, {f"far-{i}": 1e18 for i in range(500)})
    pacing = RedisPacing(REDIS_URL, key=redis_key, max_concurrency=1, lease_ttl=5.0)
    events, took = await paced_run(pacing)
    assert took < 3.0
    assert "1000 leases expiring more than lease_ttl ahead (deleted)" in capped(events)
    assert client.zcard(leases) == 0  # the call's own lease is given back too


@pytest.mark.parametrize("kind", ["string", "list"])
async def test_keys_of_the_wrong_type_are_deleted_not_an_outage(
    redis_key: str, client: Any, kind: str
) -> None:
    state, leases = keys(redis_key)
    if kind == "string":
        client.set(state, "x" * 1000)
        client.set(leases, "y")
    else:
        client.rpush(state, "a", "b")
        client.rpush(leases, "c")
    pacing = RedisPacing(
        REDIS_URL,
        key=redis_key,
        requests_per_minute=600,
        max_concurrency=2,
        on_unavailable="closed",  # before: WRONGTYPE, taken as an outage, and the call refused
    )
    events, took = await paced_run(pacing)
    assert took < 3.0
    detail = capped(events)
    assert f"state held a {kind} (deleted)" in detail
    assert f"leases held a {kind} (deleted)" in detail
    assert client.type(state) == b"hash"


async def test_a_reply_past_the_caps_is_capped_in_python_too(
    redis_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the script replies is checked again (a script of another version on the key)."""
    pacing = RedisPacing(REDIS_URL, key=redis_key, requests_per_minute=60, max_wait=0.5)
    state = pacing._state

    async def reply(link: Any, script: str, args: list[Any]) -> Any:
        return [b"requests", b"1e9", b"0", b"1000000001.0", b"5.0", b"", b""]

    monkeypatch.setattr(state, "_run", reply)
    hold = Hold()
    try:
        wait = await state.step(hold, 0)
    finally:
        await pacing.aclose()
    assert wait == (0.5, "requests")
    assert hold.slot_at == pytest.approx(1.5)  # the slot moved in with the wait
    assert hold.notice == "a wait of 1e+09 s (capped at 0.5 s)"


async def test_a_lease_is_renewed_while_its_call_runs(redis_key: str, client: Any) -> None:
    """A call running past ``lease_ttl`` keeps its slot: the renewal reaches the lease set (it
    used to address the state hash, fail with WRONGTYPE, and let the lease lapse)."""
    release = anyio.Event()
    started = anyio.Event()

    async def respond(request: Any) -> str:
        if request.messages[0].content[0].text == "long":
            started.set()
            await release.wait()
        return "ok"

    pacing = RedisPacing(
        REDIS_URL, key=redis_key, max_concurrency=1, requests_per_minute=6000, lease_ttl=0.6
    )
    agent = Agent(paced(ScriptedProvider(respond), pacing))
    _, leases = keys(redis_key)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "long")
            await started.wait()
            deadline = server_now(client) + 1.5  # two and a half lease_ttl
            while server_now(client) < deadline:
                assert client.zcard(leases) == 1  # never lapsed
                await anyio.sleep(0.05)
            with anyio.move_on_after(0.5):  # the slot is still held: this call must wait
                await agent.run("second")
                pytest.fail("a second call got the slot while the first one ran")
            release.set()
    finally:
        await pacing.aclose()


async def test_capped_state_shows_in_the_chat_span(redis_key: str, client: Any) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fanloop.otel import OpenTelemetryObserver

    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    state, _ = keys(redis_key)
    client.hset(state, "cool", "9" * 400)
    pacing = RedisPacing(REDIS_URL, key=redis_key, max_cooldown=0.2, cooldown_jitter=0)
    agent = Agent(
        paced(ScriptedProvider(lambda r: "ok"), pacing),
        observer=OpenTelemetryObserver(tracer_provider=tracer),
    )
    try:
        with anyio.fail_after(10):
            assert (await agent.run("hi")).text == "ok"
    finally:
        await pacing.aclose()
    [chat] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    [event] = [e for e in chat.events if e.name == "fanloop.pacing_capped"]
    assert event.attributes is not None
    assert event.attributes["fanloop.pacing.key"] == redis_key
    detail = str(event.attributes["fanloop.pacing.detail"])
    assert detail.startswith("cool held 999") and "not a finite number" in detail
