"""A long conversation's requests carry, byte for byte, what rendering each message afresh
gives: the run keeps its conversation's wire text joined and adds each turn's new messages
to it (``providers._wire.joined_memo``)."""

from __future__ import annotations

import gc
import json
from typing import Any

from fanloop import Agent, tool
from fanloop.providers._wire import joined_memo
from fanloop.testing import FakeLLMServer, call, reply

TURNS = 6  # tool turns: the last request carries 13 messages


@tool
async def step(n: int) -> str:
    """Take step n."""
    return f"step {n} done"


async def test_each_request_of_a_long_run_is_what_a_fresh_rendering_gives(
    server: FakeLLMServer, make: Any, api: str
) -> None:
    server.add(
        *[reply(f"Step {n}.", tool_calls=[call("step", f"s{n}", n=n)]) for n in range(TURNS)],
        "All done.",
    )
    provider = make()
    agent = Agent(provider, tools=[step], system="Be brief.")
    requests = []
    memos = []
    async with agent.stream("Walk.") as run:
        async for event in run:
            if event.kind == "request_started":
                requests.append(event.request)
                memos.append(joined_memo(event.request))
    assert run.result.text == "All done."
    assert len(requests) == len(server.requests) == TURNS + 1
    for request, received in zip(requests, server.requests, strict=True):
        fresh = make()  # no memo of anything: every message rendered now
        again = json.loads(fresh._encode(request.model_copy(), stream=True))
        assert received.body == again
    assert len(requests[-1].messages) == 2 * TURNS + 1
    # A short conversation's request carries no memo (the run makes one only once its
    # conversation is long enough to keep); a long one's carries the run's.
    assert memos[0] is None and memos[-1] is not None
    assert not memos[-1]  # a finished run keeps no conversation texts, whoever holds its memo
    del run, memos
    gc.collect()
    assert joined_memo(requests[-1]) is None  # (its run is gone: the memo with it)
