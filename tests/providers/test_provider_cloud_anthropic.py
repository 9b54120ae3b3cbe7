"""Claude on Google Vertex AI and Amazon Bedrock through the SDK's own clients
(``AnthropicProvider(model, client=AsyncAnthropicVertex(...) / AsyncAnthropicBedrock(...))``),
against the fake server over real HTTP: the platform's paths and body, authentication,
streaming (SSE on Vertex, AWS event-stream framing on Bedrock), tool calls, thinking, usage
and errors in the stream."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.lib.bedrock import AsyncAnthropicBedrock
from anthropic.lib.vertex import AsyncAnthropicVertex
from provider_helpers import request, stream_all

from fanloop import Agent, RetryPolicy, tool
from fanloop.errors import RateLimited, ResponseInvalid, ResponseTooLarge, StreamIncomplete
from fanloop.messages import ThinkingPart
from fanloop.providers import Usage
from fanloop.providers._eventstream import EventStreamDecoder
from fanloop.providers._wire import Malformed
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.testing import FakeLLMServer, Fault, call, reply
from fanloop.testing._cloud import bedrock_frames, event_stream_message
from fanloop.testing._faults import Hostile

MODEL = "claude-sonnet-4-5@20250929"
BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


def vertex_client(server: FakeLLMServer) -> AsyncAnthropicVertex:
    return AsyncAnthropicVertex(
        region="us-east5",
        project_id="my-project",
        access_token="ya29.test-token",
        base_url=f"{server.url}/v1",
    )


def bedrock_client(server: FakeLLMServer) -> AsyncAnthropicBedrock:
    return AsyncAnthropicBedrock(
        aws_access_key="AKIDEXAMPLE",
        aws_secret_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        aws_region="us-west-2",
        base_url=server.url,
    )


@pytest.fixture(params=["vertex", "bedrock"])
async def platform(request: pytest.FixtureRequest, server: FakeLLMServer) -> AsyncIterator[Any]:
    if request.param == "vertex":
        sdk: Any = vertex_client(server)
        provider = AnthropicProvider(MODEL, client=sdk)
    else:
        sdk = bedrock_client(server)
        provider = AnthropicProvider(BEDROCK_MODEL, client=sdk)
    async with provider:
        yield request.param, provider
    await sdk.close()


def expected_path(kind: str, stream: bool) -> str:
    if kind == "vertex":
        verb = "streamRawPredict" if stream else "rawPredict"
        return (
            f"/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/{MODEL}:{verb}"
        )
    return f"/model/{BEDROCK_MODEL}/invoke" + ("-with-response-stream" if stream else "")


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_the_platform_gets_its_path_body_and_credentials(
    platform: Any, server: FakeLLMServer, streaming: bool
) -> None:
    kind, provider = platform
    server.add(reply("Hi from the cloud.", usage=Usage(input_tokens=11, output_tokens=4)))
    if streaming:
        deltas, response = await stream_all(provider, request("hi"))
        assert "".join(d.text for d in deltas if d.kind == "text_delta") == "Hi from the cloud."
    else:
        response = await provider.complete(request("hi"))
    assert response.text == "Hi from the cloud."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 4)
    (seen,) = server.requests
    assert seen.platform == kind
    assert seen.path == expected_path(kind, streaming)
    assert seen.stream is streaming
    assert "model" not in seen.body  # it is in the path
    assert seen.body["anthropic_version"]
    assert seen.messages[0]["content"][0]["text"] == "hi"
    auth = seen.headers["authorization"]
    if kind == "vertex":
        assert auth == "Bearer ya29.test-token"
    else:
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/us-west-2/bedrock/aws4_request" in auth
        assert seen.headers["x-amz-date"]


async def test_tool_calls_and_thinking_stream_through_the_platform(
    platform: Any, server: FakeLLMServer
) -> None:
    _, provider = platform
    server.add(
        reply(
            "Let me look.",
            tool_calls=[call("get_weather", _id="toolu_1", city="Oslo")],
            thinking="The user wants the weather.",
            usage=Usage(input_tokens=30, output_tokens=12, cache_read_tokens=7),
        )
    )
    deltas, response = await stream_all(provider, request("weather?", thinking_budget=2048))
    kinds = {d.kind for d in deltas}
    assert {"thinking_delta", "text_delta", "tool_call_started", "tool_call_delta"} <= kinds
    (tool_call,) = response.tool_calls
    assert (tool_call.id, tool_call.name, tool_call.arguments) == (
        "toolu_1",
        "get_weather",
        {"city": "Oslo"},
    )
    (thinking,) = [p for p in response.content if isinstance(p, ThinkingPart)]
    assert thinking.text == "The user wants the weather."
    assert thinking.signature
    assert response.usage.cache_read_tokens == 7
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_an_agent_runs_its_tools_on_the_platform(
    platform: Any, server: FakeLLMServer
) -> None:
    kind, provider = platform

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    server.add(
        reply(tool_calls=[call("get_weather", _id="toolu_9", city="Bergen")]),
        "Bergen is sunny.",
    )
    result = await Agent(provider, tools=[get_weather]).run("weather in Bergen?")
    assert result.output == "Bergen is sunny."
    first, second = server.requests
    assert first.path == second.path == expected_path(kind, True)
    tool_result = second.messages[-1]["content"][0]
    assert tool_result["tool_use_id"] == "toolu_9"
    assert "Sunny in Bergen" in json.dumps(tool_result["content"])


async def test_an_error_in_the_stream_is_typed_and_retried(
    platform: Any, server: FakeLLMServer
) -> None:
    _, provider = platform
    server.add(
        Fault.stream_error(reply("partial answer"), after_events=1, error_type="rate_limit_error")
    )
    with pytest.raises(RateLimited):
        await stream_all(provider, request("hi"))
    server.add(
        Fault.stream_error(reply("partial answer"), after_events=1, error_type="rate_limit_error"),
        "Second time lucky.",
    )
    agent = Agent(provider, retry=RetryPolicy(base_delay=0.01, jitter=False))
    result = await agent.run("hi")
    assert result.output == "Second time lucky."


async def test_vertex_and_bedrock_clients_keep_fanloop_options(server: FakeLLMServer) -> None:
    sdk = bedrock_client(server)
    provider = AnthropicProvider(BEDROCK_MODEL, client=sdk, default_headers={"x-team": "a"})
    server.add("ok")
    async with provider:
        assert (await provider.complete(request("hi"))).text == "ok"
    assert server.requests[0].headers["x-team"] == "a"
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"
    await sdk.close()


# -- the event-stream framing ---------------------------------------------------------------


def chunk(event: dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(event).encode()).decode()
    headers = {":message-type": "event", ":event-type": "chunk"}
    return event_stream_message(headers, json.dumps({"bytes": data}).encode())


def test_the_decoder_takes_messages_split_anywhere() -> None:
    events = [{"type": "ping"}, {"type": "message_stop"}, {"type": "x", "n": "é" * 300}]
    body = b"".join(chunk(e) for e in events)
    for size in (1, 7, 13, len(body)):
        decoder = EventStreamDecoder()
        out: list[tuple[bytes, bytes]] = []
        for at in range(0, len(body), size):
            out += decoder.feed(body[at : at + size])
        assert [json.loads(data) for _, data in out] == events
        assert {event for event, _ in out} == {b"chunk"}


def test_an_exception_message_becomes_an_anthropic_error_event() -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    sse = b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"
    (frame,) = bedrock_frames([sse])
    ((event, data),) = EventStreamDecoder().feed(frame)
    assert event == b"error"
    assert json.loads(data)["error"] == {"type": "rate_limit_error", "message": "slow down"}


def test_damaged_or_oversized_messages_are_refused() -> None:
    good = chunk({"type": "ping"})
    with pytest.raises(Malformed, match="prelude checksum"):
        EventStreamDecoder().feed(good[:8] + b"\0\0\0\0" + good[12:])
    with pytest.raises(Malformed, match="bad checksum"):
        EventStreamDecoder().feed(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ResponseTooLarge):
        EventStreamDecoder(max_frame_bytes=64).feed(chunk({"type": "x", "pad": "a" * 200})[:12])
    not_base64 = event_stream_message(
        {":message-type": "event", ":event-type": "chunk"}, b'{"bytes": "***"}'
    )
    with pytest.raises(Malformed, match="base64"):
        EventStreamDecoder().feed(not_base64)
    other = event_stream_message({":message-type": "event", ":event-type": "metadata"}, b"{}")
    assert EventStreamDecoder().feed(other) == []


@pytest.mark.parametrize(
    "body",
    [
        Hostile.garbage(size=4096, seed=3),
        Hostile.raw([chunk({"type": "ping"})[:-1] + b"\0"]),  # a bad checksum
        Hostile.raw([chunk({"type": "message_start", "message": []})]),  # a bad event
    ],
    ids=["garbage", "checksum", "malformed-event"],
)
async def test_a_damaged_bedrock_stream_is_response_invalid(
    server: FakeLLMServer, body: Hostile
) -> None:
    sdk = bedrock_client(server)
    server.add(body)
    async with AnthropicProvider(BEDROCK_MODEL, client=sdk) as provider:
        with pytest.raises(ResponseInvalid):
            await stream_all(provider, request("hi"))
    await sdk.close()


async def test_a_bedrock_stream_that_ends_early_is_incomplete(server: FakeLLMServer) -> None:
    sdk = bedrock_client(server)
    server.add(Hostile.raw([chunk({"type": "ping"})]))
    async with AnthropicProvider(BEDROCK_MODEL, client=sdk) as provider:
        with pytest.raises(StreamIncomplete):
            await stream_all(provider, request("hi"))
    await sdk.close()


async def test_a_huge_bedrock_message_is_refused_before_it_is_read(server: FakeLLMServer) -> None:
    sdk = bedrock_client(server)
    big = chunk({"type": "ping", "pad": "a" * 200_000})
    server.add(Hostile.raw([big]))
    async with AnthropicProvider(BEDROCK_MODEL, client=sdk, max_frame_bytes=65_536) as provider:
        with pytest.raises(ResponseTooLarge):
            await stream_all(provider, request("hi"))
    await sdk.close()
