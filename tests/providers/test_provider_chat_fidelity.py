"""Wire fidelity on Chat Completions and Messages: one choice per turn (``n``), OpenRouter's
``reasoning_details``, reasoning sent back per preset (``send_reasoning``), streamed Anthropic
compaction blocks, and the Gemini preset. Real HTTP against FakeLLMServer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provider_helpers import answer, make_anthropic, make_openai, request, results, stream_all

from fanloop import Agent, ModelSettings, tool
from fanloop.catalog import cost_of, model_info
from fanloop.errors import ConfigurationError, ResponseInvalid
from fanloop.events import TextDelta, ThinkingDelta, ToolCallStarted
from fanloop.messages import Message, ThinkingPart
from fanloop.providers import Usage, from_env, resolve_provider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, Hostile, call, reply


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def sse(*payloads: dict[str, Any]) -> bytes:
    """An OpenAI stream body: one ``data:`` frame per payload, then ``[DONE]``."""
    frames = [b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads]
    return b"".join(frames) + b"data: [DONE]\n\n"


def chunk(*choices: dict[str, Any], usage: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": list(choices),
        "usage": usage,
    }


def delta(index: int, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "finish_reason": finish}


def completion(*choices: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": list(choices),
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }


def header(index: int, call_id: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
        **extra,
    }


def piece(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


# -- n > 1: the choice with index 0 only ----------------------------------------------------


async def test_interleaved_choices_stream_keeps_choice_zero(server: FakeLLMServer) -> None:
    body = sse(
        chunk(delta(0, role="assistant", content=""), delta(1, role="assistant", content="")),
        chunk(delta(1, content="WRONG ")),
        chunk(delta(0, content="Right ")),
        chunk(delta(1, tool_calls=[header(0, "call_other", "get_time")])),
        chunk(delta(0, tool_calls=[header(0, "call_mine", "get_weather")])),
        chunk(delta(1, tool_calls=[piece(0, '{"tz": "CET"}')])),
        chunk(delta(0, content="answer.")),
        chunk(delta(0, tool_calls=[piece(0, '{"city": "Paris"}')])),
        chunk(delta(1, "stop")),
        chunk(delta(0, "tool_calls")),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}),
    )
    server.add(Hostile.raw(body))
    provider = make_openai(server)
    try:
        deltas, final = await stream_all(provider, request("Hi"))
    finally:
        await provider.aclose()
    assert final.text == "Right answer."
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("call_mine", "get_weather", {"city": "Paris"})
    ]
    assert final.raw_stop_reason == "tool_calls"
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Right answer."
    assert [d.name for d in deltas if isinstance(d, ToolCallStarted)] == ["get_weather"]
    assert final.usage.output_tokens == 9


async def test_non_streamed_choices_pick_index_zero(server: FakeLLMServer) -> None:
    other = {
        "index": 1,
        "message": {"role": "assistant", "content": "WRONG"},
        "finish_reason": "stop",
    }
    mine = {
        "index": 0,
        "message": {"role": "assistant", "content": "Right."},
        "finish_reason": "stop",
    }
    server.add(Hostile.raw(json.dumps(completion(other, mine)).encode()))
    server.add(Hostile.raw(json.dumps(completion(other)).encode()))
    provider = make_openai(server)
    try:
        assert (await provider.complete(request("Hi"))).text == "Right."
        with pytest.raises(ResponseInvalid, match="no choice with index 0"):
            await provider.complete(request("Hi"))
    finally:
        await provider.aclose()


@pytest.mark.parametrize("where", ["extra", "settings", "extra_body"])
async def test_n_above_one_is_refused_before_sending(server: FakeLLMServer, where: str) -> None:
    provider = make_openai(server, extra_body={"n": 1})  # n=1 is fine
    try:
        if where == "extra_body":
            with pytest.raises(ConfigurationError, match="n must be 1"):
                make_openai(server, extra_body={"n": 2})
            return
        fields: dict[str, Any] = (
            {"extra": {"n": 3}} if where == "extra" else {"settings": ModelSettings(extra={"n": 2})}
        )
        with pytest.raises(ConfigurationError, match="n must be 1"):
            await provider.complete(request("Hi", **fields))
        assert server.requests == []
    finally:
        await provider.aclose()


# -- OpenRouter reasoning_details ------------------------------------------------------------

_SIGNED = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}
_ENCRYPTED = {
    "type": "reasoning.encrypted",
    "data": "ENC-DATA==",
    "id": "rs_1",
    "format": "anthropic-claude-v1",
    "index": 1,
}
EXPECTED_DETAILS = [
    {
        "type": "reasoning.text",
        "format": "anthropic-claude-v1",
        "index": 0,
        "text": "Let me check the weather.",
        "signature": "sig-XYZ",
    },
    _ENCRYPTED,
]


def openrouter(server: FakeLLMServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider.openrouter(
        "anthropic/claude-sonnet-4.5",
        api_key="sk-or-test",
        base_url=server.openai_base_url,
        **options,
    )


def reasoning_details_turn(streaming: bool) -> Hostile:
    if not streaming:
        message = {
            "role": "assistant",
            "content": "Checking.",
            "reasoning": "Let me check the weather.",
            "reasoning_details": EXPECTED_DETAILS,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        }
        return Hostile.raw(
            json.dumps(
                completion({"index": 0, "message": message, "finish_reason": "tool_calls"})
            ).encode()
        )
    return Hostile.raw(
        sse(
            chunk(delta(0, role="assistant", content="")),
            chunk(
                delta(
                    0,
                    reasoning="Let me check ",
                    reasoning_details=[{**_SIGNED, "text": "Let me check ", "signature": None}],
                )
            ),
            chunk(
                delta(
                    0,
                    reasoning="the weather.",
                    reasoning_details=[{**_SIGNED, "text": "the weather."}],
                )
            ),
            chunk(delta(0, reasoning_details=[{**_SIGNED, "text": "", "signature": "sig-XYZ"}])),
            chunk(delta(0, reasoning_details=[_ENCRYPTED])),
            chunk(delta(0, content="Checking.")),
            chunk(delta(0, tool_calls=[header(0, "call_w", "get_weather")])),
            chunk(delta(0, tool_calls=[piece(0, '{"city": "Paris"}')])),
            chunk(delta(0, "tool_calls")),
        )
    )


@pytest.mark.parametrize("streaming", [True, False])
async def test_reasoning_details_are_kept_and_sent_back(
    server: FakeLLMServer, streaming: bool
) -> None:
    server.add(reasoning_details_turn(streaming), "It is sunny.")
    provider = openrouter(server)
    assert provider.send_reasoning == "reasoning_details"
    try:
        first = await answer(provider, request("Weather?"), streaming=streaming)
        thinking = [p for p in first.content if isinstance(p, ThinkingPart)]
        assert thinking == [
            ThinkingPart(text="Let me check the weather.", signature="sig-XYZ"),
            ThinkingPart(text="", redacted="ENC-DATA=="),
        ]
        assert first.text == "Checking."
        follow_up = request("Weather?", first.to_message(), results(("call_w", "Sunny")))
        final = await answer(provider, follow_up, streaming=streaming)
    finally:
        await provider.aclose()
    assert final.text == "It is sunny."
    assert len(server.requests) == 2
    assistant = server.requests[1].messages[1]
    assert assistant["role"] == "assistant"
    assert assistant["reasoning_details"] == EXPECTED_DETAILS
    assert "reasoning" not in assistant and "reasoning_content" not in assistant
    assert assistant["tool_calls"][0]["id"] == "call_w"


async def _streamed(agent: Agent, prompt: str) -> Any:
    async with agent.stream(prompt) as run:
        async for _ in run:
            pass
    return run.result


async def test_reasoning_details_stream_thinking_deltas_once(server: FakeLLMServer) -> None:
    server.add(reasoning_details_turn(True))
    provider = openrouter(server)
    try:
        deltas, final = await stream_all(provider, request("Hi"))
    finally:
        await provider.aclose()
    # The text came in both ``reasoning`` and ``reasoning_details``: streamed once.
    assert "".join(d.text for d in deltas if isinstance(d, ThinkingDelta)) == (
        "Let me check the weather."
    )
    assert final.thinking == "Let me check the weather."


@pytest.mark.parametrize(
    "bad",
    [
        "not a list",
        ["not an object"],
        [{"text": "no type"}],
        [{"type": "reasoning.text", "text": 5}],
        [{"type": "reasoning.text", "text": "x", "index": -1}],
    ],
)
async def test_malformed_reasoning_details_are_refused(server: FakeLLMServer, bad: Any) -> None:
    server.add(Hostile.raw(sse(chunk(delta(0, reasoning_details=bad)), chunk(delta(0, "stop")))))
    provider = openrouter(server)
    try:
        with pytest.raises(ResponseInvalid):
            await stream_all(provider, request("Hi"))
    finally:
        await provider.aclose()


async def test_reasoning_details_count_is_capped(server: FakeLLMServer) -> None:
    items = [{"type": "reasoning.encrypted", "data": "x", "index": i} for i in range(5)]
    server.add(Hostile.raw(sse(chunk(delta(0, reasoning_details=items)), chunk(delta(0, "stop")))))
    provider = openrouter(server, max_blocks=3)
    try:
        with pytest.raises(ResponseInvalid, match="reasoning_details"):
            await stream_all(provider, request("Hi"))
    finally:
        await provider.aclose()


# -- send_reasoning per preset ----------------------------------------------------------------


def preset(server: FakeLLMServer, name: str, **options: Any) -> OpenAIProvider:
    url = server.openai_base_url
    if name == "openai":
        return OpenAIProvider("gpt-4.1", api_key="sk-test", base_url=url, **options)
    if name == "gemini":
        return OpenAIProvider.gemini("gemini-2.5-flash", api_key="g-test", base_url=url, **options)
    if name == "openrouter":
        return openrouter(server, **options)
    factory = getattr(OpenAIProvider, name)
    result: OpenAIProvider = factory("some-model", base_url=url, **options)
    return result


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("openai", {}, None),
        ("vllm", {}, None),
        ("gemini", {}, None),
        ("openrouter", {}, None),  # reasoning_details only: a plain reasoning text is not sent
        ("ollama", {}, "reasoning"),
        ("openai", {"send_reasoning": "reasoning_content"}, "reasoning_content"),  # DeepSeek, Z.ai
        ("ollama", {"send_reasoning": None}, None),
    ],
)
async def test_reasoning_goes_back_in_the_field_the_server_reads(
    server: FakeLLMServer, name: str, options: dict[str, Any], field: str | None
) -> None:
    """An agent's tool loop (streamed turns: the agent streams) with thinking on every turn:
    each earlier assistant turn carries its reasoning back in the preset's field, or none."""
    server.add(
        reply(thinking="plan A", tool_calls=[call("get_weather", "c1", city="Paris")]),
        reply("Next.", thinking="plan B", tool_calls=[call("get_weather", "c2", city="Rome")]),
        reply("Done.", thinking="plan C"),
    )
    provider = preset(server, name, **options)
    try:
        agent = Agent(provider, tools=[get_weather])
        result = await agent.run("Weather?")
    finally:
        await provider.aclose()
    assert result.text == "Done."
    assert len(server.requests) == 3
    for req, plans in zip(server.requests[1:], (["plan A"], ["plan A", "plan B"]), strict=True):
        assistants = [m for m in req.messages if m["role"] == "assistant"]
        assert [m["tool_calls"][0]["id"] for m in assistants] == ["c1", "c2"][: len(plans)]
        for message, plan in zip(assistants, plans, strict=True):
            keys = set(message) & {"reasoning", "reasoning_content", "reasoning_details"}
            if field is None:
                assert keys == set()
            else:
                assert keys == {field}
                assert message[field] == plan


