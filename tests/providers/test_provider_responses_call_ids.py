"""A Responses server that reuses call ids (``call_0`` on every turn) keeps its reasoning.

The loop replaces a reused call id before the turn enters the transcript; the turn's output
items are rewritten with the new id, so the next request still sends every reasoning item
back right before the call it preceded, and each result answers its call by the new id.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from provider_helpers import make_responses

from fanloop import Agent, tool
from fanloop._callids import renamed_origin
from fanloop.messages import Origin
from fanloop.testing import FakeLLMServer, call, reply


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def _script(server: FakeLLMServer) -> None:
    server.add(
        reply(thinking="Paris first.", tool_calls=[call("get_weather", "call_0", city="Paris")]),
        reply(thinking="Now Rome.", tool_calls=[call("get_weather", "call_0", city="Rome")]),
        reply(thinking="Then Oslo.", tool_calls=[call("get_weather", "call_0", city="Oslo")]),
        reply("All sunny.", thinking="Done."),
        api="responses",
    )


def _kinds(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(i.get("type"), i.get("id") or i.get("call_id")) for i in items]


@pytest.mark.parametrize("store", [False, True], ids=["stateless", "store"])
async def test_reused_call_ids_keep_the_reasoning_items_in_order(
    server: FakeLLMServer, store: bool
) -> None:
    _script(server)
    provider = make_responses(server, store=store)
    try:
        result = await Agent(provider, tools=[get_weather]).run("Paris, Rome, Oslo?")
    finally:
        await provider.aclose()
    assert result.text == "All sunny."
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 4
    # A turn whose ids changed is not the one the server stored: it is never referred to by
    # previous_response_id (only the first turn, whose id was kept, is).
    chained = ["previous_response_id" in b for b in bodies]
    assert chained == ([False, True, False, False] if store else [False] * 4)
    last = bodies[-1]["input"]
    assert last[0] == {"role": "user", "content": "Paris, Rome, Oslo?"}
    calls = [i for i in last if i.get("type") == "function_call"]
    outputs = [i for i in last if i.get("type") == "function_call_output"]
    ids = [c["call_id"] for c in calls]
    assert ids[0] == "call_0" and len(set(ids)) == 3  # the first kept, the reused ones new
    assert [o["call_id"] for o in outputs] == ids
    assert [o["output"] for o in outputs] == ["Sunny in Paris", "Sunny in Rome", "Sunny in Oslo"]
    for turn in range(3):
        number = f"req_fake_{turn + 1:06d}"
        at = 1 + 3 * turn
        assert last[at] == {
            "type": "reasoning",
            "id": f"rs_{number}_0",
            "summary": [
                {"type": "summary_text", "text": ["Paris first.", "Now Rome.", "Then Oslo."][turn]}
            ],
            "encrypted_content": f"enc-fake-{number}-0",
        }
        assert last[at + 1]["type"] == "function_call"
        assert last[at + 1]["id"] == f"fc_{number}_1"  # the server's item id, unchanged
        assert last[at + 1]["call_id"] == ids[turn]
        assert last[at + 2] == {
            "type": "function_call_output",
            "call_id": ids[turn],
            "output": last[at + 2]["output"],
        }
    # Each request is the one before it plus the newest turn: nothing earlier was rewritten.
    whole = [b for b, chain in zip(bodies, chained, strict=True) if not chain]
    for before, after in pairwise(whole):
        assert after["input"][: len(before["input"])] == before["input"]


def test_renamed_origin_copies_and_refuses_what_it_cannot_rename() -> None:
    items = [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "x"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_0", "name": "f", "arguments": ""},
    ]
    origin = Origin(
        provider="openai", api="responses", model="m", raw={"output": items, "stored": True}
    )
    renamed = renamed_origin(origin, ["call_new"])
    assert renamed is not None and renamed.raw["output"][1]["call_id"] == "call_new"
    assert renamed.raw["output"][0] is items[0]
    assert renamed.raw["stored"] is False
    assert items[1]["call_id"] == "call_0" and origin.raw["stored"] is True  # not changed
    assert renamed_origin(origin, []) is None  # more calls than ids
    assert renamed_origin(origin, ["a", "b"]) is None  # fewer
    chat = Origin(provider="openai", api="chat", model="m", raw={"output": items})
    assert renamed_origin(chat, ["a"]) is None
    assert renamed_origin(None, ["a"]) is None
