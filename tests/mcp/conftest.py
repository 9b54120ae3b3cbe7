"""Fixtures for the MCP tests: real MCP servers, over stdio and streamable HTTP.

The servers live in ``servers/``. A stdio server is started by the test itself (inside
``async with server:``, because the SDK's task groups must be entered and left by the same
task, which pytest-asyncio's async fixtures do not guarantee). An HTTP server runs as a
subprocess that prints ``PORT <n>`` once its socket listens; the fixture waits for that line.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fanloop.mcp import MCPServer, MCPTool, load_mcp_tools

SERVERS = Path(__file__).parent / "servers"
TOOLS_SERVER = SERVERS / "tools_server.py"


@pytest.fixture(scope="session")
def stdio_listing() -> dict[str, MCPTool]:
    """The stdio server's tools, loaded once (closed since: for tests of their attributes)."""

    async def load() -> dict[str, MCPTool]:
        async with MCPServer.stdio(sys.executable, [str(TOOLS_SERVER)]) as server:
            tools = await load_mcp_tools(server)
        return {t.name: t for t in tools if isinstance(t, MCPTool)}

    return anyio.run(load)


@pytest.fixture
def stdio_server() -> Callable[..., MCPServer]:
    """Build (not start) an ``MCPServer`` for ``servers/tools_server.py`` over stdio."""

    def make(**kwargs: Any) -> MCPServer:
        return MCPServer.stdio(sys.executable, [str(TOOLS_SERVER)], **kwargs)

    return make


class HttpServerProcess:
    """``SCRIPT ARGS... --http`` (``tools_server.py`` by default) in a subprocess, ready to
    accept connections."""

    def __init__(self, script: Path = TOOLS_SERVER, *args: str) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.process = subprocess.Popen(
            [sys.executable, str(script), *args, "--http"],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until the socket listens, or EOF
        if not line.startswith("PORT "):
            self.close()
            self.stderr.seek(0)
            raise RuntimeError(f"HTTP MCP server did not start: {self.stderr.read()!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/mcp"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.stderr.close()


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    """The URL of an HTTP MCP server shared by the session's tests (do not crash it)."""
    server = HttpServerProcess()
    yield server.url
    server.close()


@pytest.fixture
def private_http_server() -> Iterator[HttpServerProcess]:
    """An HTTP MCP server of this test's own (for the tests that crash it)."""
    server = HttpServerProcess()
    yield server
    server.close()


@pytest.fixture
def http_server_of() -> Iterator[Callable[..., HttpServerProcess]]:
    """Start ``SCRIPT ARGS... --http`` servers of this test's own; each is closed after it."""
    started: list[HttpServerProcess] = []

    def start(script: Path, *args: str) -> HttpServerProcess:
        started.append(HttpServerProcess(script, *args))
        return started[-1]

    yield start
    for server in started:
        server.close()
