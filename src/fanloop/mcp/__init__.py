"""Tools from Model Context Protocol servers, as ordinary fanloop tools.

Needs the MCP SDK, an optional extra: ``pip install 'fanloop[mcp]'``.

::

    from fanloop.mcp import MCPServer, load_mcp_tools

    server = MCPServer.stdio(sys.executable, ["server.py"])  # or MCPServer.http(url)
    async with server:
        tools = await load_mcp_tools(server)

Errors::

    FanloopError
     └── MCPServerError          the server is not connected, failed, or answered nonsense
          ├── MCPConnectionError  the connection could not be opened (at ``async with``)
          └── MCPListingError     its tool listing broke a limit of MCPLimits

Tool calls never raise: failures (including a crashed server or a call past its timeout)
become error results the model reads.

What a server sends is bounded by :class:`MCPLimits` (``MCPServer.stdio(..., limits=...)``):
how many tools it may list, how many bytes the listing and each tool may take, how large one
message may be.
"""

try:
    import mcp as _mcp  # noqa: F401
except ImportError as _err:  # pragma: no cover - exercised by a test that hides the SDK
    raise ImportError(
        "fanloop.mcp needs the MCP SDK, an optional extra: pip install 'fanloop[mcp]'"
    ) from _err

from ._limits import MCPLimits
from ._server import MCPConnectionError, MCPListingError, MCPServer, MCPServerError
from ._tool import MCPTool, convert_result, load_mcp_tools, open_mcp_tools

__all__ = [
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
