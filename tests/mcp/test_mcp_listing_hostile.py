"""Hostile MCP servers (``servers/flood_server.py``): a tool listing far too large, never ending,
or holding tools too big or broken to use. The listing is bounded (``MCPLimits``), refused with
an ``MCPListingError`` that names the limit to raise, and checked without holding the event
loop (``heartbeat``); no model request ever carries what was refused.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fanloop import Agent
from fanloop.mcp import (
    MCPLimits,
    MCPListingError,
    MCPServer,
    MCPServerError,
    load_mcp_tools,
    open_mcp_tools,
)
from fanloop.providers import ModelRequest
from fanloop.testing import ScriptedProvider, call, reply
from heartbeat import heartbeat

FLOOD = Path(__file__).parent / "servers" / "flood_server.py"
TOOLS_SERVER = Path(__file__).parent / "servers" / "tools_server.py"
FLOOD_TOOLS = 20_000  # about 11 MB in one page


def flood(mode: str, **kwargs: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, [str(FLOOD), mode], **kwargs)


@pytest.fixture
def flood_http(http_server_of: Any) -> Any:
    """``flood_server.py`` over HTTP, listing FLOOD_TOOLS tools in one page."""
    return http_server_of(FLOOD, f"many:{FLOOD_TOOLS}")


async def load_under_heartbeat(server: MCPServer) -> tuple[BaseException | None, Any]:
    """Open ``server`` and load its tools with a heartbeat running over the load."""
    error: BaseException | None = None
    with anyio.fail_after(120):  # a bounded time, however the load ends
        async with server, heartbeat() as beat:
            try:
                await load_mcp_tools(server)
            except MCPServerError as exc:
                error = exc
    return error, beat


async def test_a_stdio_server_listing_20000_tools_is_refused_without_stalling() -> None:
    error, beat = await load_under_heartbeat(flood(f"many:{FLOOD_TOOLS}"))
    assert beat.beats > 0 and beat.max_stall < 0.1, beat  # the 11 MB page was decoded aside
    assert isinstance(error, MCPListingError), error
    assert error.limit == "max_listing_bytes"
    assert "MCPLimits(max_listing_bytes=1,048,576)" in str(error)


async def test_a_wider_byte_limit_still_stops_at_max_tools() -> None:
    limits = MCPLimits(max_listing_bytes=64 << 20)
    error, beat = await load_under_heartbeat(flood(f"many:{FLOOD_TOOLS}", limits=limits))
    assert isinstance(error, MCPListingError), error
    assert error.limit == "max_tools"
    assert "lists 20,000 tools (MCPLimits(max_tools=128))" in str(error)
    assert beat.beats > 0 and beat.max_stall < 0.1, beat  # never validated by the SDK


async def test_an_http_server_listing_20000_tools_is_refused_without_stalling(
    flood_http: Any,
) -> None:
    error, beat = await load_under_heartbeat(MCPServer.http(flood_http.url))
    assert beat.beats > 0 and beat.max_stall < 0.1, beat  # read up to the cap, never decoded
    assert isinstance(error, MCPListingError), error
    assert error.limit == "max_listing_bytes"
    assert "MCPLimits(max_listing_bytes=1,048,576)" in str(error)


async def test_a_message_over_max_message_bytes_ends_the_connection() -> None:
    limits = MCPLimits(max_message_bytes=1 << 20, max_listing_bytes=64 << 20)
    error, _ = await load_under_heartbeat(flood(f"many:{FLOOD_TOOLS}", limits=limits))
    assert isinstance(error, MCPListingError), error
    assert error.limit == "max_message_bytes"
    assert "raise MCPLimits(max_message_bytes=...)" in str(error)


async def test_a_tool_result_over_max_message_bytes_is_an_error_result() -> None:
    server = MCPServer.stdio(
        sys.executable, [str(TOOLS_SERVER)], limits=MCPLimits(max_message_bytes=100_000)
    )
    with anyio.fail_after(60):
        async with server:
            tools = {t.name: t for t in await load_mcp_tools(server)}
            small = await tools["echo"].run(text="hi", times=2)
            big = await tools["echo"].run(text="x" * 1000, times=200)  # 200 KB
    assert small.content == "hi hi"
    assert big.is_error
    assert "sent a message of over 100,000 bytes" in big.content
    assert "MCPLimits(max_message_bytes=...)" in big.content


@pytest.mark.parametrize(
    ("mode", "limit", "count"), [("endless", "max_tools", 65), ("empty", "pages", 100)]
)
async def test_endless_pagination_is_refused(mode: str, limit: str, count: int) -> None:
    """A server whose pages never end: at ``max_tools`` tools, or after ``MAX_LIST_PAGES``
    pages (before: 100 pages, then the tools so far, silently)."""
    server = flood(mode)
    pages: list[int] = []
    started = time.monotonic()
    with anyio.fail_after(60):
        async with server:
            original = server._connection().require_client().list_tools  # type: ignore[union-attr]

            async def counted(**kwargs: Any) -> Any:
                pages.append(1)
                return await original(**kwargs)

            server._connection().client.list_tools = counted  # type: ignore[union-attr,method-assign]
            with pytest.raises(MCPListingError) as caught:
                await load_mcp_tools(server)
    assert caught.value.limit == limit
    assert len(pages) == count
    assert time.monotonic() - started < 30


async def test_a_repeated_cursor_is_refused_at_once() -> None:
    with anyio.fail_after(60):
        async with flood("cycle") as server:
            with pytest.raises(MCPListingError, match="same page cursor twice") as caught:
                await load_mcp_tools(server)
    assert caught.value.limit == "cursor"


async def test_a_tool_too_large_or_with_an_invalid_schema_is_skipped() -> None:
    with anyio.fail_after(60), capture_logs() as logs:
        async with flood("mixed:100000") as server:
            tools = await load_mcp_tools(server)
    assert [t.name for t in tools] == ["tool_0", "tool_3"]
    skipped = {e["tool"]: e["reason"] for e in logs if e["event"] == "mcp_tool_skipped"}
    assert "over MCPLimits(max_tool_bytes=65,536)" in skipped["tool_1"]
    assert "invalid parameters schema" in skipped["tool_2"]
    # loaded tools arrive with their validator compiled (in the worker thread)
    assert all("_fanloop_validator" in t.__dict__ for t in tools)


async def test_the_model_is_never_sent_more_tools_than_were_loaded() -> None:
    """``max_tools`` counts the whole listing; a user who widens it picks with ``include``."""
    seen: list[int] = []

    def respond(request: ModelRequest) -> Any:
        seen.append(len(request.tools))
        if len(seen) == 1:
            return reply(tool_calls=[call("tool_150", q="x")])
        return "done"

    with anyio.fail_after(60):
        async with flood("many:200") as server:
            with pytest.raises(MCPListingError, match="lists 200 tools"):
                await load_mcp_tools(server)
        wide = flood("many:200", limits=MCPLimits(max_tools=200), include=["tool_7", "tool_150"])
        async with open_mcp_tools([wide]) as tools:
            agent = Agent(ScriptedProvider(respond), tools=tools, auto_approve=True)
            result = await agent.run("go")
    assert result.text == "done"
    assert seen == [2, 2]
