"""Anthropic prompt caching: breakpoints where stated and nowhere else; cached tokens priced."""

from __future__ import annotations

import copy
import gc
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from fanloop import Agent, Limits, tool
from fanloop.catalog import cost_of
from fanloop.messages import Message, Origin, TextPart, ThinkingPart
from fanloop.providers import HostedTool, ModelRequest, ToolSpec, Usage
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.testing import FakeLLMServer, call, reply

EPHEMERAL = {"type": "ephemeral"}
SPEC = ToolSpec(name="lookup", parameters={"type": "object", "properties": {}})


def breakpoints(value: Any, path: str = "") -> list[str]:
    """Where ``cache_control`` appears in a request body, as paths."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "cache_control":
                found.append(path)
            else:
                found += breakpoints(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += breakpoints(inner, f"{path}[{i}]")
    return found


def unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    return out


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_a_long_conversation_reads_its_prefix_from_cache(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    turns = 50
    server.add(
        *[
            reply(f"step {i}", tool_calls=[call("lookup", f"c{i}", key=str(i))])
            for i in range(turns)
        ],
        "done",
    )
    agent = Agent(
        anthropic, tools=[lookup], system="You look things up.", limits=Limits(max_turns=turns + 1)
    )
    result = await agent.run("Look up fifty keys.")
    assert result.text == "done"
    bodies = [r.body for r in server.requests]
    assert len(bodies) == turns + 1
    for body in bodies:
        last = len(body["messages"]) - 1
        last_block = len(body["messages"][-1]["content"]) - 1
        # Three breakpoints, the API allows four: system, last tool, last block. No others.
        assert breakpoints(body) == [
            ".system[0]",
            f".tools[{len(body['tools']) - 1}]",
            f".messages[{last}].content[{last_block}]",
        ]
        assert body["system"] == [
            {"type": "text", "text": "You look things up.", "cache_control": EPHEMERAL}
        ]
    # Each request repeats the previous one byte for byte (bar the moved marker) and adds to
    # its end: the prefix the last request wrote to the cache is what the next one reads.
    for before, after in itertools.pairwise(bodies):
        assert after["tools"] == before["tools"] and after["system"] == before["system"]
        prefix = unmarked(before["messages"])
        assert unmarked(after["messages"])[: len(prefix)] == prefix


async def test_caching_can_be_turned_off(
    server: FakeLLMServer, anthropic_of: Callable[..., AnthropicProvider]
) -> None:
    provider = anthropic_of(prompt_caching=False)
    server.add("ok")
    await provider.complete(
        ModelRequest(system="Be brief.", tools=(SPEC,), messages=(Message.user("hi"),))
    )
    body = server.requests[0].body
    assert breakpoints(body) == []
    assert body["system"] == "Be brief."


async def test_only_what_is_there_is_marked(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    server.add("ok", "ok", "ok")
    await anthropic.complete(ModelRequest(messages=(Message.user("hi"),)))
    await anthropic.complete(ModelRequest(system="S", messages=(Message.user("hi"),)))
    hosted = (HostedTool("web_search"),)
    await anthropic.complete(
        ModelRequest(tools=(SPEC,), hosted_tools=hosted, messages=(Message.user("hi"),))
    )
    assert [breakpoints(r.body) for r in server.requests] == [
        [".messages[0].content[0]"],
        [".system[0]", ".messages[0].content[0]"],
        [".tools[1]", ".messages[0].content[0]"],  # the hosted tool is the last tool
    ]


async def test_a_thinking_block_is_never_a_breakpoint(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    # A paused turn is continued with the assistant message last; thinking cannot be cached.
    thinking_last = Message(
        role="assistant",
        content=(TextPart(text="Working"), ThinkingPart(text="hmm", signature="sig")),
    )
    text_last = Message(
        role="assistant",
        content=(ThinkingPart(text="hmm", signature="sig"), TextPart(text="Working")),
    )
    server.add("ok", "ok")
    await anthropic.complete(ModelRequest(messages=(Message.user("go"), thinking_last)))
    await anthropic.complete(ModelRequest(messages=(Message.user("go"), text_last)))
    assert breakpoints(server.requests[0].body) == []
    assert breakpoints(server.requests[1].body) == [".messages[1].content[1]"]


async def test_replayed_blocks_are_marked_without_changing_the_stored_turn(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    raw = [{"type": "text", "text": "Hello."}]
    turn = Message(
        role="assistant",
        content=(TextPart(text="Hello."),),
        origin=Origin(provider="anthropic", api="messages", model="m", raw=raw),
    )
    server.add("ok")
    await anthropic.complete(ModelRequest(messages=(Message.user("hi"), turn)))
    assert server.requests[0].messages[1]["content"] == [
        {"type": "text", "text": "Hello.", "cache_control": EPHEMERAL}
    ]
    assert raw == [{"type": "text", "text": "Hello."}]


async def test_a_breakpoint_a_server_slips_into_its_answer_is_not_replayed(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    answer = anthropic._decode(
        {
            "content": [
                {"type": "text", "text": "a", "cache_control": EPHEMERAL},
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}, "cache_control": 1},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
        None,
    )
    server.add("ok")
    results = Message.tool_results([])  # an empty follow-up keeps the turn second to last
    request = ModelRequest(
        system="S", tools=(SPEC,), messages=(Message.user("x"), answer.to_message(), results)
    )
    await anthropic.complete(request)
    assert breakpoints(server.requests[0].body) == [".system[0]", ".tools[0]"]


async def test_each_message_is_rendered_once_with_caching_on(
    server: FakeLLMServer, anthropic: AnthropicProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[Message] = []
    original = anthropic._render_message

    def counting(message: Message) -> str:
        rendered.append(message)
        return original(message)

    monkeypatch.setattr(anthropic._messages, "_render", counting)
    history = [Message.user("hello")]
    for n in range(6):
        server.add(f"answer {n}")
        response = await anthropic.complete(ModelRequest(messages=tuple(history)))
        history += [response.to_message(), Message.user(f"follow-up {n}")]
    # The last message of each request is marked from its cached plain form (no second
    # rendering); older messages reuse theirs.
    assert len(rendered) == len(history) - 2
    assert len({id(m) for m in rendered}) == len(rendered)
    rendered.clear()
    del history, response
    gc.collect()
    assert len(anthropic._messages) == 0


async def test_cache_tokens_are_counted_and_priced(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    usage = Usage(
        input_tokens=100, output_tokens=10, cache_read_tokens=5000, cache_write_tokens=2000
    )
    server.add(reply("ok", usage=usage))
    result = await Agent(anthropic).run("hi")
    assert result.usage == usage
    # claude-sonnet-4-5: $3 input, $15 output, $0.30 cache reads, $3.75 cache writes per MTok
    expected = (100 * 3 + 10 * 15 + 5000 * 0.30 + 2000 * 3.75) / 1_000_000
    assert result.cost_usd == pytest.approx(expected)


@pytest.mark.parametrize(
    ("model", "usage", "dollars"),
    [
        ("claude-sonnet-4-5", Usage(cache_read_tokens=1_000_000), 0.30),
        ("claude-sonnet-4-5-20250929", Usage(cache_write_tokens=1_000_000), 3.75),
        ("claude-opus-4-6", Usage(input_tokens=1_000_000, cache_read_tokens=1_000_000), 5.50),
        ("claude-haiku-4-5", Usage(cache_write_tokens=2_000_000, output_tokens=1_000_000), 7.50),
        ("claude-opus-5", Usage(cache_write_tokens=1_000_000, cache_read_tokens=1_000_000), 6.75),
        ("gpt-4.1", Usage(input_tokens=1_000_000, cache_read_tokens=1_000_000), 2.50),
        ("gpt-6-sol", Usage(cache_read_tokens=1_000_000, cache_write_tokens=1_000_000), 2.70),
        ("openrouter/gpt-4o-mini", Usage(cache_read_tokens=1_000_000), 0.075),
    ],
)
def test_cost_of_prices_cache_reads_and_writes(model: str, usage: Usage, dollars: float) -> None:
    assert cost_of(model, usage) == pytest.approx(dollars)


def test_cost_of_an_unknown_model_is_none() -> None:
    assert cost_of("my-llama", Usage(cache_read_tokens=10)) is None
