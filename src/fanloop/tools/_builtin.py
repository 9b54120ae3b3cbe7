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
from ._netguard import BlockedAddressError, NetworkPolicy
from ._readcache import ReadCache, default_db_path
from ._workspace import StrPath, Workspace
from .base import FunctionTool, RunContext, Tool, ToolResult, current_context, tool
from .env import EnvTool
from .files import (
    DeleteFileTool,
    EditFileTool,
    GlobTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WriteFileTool,
)
from .git import GitCommitTool, GitDiffTool, GitLogTool, GitStatusTool
from .memory import MEMORY_FILE, RememberTool, load_memory, memory_prompt
from .shell import BashTool
from .sql import SqlQueryTool, SqlSchemaTool
from .web import HttpRequestTool, WebFetchTool

if TYPE_CHECKING:
    from ._guarded import guarded_transport

READ_ONLY_NAMES = (
    "read_file",
    "list_dir",
    "glob",
    "grep",
    "web_fetch",
    "git_status",
    "git_diff",
    "git_log",
    "sql_schema",
    "sql_query",
)
"""The names of the read-only built-in tools, in ``READ_ONLY_TOOLS`` order."""


def default_tools(
    *,
    root: StrPath | None = None,
    read_cache: ReadCache | bool = True,
    sql_dsn: str | None = None,
) -> tuple[Tool, ...]:
    """Fresh instances of every built-in tool (the same set as ``DEFAULT_TOOLS``).

    Args:
        root: the workspace root for the file, shell, git and SQLite tools (default: the
            current directory at the time of each call).
        read_cache: ``True`` for the shared read cache, a :class:`ReadCache` for another,
            ``False`` to turn it off.
        sql_dsn: the database of the SQL tools (default: ``$FANLOOP_SQL_DSN`` at call time).

    Example:
        >>> [t.name for t in default_tools(read_cache=False)][:3]
        ['read_file', 'write_file', 'edit_file']
    """
    return (
        ReadFileTool(root=root, read_cache=read_cache),
        WriteFileTool(root=root, read_cache=read_cache),
        EditFileTool(root=root, read_cache=read_cache),
        DeleteFileTool(root=root, read_cache=read_cache),
        ListDirTool(root=root),
        GlobTool(root=root),
        GrepTool(root=root),
        BashTool(root=root),
        WebFetchTool(),
        HttpRequestTool(),
        GitStatusTool(root=root),
        GitDiffTool(root=root),
        GitLogTool(root=root),
        GitCommitTool(root=root),
        EnvTool(),
        SqlSchemaTool(sql_dsn, root=root),
        SqlQueryTool(sql_dsn, root=root),
    )


def read_only_tools(
    *,
    root: StrPath | None = None,
    read_cache: ReadCache | bool = True,
    sql_dsn: str | None = None,
) -> tuple[Tool, ...]:
    """Fresh instances of the read-only built-in tools (the set of ``READ_ONLY_TOOLS``).

    Takes the same arguments as :func:`default_tools`.
    """
    tools = {t.name: t for t in default_tools(root=root, read_cache=read_cache, sql_dsn=sql_dsn)}
    return tuple(tools[name] for name in READ_ONLY_NAMES)


DEFAULT_TOOLS: tuple[Tool, ...] = default_tools()
"""Every built-in tool but ``remember`` and ``delegate``, working in the current directory."""

READ_ONLY_TOOLS: tuple[Tool, ...] = tuple(
    t for name in READ_ONLY_NAMES for t in DEFAULT_TOOLS if t.name == name
)
"""The read-only subset of ``DEFAULT_TOOLS`` (the same instances), given to sub-agents."""

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


# The connection guard (and httpcore2 under it) loads with a web tool's first client.
__getattr__, __dir__ = lazy(__name__, {"guarded_transport": "._guarded"})
