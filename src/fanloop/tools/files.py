"""File tools: read, write, edit and delete files, list directories, glob and grep.

Every tool here works inside a :class:`~fanloop.tools._workspace.Workspace`: paths are relative
to its root (the current directory by default; ``ReadFileTool(root=...)`` to fix one), and a
path that resolves outside the root, through ``..``, an absolute path or a symbolic link, is
refused with a :class:`~fanloop.errors.ToolError`.

The three tools that change files are dangerous; their :meth:`preview` is a unified diff of
the change they would make. ``read_file`` goes through the read cache (see
:mod:`fanloop.tools._readcache`), and the tools that change files tell the cache so.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from ..errors import ToolError
from ._readcache import Op, ReadCache, cache_scope, default_read_cache
from ._workspace import (
    StrPath,
    Workspace,
    arg_bool,
    arg_int,
    arg_opt_str,
    arg_str,
    truncate,
)
from .base import Tool, ToolResult

__all__ = [
    "DeleteFileTool",
    "EditFileTool",
    "GlobTool",
    "GrepTool",
    "ListDirTool",
    "ReadFileTool",
    "WriteFileTool",
]

_SNIFF = 8192
_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAX_PREVIEW = 20_000


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head[:_SNIFF]


def _check_special(path: Path, display: str) -> None:
    """Refuse a FIFO, socket or device: opening one could block or never end."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing or unreadable: the caller reports it
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ToolError(f"{display} is not a regular file (a pipe, socket or device).")


def _read_text(path: Path, display: str) -> str:
    """The whole file as text, or a ToolError the model can act on."""
    _check_special(path, display)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(
            f"File not found: {display}. Use list_dir or glob to find the file."
        ) from None
    except IsADirectoryError:
        raise ToolError(f"{display} is a directory, not a file. Use list_dir.") from None
    except OSError as exc:
        raise ToolError(f"Cannot read {display}: {exc.strerror or exc}.") from None
    if _is_binary(data):
        raise ToolError(f"{display} is a binary file ({len(data):,} bytes); it cannot be edited.")
    return data.decode("utf-8", errors="replace")


def unified_diff(old: str | None, new: str | None, display: str) -> str:
    """A unified diff from ``old`` to ``new`` (``None`` meaning the file does not exist)."""
    before = "/dev/null" if old is None else f"a/{display}"
    after = "/dev/null" if new is None else f"b/{display}"
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        (new or "").splitlines(keepends=True),
        before,
        after,
    )
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    if not text:
        return f"(no changes to {display})"
    return truncate(text, _MAX_PREVIEW, what="diff")


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
        return text


# -- read_file ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Slice:
    text: str
    digest: str
    total_lines: int
    first: int
    last: int
    cut: bool  # the character budget ended the slice early


def _read_slice(path: Path, display: str, offset: int, limit: int | None, budget: int) -> _Slice:
    _check_special(path, display)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise ToolError(
            f"File not found: {display}. Use list_dir or glob to find the file."
        ) from None
    except IsADirectoryError:
        raise ToolError(f"{display} is a directory, not a file. Use list_dir.") from None
    except OSError as exc:
        raise ToolError(f"Cannot read {display}: {exc.strerror or exc}.") from None
    digest = hashlib.sha256()
    parts: list[str] = []
    used = 0
    total = 0
    last = offset - 1
    cut = False
    with fh:
        head = fh.read(_SNIFF)
        if _is_binary(head):
            size = os.fstat(fh.fileno()).st_size
            raise ToolError(f"{display} is a binary file ({size:,} bytes); read_file shows text.")
        fh.seek(0)
        for total, raw in enumerate(fh, start=1):
            digest.update(raw)
            if total < offset or cut or (limit is not None and total >= offset + limit):
                continue
            line = raw.decode("utf-8", errors="replace")
            if used + len(line) > budget:
                if not parts:  # one enormous line: show its start
                    parts.append(line[: budget - used])
                    last = total
                cut = True
                continue
            parts.append(line)
            used += len(line)
            last = total
    return _Slice("".join(parts), digest.hexdigest(), total, offset, last, cut)


