"""A small MCP server for fanloop's tests: stdio by default, streamable HTTP with ``--http``.

Tools: ``add``, ``echo``, ``lookup`` (read-only), ``fail`` (raises ToolError), ``hang`` (never
returns), ``crash`` (kills its own process), ``pid`` (read-only), ``picture`` (image content),
``shout`` (structured output only), ``report`` (an embedded PDF resource), ``mislabeled``
(JPEG bytes labelled image/png).

Over HTTP the server binds 127.0.0.1 on an ephemeral port, starts listening, and only then
prints ``PORT <n>`` on stdout, so the test can connect as soon as it reads that line.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    ToolAnnotations,
)

server = MCPServer("fanloop-test-tools", version="0.0.1")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat a text."""
    return " ".join([text] * times)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str) -> str:
    """Look a key up in a fixed table."""
    return {"pi": "3.14159", "e": "2.71828"}.get(key, "unknown")


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool()
async def hang() -> str:
    """Never returns."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def crash() -> str:
    """Kill this server's own process, as a crash would."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def picture() -> CallToolResult:
    """Return a tiny image and a line of text."""
    data = base64.b64encode(b"\x89PNG fake").decode()
    return CallToolResult(
        content=[
            TextContent(type="text", text="here is a picture"),
            ImageContent(type="image", data=data, mime_type="image/png"),
        ]
    )


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def report() -> CallToolResult:
    """Return a one-page PDF as an embedded resource."""
    pdf = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
    blob = BlobResourceContents(
        uri="file:///reports/q3.pdf",
        mime_type="application/pdf",
        blob=base64.b64encode(pdf).decode(),
    )
    return CallToolResult(content=[EmbeddedResource(type="resource", resource=blob)])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def mislabeled() -> CallToolResult:
    """Claim a PNG, send JPEG bytes (fanloop sends them as JPEG)."""
    data = base64.b64encode(b"\xff\xd8\xff\xe0 not a png").decode()
    return CallToolResult(content=[ImageContent(type="image", data=data, mime_type="image/png")])


@server.tool(structured_output=True)
def shout(text: str) -> CallToolResult:
    """Structured content only, no text blocks."""
    return CallToolResult(content=[], structured_content={"upper": text.upper()})


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
