"""A hostile MCP server for fanloop's tests: a tool listing far too large, or never ending.

``flood_server.py MODE [--http]``, where MODE is:

- ``many:N``: ``N`` tools in one page, each with a ~500-byte description and schema (20,000
  of them make an 11 MB listing);
- ``endless``: every page lists two new tools and a ``nextCursor`` to another page;
- ``empty``: every page lists no tool and a ``nextCursor`` to another page;
- ``cycle``: every page lists no tool and the same ``nextCursor``;
- ``mixed:N``: ``tool_0`` and ``tool_3`` are fine, ``tool_1``'s description is ``N``
  characters long, ``tool_2``'s input schema is not a valid JSON Schema.

Over HTTP the server binds 127.0.0.1 on an ephemeral port, starts listening, and only then
prints ``PORT <n>`` on stdout (as ``tools_server.py`` does).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ListToolsResult, PaginatedRequestParams, Tool

server = MCPServer("fanloop-test-flood", version="0.0.1")
MODE = next((a for a in sys.argv[1:] if not a.startswith("--")), "many:20000")


def _tool(i: int, description: str | None = None) -> Tool:
    return Tool(
        name=f"tool_{i}",
        description=description if description is not None else f"Tool number {i}. " + "x" * 400,
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string", "description": f"the query for tool {i}"}},
            "required": ["q"],
        },
    )


def _listing() -> list[Tool]:
    kind, _, n = MODE.partition(":")
    if kind == "many":
        return [_tool(i) for i in range(int(n))]
    if kind == "mixed":
        invalid = _tool(2)
        invalid.input_schema = {"type": "object", "properties": {"q": {"type": 12}}}
        return [_tool(0), _tool(1, "y" * int(n)), invalid, _tool(3)]
    return []


LISTING = _listing()


async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
    page = int(params.cursor) if params is not None and params.cursor else 0
    if MODE == "endless":
        return ListToolsResult(
            tools=[_tool(2 * page), _tool(2 * page + 1)], next_cursor=str(page + 1)
        )
    if MODE == "empty":
        return ListToolsResult(tools=[], next_cursor=str(page + 1))
    if MODE == "cycle":
        return ListToolsResult(tools=[], next_cursor="7")
    return ListToolsResult(tools=LISTING)


server._lowlevel_server.add_request_handler("tools/list", PaginatedRequestParams, list_tools)


async def _serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        anyio.run(_serve_http)
    else:
        server.run()