async def test_reasoning_of_a_turn_from_elsewhere_goes_back_too(server: FakeLLMServer) -> None:
    """A turn with no Chat Completions origin (another provider, a stored session) still
    carries its thinking text in the field; signatures stay out."""
    server.add("Fine.")
    provider = preset(server, "openai", send_reasoning="reasoning_content")
    turn = Message.assistant(ThinkingPart(text="thought", signature="anthropic-sig"), "Hello.")
    try:
        await answer(provider, request("Hi", turn, "And?"), streaming=False)
    finally:
        await provider.aclose()
    sent = server.requests[0].messages[1]
    assert sent["reasoning_content"] == "thought"
    assert "anthropic-sig" not in json.dumps(sent)


def test_send_reasoning_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="send_reasoning"):
        OpenAIProvider(
            "m", api_key="k", base_url="http://127.0.0.1:9/v1", send_reasoning="thoughts"
        )


# -- Anthropic compaction blocks ----------------------------------------------------------------

_SUMMARY = "The user asked about Paris; the weather tool said sunny."


def compaction_turn(streaming: bool) -> Hostile:
    start = {"type": "compaction", "content": None, "encrypted_content": None, "signature": "sig-c"}
    final_block = {**start, "content": _SUMMARY, "encrypted_content": "opaque=="}
    usage = {"input_tokens": 10, "output_tokens": 4}
    if not streaming:
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [final_block, {"type": "text", "text": "Hello again."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        return Hostile.raw(json.dumps(body).encode())

    def event(name: str, payload: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    half = len(_SUMMARY) // 2
    return Hostile.raw(
        b"".join(
            [
                event("message_start", {"message": message}),
                event("content_block_start", {"index": 0, "content_block": start}),
                event(
                    "content_block_delta",
                    {"index": 0, "delta": {"type": "compaction_delta", "content": _SUMMARY[:half]}},
                ),
                event(
                    "content_block_delta",
                    {
                        "index": 0,
                        "delta": {
                            "type": "compaction_delta",
                            "content": _SUMMARY[half:],
                            "encrypted_content": "opaque==",
                        },
                    },
                ),
                event("content_block_stop", {"index": 0}),
                event(
                    "content_block_start",
                    {"index": 1, "content_block": {"type": "text", "text": ""}},
                ),
                event(
                    "content_block_delta",
                    {"index": 1, "delta": {"type": "text_delta", "text": "Hello again."}},
                ),
                event("content_block_stop", {"index": 1}),
                event(
                    "message_delta",
                    {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}},
                ),
                event("message_stop", {}),
            ]
        )
    )


async def test_streamed_compaction_is_sent_back_as_the_non_streamed_one(
    server: FakeLLMServer,
) -> None:
    sent_back: dict[bool, Any] = {}
    for streaming in (True, False):
        server.clear()
        server.requests.clear()
        server.add(compaction_turn(streaming), "Next answer.")
        provider = make_anthropic(server)
        try:
            first = await answer(provider, request("Hi"), streaming=streaming)
            assert first.text == "Hello again."
            await answer(
                provider, request("Hi", first.to_message(), "And now?"), streaming=streaming
            )
        finally:
            await provider.aclose()
        sent_back[streaming] = server.requests[1].messages[1]["content"]
    assert sent_back[True] == sent_back[False]
    block = sent_back[True][0]
    assert block["type"] == "compaction"
    assert block["content"] == _SUMMARY
    assert block["encrypted_content"] == "opaque=="
    assert block["signature"] == "sig-c"


async def test_compaction_delta_outside_its_block_is_refused(server: FakeLLMServer) -> None:
    def event(name: str, payload: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

    server.add(
        Hostile.raw(
            event("message_start", {"message": {"id": "m", "usage": {}}})
            + event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
            + event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "compaction_delta", "content": "x"}},
            )
        )
    )
    provider = make_anthropic(server)
    try:
        with pytest.raises(ResponseInvalid, match="compaction_delta"):
            await stream_all(provider, request("Hi"))
    finally:
        await provider.aclose()


