"""The baseline: a hand-written minimal tool loop on the official SDK clients (SDK-direct).

What a user writes without a framework: call ``chat.completions.create`` /
``messages.create`` (streamed or not), run the requested tool, append, repeat. The tool is the
same no-op as fanloop's side; its result goes back as a string.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from _tools import ANTHROPIC_TOOLS, OPENAI_TOOLS, noop


async def openai_loop(
    client: openai.AsyncOpenAI, prompt: str, *, streaming: bool, model: str = "gpt-4.1"
) -> tuple[int, str]:
    """Run one conversation to its answer; returns (model calls, answer text)."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        if streaming:
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            stream = await client.chat.completions.create(
                model=model,
                max_completion_tokens=4096,
                messages=messages,
                tools=OPENAI_TOOLS,
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
                model=model, max_completion_tokens=4096, messages=messages, tools=OPENAI_TOOLS
            )
            message = completion.choices[0].message
            content = message.content
            tool_calls = [c.to_dict() for c in message.tool_calls or ()]
        if not tool_calls:
            return turns, content or ""
        messages.append({"role": "assistant", "content": content, "tool_calls": tool_calls})
        for c in tool_calls:
            json.loads(c["function"]["arguments"] or "{}")
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": await noop()})


async def anthropic_loop(
    client: anthropic.AsyncAnthropic, prompt: str, *, streaming: bool, model: str = "claude-x"
) -> tuple[int, str]:
    """Run one conversation to its answer; returns (model calls, answer text)."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        if streaming:
            blocks: dict[int, dict[str, Any]] = {}
            stream = await client.messages.create(
                model=model, max_tokens=4096, messages=messages, tools=ANTHROPIC_TOOLS, stream=True
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
                model=model, max_tokens=4096, messages=messages, tools=ANTHROPIC_TOOLS
            )
            content = [block.to_dict() for block in message.content]
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return turns, "".join(b.get("text", "") for b in content)
        messages.append({"role": "assistant", "content": content})
        results = [
            {"type": "tool_result", "tool_use_id": c["id"], "content": await noop()} for c in calls
        ]
        messages.append({"role": "user", "content": results})