class ReadFileTool(_FileTool):
    """``read_file``: read a text file, optionally a range of lines.

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: ``True`` for the shared cache at ``~/.fanloop/fanloop.db``, a
            :class:`~fanloop.tools._readcache.ReadCache` for another, ``False`` for none.
        max_chars: the most characters one call returns; longer content is cut at a line
            boundary with a note telling the model how to read on.
    """

    name = "read_file"
    description = (
        "Read a text file in the workspace. Returns the file's content; with offset/limit, only "
        "that range of lines (1-based). If you already read the same range of an unchanged file "
        "in this conversation, you get a short notice instead; pass force=true to get the "
        "content again (e.g. after it dropped out of your context)."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to return (1-based). Default: 1.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "How many lines to return. Default: to the end of the file.",
            },
            "force": {
                "type": "boolean",
                "description": "Return the content even if it is unchanged since your last read.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    concurrent_safe = True

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        read_cache: ReadCache | bool = True,
        max_chars: int = 50_000,
    ) -> None:
        super().__init__(root=root, read_cache=read_cache)
        self.max_chars = max_chars

    async def run(self, **kwargs: Any) -> ToolResult:
        """Read the file; see the class docstring."""
        raw_path = arg_str(kwargs, "path")
        offset = arg_int(kwargs, "offset", minimum=1) or 1
        limit = arg_int(kwargs, "limit", minimum=1)
        force = arg_bool(kwargs, "force")
        root = self.workspace.root
        path = self.workspace.resolve(raw_path, root=root)
        display = self.workspace.display(path, root=root)
        piece = await anyio.to_thread.run_sync(
            _read_slice, path, display, offset, limit, self.max_chars
        )
        text = self._render(piece, display, offset, limit)
        cache = self.read_cache
        scope = cache_scope()
        if cache is not None:
            if not force and await cache.seen(
                scope, str(path), offset=offset, limit=limit, digest=piece.digest
            ):
                return ToolResult(
                    f"[{display}{_range_label(offset, limit)} is unchanged since you last read "
                    "it in this conversation; its content is earlier in your context. "
                    "Pass force=true to read it again.]",
                    metadata={"cached": True},
                )
            await cache.record(
                scope, str(path), "read", offset=offset, limit=limit, digest=piece.digest
            )
        return ToolResult(text)

    def _render(self, piece: _Slice, display: str, offset: int, limit: int | None) -> str:
        if piece.total_lines == 0:
            return f"[{display} is empty]"
        if offset > piece.total_lines:
            raise ToolError(
                f"offset {offset} is past the end of {display}, which has "
                f"{piece.total_lines} lines."
            )
        whole = offset == 1 and piece.last == piece.total_lines and not piece.cut
        if whole:
            return piece.text
        text = piece.text if piece.text.endswith("\n") else piece.text + "\n"
        note = f"[lines {piece.first}-{piece.last} of {piece.total_lines} in {display}"
        if piece.cut:
            note += f"; output cut at {self.max_chars:,} characters"
        if piece.last < piece.total_lines:
            note += f"; pass offset={piece.last + 1} to read on"
        return text + note + "]"


def _range_label(offset: int, limit: int | None) -> str:
    if offset == 1 and limit is None:
        return ""
    end = "end" if limit is None else str(offset + limit - 1)
    return f" (lines {offset}-{end})"


# -- write_file -----------------------------------------------------------------------------


def _existing_text(path: Path) -> str | None:
    """The current text of ``path``, ``None`` if it does not exist."""
    _check_special(path, "The path")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ToolError("The path is a directory; write_file writes files.") from None
    except OSError as exc:
        raise ToolError(f"Cannot read the current file: {exc.strerror or exc}.") from None
    if _is_binary(data):
        return f"(binary file, {len(data):,} bytes)\n"
    return data.decode("utf-8", errors="replace")


