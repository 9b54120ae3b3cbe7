"""A multi-turn tool conversation through each API, streamed and not, over real HTTP."""

from __future__ import annotations

import json

import pytest
from provider_helpers import request, results, stream_all

from fanloop.events import TextDelta, ToolCallDelta, ToolCallStarted
from fanloop.messages import Message, TextPart, ToolCallPart
from fanloop.providers import StopReason, Usage
from fanloop.testing import FakeLLMServer, call, reply


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_multi_turn_tool_conversation(
    server: FakeLLMServer, make, api: str, streaming: bool
) -> None:
    provider = make()
    server.add(
        reply(
            "Let me check both.",
            tool_calls=[call("get_weather", "c1", city="Paris"), call("get_time", "c2", tz="CET")],
            usage=Usage(input_tokens=30, output_tokens=20),
        ),
        reply(tool_calls=[call("get_weather", "c3", city="Lyon")]),
        reply("Sunny in Paris and Lyon, 14:00.", usage=Usage(input_tokens=80, output_tokens=9)),
    )
    history: list[Message] = [Message.user("Weather and time in Paris?")]

    async def turn() -> object:
        req = request(*history, system="You are terse.")
        if streaming:
            return (await stream_all(provider, req))[1]
        return await provider.complete(req)

    first = await turn()
    assert first.stop_reason is StopReason.TOOL_USE
    assert first.text == "Let me check both."
    assert first.tool_calls == (
        ToolCallPart(id="c1", name="get_weather", arguments={"city": "Paris"}),
        ToolCallPart(id="c2", name="get_time", arguments={"tz": "CET"}),
    )
    assert first.usage == Usage(input_tokens=30, output_tokens=20)
    assert first.provider == provider.name
    assert first.model == provider.model
    history += [first.to_message(), results(("c1", "14C, sunny"), ("c2", "bad tz", True))]

    second = await turn()
    assert second.tool_calls == (
        ToolCallPart(id="c3", name="get_weather", arguments={"city": "Lyon"}),
    )
    history += [second.to_message(), results(("c3", "16C"))]

    third = await turn()
    assert third.stop_reason is StopReason.END_TURN
    assert third.content == (TextPart(text="Sunny in Paris and Lyon, 14:00."),)

    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3
    assert all(b.get("stream", False) is streaming for b in bodies)
    last = bodies[-1]
    if api == "anthropic":
        assert last["system"] == [  # with its prompt-cache breakpoint
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
        assert last["max_tokens"] == 512
        assert [t["name"] for t in last["tools"]] == ["get_weather", "get_time"]
        assert last["tools"][0]["input_schema"]["properties"] == {"city": {"type": "string"}}
        roles = [m["role"] for m in last["messages"]]
        assert roles == ["user", "assistant", "user", "assistant", "user"]
        assert last["messages"][1]["content"] == [
            {"type": "text", "text": "Let me check both."},
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "c2", "name": "get_time", "input": {"tz": "CET"}},
        ]
        assert last["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "c1", "content": "14C, sunny"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "bad tz", "is_error": True},
        ]
    else:
        assert last["max_completion_tokens"] == 512
        if streaming:
            assert last["stream_options"] == {"include_usage": True}
        assert [t["function"]["name"] for t in last["tools"]] == ["get_weather", "get_time"]
        roles = [m["role"] for m in last["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
        assert last["messages"][0] == {"role": "system", "content": "You are terse."}
        assistant = last["messages"][2]
        assert assistant["content"] == "Let me check both."
        assert [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]
        ] == [("c1", "get_weather", {"city": "Paris"}), ("c2", "get_time", {"tz": "CET"})]
        assert last["messages"][3] == {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "14C, sunny",
        }
        assert last["messages"][4] == {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "Error: bad tz",
        }


async def test_stream_deltas(server: FakeLLMServer, make, api: str) -> None:
    provider = make()
    server.add(
        reply(
            "The answer arrives in pieces.",
            tool_calls=[
                call("get_weather", "w1", city="Reykjavik"),
                call("get_time", "t1", tz="UTC"),
            ],
        )
    )
    deltas, final = await stream_all(provider, request("go"))
    text = [d for d in deltas if isinstance(d, TextDelta)]
    assert len(text) > 2, "text arrives in several deltas"
    assert "".join(d.text for d in text) == "The answer arrives in pieces."
    started = [d for d in deltas if isinstance(d, ToolCallStarted)]
    assert [(s.call_id, s.name) for s in started] == [("w1", "get_weather"), ("t1", "get_time")]
    for s in started:
        fragments = [d for d in deltas if isinstance(d, ToolCallDelta) and d.call_id == s.call_id]
        assert len(fragments) >= 2 or s.call_id == "t1"
        assert deltas.index(s) < deltas.index(fragments[0]), "started before its fragments"
        assert all(f.index == s.index for f in fragments)
        assert json.loads("".join(f.arguments_delta for f in fragments)) == next(
            c.arguments for c in final.tool_calls if c.id == s.call_id
        )
    if api == "openai":  # the fake server interleaves the two calls' fragments
        kinds = [d.call_id for d in deltas if isinstance(d, ToolCallDelta)]
        assert kinds != sorted(kinds, key=lambda k: k != "w1")


async def test_invalid_tool_arguments(server: FakeLLMServer, make, api: str) -> None:
    from fanloop.messages import INVALID_ARGUMENTS_KEY

    provider = make()
    bad = ToolCallPart(
        id="b1", name="get_weather", arguments={INVALID_ARGUMENTS_KEY: '{"city": Par'}
    )
    not_object = ToolCallPart(id="b2", name="get_time", arguments={INVALID_ARGUMENTS_KEY: "[1, 2]"})
    server.add(reply(tool_calls=[bad, not_object]), reply(tool_calls=[bad]))
    _, streamed = await stream_all(provider, request("go"))
    assert streamed.tool_calls == (bad, not_object)
    completed = await provider.complete(request("go"))
    assert completed.tool_calls == (bad,)


async def test_empty_arguments_are_an_empty_object(server: FakeLLMServer, make) -> None:
    provider = make()
    server.add(reply(tool_calls=[call("get_time", "e1")]))
    _, response = await stream_all(provider, request("go"))
    assert response.tool_calls == (ToolCallPart(id="e1", name="get_time", arguments={}),)


async def test_truncated_tool_call_keeps_max_tokens(server: FakeLLMServer, make) -> None:
    from fanloop.messages import INVALID_ARGUMENTS_KEY

    provider = make()
    cut = ToolCallPart(
        id="m1", name="get_weather", arguments={INVALID_ARGUMENTS_KEY: '{"city": "Pa'}
    )
    server.add(reply("Checking", tool_calls=[cut], stop_reason=StopReason.MAX_TOKENS))
    _, response = await stream_all(provider, request("go"))
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert response.tool_calls == (cut,)


async def test_usage_with_cache(server: FakeLLMServer, make, api: str) -> None:
    provider = make()
    usage = Usage(input_tokens=12, output_tokens=7, cache_read_tokens=1000, cache_write_tokens=300)
    server.add(reply("cached", usage=usage), reply("cached", usage=usage))
    _, streamed = await stream_all(provider, request("go"))
    completed = await provider.complete(request("go"))
    assert streamed.usage == usage
    assert completed.usage == usage


async def test_temperature_stop_sequences_and_extra(server: FakeLLMServer, make, api: str) -> None:
    provider = make(extra_body={"metadata": {"user_id": "u1"}})
    server.add("ok")
    await provider.complete(
        request("go", temperature=0.2, stop_sequences=("END",), extra={"top_k": 5}, tools=())
    )
    body = server.requests[-1].body
    assert body["temperature"] == 0.2
    assert body["top_k"] == 5
    assert body["metadata"] == {"user_id": "u1"}
    assert "tools" not in body
    assert body["stop_sequences" if api == "anthropic" else "stop"] == ["END"]


async def test_response_ids_and_request_ids(server: FakeLLMServer, make) -> None:
    provider = make()
    server.add("one", "two")
    _, streamed = await stream_all(provider, request("go"))
    completed = await provider.complete(request("go"))
    assert streamed.response_id and server.requests[0].request_id in streamed.response_id
    assert completed.response_id and server.requests[1].request_id in completed.response_id
