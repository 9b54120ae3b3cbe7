"""Tools: the base class, the decorator, and the built-in tool set.

``DEFAULT_TOOLS`` holds one instance of every built-in tool (``remember`` and ``delegate`` are
added by the agent when memory or delegation is on); ``READ_ONLY_TOOLS`` is the subset that
cannot change anything, which sub-agents get. The default instances work in the current
directory at the time of each call; :func:`default_tools` builds fresh instances for another
workspace root or read cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy
from .base import FunctionTool, RunContext, Tool, ToolResult, current_context, tool

if TYPE_CHECKING:
    from ._builtin import (
        DEFAULT_TOOLS,
        MEMORY_FILE,
        READ_ONLY_NAMES,
        READ_ONLY_TOOLS,
        BashTool,
        BlockedAddressError,
        DeleteFileTool,
        EditFileTool,
        EnvTool,
        GitCommitTool,
        GitDiffTool,
        GitLogTool,
        GitStatusTool,
        GlobTool,
        GrepTool,
        HttpRequestTool,
        ListDirTool,
        NetworkPolicy,
        ReadCache,
        ReadFileTool,
        RememberTool,
        SqlQueryTool,
        SqlSchemaTool,
        WebFetchTool,
        Workspace,
        WriteFileTool,
        default_db_path,
        default_tools,
        guarded_transport,
        load_memory,
        memory_prompt,
        read_only_tools,
    )

# The built-in tools load on first use, so ``import fanloop`` stays light.
_EAGER = frozenset({"FunctionTool", "RunContext", "Tool", "ToolResult", "current_context", "tool"})


__all__ = [
    "DEFAULT_TOOLS",
    "MEMORY_FILE",
    "READ_ONLY_NAMES",
    "READ_ONLY_TOOLS",
    "BashTool",
    "BlockedAddressError",
    "DeleteFileTool",
    "EditFileTool",
    "EnvTool",
    "FunctionTool",
    "GitCommitTool",
    "GitDiffTool",
    "GitLogTool",
    "GitStatusTool",
    "GlobTool",
    "GrepTool",
    "HttpRequestTool",
    "ListDirTool",
    "NetworkPolicy",
    "ReadCache",
    "ReadFileTool",
    "RememberTool",
    "RunContext",
    "SqlQueryTool",
    "SqlSchemaTool",
    "Tool",
    "ToolResult",
    "WebFetchTool",
    "Workspace",
    "WriteFileTool",
    "current_context",
    "default_db_path",
    "default_tools",
    "guarded_transport",
    "load_memory",
    "memory_prompt",
    "read_only_tools",
    "tool",
]

__getattr__, __dir__ = lazy(__name__, {n: "._builtin" for n in __all__ if n not in _EAGER})
