"""Provider overhead over real HTTP: fanloop's providers vs the SDKs' own ``create()``.

Each workload is one multi-turn tool conversation (the model calls a tool TURNS times, then
answers; every request re-sends the whole, growing conversation) against a FakeLLMServer in
the same process. fanloop's side uses ``AnthropicProvider`` / ``OpenAIProvider`` ``stream()``
and ``complete()``; the baseline is a hand-written loop calling the same SDK's high-level
``create()`` (streamed and not) on a client with the same settings. Figures are the median
per-turn time over REPEATS conversations. Run: ``python benchmarks/bench_providers.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai

from _common import Row, median_time, table, write
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import ModelRequest, ToolSpec
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, call, reply

TURNS = 20
REPEATS = 7
RESULT = "tool output line\n" * 30  # ~500 characters per tool result
LOOKUP = ToolSpec(
    name="lookup",
    description="Look something up.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)


def responder(body: dict[str, Any]) -> Any:
    """Call ``lookup`` until the conversation holds TURNS tool results, then answer."""
    done = sum(
        1
        for m in body["messages"]
        if m["role"] == "tool"
        or (
            m["role"] == "user"
            and isinstance(m["content"], list)
            and m["content"][:1]
            and m["content"][0].get("type") == "tool_result"
        )
    )
    if done < TURNS:
        return reply(
            "Looking that up for you now.",
            tool_calls=[call("lookup", _id=f"call_{done}", query=f"item number {done}")],
        )
    return reply("Here is everything I found, summarised in one short paragraph.")


# -- fanloop ---------------------------------------------------------------------------------


async def fanloop_conversation(provider: Any, *, streaming: bool) -> int:
    history: list[Message] = [Message.user("Find all the items.")]
    tools = (LOOKUP,)
    requests = 0
    while True:
        req = ModelRequest(messages=tuple(history), tools=tools, max_tokens=1024)
        requests += 1
        if streaming:
            async with provider.stream(req) as events:
                async for item in events:
                    response = item
        else:
            response = await provider.complete(req)
        calls = response.tool_calls
        if not calls:
            return requests
        history.append(response.to_message())
        history.append(
            Message.tool_results(ToolResultPart(call_id=c.id, content=RESULT) for c in calls)
        )


# -- hand-written SDK loops --------------------------------------------------------------------

ANTHROPIC_TOOLS = [
    {"name": LOOKUP.name, "description": LOOKUP.description, "input_schema": LOOKUP.parameters}
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": LOOKUP.name,
            "description": LOOKUP.description,
            "parameters": LOOKUP.parameters,
        },
    }
]


async def anthropic_sdk_conversation(client: anthropic.AsyncAnthropic, *, streaming: bool) -> int:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find all the items."}]
    requests = 0
    while True:
        requests += 1
        if streaming:
            blocks: dict[int, dict[str, Any]] = {}
            stream = await client.messages.create(
                model="claude-bench-model",
                max_tokens=1024,
                messages=messages,  # type: ignore[arg-type]
                tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
                stream=True,
            )
            async for event in stream:
                if event.type == "content_block_start":
                    blocks[event.index] = event.content_block.to_dict()
                    if event.content_block.type == "tool_use":
                        blocks[event.index]["partial"] = ""
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        blocks[event.index]["text"] += delta.text
                    elif delta.type == "input_json_delta":
                        blocks[event.index]["partial"] += delta.partial_json
            content = []
            for index in sorted(blocks):
                block = blocks[index]
                if block["type"] == "tool_use":
                    block["input"] = json.loads(block.pop("partial") or "{}")
                content.append(block)
        else:
            message = await client.messages.create(
                model="claude-bench-model",
                max_tokens=1024,
                messages=messages,  # type: ignore[arg-type]
                tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
            )
            content = [block.to_dict() for block in message.content]
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return requests
        messages.append({"role": "assistant", "content": content})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": RESULT}
                    for c in calls
                ],
            }
        )


async def openai_sdk_conversation(client: openai.AsyncOpenAI, *, streaming: bool) -> int:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find all the items."}]
    requests = 0
    while True:
        requests += 1
        if streaming:
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            stream = await client.chat.completions.create(
                model="gpt-4.1",
                max_completion_tokens=1024,
                messages=messages,  # type: ignore[arg-type]
                tools=OPENAI_TOOLS,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    text.append(delta.content)
                for fragment in delta.tool_calls or ():
                    entry = calls.setdefault(
                        fragment.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if fragment.id:
                        entry["id"] = fragment.id
                    if fragment.function and fragment.function.name:
                        entry["function"]["name"] = fragment.function.name
                    if fragment.function and fragment.function.arguments:
                        entry["function"]["arguments"] += fragment.function.arguments
            tool_calls = [calls[i] for i in sorted(calls)]
            content = "".join(text) or None
        else:
            completion = await client.chat.completions.create(
                model="gpt-4.1",
                max_completion_tokens=1024,
                messages=messages,  # type: ignore[arg-type]
                tools=OPENAI_TOOLS,  # type: ignore[arg-type]
            )
            message = completion.choices[0].message
            content = message.content
            tool_calls = [c.to_dict() for c in message.tool_calls or ()]
        if not tool_calls:
            return requests
        for c in tool_calls:
            json.loads(c["function"]["arguments"])  # what a loop does before running the tool
        messages.append({"role": "assistant", "content": content, "tool_calls": tool_calls})
        messages.extend(
            {"role": "tool", "tool_call_id": c["id"], "content": RESULT} for c in tool_calls
        )


# -- driver ------------------------------------------------------------------------------------


async def per_turn(run: Callable[[], Awaitable[int]]) -> float:
    """Median seconds per request of a whole conversation."""
    turns = await run()  # warm-up, and the number of requests per conversation
    assert turns == TURNS + 1, turns
    return await median_time(run, REPEATS) / turns


async def main() -> list[Row]:
    rows: list[Row] = []
    with FakeLLMServer(responder=responder, record=False, chars_per_delta=12) as server:
        a_provider = AnthropicProvider(
            "claude-bench-model", api_key="bench", base_url=server.anthropic_base_url
        )
        o_provider = OpenAIProvider("gpt-4.1", api_key="bench", base_url=server.openai_base_url)
        a_client = anthropic.AsyncAnthropic(
            api_key="bench", base_url=server.anthropic_base_url, max_retries=0, open_telemetry=False
        )
        o_client = openai.AsyncOpenAI(
            api_key="bench", base_url=server.openai_base_url, max_retries=0
        )
        try:
            for api, provider, sdk in (
                (
                    "anthropic",
                    a_provider,
                    lambda s: anthropic_sdk_conversation(a_client, streaming=s),
                ),
                ("openai", o_provider, lambda s: openai_sdk_conversation(o_client, streaming=s)),
            ):
                for streaming, mode in ((True, "stream"), (False, "complete")):
                    ours = await per_turn(
                        lambda p=provider, s=streaming: fanloop_conversation(p, streaming=s)
                    )
                    base = await per_turn(lambda s=streaming, f=sdk: f(s))
                    rows.append(
                        Row(
                            f"{api} {mode}, {TURNS}-call tool conversation",
                            "per-turn time",
                            ours * 1000,
                            base * 1000,
                            "ms",
                            "well under 1.0× (final bar 0.15×, end to end)",
                        )
                    )
                    print(
                        f"{api:9} {mode:8} fanloop {ours * 1000:7.3f} ms/turn   "
                        f"SDK create() {base * 1000:7.3f} ms/turn   ratio {ours / base:.2f}x",
                        flush=True,
                    )
        finally:
            await a_provider.aclose()
            await o_provider.aclose()
            await a_client.close()
            await o_client.close()
    return rows


if __name__ == "__main__":
    rows = asyncio.run(main())
    text = (
        "# Provider overhead over HTTP\n\n"
        f"Median per-turn time of a {TURNS}-call tool conversation against FakeLLMServer "
        f"(same process, {REPEATS} repeats), Python {sys.version.split()[0]}.\n\n"
        + table(rows)
        + "\n"
    )
    path = write("providers.md", text)
    print(f"\n{table(rows)}\n\nwritten to {path}")
