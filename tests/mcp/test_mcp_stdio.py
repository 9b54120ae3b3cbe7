"""MCP tools over stdio, against a real server subprocess (``servers/tools_server.py``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from fanloop import Tool, ToolResult
from fanloop.mcp import MCPServer, MCPServerError, MCPTool, load_mcp_tools

ServerFactory = Callable[..., MCPServer]


def by_name(tools: list[Tool]) -> dict[str, MCPTool]:
    out = {}
    for t in tools:
        assert isinstance(t, MCPTool)
        out[t.name] = t
    return out


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_lists_tools_with_their_schemas(stdio_listing: dict[str, MCPTool]) -> None:
    tools = stdio_listing
    assert {"add", "echo", "lookup", "fail", "hang", "crash", "pid"} <= set(tools)
    add = tools["add"]
    assert isinstance(add, Tool)
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.schema() == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": add.parameters,
    }
    assert add.spec().name == "add"
    assert tools["echo"].parameters["properties"]["times"]["default"] == 1


async def test_calls_tools(stdio_server: ServerFactory) -> None:
    async with stdio_server() as server:
        tools = by_name(await load_mcp_tools(server))
        added = await tools["add"].run(a=2, b=3)
        echoed = await tools["echo"].run(text="hi", times=2)

    assert added == ToolResult(
        "5", metadata={"mcp_server": server.name, "structured_content": {"result": 5}}
    )
    assert echoed.content == "hi hi"
    assert not echoed.is_error


def test_read_only_tools_are_safe_and_others_dangerous(
    stdio_listing: dict[str, MCPTool],
) -> None:
    lookup, add = stdio_listing["lookup"], stdio_listing["add"]
    assert lookup.read_only
    assert not lookup.dangerous
    assert lookup.concurrent_safe
    assert lookup.annotations == {"read_only_hint": True}
    assert add.dangerous
    assert not add.concurrent_safe
    assert not add.read_only
    assert add.annotations == {}


def test_preview_renders_the_call(stdio_listing: dict[str, MCPTool]) -> None:
    assert stdio_listing["add"].preview(a=1, b=2) == "add(a=1, b=2)"
    assert stdio_listing["echo"].preview(text="it's") == 'echo(text="it\'s")'


def test_validate_uses_the_servers_schema(stdio_listing: dict[str, MCPTool]) -> None:
    from fanloop.errors import ToolError

    add = stdio_listing["add"]
    assert add.validate({"a": 1, "b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(ToolError, match="'b' is a required property"):
        add.validate({"a": 1})


async def test_tool_error_becomes_an_error_result(stdio_server: ServerFactory) -> None:
    async with stdio_server() as server:
        tools = by_name(await load_mcp_tools(server))
        result = await tools["fail"].run(reason="the disk is full")
        unknown_args = await tools["add"].run(a="x", b=1)

    assert result.is_error
    assert "the disk is full" in result.content
    assert unknown_args.is_error


async def test_hang_past_timeout_is_an_error_result(stdio_server: ServerFactory) -> None:
    async with stdio_server(timeout=0.5) as server:
        tools = by_name(await load_mcp_tools(server))
        start = time.monotonic()
        with anyio.fail_after(10):
            result = await tools["hang"].run()
        elapsed = time.monotonic() - start
        after = await tools["add"].run(a=1, b=1)  # the session survives a timed-out call

    assert result.is_error
    assert "did not answer within 0.5 s" in result.content
    assert elapsed < 5
    assert after.content == "2"


async def test_timeout_given_to_load_overrides_the_servers(stdio_server: ServerFactory) -> None:
    async with stdio_server(timeout=None) as server:
        (hang,) = await load_mcp_tools(server, include=["hang"], timeout=0.3)
        with anyio.fail_after(10):
            result = await hang.run()

    assert hang.timeout == 0.3
    assert result.is_error


async def test_crash_gives_error_results_for_in_flight_and_later_calls(
    stdio_server: ServerFactory,
) -> None:
    results: dict[str, ToolResult] = {}
    with anyio.fail_after(30):
        async with stdio_server(timeout=60) as server:
            tools = by_name(await load_mcp_tools(server))

            async def call(name: str) -> None:
                results[name] = await tools[name].run()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "hang")  # in flight when the server dies
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(call, "crash")
            assert not server.connected
            later = await tools["add"].run(a=1, b=2)  # the server is started again
            assert server.connected
            assert {t.name for t in await load_mcp_tools(server)} >= {"add", "crash"}

    for result in (results["hang"], results["crash"]):
        assert result.is_error
        assert "closed the connection" in result.content
    assert (later.content, later.is_error) == ("3", False)


async def test_subprocess_is_stopped_when_the_block_ends(stdio_server: ServerFactory) -> None:
    server = stdio_server()
    async with server:
        (pid_tool,) = await load_mcp_tools(server, include=["pid"])
        pid = int((await pid_tool.run()).content)
        assert process_alive(pid)
        assert server.connected

    assert not process_alive(pid)
    assert not server.connected
    result = await pid_tool.run()
    assert result.is_error
    assert "not connected" in result.content


async def test_server_can_be_entered_again_and_tools_keep_working(
    stdio_server: ServerFactory,
) -> None:
    server = stdio_server()
    async with server:
        (pid_tool,) = await load_mcp_tools(server, include=["pid"])
        first = (await pid_tool.run()).content
    async with server:
        second = (await pid_tool.run()).content

    assert first != second  # a fresh subprocess, reached by the tool loaded earlier


async def test_concurrent_calls_over_one_session(stdio_server: ServerFactory) -> None:
    results: dict[int, str] = {}
    async with stdio_server() as server:
        tools = by_name(await load_mcp_tools(server))

        async def call(i: int) -> None:
            results[i] = (await tools["add"].run(a=i, b=i)).content

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(call, i)

    assert results == {i: str(2 * i) for i in range(20)}


async def test_each_task_that_enters_gets_its_own_connection(
    stdio_server: ServerFactory,
) -> None:
    """Two concurrent runs enter one server; each run's calls go over its own connection."""
    server = stdio_server()
    loaded: list[Tool] = []
    pids: list[str] = []
    both_loaded = anyio.Event()

    async def one_run() -> None:
        async with server:
            loaded.extend(await load_mcp_tools(server, include=["pid"]))
            if len(loaded) == 2:
                both_loaded.set()
            await both_loaded.wait()
            pids.append((await loaded[0].run()).content)  # the same tool object in both runs

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one_run)
            tg.start_soon(one_run)

    assert len(set(pids)) == 2
    assert not server.connected


