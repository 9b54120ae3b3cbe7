"""The bounds fanloop puts on what an MCP server sends over HTTP, at the httpx2 seam
(``httpx2.MockTransport`` plays the server): bodies are decoded here a MiB at a time and
capped, and a tool listing is checked before the SDK would read it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from fanloop.mcp import MCPLimits
from fanloop.mcp._inbound import Inbound, Refused, decode_in_steps
from heartbeat import heartbeat


def listing(count: int, *, size: int = 400) -> dict[str, Any]:
    tools = [
        {"name": f"t{i}", "description": "x" * size, "inputSchema": {"type": "object"}}
        for i in range(count)
    ]
    return {"jsonrpc": "2.0", "id": 2, "result": {"tools": tools}}


def streamed(data: bytes) -> AsyncIterator[bytes]:
    """``data`` as a real transport gives it: a stream not yet read, 64 KiB at a time."""

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    return body()


def client_for(inbound: Inbound, respond: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=httpx2.MockTransport(respond),
        event_hooks={"request": [], "response": [inbound.on_response]},
    )


async def read(client: httpx2.AsyncClient, method: str = "tools/list") -> bytes:
    body = {"jsonrpc": "2.0", "id": 2, "method": method, "params": {}}
    async with client.stream("POST", "http://mcp.test/mcp", json=body) as response:
        return await response.aread()


async def test_a_gzip_bomb_listing_is_cut_at_the_listing_cap() -> None:
    bomb = gzip.compress(json.dumps(listing(20_000)).encode(), 9)  # ~11 MB, ~50 KB packed
    inbound = Inbound(MCPLimits(), "bomb")

    def respond(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx2.Response(200, headers=headers, content=streamed(bomb))

    async with client_for(inbound, respond) as client, heartbeat() as beat:
        with pytest.raises(httpx2.StreamError, match=r"max_listing_bytes=1,048,576"):
            await read(client)
    assert beat.max_stall < 0.1, beat
    refused = inbound.take_refused()
    assert refused is not None and refused.limit == "max_listing_bytes"


async def test_any_other_body_is_cut_at_max_message_bytes() -> None:
    inbound = Inbound(MCPLimits(max_message_bytes=1000), "big")

    def respond(request: httpx2.Request) -> httpx2.Response:
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"x": "y" * 2000}}).encode()
        headers = {"content-type": "application/json"}
        return httpx2.Response(200, headers=headers, content=streamed(body))

    async with client_for(inbound, respond) as client:
        with pytest.raises(httpx2.StreamError, match=r"over 1,000 bytes"):
            await read(client, "tools/call")
        refused = inbound.take_refused()
        assert refused is not None and refused.limit == "max_message_bytes"


async def test_an_unknown_content_encoding_is_refused() -> None:
    inbound = Inbound(MCPLimits(), "br")

    def respond(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "content-encoding": "br"}
        return httpx2.Response(200, headers=headers, content=streamed(b"\x00" * 10))

    async with client_for(inbound, respond) as client:
        with pytest.raises(httpx2.StreamError, match="encoding fanloop does not decode"):
            await read(client)


def sse(*messages: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: message\r\ndata: " + json.dumps(m).encode() + b"\r\n\r\n" for m in messages
    )


NOTICE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}


def left_open(payload: bytes) -> Any:
    """A transport that sends ``payload`` as an event stream and never ends it."""

    def respond(request: httpx2.Request) -> httpx2.Response:
        async def body() -> AsyncIterator[bytes]:
            yield payload
            raise AssertionError("read past the answer")  # the stream is never read this far

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return respond


async def read_answer(client: httpx2.AsyncClient) -> bytes:
    """Read an event stream as the SDK does: until the answer has come."""
    body = b""
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with client.stream("POST", "http://mcp.test/mcp", json=request) as response:
        async for chunk in response.aiter_bytes():
            body += chunk
            if b'"result"' in body:
                break
    return body


async def test_an_event_stream_listing_is_checked_event_by_event() -> None:
    """Over SSE, each event is checked as it arrives, even on a stream left open."""
    good = sse(NOTICE, listing(3))
    async with client_for(Inbound(MCPLimits(), "sse"), left_open(good)) as client:
        assert await read_answer(client) == good


async def test_an_event_stream_listing_over_max_tools_is_refused() -> None:
    bad = sse(NOTICE, listing(200, size=10))
    async with client_for(Inbound(MCPLimits(), "sse"), left_open(bad)) as client:
        with pytest.raises(httpx2.SSEError, match=r"lists 200 tools"):
            await read_answer(client)


def test_decoding_in_steps_matches_json_loads_and_refuses_deep_nesting() -> None:
    doc = listing(50)
    data = json.dumps(doc).encode()
    assert decode_in_steps(data) == doc
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_in_steps(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError):
        decode_in_steps(b"\xff{}")
    assert issubclass(Refused, Exception)


def listing_request(request_id: int | str) -> Any:
    from mcp_types import JSONRPCRequest

    return JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/list", params={})


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{"tools":[' + b"x" * (2 << 20) + b"]}}",
        b'{"result":{"tools":[' + b"x" * (2 << 20) + b']},"jsonrpc":"2.0","id":7}',
    ],
    ids=["id first", "id last"],
)
async def test_a_long_listing_line_is_refused_unread(line: bytes) -> None:
    """The line is not JSON past its envelope: refused without decoding it."""
    from mcp_types import JSONRPCError

    inbound = Inbound(MCPLimits(), "stdio")
    inbound.sent(listing_request(7))
    item = await inbound.decode(line)
    assert not isinstance(item, Exception)
    message = item.message
    assert isinstance(message, JSONRPCError) and message.id == 7
    assert "MCPLimits(max_listing_bytes=1,048,576)" in message.error.message
    refused = inbound.take_refused()
    assert refused is not None and refused.limit == "max_listing_bytes"


async def test_a_long_line_answering_another_request_is_decoded_aside() -> None:
    from mcp_types import JSONRPCResponse

    inbound = Inbound(MCPLimits(), "stdio")
    inbound.sent(listing_request(7))
    line = json.dumps({"jsonrpc": "2.0", "id": 8, "result": {"text": "y" * (3 << 20)}}).encode()
    async with heartbeat() as beat:
        item = await inbound.decode(line)
    assert not isinstance(item, Exception)
    assert isinstance(item.message, JSONRPCResponse) and item.message.id == 8
    assert len(item.message.result["text"]) == 3 << 20
    assert inbound.take_refused() is None
    assert beat.max_stall < 0.1, beat
    assert isinstance(await inbound.decode(b"{not json" + b" " * 70_000), ValueError)
