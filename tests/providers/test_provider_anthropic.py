"""Anthropic specifics: thinking replay, stop reasons, refusals, hosted tools, the wire cache."""

from __future__ import annotations

import pytest
from provider_helpers import answer, request, results, stream_all

from fanloop.errors import ConfigurationError
from fanloop.events import ThinkingDelta
from fanloop.messages import Message, Origin, TextPart, ThinkingPart
from fanloop.providers import HostedTool, ModelResponse, StopReason
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.testing import FakeLLMServer, call, reply

SIGNATURE = "EqQBCkYIBxgCKkDx+/9sig==" + "Zm9v" * 40


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_thinking_signature_replayed_byte_for_byte(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider, streaming: bool
) -> None:
    server.add(
        reply(
            "I'll look it up.",
            thinking="The user wants the weather; call the tool.",
            signature=SIGNATURE,
            tool_calls=[call("get_weather", "t1", city="Oslo")],
        ),
        "Cold.",
    )
    first = await answer(anthropic_provider, request("Weather in Oslo?"), streaming=streaming)
    assert first.content[0] == ThinkingPart(
        text="The user wants the weather; call the tool.", signature=SIGNATURE
    )
    await answer(
        anthropic_provider,
        request("Weather in Oslo?", first.to_message(), results(("t1", "-3C"))),
        streaming=streaming,
    )
    sent = server.requests[-1]
    assert sent.messages[1]["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants the weather; call the tool.",
        "signature": SIGNATURE,
    }
    assert f'"signature":"{SIGNATURE}"'.encode() in sent.raw_body


