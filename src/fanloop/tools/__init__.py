"""Tools: the base class, the decorator, and the built-in tool set."""

from .base import FunctionTool, RunContext, Tool, ToolResult, current_context, tool

DEFAULT_TOOLS: tuple[Tool, ...] = ()
READ_ONLY_TOOLS: tuple[Tool, ...] = ()

__all__ = [
    "DEFAULT_TOOLS",
    "READ_ONLY_TOOLS",
    "FunctionTool",
    "RunContext",
    "Tool",
    "ToolResult",
    "current_context",
    "tool",
]