# -- the Gemini preset --------------------------------------------------------------------------


async def test_gemini_preset_over_http(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-google")
    signature = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    body = sse(
        chunk(delta(0, role="assistant", content="")),
        chunk(delta(0, tool_calls=[header(0, "gcall", "get_weather", extra_content=signature)])),
        chunk(delta(0, tool_calls=[piece(0, '{"city": "Paris"}')])),
        chunk(delta(0, "tool_calls")),
    )
    server.add(Hostile.raw(body), "Sunny.")
    base = f"{server.url}/v1beta/openai"
    provider = resolve_provider("gemini:gemini-2.5-flash", base_url=base)
    assert isinstance(provider, OpenAIProvider)
    assert (provider.name, provider.model, provider.send_reasoning) == (
        "gemini",
        "gemini-2.5-flash",
        None,
    )
    try:
        agent = Agent(provider, tools=[get_weather])
        result = await _streamed(agent, "Weather?")
    finally:
        await provider.aclose()
    assert result.text == "Sunny."
    first, second = server.requests
    assert first.path == "/v1beta/openai/chat/completions"
    assert first.headers["authorization"] == "Bearer g-google"
    assert first.body["model"] == "gemini-2.5-flash"
    assert "max_tokens" in first.body and "max_completion_tokens" not in first.body
    replayed = next(m for m in second.messages if m["role"] == "assistant")
    assert replayed["tool_calls"][0]["extra_content"] == signature  # thought signature back


def test_gemini_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-gemini")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-google")
    provider = OpenAIProvider.gemini("gemini-2.5-pro")
    assert provider._key_source == "the key in GEMINI_API_KEY"
    env = {"LLM_PROVIDER": "gemini", "GOOGLE_API_KEY": "g-env"}
    from_environ = from_env(env)
    assert (from_environ.name, from_environ.model) == ("gemini", "gemini-2.5-flash")
    assert from_environ._key_source == "the key in GOOGLE_API_KEY"  # type: ignore[attr-defined]
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY"):
        OpenAIProvider.gemini("gemini-2.5-pro")
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY"):
        from_env({"LLM_PROVIDER": "gemini"})


def test_gemini_prices_in_the_catalog() -> None:
    flash, lite = model_info("gemini-2.5-flash"), model_info("gemini-2.5-flash-lite")
    assert flash is not None and lite is not None
    assert (flash.input_price, flash.output_price) == (0.30, 2.50)
    assert lite.input_price < flash.input_price
    assert model_info("google/gemini-2.5-pro") is model_info("gemini-2.5-pro")
    cost = cost_of("gemini-2.5-flash", Usage(input_tokens=1_000_000, output_tokens=1_000_000))
    assert cost == pytest.approx(2.80)


def test_gemini_from_the_cli() -> None:
    from fanloop.cli._app import CommandError, make_provider

    provider = make_provider("gemini", None, {"GEMINI_API_KEY": "g-cli"})
    assert (provider.name, provider.model) == ("gemini", "gemini-2.5-flash")
    provider = make_provider(None, "gemini:gemini-2.5-pro", {"GOOGLE_API_KEY": "g-cli"})
    assert provider.model == "gemini-2.5-pro"
    with pytest.raises(CommandError, match="GEMINI_API_KEY"):
        make_provider("gemini", None, {})
