"""``--mcp``: MCP servers whose tools join the agent's (see docs/cli.md and docs/mcp.md).

``--mcp "COMMAND ARGS..."`` starts a server as a subprocess (stdio); ``--mcp URL`` (``http://``
or ``https://``) connects to one over streamable HTTP. The option may be repeated.
"""

from __future__ import annotations

import argparse
import shlex
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from ._exits import EXIT_CONFIG, CommandError

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["MAX_SERVERS", "mcp_server", "open_mcp"]

MAX_SERVERS = 16
"""How many ``--mcp`` options one command takes."""


def mcp_server(spec: str) -> Any:
    """The :class:`~fanloop.mcp.MCPServer` an ``--mcp`` value describes.

    Raises:
        CommandError: with exit code 2 for an empty or unparsable value, or when the MCP
            extra is not installed.
    """
    try:
        from ..mcp import MCPServer
    except ImportError as exc:
        raise CommandError(f"--mcp: {exc}", EXIT_CONFIG) from None
    text = spec.strip()
    if text.lower().startswith(("http://", "https://")):
        return MCPServer.http(text)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CommandError(f"--mcp {spec!r}: {exc}", EXIT_CONFIG) from None
    if not words:
        raise CommandError('--mcp needs a command ("npx some-server") or a URL', EXIT_CONFIG)
    return MCPServer.stdio(words[0], words[1:])


async def open_mcp(args: argparse.Namespace, stack: AsyncExitStack) -> list[Tool]:
    """Open the servers of ``args.mcp`` on ``stack`` (closed when it is) and load their tools.

    The stack must be left by the task that entered it (the MCP SDK's rule).

    Raises:
        CommandError: a bad ``--mcp`` value (exit code 2).
        MCPServerError: a server could not be started or reached, or listed too much.
        ConfigurationError: two tools of the servers share a name.
    """
    specs: list[str] = list(getattr(args, "mcp", None) or [])
    if not specs:
        return []
    if len(specs) > MAX_SERVERS:
        raise CommandError(f"at most {MAX_SERVERS} --mcp servers", EXIT_CONFIG)
    from ..mcp import open_mcp_tools

    servers = [mcp_server(spec) for spec in specs]
    return list(await stack.enter_async_context(open_mcp_tools(servers)))
