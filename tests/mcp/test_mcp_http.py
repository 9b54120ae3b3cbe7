"""MCP tools over streamable HTTP, against a real server subprocess on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest

from fanloop import Tool, ToolResult
from fanloop.errors import ConfigurationError
from fanloop.mcp import MCPServer, load_mcp_tools, open_mcp_tools


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


async def test_lists_and_calls_tools(http_url: str) -> None:
    async with MCPServer.http(http_url) as server:
        tools = by_name(await load_mcp_tools(server))
        added = await tools["add"].run(a=20, b=22)
        looked_up = await tools["lookup"].run(key="pi")
        failed = await tools["fail"].run(reason="no way")

    assert added.content == "42"
    assert tools["add"].parameters["required"] == ["a", "b"]
    assert tools["add"].dangerous
    assert not tools["lookup"].dangerous
    assert tools["lookup"].concurrent_safe
    assert looked_up == ToolResult("3.14159", metadata=looked_up.metadata)
    assert failed.is_error
    assert "no way" in failed.content


async def test_headers_are_sent(http_url: str) -> None:
    seen: list[str | None] = []

    async def record(request: httpx2.Request) -> None:
        seen.append(request.headers.get("x-api-key"))

    client = httpx2.AsyncClient(headers={"x-api-key": "k1"}, event_hooks={"request": [record]})
    async with client, MCPServer.http(http_url, http_client=client) as server:
        (add,) = await load_mcp_tools(server, include=["add"])
        assert (await add.run(a=1, b=1)).content == "2"
    assert seen
    assert set(seen) == {"k1"}

    async with MCPServer.http(http_url, headers={"x-api-key": "k2"}) as server:
        assert await load_mcp_tools(server, include=["add"])


def test_headers_and_http_client_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        MCPServer.http("http://x/mcp", headers={"a": "b"}, http_client=httpx2.AsyncClient())


async def test_hang_past_timeout_is_an_error_result(http_url: str) -> None:
    async with MCPServer.http(http_url, timeout=0.5) as server:
        tools = by_name(await load_mcp_tools(server))
        start = time.monotonic()
        with anyio.fail_after(10):
            result = await tools["hang"].run()
        elapsed = time.monotonic() - start
        after = await tools["echo"].run(text="still here")

    assert result.is_error
    assert "did not answer" in result.content
    assert elapsed < 5
    assert after.content == "still here"


async def test_crash_gives_error_results_and_does_not_cancel_the_caller(
    private_http_server: Any,
) -> None:
    results: dict[str, ToolResult] = {}
    with anyio.fail_after(30):
        async with MCPServer.http(private_http_server.url, timeout=60) as server:
            tools = by_name(await load_mcp_tools(server))

            async def call(name: str) -> None:
                results[name] = await tools[name].run()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "hang")
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(call, "crash")
            later = await tools["add"].run(a=1, b=2)
            await anyio.sleep(0)  # a checkpoint: the caller was not cancelled by the transport
        private_http_server.process.wait()

    for result in (results["hang"], results["crash"]):
        assert result.is_error
        assert "closed the connection" in result.content
    assert later.is_error  # the HTTP server is gone for good: reconnecting fails, clearly
    assert "could not be reached again" in later.content


async def test_open_mcp_tools_combines_servers(
    http_url: str, stdio_server: Callable[..., MCPServer]
) -> None:
    remote = MCPServer.http(http_url, prefix="web", include=["add", "lookup"])
    local = stdio_server(prefix="local", include=["echo"], timeout=5)
    async with open_mcp_tools([remote, local]) as tools:
        names = [t.name for t in tools]
        echo = by_name(tools)["local_echo"]
        assert (await echo.run(text="x")).content == "x"
        assert remote.connected
        assert local.connected

    assert names == ["web_add", "web_lookup", "local_echo"]
    assert echo.timeout == 5
    assert not remote.connected
    assert not local.connected


async def test_open_mcp_tools_rejects_clashing_names(
    http_url: str, stdio_server: Callable[..., MCPServer]
) -> None:
    remote = MCPServer.http(http_url, include=["add"])
    local = stdio_server(include=["add"])
    with pytest.raises(ConfigurationError, match="'add' is offered by MCP servers"):
        async with open_mcp_tools([remote, local]):
            pass
    assert not remote.connected
    assert not local.connected


async def test_include_names_unknown_tool(http_url: str) -> None:
    async with MCPServer.http(http_url) as server:
        with pytest.raises(ConfigurationError, match=r"no tool 'nope'; it has: add, crash"):
            await load_mcp_tools(server, include=["add", "nope"])
