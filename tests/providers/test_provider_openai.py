"""OpenAI Chat Completions specifics: finish reasons, refusals, presets, exact replay."""

from __future__ import annotations

import json

import pytest
from provider_helpers import answer, request, results, stream_all

from fanloop.errors import ConfigurationError
from fanloop.events import ThinkingDelta
from fanloop.messages import Message, TextPart, ThinkingPart, ToolCallPart
from fanloop.providers import HostedTool, ModelResponse, StopReason
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, call, reply


@pytest.mark.parametrize(
    ("turn", "stop", "raw"),
    [
        (reply("done"), StopReason.END_TURN, "stop"),
        (reply(tool_calls=[call("get_time", "s1")]), StopReason.TOOL_USE, "tool_calls"),
        (reply("cut", stop_reason="max_tokens"), StopReason.MAX_TOKENS, "length"),
        (reply("hidden", raw_stop_reason="content_filter"), StopReason.REFUSAL, "content_filter"),
        (reply("new", raw_stop_reason="brand_new_reason"), StopReason.UNKNOWN, "brand_new_reason"),
        # Some compatible servers say "stop" after tool calls: still a tool-use turn.
        (
            reply(tool_calls=[call("get_time", "s2")], raw_stop_reason="stop"),
            StopReason.TOOL_USE,
            "stop",
        ),
    ],
    ids=["stop", "tool_calls", "length", "content_filter", "unknown", "stop_with_calls"],
)
@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_finish_reasons(
    server: FakeLLMServer,
    openai_provider: OpenAIProvider,
    turn: ModelResponse,
    stop: StopReason,
    raw: str,
    streaming: bool,
) -> None:
    server.add(turn)
    response = await answer(openai_provider, request("go"), streaming=streaming)
    assert response.stop_reason is stop
    assert response.raw_stop_reason == raw


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_refusal_field(
    server: FakeLLMServer, openai_provider: OpenAIProvider, streaming: bool
) -> None:
    server.add(reply("I can't help with that request.", stop_reason="refusal"))
    response = await answer(openai_provider, request("bad"), streaming=streaming)
    assert response.stop_reason is StopReason.REFUSAL
    assert response.text == "I can't help with that request."
    assert response.stop_details == {
        "type": "refusal",
        "category": None,
        "explanation": "I can't help with that request.",
    }


async def test_reasoning_content_becomes_thinking(
    server: FakeLLMServer, openai_provider: OpenAIProvider
) -> None:
    server.add(reply("42.", thinking="six times seven"), reply("42.", thinking="six times seven"))
    deltas, streamed = await stream_all(openai_provider, request("q"))
    assert "".join(d.text for d in deltas if isinstance(d, ThinkingDelta)) == "six times seven"
    completed = await openai_provider.complete(request("q"))
    for response in (streamed, completed):
        assert response.content == (ThinkingPart(text="six times seven"), TextPart(text="42."))
    # Chat Completions cannot take reasoning back: it is left out of the next request.
    server.add("ok")
    await openai_provider.complete(request("q", streamed.to_message(), "more"))
    assert server.requests[-1].messages[1] == {"role": "assistant", "content": "42."}


async def test_tool_arguments_replayed_exactly(
    server: FakeLLMServer, openai_provider: OpenAIProvider
) -> None:
    server.add(reply(tool_calls=[call("get_weather", "x1", city="Paris", days=2)]), "ok")
    _, first = await stream_all(openai_provider, request("go"))
    sent_back = '{"city": "Paris", "days": 2}'  # exactly as the server streamed it
    await openai_provider.complete(request("go", first.to_message(), results(("x1", "rain"))))
    arguments = server.requests[-1].messages[1]["tool_calls"][0]["function"]["arguments"]
    assert arguments == sent_back
    # A message without origin is re-encoded compactly, and says the same.
    plain = Message(role="assistant", content=first.content)
    server.add("ok")
    await openai_provider.complete(request("go", plain, results(("x1", "rain"))))
    again = server.requests[-1].messages[1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(again) == json.loads(sent_back)


@pytest.mark.parametrize(
    "change",
    ["text", "call id", "call name", "arguments", "a call dropped", "a call added", "no text"],
)
async def test_a_changed_turn_is_sent_as_it_now_reads_not_as_received(
    server: FakeLLMServer, openai_provider: OpenAIProvider, change: str
) -> None:
    # The turn as received is replayed byte for byte only while the message still says the
    # same; a message changed since (by an application, by compaction) is encoded anew.
    server.add(
        reply("Checking.", tool_calls=[call("get_weather", "x1", city="Paris")]),
        *["ok"] * 2,
    )
    _, first = await stream_all(openai_provider, request("go"))
    received = first.to_message()
    await openai_provider.complete(request("go", received, results(("x1", "rain"))))
    assert server.requests[-1].messages[1]["tool_calls"][0]["function"]["arguments"] == (
        '{"city": "Paris"}'  # as streamed: the origin was used
    )
    text, tool_call = received.content
    assert isinstance(text, TextPart) and isinstance(tool_call, ToolCallPart)
    other = ToolCallPart(id="x2", name="get_time", arguments={})
    parts = {
        "text": [TextPart(text="Changed."), tool_call],
        "call id": [text, tool_call.model_copy(update={"id": "x9"})],
        "call name": [text, tool_call.model_copy(update={"name": "get_time"})],
        "arguments": [text, tool_call.model_copy(update={"arguments": {"city": "Rome"}})],
        "a call dropped": [text],
        "a call added": [text, tool_call, other],
        "no text": [tool_call],
    }[change]
    edited = received.model_copy(update={"content": tuple(parts)})
    ids = [p.id for p in parts if isinstance(p, ToolCallPart)]
    await openai_provider.complete(request("go", edited, results(*((i, "r") for i in ids))))
    sent = server.requests[-1].messages[1]
    expected_text = next((p.text for p in parts if isinstance(p, TextPart)), None)
    assert sent.get("content") == expected_text
    sent_calls = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in sent.get("tool_calls") or ()
    ]
    assert sent_calls == [(p.id, p.name, p.arguments) for p in parts if isinstance(p, ToolCallPart)]