async def test_thinking_deltas_and_budget(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    server.add(reply("Done.", thinking="step one, step two", signature="sig-1"))
    deltas, response = await stream_all(anthropic_provider, request("think", thinking_budget=2048))
    thinking = [d for d in deltas if isinstance(d, ThinkingDelta)]
    assert "".join(d.text for d in thinking) == "step one, step two"
    assert thinking[-1].signature == "sig-1"
    assert response.thinking == "step one, step two"
    assert server.requests[-1].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_redacted_thinking_round_trip(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    redacted = ModelResponse(
        content=(ThinkingPart(text="", redacted="opaque-blob=="), TextPart(text="Hi.")),
    )
    server.add(redacted, "again")
    _, first = await stream_all(anthropic_provider, request("hi"))
    assert first.content[0] == ThinkingPart(text="", redacted="opaque-blob==")
    # Without origin (e.g. a message loaded from elsewhere) the parts are translated.
    plain = Message(role="assistant", content=first.content)
    await anthropic_provider.complete(request("hi", plain, "more"))
    assert server.requests[-1].messages[1]["content"] == [
        {"type": "redacted_thinking", "data": "opaque-blob=="},
        {"type": "text", "text": "Hi."},
    ]


async def test_unsigned_thinking_is_not_sent(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    server.add("ok")
    foreign = Message.assistant(ThinkingPart(text="from another provider"), "Answer.")
    await anthropic_provider.complete(request("q", foreign, "next"))
    assert server.requests[-1].messages[1]["content"] == [{"type": "text", "text": "Answer."}]


@pytest.mark.parametrize(
    ("turn", "stop", "raw"),
    [
        (reply("done"), StopReason.END_TURN, "end_turn"),
        (reply(tool_calls=[call("get_time", "s1")]), StopReason.TOOL_USE, "tool_use"),
        (reply("cut", stop_reason="max_tokens"), StopReason.MAX_TOKENS, "max_tokens"),
        (reply("x", stop_reason="stop_sequence"), StopReason.STOP_SEQUENCE, "stop_sequence"),
        (reply("searching", stop_reason="paused"), StopReason.PAUSED, "pause_turn"),
        (
            reply("full", raw_stop_reason="model_context_window_exceeded"),
            StopReason.MAX_TOKENS,
            "model_context_window_exceeded",
        ),
        (reply("new", raw_stop_reason="brand_new_reason"), StopReason.UNKNOWN, "brand_new_reason"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_stop_reasons(
    server: FakeLLMServer,
    anthropic_provider: AnthropicProvider,
    turn: ModelResponse,
    stop: StopReason,
    raw: str,
    streaming: bool,
) -> None:
    server.add(turn)
    response = await answer(anthropic_provider, request("go"), streaming=streaming)
    assert response.stop_reason is stop
    assert response.raw_stop_reason == raw


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_refusal_keeps_stop_details(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider, streaming: bool
) -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "Not with that."}
    server.add(reply(stop_reason="refusal", stop_details=details))
    response = await answer(anthropic_provider, request("bad"), streaming=streaming)
    assert response.stop_reason is StopReason.REFUSAL
    assert response.content == ()
    assert response.stop_details == details


async def test_hosted_tools_declared_and_server_blocks_replayed(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    assert anthropic_provider.hosted_tools == {"web_search", "web_fetch", "code_execution"}
    raw = [
        {
            "type": "server_tool_use",
            "id": "srv_1",
            "name": "web_search",
            "input": {"query": "fanloop"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srv_1",
            "content": [{"type": "web_search_result", "url": "https://x.test", "title": "X"}],
        },
        {"type": "text", "text": "Found it."},
    ]
    scripted = ModelResponse(
        content=(TextPart(text="Found it."),),
        origin=Origin(provider="anthropic", api="messages", model="m", raw=raw),
    )
    server.add(scripted, "ok")
    hosted = (HostedTool("web_search", options={"max_uses": 2}), HostedTool("web_fetch"))
    _, first = await stream_all(anthropic_provider, request("search", hosted_tools=hosted))
    tools = server.requests[0].body["tools"]
    assert tools[-2:] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        {"type": "web_fetch_20250910", "name": "web_fetch", "cache_control": {"type": "ephemeral"}},
    ]  # the last tool carries the tool list's prompt-cache breakpoint
    assert first.content == (TextPart(text="Found it."),)
    assert first.origin is not None and first.origin.raw == raw
    await anthropic_provider.complete(request("search", first.to_message(), "thanks"))
    assert server.requests[-1].messages[1] == {"role": "assistant", "content": raw}


async def test_changed_message_is_translated_not_replayed(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    server.add("First part.", "ok")
    _, first = await stream_all(anthropic_provider, request("go"))
    joined = first.to_message().model_copy(
        update={"content": (*first.content, TextPart(text=" Second part."))}
    )
    await anthropic_provider.complete(request("go", joined))
    assert server.requests[-1].messages[1]["content"] == [
        {"type": "text", "text": "First part."},
        # the last block of a request carries the conversation's prompt-cache breakpoint
        {"type": "text", "text": " Second part.", "cache_control": {"type": "ephemeral"}},
    ]


async def test_unsupported_hosted_tool_rejected(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider
) -> None:
    with pytest.raises(ConfigurationError, match="image_generation"):
        await anthropic_provider.complete(
            request("go", hosted_tools=(HostedTool("image_generation"),))
        )
    assert server.requests == []


async def test_each_message_is_encoded_once(
    server: FakeLLMServer, anthropic_provider: AnthropicProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[Message] = []
    original = anthropic_provider._render_message

    def counting(message: Message) -> str:
        rendered.append(message)
        return original(message)

    monkeypatch.setattr(anthropic_provider._messages, "_render", counting)
    history = [Message.user("hello")]
    for n in range(4):
        server.add(f"answer {n}")
        response = await anthropic_provider.complete(request(*history))
        history += [response.to_message(), Message.user(f"follow-up {n}")]
    assert len(rendered) == len(history) - 2  # the last two were never sent
    assert len({id(m) for m in rendered}) == len(rendered)
    rendered.clear()
    del history, response
    import gc

    gc.collect()
    assert len(anthropic_provider._messages) == 0, "entries die with their messages"


async def test_system_prompt_and_headers(server: FakeLLMServer) -> None:
    provider = AnthropicProvider(
        "claude-haiku-4-5",
        api_key="sk-ant-secret",
        base_url=server.anthropic_base_url,
        default_headers={"anthropic-beta": "test-beta"},
    )
    async with provider:
        server.add("ok")
        await provider.complete(request("hi", system="Be brief."))
    sent = server.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.body["system"] == [  # with its prompt-cache breakpoint
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent.body["model"] == "claude-haiku-4-5"
    assert sent.headers["authorization"] == "Bearer sk-ant-secret" or (
        sent.headers.get("x-api-key") == "sk-ant-secret"
    )
    assert sent.headers["anthropic-beta"] == "test-beta"
    assert sent.headers["x-stainless-retry-count"] == "0"
    assert "traceparent" not in sent.headers
    assert "sk-ant-secret" not in repr(provider)
