"""The OpenAI Responses API provider over real HTTP, against FakeLLMServer and raw servers.

The tool loop round-trips reasoning items unchanged and in order (checked in the request
bodies the server recorded), on both transports and through the ``openai`` SDK client; the
SDK itself parses what FakeLLMServer sends; stop reasons, usage, errors and caps.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from provider_helpers import WEATHER, make_responses, request, stream_all

from fanloop import Agent, ModelSettings, RetryPolicy, TerminationReason, tool
from fanloop.catalog import cost_of
from fanloop.errors import (
    ConfigurationError,
    Overloaded,
    RateLimited,
    ResponseInvalid,
    ServerError,
    StreamIncomplete,
)
from fanloop.events import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from fanloop.messages import Message, ThinkingPart, ToolResultPart
from fanloop.providers import OutputFormat, StopReason, Usage
from fanloop.providers._wire import ResponseTooLarge
from fanloop.providers.openai import OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer, Fault, call, reply
from fanloop.testing._faults import Hostile

FAST = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02, jitter=False)


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def _script(server: FakeLLMServer) -> None:
    server.add(
        reply(thinking="Check Paris first.", tool_calls=[call("get_weather", "c1", city="Paris")]),
        reply(
            "Now Rome.",
            thinking="Then Rome.",
            tool_calls=[call("get_weather", "c2", city="Rome")],
        ),
        reply("Both sunny.", thinking="Done."),
        api="responses",
    )


def _check_round_trip(server: FakeLLMServer) -> None:
    """Each request sends back every earlier output item, unchanged and in order."""
    bodies = [r.body for r in server.requests]
    assert [r.path for r in server.requests] == ["/v1/responses"] * 3
    for body in bodies:
        assert body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["instructions"] == "Be brief."
        assert body["tools"][0] == {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": body["tools"][0]["parameters"],
            "strict": False,
        }
    first, second, third = (b["input"] for b in bodies)
    assert first == [{"role": "user", "content": "Paris then Rome?"}]
    rs1 = {
        "type": "reasoning",
        "id": "rs_req_fake_000001_0",
        "summary": [{"type": "summary_text", "text": "Check Paris first."}],
        "encrypted_content": "enc-fake-req_fake_000001-0",
    }
    assert second[1] == rs1
    assert second[2]["type"] == "function_call"
    assert second[2]["call_id"] == "c1"
    assert second[2]["id"] == "fc_req_fake_000001_1"
    result = {"type": "function_call_output", "call_id": "c1", "output": "Sunny in Paris"}
    assert second[3] == result
    assert third[:4] == second
    kinds = [(i.get("type"), i.get("id")) for i in third[4:]]
    assert kinds == [
        ("reasoning", "rs_req_fake_000002_0"),
        ("message", "msg_req_fake_000002_1"),
        ("function_call", "fc_req_fake_000002_2"),
        ("function_call_output", None),
    ]
    assert third[4]["encrypted_content"] == "enc-fake-req_fake_000002-0"


async def _run_agent(provider: Any) -> Any:
    agent = Agent(provider, tools=[get_weather], system="Be brief.")
    thinking: list[str] = []
    async with agent.stream("Paris then Rome?") as run:
        async for event in run:
            if isinstance(event, ThinkingDelta):
                thinking.append(event.text)
    assert "".join(thinking) == "Check Paris first.Then Rome.Done."
    return run.result


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_three_turn_tool_loop_sends_reasoning_back_unchanged_and_in_order(
    server: FakeLLMServer, transport: str
) -> None:
    _script(server)
    provider = make_responses(server, transport=transport)
    try:
        result = await _run_agent(provider)
    finally:
        await provider.aclose()
    assert result.text == "Both sunny."
    assert result.termination_reason == TerminationReason.COMPLETED
    _check_round_trip(server)


async def test_three_turn_tool_loop_through_the_sdk_client(server: FakeLLMServer) -> None:
    _script(server)
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.openai_base_url)
    try:
        result = await _run_agent(OpenAIResponsesProvider("gpt-5", client=client))
    finally:
        await client.close()
    assert result.text == "Both sunny."
    _check_round_trip(server)


async def test_three_turn_loop_without_streaming(server: FakeLLMServer) -> None:
    _script(server)
    provider = make_responses(server)
    messages: list[Message] = [Message.user("Paris then Rome?")]
    for _ in range(3):
        response = await provider.complete(request(*messages, tools=(WEATHER,), system="Be brief."))
        messages.append(response.to_message())
        calls = response.tool_calls
        if calls:
            messages.append(
                Message.tool_results(
                    ToolResultPart(call_id=c.id, content=f"Sunny in {c.arguments['city']}")
                    for c in calls
                )
            )
    await provider.aclose()
    assert response.text == "Both sunny."
    assert response.thinking == "Done."
    assert all(r.body.get("stream") is None for r in server.requests)
    _check_round_trip(server)


async def test_the_sdk_parses_what_the_fake_server_sends(server: FakeLLMServer) -> None:
    server.add(
        reply("Hi.", thinking="Hm.", tool_calls=[call("get_weather", "c9", city="Oslo")]),
        reply("Hi.", thinking="Hm.", tool_calls=[call("get_weather", "c9", city="Oslo")]),
    )
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.openai_base_url, max_retries=0)
    try:
        made = await client.responses.create(model="gpt-5", input="hi")
        async with client.responses.stream(model="gpt-5", input="hi") as stream:
            kinds = [event.type async for event in stream]
            streamed = await stream.get_final_response()
    finally:
        await client.close()
    for response in (made, streamed):
        assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
        assert response.output[0].encrypted_content is not None
        assert response.output[2].call_id == "c9"
        assert json.loads(response.output[2].arguments) == {"city": "Oslo"}
        assert response.output_text == "Hi."
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds


async def test_deltas_match_the_final_turn(server: FakeLLMServer) -> None:
    server.add(
        reply("Let me see.", thinking="A", tool_calls=[call("get_weather", "k1", city="Paris")])
    )
    provider = make_responses(server)
    deltas, final = await stream_all(provider, request("hi"))
    await provider.aclose()
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == final.text
    started = [d for d in deltas if isinstance(d, ToolCallStarted)]
    assert [(d.call_id, d.name) for d in started] == [("k1", "get_weather")]
    arguments = "".join(d.arguments_delta for d in deltas if isinstance(d, ToolCallDelta))
    assert json.loads(arguments) == final.tool_calls[0].arguments == {"city": "Paris"}
    assert isinstance(final.content[0], ThinkingPart) and final.content[0].signature is None
    assert final.stop_reason is StopReason.TOOL_USE


@pytest.mark.parametrize("streaming", [True, False])
async def test_usage_counts_cached_and_reasoning_tokens(
    server: FakeLLMServer, streaming: bool
) -> None:
    usage = Usage(input_tokens=100, cache_read_tokens=900, output_tokens=50, reasoning_tokens=30)
    server.add(reply("ok", usage=usage))
    provider = make_responses(server)
    if streaming:
        final = (await stream_all(provider, request("hi")))[1]
    else:
        final = await provider.complete(request("hi"))
    await provider.aclose()
    assert final.usage == usage
    assert cost_of("gpt-5", final.usage) == pytest.approx(
        (100 * 1.25 + 900 * 0.125 + 50 * 10.0) / 1_000_000
    )


@pytest.mark.parametrize("streaming", [True, False])
async def test_stop_reasons(server: FakeLLMServer, streaming: bool) -> None:
    server.add(
        reply("cut", stop_reason=StopReason.MAX_TOKENS),
        reply("", stop_reason=StopReason.REFUSAL, raw_stop_reason="content_filter"),
        reply("No.", stop_reason=StopReason.REFUSAL),
    )
    provider = make_responses(server)
    finals = []
    for _ in range(3):
        if streaming:
            finals.append((await stream_all(provider, request("hi")))[1])
        else:
            finals.append(await provider.complete(request("hi")))
    await provider.aclose()
    assert [f.stop_reason for f in finals] == [
        StopReason.MAX_TOKENS,
        StopReason.REFUSAL,
        StopReason.REFUSAL,
    ]
    raw = ["max_output_tokens", "content_filter", "completed"]
    assert [f.raw_stop_reason for f in finals] == raw
    assert finals[0].text == "cut"
    assert finals[2].text == "No."
    assert finals[2].stop_details == {"type": "refusal", "category": None, "explanation": "No."}


# -- errors --------------------------------------------------------------------------------


async def test_an_error_event_is_a_typed_transient_error(server: FakeLLMServer) -> None:
    server.add(Fault.stream_error(reply("partial answer"), error_type="overloaded_error"))
    provider = make_responses(server)
    with pytest.raises(Overloaded) as caught:
        await stream_all(provider, request("hi"))
    await provider.aclose()
    assert caught.value.transient


def _frames(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode()) for e in events
    )


_CREATED = {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}


@pytest.mark.parametrize(
    ("code", "error_class"),
    [("rate_limit_exceeded", RateLimited), ("server_error", ServerError), (None, ServerError)],
)
async def test_response_failed_is_a_typed_error(
    server: FakeLLMServer, code: str | None, error_class: type[Exception]
) -> None:
    failed = {
        "type": "response.failed",
        "response": {"id": "resp_1", "status": "failed", "error": {"code": code, "message": "x"}},
    }
    server.add(Hostile.raw(_frames(_CREATED, failed)))
    server.add(Hostile.raw(json.dumps(failed["response"]).encode()))
    provider = make_responses(server)
    with pytest.raises(error_class) as streamed:
        await stream_all(provider, request("hi"))
    with pytest.raises(error_class) as whole:
        await provider.complete(request("hi"))
    await provider.aclose()
    assert type(streamed.value) is type(whole.value) is error_class
    assert streamed.value.transient


async def test_agent_retries_a_failed_response(server: FakeLLMServer) -> None:
    failed = {
        "type": "response.failed",
        "response": {"id": "r", "status": "failed", "error": {"code": "server_error"}},
    }
    server.add(Hostile.raw(_frames(_CREATED, failed)), Fault.http(429, retry_after=0.01), "ok")
    result = await Agent(make_responses(server), retry=FAST).run("hi")
    assert result.text == "ok"
    assert len(server.requests) == 3


async def test_a_stream_without_its_terminal_event_is_incomplete(server: FakeLLMServer) -> None:
    server.add(Fault.truncate(reply("a long enough answer to cut")))
    provider = make_responses(server)
    with pytest.raises(StreamIncomplete):
        await stream_all(provider, request("hi"))
    await provider.aclose()


# -- hostile servers -----------------------------------------------------------------------


def _completed(output: list[Any]) -> dict[str, Any]:
    return {
        "type": "response.completed",
        "response": {"id": "resp_1", "status": "completed", "output": output},
    }


async def test_too_many_output_items_are_refused(server: FakeLLMServer) -> None:
    added = [
        {
            "type": "response.output_item.added",
            "output_index": i,
            "item": {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": ""},
        }
        for i in range(20)
    ]
    item = {"type": "message", "content": [{"type": "output_text", "text": "x"}] * 20}
    server.add(
        Hostile.raw(_frames(_CREATED, *added)),
        Hostile.raw(_frames(_CREATED, _completed([{"type": "web_search_call"}] * 20))),
        Hostile.raw(_frames(_CREATED, _completed([item]))),
        Hostile.raw(json.dumps({"status": "completed", "output": [item] * 20}).encode()),
    )
    provider = make_responses(server, max_blocks=10)
    for _ in range(3):
        with pytest.raises(ResponseTooLarge):
            await stream_all(provider, request("hi"))
    with pytest.raises(ResponseTooLarge):
        await provider.complete(request("hi"))
    await provider.aclose()


@pytest.mark.parametrize(
    "output",
    [
        ["not an item"],
        [{"no": "type"}],
        [{"type": "message", "content": "text"}],
        [{"type": "message", "content": [{"type": "output_text", "text": 5}]}],
        [{"type": "reasoning", "summary": [], "encrypted_content": 7}],
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}],
        [],  # an empty turn
    ],
)
async def test_malformed_items_are_response_invalid(server: FakeLLMServer, output: Any) -> None:
    server.add(Hostile.raw(_frames(_CREATED, _completed(output))))
    provider = make_responses(server)
    with pytest.raises(ResponseInvalid):
        await stream_all(provider, request("hi"))
    await provider.aclose()


async def test_deep_nesting_and_unknown_items(server: FakeLLMServer) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    nested = b'{"type":"response.completed","response":{"output":' + b"[" * 100_000
    server.add(
        Hostile.raw(_frames(_CREATED) + b"data: " + nested + b"\n\n"),
        Hostile.raw(
            _frames(
                _CREATED,
                _completed(
                    [
                        {"type": "compaction_v9", "blob": {"a": [1, 2]}},
                        {"type": "message", "content": [{"type": "output_text", "text": "ok"}]},
                    ]
                ),
            )
        ),
    )
    provider = make_responses(server)
    with pytest.raises(ResponseInvalid):
        await stream_all(provider, request("hi"))
    final = (await stream_all(provider, request("hi")))[1]
    assert final.text == "ok"
    server.add("next")
    await provider.complete(request("hi", final.to_message(), "again"))
    await provider.aclose()
    sent = server.requests[-1].body["input"]
    assert sent[1] == {"type": "compaction_v9", "blob": {"a": [1, 2]}}  # kept, sent back


async def test_an_unusable_call_id_keeps_the_one_its_deltas_used(server: FakeLLMServer) -> None:
    start = {"type": "function_call", "call_id": "bad id", "name": "get_weather", "arguments": ""}
    events = [
        _CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": start},
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc",
            "delta": "{}",
        },
        _completed([{**start, "arguments": "{}"}]),
    ]
    server.add(Hostile.raw(_frames(*events)))
    provider = make_responses(server)
    deltas, final = await stream_all(provider, request("hi"))
    await provider.aclose()
    started = [d.call_id for d in deltas if isinstance(d, ToolCallStarted)]
    assert started == [final.tool_calls[0].id]
    assert started[0].startswith("call_") and started[0] != "bad id"


async def test_call_ids_reused_across_turns(server: FakeLLMServer) -> None:
    # A compatible server that names every call call_0: the loop makes the ids distinct, and
    # each function_call_output answers the function_call sent with it.
    server.add(
        reply(thinking="a", tool_calls=[call("get_weather", "call_0", city="Paris")]),
        reply(thinking="b", tool_calls=[call("get_weather", "call_0", city="Rome")]),
        "done",
    )
    result = await Agent(make_responses(server), tools=[get_weather]).run("go")
    assert result.text == "done"
    sent = server.requests[-1].body["input"]
    calls = [i["call_id"] for i in sent if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in sent if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == 2


# -- settings, typed output, media ---------------------------------------------------------


async def test_settings_and_typed_output_map_onto_the_responses_fields(
    server: FakeLLMServer,
) -> None:
    server.add('{"total": 1}')
    provider = make_responses(
        server,
        reasoning_effort="low",
        verbosity="low",
        service_tier="flex",
        prompt_cache_key="k1",
    )
    schema = {
        "type": "object",
        "properties": {"total": {"type": "number"}},
        "required": ["total"],
    }
    settings = ModelSettings(tool_choice="get_weather", parallel_tool_calls=False, top_p=0.5)
    await provider.complete(
        request(
            "hi",
            tools=(WEATHER,),
            output=OutputFormat(name="Invoice", json_schema=schema),
            settings=settings,
        )
    )
    await provider.aclose()
    body = server.requests[-1].body
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["text"]["verbosity"] == "low"
    assert body["text"]["format"]["type"] == "json_schema"
    assert body["text"]["format"]["name"] == "Invoice"
    assert body["text"]["format"]["strict"] is True
    assert server.requests[-1].output_schema == body["text"]["format"]["schema"]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["parallel_tool_calls"] is False
    assert body["top_p"] == 0.5
    assert body["service_tier"] == "flex"
    assert body["prompt_cache_key"] == "k1"


async def test_stop_and_seed_are_refused(server: FakeLLMServer) -> None:
    provider = make_responses(server)
    with pytest.raises(ConfigurationError, match="stop"):
        Agent(provider, model_settings=ModelSettings(stop="END"))
    with pytest.raises(ConfigurationError, match="seed"):
        Agent(provider, model_settings=ModelSettings(seed=1))


async def test_images_documents_and_tool_result_media(server: FakeLLMServer) -> None:
    from fanloop.messages import DocumentPart, ImagePart, TextPart

    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    server.add("seen")
    provider = make_responses(server)
    user = Message(
        role="user",
        content=(
            TextPart(text="look"),
            ImagePart(data=png),
            ImagePart(url="https://example.com/a.png", media_type="image/png"),
            DocumentPart(data=b"%PDF-1.4", title="report"),
        ),
    )
    result = Message.tool_results(
        [ToolResultPart(call_id="c1", content="chart", parts=(ImagePart(data=png),))]
    )
    await provider.complete(request(result, user))
    await provider.aclose()
    sent = server.requests[-1].body["input"]
    assert sent[0]["type"] == "function_call_output"
    assert sent[0]["output"][0] == {"type": "input_text", "text": "chart"}
    assert sent[0]["output"][1]["image_url"].startswith("data:image/png;base64,iVBOR")
    content = sent[1]["content"]
    kinds = ["input_text", "input_image", "input_image", "input_file"]
    assert [c["type"] for c in content] == kinds
    assert content[2]["image_url"] == "https://example.com/a.png"
    assert content[3]["filename"] == "report.pdf"
    assert content[3]["file_data"].startswith("data:application/pdf;base64,")


def test_constructor_checks(server: FakeLLMServer) -> None:
    with pytest.raises(ConfigurationError):
        OpenAIResponsesProvider("")
    with pytest.raises(ConfigurationError, match="client="):
        OpenAIResponsesProvider(
            "gpt-5", client=openai.AsyncOpenAI(api_key="k"), http_client=httpx2.AsyncClient()
        )


async def test_store_continues_from_the_previous_response(server: FakeLLMServer) -> None:
    server.add(
        reply(thinking="a", tool_calls=[call("get_weather", "c1", city="Paris")]),
        reply(thinking="b", tool_calls=[call("get_weather", "c2", city="Rome")]),
        "done",
    )
    result = await Agent(make_responses(server, store=True), tools=[get_weather]).run("go")
    assert result.text == "done"
    first, second, third = (r.body for r in server.requests)
    assert first["store"] is True and "include" not in first
    assert "previous_response_id" not in first
    assert second["previous_response_id"] == "resp_req_fake_000001"
    assert second["input"] == [
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny in Paris"}
    ]
    assert third["previous_response_id"] == "resp_req_fake_000002"
    assert [i["call_id"] for i in third["input"]] == ["c2"]