async def test_stderr_is_captured_unless_errlog_is_given(
    stdio_server: ServerFactory, tmp_path: Path
) -> None:
    async with stdio_server() as server:
        (fail,) = await load_mcp_tools(server, include=["fail"])
        await fail.run(reason="first")
        # the server logs the failure on its stderr before it answers; fanloop keeps it
        assert "first" in (server.stderr_tail() or "")

    log = tmp_path / "server.log"
    with log.open("w") as errlog:
        async with stdio_server(errlog=errlog) as server:
            (fail,) = await load_mcp_tools(server, include=["fail"])
            await fail.run(reason="second")
            assert server.stderr_tail() is None
    assert "second" in log.read_text()


async def test_not_connected_errors(stdio_server: ServerFactory) -> None:
    server = stdio_server()
    with pytest.raises(MCPServerError, match="not connected"):
        await load_mcp_tools(server)


async def test_cancelling_the_block_still_stops_the_subprocess(
    stdio_server: ServerFactory,
) -> None:
    server = stdio_server(timeout=None)
    pid = 0
    with anyio.fail_after(30):
        with anyio.CancelScope() as scope:
            async with server:
                tools = by_name(await load_mcp_tools(server))
                pid = int((await tools["pid"].run()).content)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(tools["hang"].run)
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()  # e.g. the run was cancelled mid-call

    assert scope.cancelled_caught
    assert not process_alive(pid)
    assert not server.connected
