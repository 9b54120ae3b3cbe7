"""The wire floor: the baseline's tool loops written by hand as plain JSON over ``aiohttp``.

No SDK, no framework, no validation: one ``aiohttp.ClientSession``, ``json.dumps`` of the body,
``json.loads`` of each SSE ``data:`` line (or of the whole body), the tool run, repeat. Nothing
a real client could do with less work per request, so fanloop's per-turn cost is stated as a
ratio to it.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp

from _tools import ANTHROPIC_TOOLS, OPENAI_TOOLS, RESPONSES_TOOLS, noop

OPENAI_HEADERS = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
ANTHROPIC_HEADERS = {
    "x-api-key": "bench",
    "anthropic-version": "2023-06-01",
    "Content-Type": "application/json",
}


def session(limit: int = 100) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit))


async def openai_turn(
    http: aiohttp.ClientSession, url: str, messages: list[Any], *, streaming: bool
) -> tuple[str, list[dict[str, Any]]]:
    """One Chat Completions call: (text, tool calls)."""
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "max_completion_tokens": 4096,
        "messages": messages,
        "tools": OPENAI_TOOLS,
    }
    if streaming:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async with http.post(
        f"{url}/v1/chat/completions", data=json.dumps(body), headers=OPENAI_HEADERS
    ) as r:
        r.raise_for_status()
        if not streaming:
            message = json.loads(await r.read())["choices"][0]["message"]
            return message.get("content") or "", message.get("tool_calls") or []
        async for line in r.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            chunk = json.loads(line[6:])
            if not chunk.get("choices"):
                continue
            delta = chunk["choices"][0]["delta"]
            if delta.get("content"):
                text.append(delta["content"])
            for f in delta.get("tool_calls") or ():
                entry = calls.setdefault(
                    f["index"],
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                entry["id"] = f.get("id") or entry["id"]
                fn = f.get("function") or {}
                entry["function"]["name"] += fn.get("name") or ""
                entry["function"]["arguments"] += fn.get("arguments") or ""
    return "".join(text), [calls[i] for i in sorted(calls)]


async def openai_loop(
    http: aiohttp.ClientSession, url: str, prompt: str, *, streaming: bool, retries: int = 0
) -> tuple[int, str]:
    """One conversation to its answer: (model calls, answer text). With ``retries``, a turn
    that fails on the connection, a timeout or HTTP 408/409/429/5xx is sent again, as
    fanloop's default ``RetryPolicy`` does it (0.5 s doubling, equal jitter)."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        attempt = 0
        while True:
            attempt += 1
            try:
                text, calls = await openai_turn(http, url, messages, streaming=streaming)
                break
            except (aiohttp.ClientError, TimeoutError) as exc:
                status = getattr(exc, "status", None)
                transient = status is None or status in (408, 409, 429) or status >= 500
                if attempt > retries or not transient:
                    raise
                backoff = 0.5 * 2.0 ** (attempt - 1)
                await asyncio.sleep(backoff / 2 + random.random() * backoff / 2)
        if not calls:
            return turns, text
        messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        for c in calls:
            json.loads(c["function"]["arguments"] or "{}")
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": await noop()})


async def anthropic_turn(
    http: aiohttp.ClientSession, url: str, messages: list[Any], *, streaming: bool
) -> list[dict[str, Any]]:
    """One Messages call: the answer's content blocks."""
    body: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 4096,
        "messages": messages,
        "tools": ANTHROPIC_TOOLS,
    }
    if streaming:
        body["stream"] = True
    blocks: dict[int, dict[str, Any]] = {}
    async with http.post(
        f"{url}/v1/messages", data=json.dumps(body), headers=ANTHROPIC_HEADERS
    ) as r:
        r.raise_for_status()
        if not streaming:
            answer: list[dict[str, Any]] = json.loads(await r.read())["content"]
            return answer
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            kind = event["type"]
            if kind == "content_block_start":
                block = blocks[event["index"]] = dict(event["content_block"])
                if block["type"] == "tool_use":
                    block["partial"] = ""
            elif kind == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    blocks[event["index"]]["text"] += delta["text"]
                elif delta["type"] == "input_json_delta":
                    blocks[event["index"]]["partial"] += delta["partial_json"]
    content = []
    for index in sorted(blocks):
        block = blocks[index]
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("partial") or "{}")
        content.append(block)
    return content


async def anthropic_loop(
    http: aiohttp.ClientSession, url: str, prompt: str, *, streaming: bool
) -> tuple[int, str]:
    """One conversation to its answer: (model calls, answer text)."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        content = await anthropic_turn(http, url, messages, streaming=streaming)
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return turns, "".join(b.get("text", "") for b in content)
        messages.append({"role": "assistant", "content": content})
        results = [
            {"type": "tool_result", "tool_use_id": c["id"], "content": await noop()} for c in calls
        ]
        messages.append({"role": "user", "content": results})


async def responses_turn(
    http: aiohttp.ClientSession, url: str, items: list[Any], *, streaming: bool
) -> list[dict[str, Any]]:
    """One Responses API call, stateless (``store: false``, reasoning sent back encrypted):
    the response's output items."""
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "max_output_tokens": 4096,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "tools": RESPONSES_TOOLS,
        "input": items,
    }
    if streaming:
        body["stream"] = True
    output: dict[int, dict[str, Any]] = {}
    chunks: dict[int, list[str]] = {}
    async with http.post(f"{url}/v1/responses", data=json.dumps(body), headers=OPENAI_HEADERS) as r:
        r.raise_for_status()
        if not streaming:
            answer: list[dict[str, Any]] = json.loads(await r.read())["output"]
            return answer
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue  # "event:" lines and blank lines: the type is in the data too
            event = json.loads(line[6:])
            kind = event["type"]
            if kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
                chunks[event["output_index"]].append(event["delta"])
            elif kind == "response.output_item.added":
                output[event["output_index"]] = event["item"]
                chunks[event["output_index"]] = []
            elif kind == "response.output_item.done":
                output[event["output_index"]] = event["item"]  # the whole item, as it ended
            elif kind == "response.completed":
                final: list[dict[str, Any]] = event["response"]["output"]
                return final or [output[i] for i in sorted(output)]
            elif kind in ("response.failed", "response.incomplete", "error"):
                raise RuntimeError(f"the response failed: {event}")
    raise RuntimeError("the stream ended before response.completed")


async def responses_loop(
    http: aiohttp.ClientSession, url: str, prompt: str, *, streaming: bool
) -> tuple[int, str]:
    """One conversation to its answer: (model calls, answer text). Every output item
    (reasoning included) goes back as it came, then a ``function_call_output`` per call."""
    items: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        output = await responses_turn(http, url, items, streaming=streaming)
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            return turns, "".join(
                part["text"]
                for item in output
                if item["type"] == "message"
                for part in item["content"]
                if part["type"] == "output_text"
            )
        items += output
        for c in calls:
            json.loads(c["arguments"] or "{}")
            items.append(
                {"type": "function_call_output", "call_id": c["call_id"], "output": await noop()}
            )
