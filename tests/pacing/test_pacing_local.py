"""In-process pacing (fanloop.pacing.Pacing): rates, tokens, concurrency, cooldowns, events.

Real HTTP where the wire matters (FakeLLMServer and the real providers), ScriptedProvider
behind ``paced()`` where only the gate does. Timing claims use generous margins.
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Any

import anyio
import pytest
from slot_events import waiting_for_a_slot

from fanloop import Agent, Limits, ModelSettings, RetryPolicy, TerminationReason
from fanloop.errors import ConfigurationError
from fanloop.events import PacingWait, RetryScheduled
from fanloop.pacing import Pacing, paced
from fanloop.providers import ModelRequest, Usage
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, Fault, ScriptedProvider, reply
from heartbeat import Stopwatch


def clocked(answer: Any = "ok", *, hold: float = 0.0) -> tuple[ScriptedProvider, dict[str, Any]]:
    """A provider that records when each call arrives and how many overlap."""
    stats: dict[str, Any] = {"times": [], "in_flight": 0, "max_in_flight": 0}

    async def respond(request: ModelRequest) -> Any:
        stats["times"].append(time.monotonic())
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            if hold:
                await anyio.sleep(hold)
        finally:
            stats["in_flight"] -= 1
        return answer

    return ScriptedProvider(respond), stats


async def stream_run(agent: Agent[Any, Any], prompt: str = "hi") -> tuple[Any, list[Any]]:
    events: list[Any] = []
    async with agent.stream(prompt) as run:
        async for event in run:
            events.append(event)
    return run.result, events


async def test_requests_per_minute_spaces_concurrent_runs() -> None:
    provider, stats = clocked()
    pacing = Pacing(requests_per_minute=1200)  # one request every 50 ms
    agent = Agent(paced(provider, pacing))
    results: list[tuple[Any, list[Any]]] = []

    async def one() -> None:
        results.append(await stream_run(agent))

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)
    assert [r.termination_reason for r, _ in results] == [TerminationReason.COMPLETED] * 6
    times = sorted(stats["times"])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Evenly spaced, not a burst (before: all six at once). A busy machine that holds the
    # process sends a call late, so it lands just before the next: two such gaps are allowed.
    assert sum(gap < 0.04 for gap in gaps) <= 2, gaps
    assert times[-1] - times[0] >= 5 * 0.045
    waits = [e for _, events in results for e in events if isinstance(e, PacingWait)]
    assert len(waits) == 5 and {w.reason for w in waits} == {"requests"}
    assert all(w.key == "local" and w.agent_path == ("agent",) for w in waits)
    assert max(w.seconds for w in waits) >= 0.2
    assert waits[0].to_dict()["kind"] == "pacing_wait"


async def test_max_concurrency_caps_calls_in_flight_across_agents() -> None:
    provider, stats = clocked(hold=0.05)
    pacing = Pacing(max_concurrency=2)
    first = Agent(paced(provider, pacing), name="a")
    second = Agent(paced(provider, pacing), name="b")  # separately built, same pacing
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(stream_run, first if i % 2 else second)
    assert stats["max_in_flight"] == 2
    assert len(stats["times"]) == 8


async def test_token_budget_is_charged_an_estimate_and_settled_with_the_usage() -> None:
    # 600 tokens a second; a call is charged its input estimate plus max_tokens=500, but
    # really uses 10 tokens.
    provider, _stats = clocked(reply("ok", usage=Usage(input_tokens=5, output_tokens=5)))
    pacing = Pacing(tokens_per_minute=36_000)
    agent = Agent(paced(provider, pacing), model_settings=ModelSettings(max_tokens=500))
    request = ModelRequest(messages=(), max_tokens=500)
    assert pacing.cost(request) >= 500
    # One after the other: each call's charge is settled to its 10 tokens before the next.
    watch = Stopwatch()
    for _ in range(4):
        result, _events = await stream_run(agent)
        assert result.termination_reason is TerminationReason.COMPLETED
    assert watch.own < 0.5, watch  # unsettled, 4 charges of 500+ would take 2.5 s
    # At once: the second waits for the first's charge (the estimate), for tokens.
    results: list[Any] = []

    async def one() -> None:
        results.append(await stream_run(agent))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    waits = [e for _, events in results for e in events if isinstance(e, PacingWait)]
    assert waits and {w.reason for w in waits} == {"tokens"}
    assert 0.5 < max(w.seconds for w in waits) < 2.0


async def test_a_run_waiting_for_pacing_ends_at_its_deadline_holding_nothing() -> None:
    provider, stats = clocked()
    pacing = Pacing(requests_per_minute=60)  # one a second
    agent = Agent(paced(provider, pacing))
    assert (await agent.run("first")).termination_reason is TerminationReason.COMPLETED
    waiting = Agent(paced(provider, pacing), limits=Limits(timeout=0.2))
    watch = Stopwatch()
    result = await waiting.run("second")
    assert result.termination_reason is TerminationReason.DEADLINE  # the wait counted
    assert watch.own < 0.8, watch  # not the second it would take to get the slot
    # Its booked slot was rolled back: the next call gets it (one second after the first),
    # not the one after.
    watch = Stopwatch()
    assert (await agent.run("third")).termination_reason is TerminationReason.COMPLETED
    assert watch.own < 1.0, watch
    assert len(stats["times"]) == 2


async def test_cancelled_while_waiting_for_a_slot_leaks_nothing() -> None:
    holding, release = anyio.Event(), anyio.Event()

    async def respond(request: ModelRequest) -> str:
        if request.messages[0].content[0].text == "hold":  # type: ignore[union-attr]
            holding.set()
            await release.wait()
        return "ok"

    pacing = Pacing(max_concurrency=1)
    waiting = waiting_for_a_slot(pacing)
    agent = Agent(paced(ScriptedProvider(respond), pacing))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, "hold")
        await holding.wait()
        async with anyio.create_task_group() as waiter:
            waiter.start_soon(agent.run, "cancelled while waiting")  # never gets the slot
            await waiting.wait()
            waiter.cancel_scope.cancel()
        release.set()
    with anyio.fail_after(2):  # before: would wait for the leaked slot forever
        assert (await agent.run("after")).text == "ok"


async def test_a_429_puts_every_run_into_one_cooldown_and_the_retry_goes_when_it_ends() -> None:
    times: list[float] = []

    def respond(body: dict[str, Any]) -> Any:
        times.append(time.monotonic())
        if len(times) == 1:
            return Fault.http(429, retry_after=0.6)
        return "done"

    pacing = Pacing(cooldown_jitter=0.05)
    with FakeLLMServer(responder=respond) as server:
        provider = AnthropicProvider(
            "claude-sonnet-4-5", api_key="k", base_url=server.anthropic_base_url, pacing=pacing
        )
        async with provider:
            agent = Agent(provider, retry=RetryPolicy(max_retries=3, base_delay=2.0))
            first = await stream_run(agent)  # gets the 429, then its retry
            assert first[0].text == "done"
            results = []

            async def one() -> None:
                results.append(await stream_run(agent))

            # Start more runs inside a fresh cooldown: none may go before it ends.
            server_429 = times[0]
            assert times[1] - server_429 >= 0.6  # the retry waited for the cooldown ...
            # ... not the cooldown plus a backoff (at least half the 2 s base delay): the
            # 0.9 s margin is for a busy machine, where the retry is late to be sent.
            assert times[1] - server_429 < 0.6 + 0.9
            retries = [e for e in first[1] if isinstance(e, RetryScheduled)]
            assert [r.delay for r in retries] == [0.0]  # the wait is the cooldown's
            waits = [e for e in first[1] if isinstance(e, PacingWait)]
            assert [w.reason for w in waits] == ["cooldown"]
            times.clear()
            await pacing.cooldown(0.4)
            marked = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one)
    assert min(times) - marked >= 0.35
    assert all(r.text == "done" for r, _ in results)


async def test_a_later_shorter_retry_after_does_not_shorten_the_cooldown() -> None:
    """A 429 asking for 30 s, then one asking for 0.05 s: the group stays cooled for 30 s.

    And the other way round, the later and longer one wins. Both groups are watched for
    1 s, twenty times the short cooldown: no call may go out.
    """
    provider, stats = clocked()
    shorter_later, longer_later = Pacing(cooldown_jitter=0), Pacing(cooldown_jitter=0)
    for pacing, first, then in ((shorter_later, 30, 0.05), (longer_later, 0.05, 30)):
        assert await pacing.cooldown(first)
        assert await pacing.cooldown(then)
    with anyio.move_on_after(1.0):
        async with anyio.create_task_group() as tg:
            for pacing in (shorter_later, longer_later):
                tg.start_soon(Agent(paced(provider, pacing)).run, "hi")
    assert stats["times"] == []


async def test_openai_provider_takes_pacing_too() -> None:
    pacing = Pacing(requests_per_minute=1200)
    with FakeLLMServer(responder=lambda body: "fine") as server:
        async with OpenAIProvider(
            "gpt-4.1", api_key="k", base_url=server.openai_base_url, pacing=pacing
        ) as provider:
            agent = Agent(provider)
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(agent.run, "hi")
            response = await provider.complete(ModelRequest(messages=(), max_tokens=10))
    assert response.text == "fine"
    assert len(server.requests) == 4


async def test_paced_complete_only_provider_streams_its_answer_and_reports_waits() -> None:
    provider = ScriptedProvider(lambda r: "whole answer", stream=False)
    agent = Agent(paced(provider, Pacing(requests_per_minute=1200, key="custom")))
    await agent.run("warm")
    result, events = await stream_run(agent)
    assert result.text == "whole answer"
    assert [e.key for e in events if isinstance(e, PacingWait)] == ["custom"]
    assert any(e.kind == "text_delta" and e.text == "whole answer" for e in events)


async def test_sync_complete_provider_behind_paced() -> None:
    class Sync:
        name = "sync"
        model = "m"

        def complete(self, request: ModelRequest) -> Any:
            return reply("from a thread")

    provider = paced(Sync(), Pacing(max_concurrency=1))
    assert (await Agent(provider).run("x")).text == "from a thread"


def test_bad_configuration_is_refused() -> None:
    for kwargs in (
        {"requests_per_minute": 0},
        {"tokens_per_minute": -1},
        {"max_concurrency": 1.5},
        {"requests_per_minute": float("nan")},
        {"burst": 0},
    ):
        with pytest.raises(ConfigurationError):
            Pacing(**kwargs)
    with pytest.raises(ConfigurationError):
        AnthropicProvider("claude-sonnet-4-5", api_key="k", pacing="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        paced(ScriptedProvider(), object())  # type: ignore[arg-type]


def test_importing_fanloop_and_pacing_does_not_import_redis() -> None:
    import subprocess

    code = "import sys, fanloop, fanloop.pacing; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_pacing_waits_show_in_the_chat_span() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fanloop.otel import OpenTelemetryObserver

    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    pacing = Pacing(requests_per_minute=600, key="otel")  # every 100 ms
    agent = Agent(
        paced(ScriptedProvider(lambda r: "ok"), pacing),
        observer=OpenTelemetryObserver(tracer_provider=tracer),
    )
    await agent.run("first")
    await agent.run("second")  # waits about 100 ms
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 2
    waited = chats[1]
    assert waited.attributes is not None
    assert 0.05 < waited.attributes["fanloop.pacing.wait_seconds"] < 1.0
    [event] = [e for e in waited.events if e.name == "fanloop.pacing_wait"]
    assert event.attributes is not None
    assert event.attributes["fanloop.pacing.reason"] == "requests"
    assert event.attributes["fanloop.pacing.key"] == "otel"
    assert "fanloop.pacing.wait_seconds" not in (chats[0].attributes or {})


def test_fake_server_rate_limit_answers_429_past_the_window() -> None:
    import httpx2

    from fanloop.testing import RateLimit

    with FakeLLMServer(responder=lambda body: "ok", rate_limit=RateLimit(3, per=30.0)) as server:
        url = f"{server.openai_base_url}/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        statuses = []
        with httpx2.Client() as client:
            for _ in range(5):
                response = client.post(url, json=body)
                statuses.append(response.status_code)
            last = response
        log = server.rate_log
    assert statuses == [200, 200, 200, 429, 429]
    assert 29_000 < int(last.headers["retry-after-ms"]) <= 30_000
    assert last.headers["retry-after"] == "30"
    assert last.json()["error"]["type"] == "requests"
    assert log is not None and len(log.accepted) == 3 and len(log.rejected) == 2
    assert log.max_in_window() == 5 and log.max_in_window(accepted_only=True) == 3
    with pytest.raises(ValueError, match="requests >= 1"):
        RateLimit(0)


async def test_a_hostile_server_cannot_freeze_the_group() -> None:
    """Absurd usage and an absurd Retry-After are bounded: the group goes on."""
    provider = ScriptedProvider(
        [reply("big", usage=Usage(input_tokens=10**15, output_tokens=10**15)), "next"]
    )
    pacing = Pacing(tokens_per_minute=60_000)  # 1000 tokens a second
    agent = Agent(paced(provider, pacing), model_settings=ModelSettings(max_tokens=100))
    with anyio.fail_after(3):  # unbounded, the schedule would be pushed out by years
        assert (await agent.run("one")).text == "big"
        assert (await agent.run("two")).text == "next"

    pacing = Pacing(max_cooldown=0.3, cooldown_jitter=0)
    with FakeLLMServer([Fault.http(429, retry_after=10**6), "after"]) as server:
        async with AnthropicProvider(
            "claude-sonnet-4-5", api_key="k", base_url=server.anthropic_base_url, pacing=pacing
        ) as capped:
            watch = Stopwatch()
            with anyio.fail_after(5):
                result = await Agent(capped, retry=RetryPolicy(max_retries=1)).run("hi")
    assert result.text == "after"
    assert watch.wall > 0.25 and watch.own < 2, watch  # the cooldown, capped at 0.3 s
