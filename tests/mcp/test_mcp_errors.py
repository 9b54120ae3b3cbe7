"""Servers that cannot be reached, and the SDK missing: clear typed errors, raised early."""

from __future__ import annotations

import importlib
import socket
import sys

import anyio
import pytest

from fanloop.errors import FanloopError
from fanloop.mcp import MCPConnectionError, MCPServer, MCPServerError


async def test_missing_command() -> None:
    server = MCPServer.stdio("fanloop-no-such-command-xyz")
    with pytest.raises(MCPConnectionError, match="could not connect to MCP server") as info:
        async with server:
            pass
    assert isinstance(info.value, MCPServerError)
    assert isinstance(info.value, FanloopError)
    assert info.value.server == "fanloop-no-such-command-xyz"
    assert not server.connected


async def test_server_that_exits_at_start_reports_its_stderr() -> None:
    code = "import sys; print('missing API key FOO', file=sys.stderr); sys.exit(3)"
    server = MCPServer.stdio(sys.executable, ["-c", code], name="broken")
    with anyio.fail_after(20), pytest.raises(MCPConnectionError) as info:
        async with server:
            pass
    assert "'broken'" in str(info.value)
    assert info.value.stderr == "missing API key FOO"
    assert "missing API key FOO" in str(info.value)


async def test_server_that_never_answers_times_out() -> None:
    # reads its stdin and says nothing; exits when fanloop closes the pipe
    server = MCPServer.stdio(
        sys.executable, ["-c", "import sys; sys.stdin.read()"], connect_timeout=0.5
    )
    with anyio.fail_after(20), pytest.raises(MCPConnectionError, match=r"no answer within 0.5 s"):
        async with server:
            pass


async def test_http_connection_refused() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = MCPServer.http(f"http://127.0.0.1:{port}/mcp")
    with anyio.fail_after(20), pytest.raises(MCPConnectionError, match="ConnectError"):
        async with server:
            pass


def test_import_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an absent package looks like
    for name in list(sys.modules):
        if name == "fanloop.mcp" or name.startswith("fanloop.mcp."):
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"pip install 'fanloop\[mcp\]'"):
        importlib.import_module("fanloop.mcp")


def test_public_names() -> None:
    import fanloop.mcp

    assert fanloop.mcp.__all__ == [
        "MCPConnectionError",
        "MCPLimits",
        "MCPListingError",
        "MCPServer",
        "MCPServerError",
        "MCPTool",
        "convert_result",
        "load_mcp_tools",
        "open_mcp_tools",
    ]
