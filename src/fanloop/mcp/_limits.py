"""How much an MCP server may send: :class:`MCPLimits`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "MAX_LIST_PAGES", "MCPLimits"]

MAX_LIST_PAGES = 100
"""Pages a tool listing may span (a server that pages on forever is refused at this)."""


@dataclass(frozen=True, slots=True)
class MCPLimits:
    """Caps on what an MCP server sends, checked before the MCP SDK or the agent sees it.

    A server is trusted with the tools it offers, not with your event loop or your requests:
    every tool it lists goes to the model in every request of every run that uses it.

    Attributes:
        max_tools: tools one listing may hold (all pages; before ``include=`` picks from them).
            128 by default: OpenAI refuses a request with more than 128 tools, and models pick
            tools worse long before that. More is an :class:`~fanloop.mcp.MCPListingError`.
        max_listing_bytes: bytes the whole listing may take (all pages, as sent): 1 MiB by
            default, 8 KiB per tool at the default ``max_tools``. More is an
            :class:`~fanloop.mcp.MCPListingError`; a page over it is refused before it is
            decoded.
        max_tool_bytes: bytes one tool may take (its name, description and schemas, as JSON):
            64 KiB by default. A larger tool is skipped with an ``mcp_tool_skipped`` warning;
            the others load.
        max_message_bytes: bytes one message from the server may take (a stdio line, an HTTP
            response body), before it is decoded: 32 MiB by default, room for a tool result
            carrying the 20 MiB of images and documents a result may hold (as base64). A larger
            message ends the connection (stdio) or fails its request (HTTP).

    Example:
        >>> MCPLimits(max_tools=300).max_listing_bytes
        1048576
    """

    max_tools: int = 128
    max_listing_bytes: int = 1 << 20
    max_tool_bytes: int = 64 << 10
    max_message_bytes: int = 32 << 20

    def __post_init__(self) -> None:
        for name in ("max_tools", "max_listing_bytes", "max_tool_bytes", "max_message_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MCPLimits.{name} must be a positive whole number, not {value!r}")


DEFAULT_LIMITS = MCPLimits()
