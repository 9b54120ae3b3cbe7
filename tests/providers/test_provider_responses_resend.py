"""The Responses provider's short cuts on the hot path keep the wire the same.

A turn the provider made is sent back as its output items without parsing them again, and
its origin is vouched for as valid Unicode so the run does not walk the items again; these
check that a changed turn is still translated from its parts, and that a message holding a
vouched origin is still checked everywhere else.
"""

from __future__ import annotations

import json

from provider_helpers import make_responses, request, stream_all

from fanloop._unicode import holds_surrogates, known_valid, valid_models
from fanloop.messages import Message, Origin, TextPart, ToolCallPart, ToolResultPart
from fanloop.providers import ModelRequest
from fanloop.providers.openai import OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer, call, reply


async def _turn(
    server: FakeLLMServer, provider: OpenAIResponsesProvider, streamed: bool
) -> Message:
    server.add(
        reply("Checking.", thinking="Look it up.", tool_calls=[call("get_weather", "c1")]),
        api="responses",
    )
    if streamed:
        _, response = await stream_all(provider, request("Weather?"))
    else:
        response = await provider.complete(request("Weather?"))
    return response.to_message()


def _input(provider: OpenAIResponsesProvider, turn: Message) -> list[dict[str, object]]:
    """The input items ``provider`` sends for ``turn`` (between a question and its result)."""
    messages = (
        Message.user("Weather?"),
        turn,
        Message.tool_results([ToolResultPart(call_id="c1", content="Sunny")]),
    )
    body = provider._encode(ModelRequest(messages=messages, max_tokens=100), stream=False)
    items: list[dict[str, object]] = json.loads(body)["input"][1:-1]
    return items


async def test_a_turn_goes_back_as_its_items_unless_its_parts_changed() -> None:
    with FakeLLMServer() as server:
        provider = make_responses(server)
        for streamed in (True, False):
            turn = await _turn(server, provider, streamed)
            assert turn.origin is not None
            assert id(turn.origin) in provider._made  # the short cut is taken below
            raw = turn.origin.raw["output"]
            assert [item["type"] for item in raw] == ["reasoning", "message", "function_call"]
            assert _input(provider, turn) == raw  # the very turn: its items, reasoning first
            # Equal parts in a new tuple: checked part by part, still the items.
            same = Message(role="assistant", content=(*turn.content,), origin=turn.origin)
            assert same.content is not turn.content
            assert _input(provider, same) == raw
            # A call id replaced (as the loop does for a clashing one): from its parts.
            changed = tuple(
                ToolCallPart(id="c9", name=p.name, arguments=p.arguments)
                if isinstance(p, ToolCallPart)
                else p
                for p in turn.content
            )
            moved = Message(role="assistant", content=changed, origin=turn.origin)
            sent = _input(provider, moved)
            assert [item.get("type") for item in sent] == [None, "function_call"]
            assert sent[1]["call_id"] == "c9"
            assert "id" not in sent[1]
        await provider.aclose()


async def test_a_vouched_origin_is_skipped_but_the_rest_of_the_message_is_checked() -> None:
    with FakeLLMServer() as server:
        provider = make_responses(server)
        turn = await _turn(server, provider, streamed=True)
        await provider.aclose()
    assert turn.origin is not None
    assert known_valid(turn.origin)
    assert await valid_models((turn,)) == (turn,)
    # The same origin next to text holding a lone surrogate: the text is still made valid.
    bad = Message.model_construct(
        role="assistant", content=(TextPart.model_construct(text="x\ud800"),), origin=turn.origin
    )
    (fixed,) = await valid_models((bad,))
    assert fixed.text == "x\ufffd"
    # An origin nobody vouched for is walked as before.
    odd = Origin.model_construct(provider="p", api="responses", model="m", raw={"k": "\udc00"})
    assert holds_surrogates(odd)
    assert holds_surrogates(Message.model_construct(role="assistant", content=(), origin=odd))
