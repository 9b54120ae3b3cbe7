"""What the file tools share: their base class and the messages of a failed open.

:class:`_FileTool` holds a tool's :class:`~fanloop.tools._workspace.Workspace` and its read
cache (see :mod:`fanloop.tools._readcache`). The helpers sniff binary files, write sizes for
people, refuse an over-long ``glob`` or ``grep`` pattern, and turn an :class:`OSError` from
opening a file into the :class:`~fanloop.errors.ToolError` the model sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ToolError
from ._fsafe import NotRegularFile
from ._readcache import Op, ReadCache, cache_scope, default_read_cache
from ._workspace import StrPath, Workspace
from .base import Tool

_SNIFF = 8192
_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAX_PATTERN = 1000  # characters in a grep or glob pattern


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head[:_SNIFF]


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1024
        if size < 1024 or unit == "TB":
            break
    return f"{size:.1f} {unit}"


def _read_failure(exc: OSError, display: str) -> ToolError:
    """The error the model sees when a file cannot be opened for reading."""
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"File not found: {display}. Use list_dir or glob to find the file.")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{display} is a directory, not a file. Use list_dir.")
    if isinstance(exc, NotRegularFile):
        return ToolError(f"{display} is not a regular file (a pipe, socket or device).")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"File not found: {display} (a parent of it is a file).")
    return ToolError(f"Cannot read {display}: {exc.strerror or exc}.")


def _write_failure(exc: OSError, display: str) -> ToolError:
    """The error the model sees when a file cannot be written."""
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{display} is a directory; write_file writes files.")
    if isinstance(exc, NotRegularFile):
        return ToolError(f"{display} is not a regular file (a pipe, socket or device).")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"Cannot write {display}: a parent of it is a file, not a directory.")
    return ToolError(f"Cannot write {display}: {exc.strerror or exc}.")


def _check_pattern(pattern: str, what: str) -> None:
    if len(pattern) > _MAX_PATTERN:
        raise ToolError(
            f"The {what} is {len(pattern):,} characters long; at most {_MAX_PATTERN:,} are allowed."
        )


class _FileTool(Tool):
    """Shared set-up: the workspace and the read cache."""

    def __init__(self, *, root: StrPath | None = None, read_cache: ReadCache | bool = True) -> None:
        self.workspace = Workspace(root)
        self._read_cache = read_cache

    @property
    def read_cache(self) -> ReadCache | None:
        """The read cache this tool logs to, or ``None`` when it is off."""
        if self._read_cache is True:
            return default_read_cache()
        if self._read_cache is False:
            return None
        return self._read_cache

    async def _log(self, path: Path, op: Op, **kw: Any) -> None:
        cache = self.read_cache
        if cache is not None:
            await cache.record(cache_scope(), str(path), op, **kw)

    def _safe_preview(self, build: Any, kwargs: dict[str, Any]) -> str:
        try:
            text: str = build(kwargs)
        except ToolError as exc:
            return f"{self.name} would fail: {exc}"
        except TimeoutError:
            return f"{self.name}: no preview (reading the file took too long)"
        return text
