"""Hostile answers only the Responses wire can give: event and item types newer than fanloop,
items announced twice, and more content or summary parts in one item than the cap allows.

(The hostile checks every wire shares run on this one too, in test_provider_hostile.py.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from provider_helpers import make_responses, request, stream_all

from fanloop.errors import ResponseInvalid, StreamIncomplete
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import StopReason
from fanloop.providers._wire import ResponseTooLarge
from fanloop.testing import FakeLLMServer, Hostile, call, reply
from fanloop.testing._faults import render_body, render_stream

STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
TURN = reply("Sunny.", thinking="Look it up.", tool_calls=[call("get_weather", "c1", city="Oslo")])
NEW_ITEM = {"type": "hologram_call", "id": "hg_1", "status": "completed", "beam": {"x": [1]}}


def _event(payload: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (payload["type"].encode(), json.dumps(payload).encode())


def _with_new_types(streaming: bool) -> bytes:
    """``TURN`` with a hologram item (a type fanloop does not know) second, and unknown
    events before and inside it."""
    body = render_body("responses", TURN, "m", "req_1")
    output = body["output"]
    output.insert(1, NEW_ITEM)
    if not streaming:
        return json.dumps(body).encode()
    frames = render_stream("responses", TURN, "m", "req_1", 4)
    events = [json.loads(f.split(b"data: ", 1)[1]) for f in frames]
    out: list[bytes] = []
    for event in events:
        index = event.get("output_index")
        if type(index) is int and index >= 1:  # make room for the new item at 1
            event["output_index"] = index + 1
        if event["type"] == "response.completed":
            event["response"]["output"] = output
            out.append(_event({"type": "response.hologram.warming", "output_index": 1}))
        out.append(_event(event))
        if event["type"] == "response.output_item.done" and index == 0:
            out += [
                _event({"type": "response.output_item.added", "output_index": 1, "item": NEW_ITEM}),
                _event({"type": "response.hologram_call.beaming", "output_index": 1, "n": 9}),
                _event({"type": "response.output_item.done", "output_index": 1, "item": NEW_ITEM}),
            ]
    return b"".join(out)


@STREAMING
async def test_unknown_events_and_items_are_kept_and_sent_back_in_place(
    server: FakeLLMServer, streaming: bool
) -> None:
    server.add(Hostile.raw(_with_new_types(streaming)), reply("Done."))
    provider = make_responses(server)
    try:
        req = request("Weather in Oslo?")
        final = (await stream_all(provider, req))[1] if streaming else await provider.complete(req)
        assert final.text == "Sunny." and final.thinking == "Look it up."
        assert [c.id for c in final.tool_calls] == ["c1"]
        assert final.stop_reason is StopReason.TOOL_USE
        result = Message.tool_results([ToolResultPart(call_id="c1", content="Sunny")])
        await provider.complete(request("Weather in Oslo?", final.to_message(), result))
    finally:
        await provider.aclose()
    sent = server.requests[-1].body["input"]
    kinds = [(i.get("type"), i.get("id")) for i in sent[1:5]]
    assert kinds[:2] == [("reasoning", "rs_req_1_0"), ("hologram_call", "hg_1")]
    assert sent[2] == NEW_ITEM  # exactly as it came, nested values and all
    assert kinds[2:] == [("message", "msg_req_1_1"), ("function_call", "fc_req_1_2")]


def _parts_flood(kind: str, count: int) -> dict[str, Any]:
    body = render_body("responses", TURN, "m", "req_1")
    for item in body["output"]:
        if item["type"] == kind == "message":
            item["content"] = [{"type": "output_text", "text": "x", "annotations": []}] * count
        elif item["type"] == kind == "reasoning":
            item["summary"] = [{"type": "summary_text", "text": "x"}] * count
    return body


@pytest.mark.parametrize("kind", ["message", "reasoning"])
@STREAMING
async def test_too_many_parts_in_one_item_are_refused(
    server: FakeLLMServer, kind: str, streaming: bool
) -> None:
    body = _parts_flood(kind, 5000)
    data = (
        _event({"type": "response.completed", "response": body})
        if streaming
        else json.dumps(body).encode()
    )
    server.add(Hostile.raw(data))
    provider = make_responses(server, max_blocks=4096)
    try:
        req = request("hi")
        call_ = stream_all(provider, req) if streaming else provider.complete(req)
        with pytest.raises(ResponseTooLarge, match="parts in one"):
            await call_
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "damage",
    ["twice", "index", "unstarted-call"],
)
async def test_items_announced_wrongly_are_malformed(server: FakeLLMServer, damage: str) -> None:
    frames = render_stream("responses", TURN, "m", "req_1", 4)
    events = [json.loads(f.split(b"data: ", 1)[1]) for f in frames]
    out: list[bytes] = []
    for event in events:
        out.append(_event(event))
        if event["type"] == "response.output_item.added" and event["output_index"] == 0:
            if damage == "twice":
                out.append(_event(event))
            elif damage == "index":
                out.append(_event({**event, "output_index": 2**53}))
            else:
                delta = {"type": "response.function_call_arguments.delta", "output_index": 7}
                out.append(_event({**delta, "delta": "{"}))
    server.add(Hostile.raw(b"".join(out)))
    provider = make_responses(server)
    try:
        with pytest.raises(ResponseInvalid) as caught:
            await stream_all(provider, request("hi"))
    finally:
        await provider.aclose()
    assert caught.value.request_id == server.requests[-1].request_id
    assert not isinstance(caught.value, ResponseTooLarge)


async def test_a_stream_cut_after_the_items_is_incomplete_not_a_turn(
    server: FakeLLMServer,
) -> None:
    server.add(Hostile.no_end_marker(TURN), Hostile.no_end_marker(TURN))
    provider = make_responses(server)
    try:
        with pytest.raises(StreamIncomplete, match=r"response\.completed"):
            await stream_all(provider, request("hi"))
        with pytest.raises(ResponseInvalid):  # half a JSON body
            await provider.complete(request("hi"))
    finally:
        await provider.aclose()