async def test_invalid_arguments_sent_back_verbatim(
    server: FakeLLMServer, openai_provider: OpenAIProvider
) -> None:
    from fanloop.messages import INVALID_ARGUMENTS_KEY

    bad = ToolCallPart(id="b1", name="get_time", arguments={INVALID_ARGUMENTS_KEY: '{"tz": '})
    server.add("ok")
    await openai_provider.complete(request("go", Message.assistant(bad), results(("b1", "error"))))
    assert server.requests[-1].messages[1]["tool_calls"][0]["function"]["arguments"] == '{"tz": '


async def test_user_text_and_results_in_one_message(
    server: FakeLLMServer, openai_provider: OpenAIProvider
) -> None:
    from fanloop.messages import ToolResultPart

    mixed = Message(
        role="user",
        content=(ToolResultPart(call_id="c9", content="done"), TextPart(text="Also: hurry.")),
    )
    server.add("ok")
    await openai_provider.complete(request("go", Message.assistant(call("f", "c9")), mixed))
    assert server.requests[-1].messages[2:] == [
        {"role": "tool", "tool_call_id": "c9", "content": "done"},
        {"role": "user", "content": "Also: hurry."},
    ]


async def test_hosted_tools_rejected(
    server: FakeLLMServer, openai_provider: OpenAIProvider
) -> None:
    assert openai_provider.hosted_tools == frozenset()
    with pytest.raises(ConfigurationError, match="hosted tools"):
        await openai_provider.complete(request("go", hosted_tools=(HostedTool("web_search"),)))


@pytest.mark.parametrize("preset", ["openrouter", "vllm", "ollama"])
async def test_presets(server: FakeLLMServer, preset: str) -> None:
    factory = getattr(OpenAIProvider, preset)
    provider = factory("some/model", api_key="k", base_url=server.openai_base_url)
    async with provider:
        assert provider.name == preset
        server.add("hello", "again")
        _, response = await stream_all(provider, request("hi"))
        assert response.provider == preset
        assert response.text == "hello"
        body = server.requests[-1].body
        assert body["max_tokens"] == 512
        assert "max_completion_tokens" not in body
        assert body["model"] == "some/model"


def test_preset_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENROUTER_API_KEY"):
        OpenAIProvider.openrouter("a/b")
    monkeypatch.setenv("OPENROUTER_API_KEY", "or-key")
    assert OpenAIProvider.openrouter("a/b")._client.base_url == "https://openrouter.ai/api/v1/"
    assert OpenAIProvider.vllm("m")._client.base_url == "http://localhost:8000/v1/"
    assert OpenAIProvider.ollama("m")._client.base_url == "http://localhost:11434/v1/"


def test_missing_key_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIProvider("gpt-4.1")


async def test_headers_and_key_not_in_repr(server: FakeLLMServer) -> None:
    provider = OpenAIProvider("gpt-4.1", api_key="sk-very-secret", base_url=server.openai_base_url)
    async with provider:
        server.add("ok")
        await provider.complete(request("hi"))
    sent = server.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-very-secret"
    assert sent.headers["x-stainless-retry-count"] == "0"
    assert "sk-very-secret" not in repr(provider)
