"""FallbackProvider: the next provider answers when one fails for good."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from fanloop import Agent, Limits, ModelSettings, RetryPolicy, TerminationReason
from fanloop.errors import (
    AuthenticationError,
    BadRequest,
    ConfigurationError,
    ContextWindowExceeded,
    RateLimited,
)
from fanloop.events import Event, ProviderFallback, RetryScheduled, TextDelta
from fanloop.providers import FallbackProvider, ModelRequest
from fanloop.providers._http import HTTPProvider
from fanloop.testing import FakeLLMServer, Fault, ScriptedProvider, reply

FAST = RetryPolicy(max_retries=2, base_delay=0, jitter=False)


async def run_streamed(agent: Agent, prompt: str = "go") -> tuple[Any, list[Event]]:
    events: list[Event] = []
    async with agent.stream(prompt) as run:
        async for event in run:
            events.append(event)
    return run.result, events


@pytest.mark.parametrize("status", [400, 401])
async def test_a_permanent_failure_falls_back_at_once(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider], status: int
) -> None:
    server.add(Fault.http(status), api="openai")
    server.add("Hello from Anthropic.", api="anthropic")
    provider = FallbackProvider(providers("openai"), providers("anthropic"))
    result, events = await run_streamed(Agent(provider, retry=FAST))
    assert result.text == "Hello from Anthropic."
    assert [r.api for r in server.requests] == ["openai", "anthropic"]  # 4xx: no retry
    (fallback,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert (fallback.from_provider, fallback.to_provider) == ("openai", "anthropic")
    assert isinstance(fallback.error, BadRequest | AuthenticationError)
    assert fallback.error.status_code == status
    assert fallback.kind == "provider_fallback"
    assert fallback.to_dict()["error"]["type"] == type(fallback.error).__name__
    (answered,) = [e.response for e in events if e.kind == "response_completed"]
    assert answered.provider == "anthropic"


async def test_transient_failures_are_retried_then_fall_back(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    server.add(Fault.http(529), Fault.http(529), Fault.http(529), api="anthropic")
    server.add("Hello from OpenAI.", api="openai")
    provider = FallbackProvider(providers("anthropic"), providers("openai"))
    result, events = await run_streamed(Agent(provider, retry=FAST))
    assert result.text == "Hello from OpenAI."
    assert [r.api for r in server.requests] == ["anthropic"] * 3 + ["openai"]
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [r.attempt for r in retries] == [1, 2]
    (fallback,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert fallback.from_provider == "anthropic" and fallback.to_provider == "openai"


async def test_a_broken_stream_says_to_discard_its_deltas(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    server.add(Fault.stream_error(reply("partial answer " * 4), after_events=2), api="openai")
    server.add("whole answer", api="anthropic")
    provider = FallbackProvider(providers("openai"), providers("anthropic"))
    no_retries = RetryPolicy(max_retries=0)
    result, events = await run_streamed(Agent(provider, retry=no_retries))
    assert result.text == "whole answer"
    (fallback,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert fallback.discard_partial
    kinds = [e.kind for e in events]
    assert kinds.index("text_delta") < kinds.index("provider_fallback")
    after = [e.text for e in events[kinds.index("provider_fallback") :] if isinstance(e, TextDelta)]
    assert "".join(after) == "whole answer"


async def test_a_stalled_provider_falls_over(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    server.add(Fault.slow(30, reply("too late")), api="openai")
    server.add("in time", api="anthropic")
    provider = FallbackProvider(providers("openai"), providers("anthropic"))
    policy = RetryPolicy(max_retries=0, stream_idle_timeout=0.3)
    result, events = await run_streamed(Agent(provider, retry=policy))
    assert result.text == "in time"
    (fallback,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert fallback.error.transient


async def test_when_every_provider_fails_the_last_error_ends_the_run() -> None:
    first = ScriptedProvider([RateLimited("slow down")] * 3, name="first")
    second = ScriptedProvider([AuthenticationError("bad key", status_code=401)], name="second")
    agent = Agent(FallbackProvider(first, second), retry=FAST)
    with pytest.raises(AuthenticationError) as caught:
        await agent.run("go")
    assert caught.value.partial.termination_reason is TerminationReason.PROVIDER_ERROR
    # the loop does not start the chain over
    assert (len(first.requests), len(second.requests)) == (3, 1)

    third = ScriptedProvider([RateLimited("again")] * 3, name="third")
    agent = Agent(FallbackProvider(ScriptedProvider([BadRequest("no")]), third), retry=FAST)
    with pytest.raises(RateLimited) as last:
        await agent.run("go")
    assert not last.value.transient and len(third.requests) == 3


async def test_a_context_window_error_goes_to_the_loop_not_the_fallback() -> None:
    first = ScriptedProvider([ContextWindowExceeded("prompt is too long")], name="first")
    second = ScriptedProvider(["never"], name="second")
    result = await Agent(FallbackProvider(first, second), retry=FAST).run("go")
    assert result.termination_reason is TerminationReason.CONTEXT_EXHAUSTED
    assert second.requests == []


async def test_an_exception_of_a_custom_provider_falls_back() -> None:
    class Broken:
        name = "broken"
        model = "b"

        async def complete(self, request: ModelRequest) -> Any:
            raise RuntimeError("boom")

    backup = ScriptedProvider(["fine"], stream=False, name="backup")
    result, events = await run_streamed(Agent(FallbackProvider(Broken(), backup), retry=FAST))
    assert result.text == "fine"
    (fallback,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert "boom" in str(fallback.error)


async def test_capabilities_are_the_shared_ones(providers: Callable[..., HTTPProvider]) -> None:
    openai, anthropic = providers("openai"), providers("anthropic")
    both = FallbackProvider(openai, anthropic)
    assert both.model == openai.model and both.name == "fallback"
    assert both.native_output
    assert both.supported_settings == anthropic.supported_settings
    assert both.hosted_tools == frozenset()
    with pytest.raises(ConfigurationError, match="seed"):  # Anthropic has none
        Agent(both, model_settings=ModelSettings(seed=1))
    with_custom = FallbackProvider(openai, ScriptedProvider())
    assert not with_custom.native_output
    assert with_custom.supported_settings == openai.supported_settings
    with pytest.raises(ConfigurationError, match="not a provider"):
        FallbackProvider(openai, object())


async def test_complete_falls_back_too() -> None:
    provider = FallbackProvider(
        ScriptedProvider([AuthenticationError("no")], name="a"),
        ScriptedProvider(["b answers"], name="b"),
    )
    response = await provider.complete(ModelRequest())
    assert response.text == "b answers" and response.provider == "b"


async def test_the_run_deadline_cuts_a_fallback_chain_short(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    server.add(Fault.slow(30, reply("too late")), api="openai")
    server.add(Fault.slow(30, reply("too late")), api="anthropic")
    provider = FallbackProvider(providers("openai"), providers("anthropic"))
    policy = RetryPolicy(max_retries=0, stream_idle_timeout=None)
    with anyio.fail_after(10):
        result = await Agent(provider, retry=policy, limits=Limits(timeout=0.5)).run("go")
    assert result.termination_reason is TerminationReason.DEADLINE
