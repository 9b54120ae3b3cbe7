"""Helpers for the provider tests."""

from __future__ import annotations

from typing import Any

from fanloop.events import StreamDelta
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, ToolSpec
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
TIME = ToolSpec(
    name="get_time", parameters={"type": "object", "properties": {"tz": {"type": "string"}}}
)


def request(*messages: Message | str, **fields: Any) -> ModelRequest:
    """A request with the weather tools; strings become user messages."""
    fields.setdefault("tools", (WEATHER, TIME))
    fields.setdefault("max_tokens", 512)
    return ModelRequest(
        messages=tuple(Message.user(m) if isinstance(m, str) else m for m in messages), **fields
    )


async def stream_all(provider: Any, req: ModelRequest) -> tuple[list[StreamDelta], ModelResponse]:
    """Stream ``req``; return the deltas and the final response."""
    deltas: list[StreamDelta] = []
    final: ModelResponse | None = None
    async with provider.stream(req) as events:
        async for item in events:
            if isinstance(item, ModelResponse):
                assert final is None, "more than one final response"
                final = item
            else:
                assert final is None, "a delta after the final response"
                deltas.append(item)
    assert final is not None
    return deltas, final


async def answer(provider: Any, req: ModelRequest, *, streaming: bool) -> ModelResponse:
    if streaming:
        return (await stream_all(provider, req))[1]
    response: ModelResponse = await provider.complete(req)
    return response


def results(*pairs: tuple[str, str] | tuple[str, str, bool]) -> Message:
    """The user message carrying tool results: (call_id, content[, is_error])."""
    return Message.tool_results(
        ToolResultPart(call_id=p[0], content=p[1], is_error=bool(p[2]) if len(p) > 2 else False)
        for p in pairs
    )


def make_anthropic(server: FakeLLMServer, **options: Any) -> AnthropicProvider:
    options.setdefault("api_key", "sk-ant-test")
    return AnthropicProvider(
        options.pop("model", "claude-sonnet-4-5"), base_url=server.anthropic_base_url, **options
    )


def make_openai(server: FakeLLMServer, **options: Any) -> OpenAIProvider:
    options.setdefault("api_key", "sk-openai-test")
    return OpenAIProvider(
        options.pop("model", "gpt-4.1"), base_url=server.openai_base_url, **options
    )


def make_responses(server: FakeLLMServer, **options: Any) -> OpenAIResponsesProvider:
    options.setdefault("api_key", "sk-openai-test")
    return OpenAIResponsesProvider(
        options.pop("model", "gpt-5"), base_url=server.openai_base_url, **options
    )
