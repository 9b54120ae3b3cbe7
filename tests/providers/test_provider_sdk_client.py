"""The path through the official SDK clients (``client=AsyncAnthropic(...)`` /
``AsyncOpenAI(...)``), against the fake server over real HTTP: streaming, tool calls, a whole
agent run with retries, and error translation, for both vendors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from provider_helpers import request, stream_all

from fanloop import Agent, RetryPolicy, TerminationReason, tool
from fanloop.errors import (
    AuthenticationError,
    BadRequest,
    ProviderError,
    RateLimited,
    ResponseTooLarge,
    ServerError,
)
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, Fault, call, reply
from fanloop.testing._faults import Hostile


@pytest.fixture(params=["anthropic", "openai"])
async def through_sdk(request: pytest.FixtureRequest, server: FakeLLMServer) -> AsyncIterator[Any]:
    if request.param == "anthropic":
        sdk: Any = anthropic.AsyncAnthropic(api_key="sk-a", base_url=server.anthropic_base_url)
        provider: Any = AnthropicProvider("claude-sonnet-4-5", client=sdk)
    else:
        sdk = openai.AsyncOpenAI(api_key="sk-o", base_url=server.openai_base_url)
        provider = OpenAIProvider("gpt-4.1", client=sdk)
    async with provider:
        yield provider
    await sdk.close()


async def test_text_streams_through_the_sdk_client(through_sdk: Any, server: FakeLLMServer) -> None:
    server.add("Hello from the server.")
    deltas, final = await stream_all(through_sdk, request("hi"))
    assert "".join(d.text for d in deltas if d.kind == "text_delta") == "Hello from the server."
    assert final.text == "Hello from the server."


async def test_tool_calls_come_back_through_the_sdk_client(
    through_sdk: Any, server: FakeLLMServer
) -> None:
    server.add(reply("Let me look.", tool_calls=[call("get_weather", _id="c1", city="Oslo")]))
    response = await through_sdk.complete(request("weather?"))
    (tool_call,) = response.tool_calls
    assert (tool_call.id, tool_call.name, tool_call.arguments) == (
        "c1",
        "get_weather",
        {"city": "Oslo"},
    )


async def test_an_agent_runs_and_retries_through_the_sdk_client(
    through_sdk: Any, server: FakeLLMServer
) -> None:
    @tool
    def get_weather(city: str) -> str:
        """The weather."""
        return f"sunny in {city}"

    server.add(
        Fault.http(429, retry_after=0.01),
        reply(tool_calls=[call("get_weather", city="Oslo")]),
        Fault.http(503),
        "It is sunny in Oslo.",
    )
    agent = Agent(
        through_sdk, tools=[get_weather], retry=RetryPolicy(base_delay=0.01, jitter=False)
    )
    result = await agent.run("weather?")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "It is sunny in Oslo."
    assert len(server.requests) == 4


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, AuthenticationError), (400, BadRequest), (429, RateLimited), (500, ServerError)],
)
async def test_errors_are_translated_on_the_sdk_path(
    through_sdk: Any, server: FakeLLMServer, status: int, error: type[Exception]
) -> None:
    server.add(Fault.http(status, message=f"injected {status}"))
    with pytest.raises(error) as info:
        await through_sdk.complete(request("hi"))
    assert info.value.status_code == status  # type: ignore[attr-defined]


async def _failure(provider: Any, *, streaming: bool) -> Exception:
    try:
        if streaming:
            await stream_all(provider, request("hi"))
        else:
            await provider.complete(request("hi"))
    except Exception as exc:
        return exc
    raise AssertionError("no error")


@pytest.mark.parametrize(
    "coding", ["gzip", "gzip, gzip, gzip, gzip, gzip, gzip", ", ".join(["deflate"] * 3000)]
)
async def test_an_error_body_the_sdk_cannot_decode_is_still_a_provider_error(
    through_sdk: Any, server: FakeLLMServer, coding: str
) -> None:
    # The SDKs read an error body whole, and httpx2's DecodingError (a body that is not gzip,
    # more than five codings) escaped raw. Where the SDK reports it as a connection error,
    # the status is lost: a transient ProviderConnectionError.
    server.add(Hostile.error(503, headers={"content-encoding": coding}))
    error = await _failure(through_sdk, streaming=False)
    assert isinstance(error, ProviderError) and error.transient, repr(error)
    assert error.status_code in (503, None)


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_an_answer_listing_too_many_codings_is_refused_through_the_sdk_client(
    through_sdk: Any, server: FakeLLMServer, streaming: bool
) -> None:
    server.add(Hostile.raw(b"{}", headers={"content-encoding": "gzip, " * 5 + "gzip"}))
    error = await _failure(through_sdk, streaming=streaming)
    assert isinstance(error, ResponseTooLarge) and not error.transient, repr(error)
    assert error.provider == through_sdk.name