class WriteFileTool(_FileTool):
    """``write_file``: create a file or overwrite it with new content (dangerous).

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: the read cache to tell about the write (see :class:`ReadFileTool`).
    """

    name = "write_file"
    description = (
        "Create a text file, or overwrite an existing one, with the given content. Parent "
        "directories are created. Prefer edit_file for changing part of an existing file."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "content": {"type": "string", "description": "The complete new content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    dangerous = True

    def preview(self, **kwargs: Any) -> str:
        """A unified diff of the write."""
        return self._safe_preview(self._diff, kwargs)

    def _diff(self, kwargs: dict[str, Any]) -> str:
        root = self.workspace.root
        path = self.workspace.resolve(arg_str(kwargs, "path"), root=root)
        content = arg_str(kwargs, "content")
        return unified_diff(_existing_text(path), content, self.workspace.display(path, root=root))

    async def run(self, **kwargs: Any) -> ToolResult:
        """Write the file; see the class docstring."""
        root = self.workspace.root
        path = self.workspace.resolve(arg_str(kwargs, "path"), root=root)
        content = arg_str(kwargs, "content")
        display = self.workspace.display(path, root=root)
        existed = await anyio.to_thread.run_sync(_write, path, display, content, root)
        await self._log(path, "write")
        data = content.encode()
        verb = "Overwrote" if existed else "Created"
        lines = content.count("\n") + (0 if not content or content.endswith("\n") else 1)
        return ToolResult(f"{verb} {display} ({lines} lines, {len(data):,} bytes).")


def _write(path: Path, display: str, content: str, root: Path) -> bool:
    if path.is_dir():
        raise ToolError(f"{display} is a directory; write_file writes files.")
    _check_special(path, display)
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The parent may have been created through a link made since the check: re-check.
        if not path.parent.resolve().is_relative_to(root):
            raise ToolError(f"Refused: {display} resolves outside the workspace root.")
        with path.open("w", encoding="utf-8", newline="") as fh:
            fh.write(content)
    except OSError as exc:
        raise ToolError(f"Cannot write {display}: {exc.strerror or exc}.") from None
    return existed


# -- edit_file ------------------------------------------------------------------------------


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def apply_edit(
    text: str, old: str, new: str, *, replace_all: bool, display: str
) -> tuple[str, int]:
    """Replace ``old`` with ``new`` in ``text``; return the new text and the count replaced.

    Raises:
        ToolError: ``old`` is empty, equal to ``new``, missing, or (without ``replace_all``)
            found more than once.
    """
    if not old:
        raise ToolError("old_string is empty; give the exact text to replace.")
    if old == new:
        raise ToolError("old_string and new_string are the same; there is nothing to change.")
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        crlf_old = old.replace("\n", "\r\n")
        if crlf_old in text:  # the file uses CRLF line endings; the model wrote LF
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
    if count == 0:
        raise ToolError(f"old_string was not found in {display}.{_near_miss(text, old)}")
    if count > 1 and not replace_all:
        starts: list[int] = []
        at = text.find(old)
        while at != -1 and len(starts) < 10:
            starts.append(_line_of(text, at))
            at = text.find(old, at + 1)
        where = ", ".join(map(str, starts))
        raise ToolError(
            f"old_string occurs {count} times in {display} (starting on lines {where}). "
            "Include more surrounding lines to make it unique, or set replace_all=true."
        )
    return text.replace(old, new), count


def _near_miss(text: str, old: str) -> str:
    """A hint when ``old`` matches except for whitespace."""
    wanted = [line.strip() for line in old.splitlines() if line.strip()]
    if not wanted:
        return " It must match the file exactly, including whitespace."
    lines = [line.strip() for line in text.splitlines()]
    for i in range(len(lines) - len(wanted) + 1):
        if lines[i] == wanted[0] and [x for x in lines[i:] if x][: len(wanted)] == wanted:
            return (
                f" A match that differs only in whitespace or indentation starts on line "
                f"{i + 1}; copy the text exactly as read_file shows it."
            )
    return " It must match the file exactly, including whitespace; read the file again."


class EditFileTool(_FileTool):
    """``edit_file``: replace an exact substring of a file (dangerous).

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: the read cache to tell about the edit (see :class:`ReadFileTool`).
    """

    name = "edit_file"
    description = (
        "Replace an exact substring of a text file with new text. old_string must match the "
        "file exactly (whitespace and indentation included) and occur exactly once, unless "
        "replace_all=true replaces every occurrence."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one.",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    dangerous = True

    def preview(self, **kwargs: Any) -> str:
        """A unified diff of the edit (or the reason it would fail)."""
        return self._safe_preview(lambda kw: self._plan(kw)[3], kwargs)

    def _plan(self, kwargs: dict[str, Any]) -> tuple[Path, str, int, str]:
        root = self.workspace.root
        path = self.workspace.resolve(arg_str(kwargs, "path"), root=root)
        display = self.workspace.display(path, root=root)
        old = arg_str(kwargs, "old_string")
        new = arg_str(kwargs, "new_string")
        replace_all = arg_bool(kwargs, "replace_all")
        text = _read_text(path, display)
        updated, count = apply_edit(text, old, new, replace_all=replace_all, display=display)
        return path, updated, count, unified_diff(text, updated, display)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Make the edit; see the class docstring."""
        path, updated, count, _ = await anyio.to_thread.run_sync(self._plan, kwargs)
        display = self.workspace.display(path)
        try:
            await anyio.to_thread.run_sync(_write_exact, path, updated)
        except OSError as exc:
            raise ToolError(f"Cannot write {display}: {exc.strerror or exc}.") from None
        await self._log(path, "edit")
        what = "1 occurrence" if count == 1 else f"{count} occurrences"
        return ToolResult(f"Edited {display}: replaced {what}.")


def _write_exact(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        fh.write(text)


# -- delete_file ----------------------------------------------------------------------------


class DeleteFileTool(_FileTool):
    """``delete_file``: delete one file (dangerous). A symbolic link is removed, not its target.

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: the read cache to tell about the delete (see :class:`ReadFileTool`).
    """

    name = "delete_file"
    description = "Delete a file in the workspace. Directories are not deleted."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    dangerous = True

    def _target(self, kwargs: dict[str, Any]) -> tuple[Path, str]:
        raw = arg_str(kwargs, "path")
        root = self.workspace.root
        resolved = self.workspace.resolve(raw, root=root)  # refuses escapes, links included
        lexical = Path(os.path.normpath(root / raw))
        if lexical.is_symlink():  # remove the link itself, inside its (checked) directory
            parent = self.workspace.resolve(os.path.dirname(raw) or ".", root=root)
            link = parent / lexical.name
            return link, self.workspace.display(link, root=root)
        return resolved, self.workspace.display(resolved, root=root)

    def preview(self, **kwargs: Any) -> str:
        """A unified diff removing the file's content."""

        def build(kw: dict[str, Any]) -> str:
            path, display = self._target(kw)
            if path.is_symlink():
                return f"delete the symbolic link {display} -> {os.readlink(path)}"
            return unified_diff(_read_text_or_note(path, display), None, display)

        return self._safe_preview(build, kwargs)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Delete the file; see the class docstring."""
        path, display = self._target(kwargs)
        try:
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                raise ToolError(f"{display} is a directory; delete_file deletes files only.")
            path.unlink()
        except FileNotFoundError:
            raise ToolError(f"File not found: {display}.") from None
        except OSError as exc:
            raise ToolError(f"Cannot delete {display}: {exc.strerror or exc}.") from None
        await self._log(path, "delete")
        return ToolResult(f"Deleted {display}.")


def _read_text_or_note(path: Path, display: str) -> str:
    _check_special(path, display)
    if path.is_dir():
        raise ToolError(f"{display} is a directory; delete_file deletes files only.")
    data = path.read_bytes() if path.exists() else None
    if data is None:
        raise ToolError(f"File not found: {display}.")
    if _is_binary(data):
        return f"(binary file, {len(data):,} bytes)\n"
    return data.decode("utf-8", errors="replace")


# -- list_dir -------------------------------------------------------------------------------


class ListDirTool(_FileTool):
    """``list_dir``: list a directory's entries.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_entries: the most entries one call lists.
    """

    name = "list_dir"
    description = (
        "List the entries of a directory in the workspace: sub-directories end with '/', files "
        "show their size, symbolic links their target."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory relative to the workspace root. Default: the root.",
            },
        },
        "additionalProperties": False,
    }
    concurrent_safe = True

    def __init__(self, *, root: StrPath | None = None, max_entries: int = 1000) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_entries = max_entries

    async def run(self, **kwargs: Any) -> ToolResult:
        """List the directory; see the class docstring."""
        root = self.workspace.root
        path = self.workspace.resolve(arg_str(kwargs, "path", "."), root=root)
        display = self.workspace.display(path, root=root)
        return ToolResult(await anyio.to_thread.run_sync(self._list, path, display))

    def _list(self, path: Path, display: str) -> str:
        try:
            entries = sorted(os.scandir(path), key=lambda e: (not _is_dir(e), e.name))
        except FileNotFoundError:
            raise ToolError(f"Directory not found: {display}.") from None
        except NotADirectoryError:
            raise ToolError(f"{display} is a file, not a directory. Use read_file.") from None
        except OSError as exc:
            raise ToolError(f"Cannot list {display}: {exc.strerror or exc}.") from None
        if not entries:
            return f"[{display} is empty]"
        lines = [f"{display}/" if display != "." else "./"]
        for entry in entries[: self.max_entries]:
            lines.append("  " + _describe(entry))
        if len(entries) > self.max_entries:
            lines.append(f"[listing cut at {self.max_entries} of {len(entries)} entries]")
        return "\n".join(lines)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _describe(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.path)}"
        if entry.is_dir(follow_symlinks=False):
            return f"{entry.name}/"
        return f"{entry.name}  ({_size(entry.stat(follow_symlinks=False).st_size)})"
    except OSError:
        return entry.name


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KB", "MB", "GB"):
        size /= 1024
        if size < 1024 or unit == "GB":
            break
    return f"{size:.1f} {unit}"


# -- glob -----------------------------------------------------------------------------------


class GlobTool(_FileTool):
    """``glob``: find files whose path matches a glob pattern.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_results: the most paths one call returns.
    """

    name = "glob"
    description = (
        "Find files in the workspace whose path matches a glob pattern, e.g. '**/*.py' or "
        "'src/*.toml' ('**' matches any number of directories). Returns matching paths relative "
        "to the workspace root, sorted; .git is skipped."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The glob pattern."},
            "path": {
                "type": "string",
                "description": "Directory to search from. Default: the workspace root.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    concurrent_safe = True

    def __init__(self, *, root: StrPath | None = None, max_results: int = 500) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_results = max_results

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run the glob; see the class docstring."""
        pattern = arg_str(kwargs, "pattern").strip()
        if not pattern:
            raise ToolError("The pattern is empty; give a glob such as '**/*.py'.")
        if pattern.startswith(("/", "\\")) or ".." in Path(pattern).parts:
            raise ToolError("The pattern must be relative and must not contain '..'.")
        root = self.workspace.root
        base = self.workspace.resolve(arg_str(kwargs, "path", "."), root=root)
        if not base.is_dir():
            raise ToolError(f"{self.workspace.display(base, root=root)} is not a directory.")
        found = await anyio.to_thread.run_sync(self._glob, base, pattern, root)
        if not found:
            return ToolResult(f"No files match {pattern!r}.")
        shown = found[: self.max_results]
        text = "\n".join(shown)
        if len(found) > self.max_results:
            text += f"\n[{len(found)} matches; showing the first {self.max_results}]"
        return ToolResult(text)

    def _glob(self, base: Path, pattern: str, root: Path) -> list[str]:
        out: list[str] = []
        try:
            for match in base.glob(pattern):
                rel = match.relative_to(base)
                if _SKIP_DIRS.intersection(rel.parts):
                    continue
                try:
                    real = match.resolve()
                except OSError:
                    continue
                if not real.is_relative_to(root):
                    continue  # a link out of the workspace: not ours to show
                shown = self_display(match, root)
                out.append(shown + "/" if match.is_dir() else shown)
                if len(out) >= 20 * self.max_results:
                    break
        except (ValueError, NotImplementedError) as exc:
            raise ToolError(f"Invalid glob pattern {pattern!r}: {exc}.") from None
        return sorted(out)


def self_display(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (lexically), POSIX style."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


# -- grep -----------------------------------------------------------------------------------


class GrepTool(_FileTool):
    """``grep``: search file contents with a regular expression.

    Binary files, files over ``max_file_bytes`` and ``.git`` directories are skipped; output is
    bounded by ``max_matches`` and ``max_chars``, and the search by ``time_budget`` seconds.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_matches: the default (and ceiling) number of matching lines returned.
        max_chars: the most characters one call returns.
        max_file_bytes: larger files are skipped.
        time_budget: seconds after which the search stops and reports what it found.
    """

    name = "grep"
    description = (
        "Search the contents of files in the workspace with a regular expression (Python "
        "syntax). Returns 'path:line: text' for each matching line. Binary files and .git are "
        "skipped. Narrow the search with path and include (a file-name glob such as '*.py')."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": {
                "type": "string",
                "description": "File or directory to search. Default: the workspace root.",
            },
            "include": {
                "type": "string",
                "description": "Only search files whose name matches this glob, e.g. '*.py'.",
            },
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively."},
            "max_matches": {
                "type": "integer",
                "minimum": 1,
                "description": "Stop after this many matching lines. Default: 200.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    concurrent_safe = True

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        max_matches: int = 200,
        max_chars: int = 30_000,
        max_file_bytes: int = 5_000_000,
        time_budget: float = 20.0,
    ) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_matches = max_matches
        self.max_chars = max_chars
        self.max_file_bytes = max_file_bytes
        self.time_budget = time_budget

    async def run(self, **kwargs: Any) -> ToolResult:
        """Search; see the class docstring."""
        pattern = arg_str(kwargs, "pattern")
        flags = re.IGNORECASE if arg_bool(kwargs, "ignore_case") else 0
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise ToolError(f"Invalid regular expression {pattern!r}: {exc}.") from None
        include = arg_opt_str(kwargs, "include")
        limit = min(arg_int(kwargs, "max_matches", minimum=1) or self.max_matches, self.max_matches)
        root = self.workspace.root
        base = self.workspace.resolve(arg_str(kwargs, "path", "."), root=root)
        if not base.exists():
            raise ToolError(f"Not found: {self.workspace.display(base, root=root)}.")
        text = await anyio.to_thread.run_sync(
            self._search, regex, base, root, include, limit, abandon_on_cancel=True
        )
        return ToolResult(text)

    def _search(
        self, regex: re.Pattern[str], base: Path, root: Path, include: str | None, limit: int
    ) -> str:
        deadline = time.monotonic() + self.time_budget
        out: list[str] = []
        used = 0
        files = 0
        stopped = ""
        for file in _walk(base, root, include):
            if time.monotonic() > deadline:
                stopped = f"the search stopped after {self.time_budget:g} s"
                break
            try:
                info = file.stat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_file_bytes:
                    continue
                data = file.read_bytes()
            except OSError:
                continue
            if _is_binary(data):
                continue
            files += 1
            shown = self_display(file, root)
            for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line) is None:
                    continue
                if len(line) > 300:
                    line = line[:300] + " [line cut]"
                entry = f"{shown}:{lineno}: {line}"
                if len(out) >= limit:
                    stopped = f"stopped at {limit} matches; narrow the pattern, path or include"
                    break
                if used + len(entry) > self.max_chars:
                    stopped = f"output cut at {self.max_chars:,} characters; narrow the search"
                    break
                out.append(entry)
                used += len(entry) + 1
            if stopped:
                break
        if not out:
            tail = f" ({stopped})" if stopped else ""
            return f"No matches for /{regex.pattern}/ in {files} files searched.{tail}"
        text = "\n".join(out)
        return text + (f"\n[{stopped}]" if stopped else "")


def _walk(base: Path, root: Path, include: str | None) -> Iterator[Path]:
    """Regular files under ``base`` (or ``base`` itself), sorted, inside the root."""
    if base.is_file():
        yield base
        return
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if include is not None and not path.relative_to(base).match(include):
                continue
            if path.is_symlink():
                try:
                    real = path.resolve()
                except OSError:
                    continue
                if not real.is_relative_to(root) or not real.is_file():
                    continue
            yield path
