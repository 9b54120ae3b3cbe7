"""Agent runs on the real providers over HTTP: the tool loop, retries, and what is not retried."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fanloop import Agent, RetryPolicy, TerminationReason, tool
from fanloop.errors import AuthenticationError, BadRequest
from fanloop.events import RetryScheduled, TextDelta
from fanloop.testing import FakeLLMServer, Fault, call, reply

# A large base delay: a retry that ignored Retry-After would stall the test.
HONOUR = RetryPolicy(max_retries=3, base_delay=30.0, jitter=False)
FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.02, jitter=False)


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


async def run_streamed(agent: Agent, prompt: str) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    async with agent.stream(prompt) as run:
        async for event in run:
            events.append(event)
    return run.result, events


async def test_tool_loop_over_http(server: FakeLLMServer, make, api: str) -> None:
    server.add(
        reply("Checking.", tool_calls=[call("get_weather", "w1", city="Paris")]),
        "It is sunny in Paris.",
    )
    agent = Agent(make(), tools=[get_weather], system="Be brief.")
    result, events = await run_streamed(agent, "Weather in Paris?")
    assert result.text == "It is sunny in Paris."
    assert result.termination_reason == TerminationReason.COMPLETED
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).endswith(
        "It is sunny in Paris."
    )
    second = server.requests[1]
    if api == "anthropic":
        assert second.messages[-1]["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "w1",
                "content": "Sunny in Paris",
                "cache_control": {"type": "ephemeral"},  # the conversation's cache breakpoint
            }
        ]
    else:
        assert second.messages[-1] == {
            "role": "tool",
            "tool_call_id": "w1",
            "content": "Sunny in Paris",
        }


async def test_rate_limited_twice_then_success(server: FakeLLMServer, make) -> None:
    server.add(
        Fault.http(429, retry_after=0.1),
        Fault.http(429, retry_after_ms=150),
        "Finally.",
    )
    agent = Agent(make(), retry=HONOUR)
    started = time.monotonic()
    result, events = await run_streamed(agent, "hi")
    elapsed = time.monotonic() - started
    assert result.text == "Finally."
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [r.delay for r in retries] == pytest.approx([0.1, 0.15])
    assert [r.attempt for r in retries] == [1, 2]
    assert all(type(r.error).__name__ == "RateLimited" for r in retries)
    assert all(not r.discard_partial for r in retries)
    assert 0.24 <= elapsed < 5.0
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "fault",
    [
        Fault.http(529),
        Fault.http(500),
        Fault.stream_error(error_type="overloaded_error", after_events=0),
        Fault.drop(after_events=0),
        Fault.truncate(after_events=0),
    ],
    ids=["529", "500", "in-stream-overload", "drop", "truncate"],
)
async def test_transient_failures_retried(server: FakeLLMServer, make, fault: Fault) -> None:
    server.add(fault, "Recovered.")
    agent = Agent(make(), retry=FAST)
    result, events = await run_streamed(agent, "hi")
    assert result.text == "Recovered."
    assert len([e for e in events if isinstance(e, RetryScheduled)]) == 1
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("fault", "error"),
    [(Fault.http(400), BadRequest), (Fault.http(401), AuthenticationError)],
    ids=["400", "401"],
)
async def test_permanent_failures_not_retried(
    server: FakeLLMServer, make, fault: Fault, error: type
) -> None:
    server.add(fault, "never reached")
    agent = Agent(make(), retry=FAST)
    with pytest.raises(error) as info:
        await agent.run("hi")
    assert info.value.attempts == 1
    assert len(server.requests) == 1
    assert server.remaining == 1


async def test_retry_after_partial_output_is_flagged(server: FakeLLMServer, make) -> None:
    server.add(
        Fault.stream_error(reply("Half an answer that breaks"), after_events=2),
        "A whole answer.",
    )
    agent = Agent(make(), retry=FAST)
    result, events = await run_streamed(agent, "hi")
    assert result.text == "A whole answer."
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    before = events[: events.index(retry)]
    assert [e for e in before if isinstance(e, TextDelta)], "partial output was streamed"
    assert retry.discard_partial is True


async def test_model_string(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    server.add("Hello from a model string.")
    agent = Agent("anthropic:claude-sonnet-4-5")
    try:
        result = await agent.run("hi")
    finally:
        await agent.provider.aclose()  # the agent built it; nobody else holds it
    assert result.text == "Hello from a model string."
    assert server.requests[-1].body["model"] == "claude-sonnet-4-5"
