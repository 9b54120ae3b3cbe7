"""File tools: read, write, edit and delete files, list directories, glob and grep.

Every tool here works inside a :class:`~fanloop.tools._workspace.Workspace`: paths are relative
to its root (the current directory by default; ``ReadFileTool(root=...)`` to fix one), and a
path that resolves outside the root, through ``..``, an absolute path or a symbolic link, is
refused with a :class:`~fanloop.errors.ToolError`. What is opened is what was checked: files
are opened beneath the root one directory at a time, never through a symbolic link swapped in
after the check (see :mod:`fanloop.tools._fsafe`).

Walks (``list_dir``, ``glob``, ``grep``) never follow a symbolic link to a directory, so they
stay in the tree and survive link loops; a link to a file is shown or searched only when its
target is inside the workspace. Every tool's blocking work runs through
:func:`~fanloop.tools._blocking.run_blocking`: it ends with the tool's timeout, the run's
deadline or cancellation, and memory is bounded by the tools' caps, not by the files.

The three tools that change files are dangerous; their :meth:`preview` is a unified diff of
the change they would make. ``read_file`` goes through the read cache (see
:mod:`fanloop.tools._readcache`), and the tools that change files tell the cache so.

This module holds the three tools that change files and re-exports the others: ``read_file``
lives in :mod:`fanloop.tools._read`, ``list_dir`` and ``glob`` in
:mod:`fanloop.tools._listing`, ``grep`` in :mod:`fanloop.tools._grep`. The previews' diffs are
made in :mod:`fanloop.tools._diff`, and :mod:`fanloop.tools._filebase` holds what all the file
tools share.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from .._record import record
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._diff import _PREVIEW_BYTES, _current_text, _near_miss, _preview_stop
from ._diff import unified_diff as unified_diff
from ._filebase import _FileTool, _is_binary, _read_failure, _size, _write_failure
from ._fread import read_capped
from ._fsafe import NotRegularFile, Place, at, existing, open_regular, replace
from ._grep import GrepTool
from ._listing import GlobTool, ListDirTool
from ._listing import States as States
from ._read import ReadFileTool
from ._readcache import ReadCache
from ._workspace import StrPath, Workspace, arg_bool, arg_str, count
from .base import ToolResult

__all__ = [
    "DeleteFileTool",
    "EditFileTool",
    "GlobTool",
    "GrepTool",
    "ListDirTool",
    "ReadFileTool",
    "WriteFileTool",
]


# -- write_file -----------------------------------------------------------------------------


@record(frozen=True)
class _Written:
    path: Path
    display: str
    existed: bool


def _write(stop: Stop, workspace: Workspace, raw: str, root: Path, data: bytes) -> _Written:
    def work(place: Place) -> _Written:
        before = existing(place)
        stop.check()
        replace(place, data, like=before)
        return _Written(place.path, place.display, before is not None)

    return at(workspace, raw, work, root=root, fail=_write_failure, create_parents=True)


class _Missing(Exception):
    """A parent of the previewed path does not exist yet."""


def _missing_or(exc: OSError, display: str) -> Exception:
    if isinstance(exc, FileNotFoundError):
        return _Missing()
    return _write_failure(exc, display)


class WriteFileTool(_FileTool):
    """``write_file``: create a file or overwrite it with new content (dangerous).

    The content goes to a new file in the same directory, renamed over the old one: the old
    file keeps its content until the rename, its permission bits carry over, and a hard or
    symbolic link at the path is replaced, never written through.

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: the read cache to tell about the write (see :class:`ReadFileTool`).
        max_preview_bytes: a larger existing file is not read for the preview's diff.
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

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        read_cache: ReadCache | bool = True,
        max_preview_bytes: int = _PREVIEW_BYTES,
    ) -> None:
        super().__init__(root=root, read_cache=read_cache)
        self.max_preview_bytes = max_preview_bytes

    def preview(self, **kwargs: Any) -> str:
        """A unified diff of the write."""
        return self._safe_preview(self._diff, kwargs)

    def _diff(self, kwargs: dict[str, Any]) -> str:
        root = self.workspace.root
        raw = arg_str(kwargs, "path")
        content = arg_str(kwargs, "content")
        display = self.workspace.display(self.workspace.resolve(raw, root=root), root=root)
        stop = _preview_stop()
        try:
            old = at(
                self.workspace,
                raw,
                lambda place: _current_text(place, stop, self.max_preview_bytes),
                root=root,
                fail=_missing_or,
            )
        except _Missing:
            old = None
        return unified_diff(old, content, display)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Write the file; see the class docstring."""
        raw = arg_str(kwargs, "path")
        content = arg_str(kwargs, "content")
        data = content.encode("utf-8", errors="replace")
        done = await run_blocking(_write, self.workspace, raw, self.workspace.root, data)
        await self._log(done.path, "write")
        verb = "Overwrote" if done.existed else "Created"
        lines = content.count("\n") + (0 if not content or content.endswith("\n") else 1)
        return ToolResult(
            f"{verb} {done.display} ({count(lines, 'line')}, {count(len(data), 'byte')})."
        )


# -- edit_file ------------------------------------------------------------------------------


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def apply_edit(
    text: str,
    old: str,
    new: str,
    *,
    replace_all: bool,
    display: str,
    max_chars: int | None = None,
) -> tuple[str, int]:
    """Replace ``old`` with ``new`` in ``text``; return the new text and the count replaced.

    Raises:
        ToolError: ``old`` is empty, equal to ``new``, missing, or (without ``replace_all``)
            found more than once; or the result would be longer than ``max_chars``.
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
        at_ = text.find(old)
        while at_ != -1 and len(starts) < 10:
            starts.append(_line_of(text, at_))
            at_ = text.find(old, at_ + 1)
        where = ", ".join(map(str, starts))
        raise ToolError(
            f"old_string occurs {count} times in {display} (starting on lines {where}). "
            "Include more surrounding lines to make it unique, or set replace_all=true."
        )
    size = len(text) + count * (len(new) - len(old))
    if max_chars is not None and size > max_chars:
        raise ToolError(
            f"The edit would make {display} {size:,} characters long, over the "
            f"{max_chars:,} edit_file allows."
        )
    return text.replace(old, new), count


@record(frozen=True)
class _Edit:
    path: Path
    display: str
    count: int
    diff: str


def _edit(
    stop: Stop,
    workspace: Workspace,
    root: Path,
    kwargs: dict[str, Any],
    cap: int,
    write: bool,
) -> _Edit:
    raw = arg_str(kwargs, "path")
    old = arg_str(kwargs, "old_string")
    new = arg_str(kwargs, "new_string")
    replace_all = arg_bool(kwargs, "replace_all")

    def work(place: Place) -> _Edit:
        fd, info = open_regular(place)
        try:
            data = None if info.st_size > cap else read_capped(fd, cap, stop)
        finally:
            os.close(fd)
        if data is None:
            raise ToolError(
                f"{place.display} is {_size(max(info.st_size, cap + 1))}; edit_file edits "
                f"files up to {cap:,} bytes. Replace it whole with write_file instead."
            )
        if _is_binary(data):
            raise ToolError(
                f"{place.display} is a binary file ({len(data):,} bytes); it cannot be edited."
            )
        text = data.decode("utf-8", errors="replace")
        updated, count = apply_edit(
            text, old, new, replace_all=replace_all, display=place.display, max_chars=cap
        )
        if write:
            stop.check()
            replace(place, updated.encode("utf-8", errors="replace"), like=info)
            return _Edit(place.path, place.display, count, "")
        return _Edit(place.path, place.display, count, unified_diff(text, updated, place.display))

    return at(workspace, raw, work, root=root, fail=_edit_failure)


def _edit_failure(exc: OSError, display: str) -> ToolError:
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotRegularFile):
        return _read_failure(exc, display)
    return _write_failure(exc, display)


class EditFileTool(_FileTool):
    """``edit_file``: replace an exact substring of a file (dangerous).

    The file is read whole, so its size is capped (``max_file_bytes``); the edited text is
    written like :class:`WriteFileTool` writes.

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: the read cache to tell about the edit (see :class:`ReadFileTool`).
        max_file_bytes: larger files are refused with an error that says so.
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

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        read_cache: ReadCache | bool = True,
        max_file_bytes: int = 5_000_000,
    ) -> None:
        super().__init__(root=root, read_cache=read_cache)
        self.max_file_bytes = max_file_bytes

    def preview(self, **kwargs: Any) -> str:
        """A unified diff of the edit (or the reason it would fail)."""

        def build(kw: dict[str, Any]) -> str:
            stop = _preview_stop()
            root = self.workspace.root
            return _edit(stop, self.workspace, root, kw, self.max_file_bytes, False).diff

        return self._safe_preview(build, kwargs)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Make the edit; see the class docstring."""
        done = await run_blocking(
            _edit, self.workspace, self.workspace.root, kwargs, self.max_file_bytes, True
        )
        await self._log(done.path, "edit")
        what = "1 occurrence" if done.count == 1 else f"{done.count} occurrences"
        return ToolResult(f"Edited {done.display}: replaced {what}.")


# -- delete_file ----------------------------------------------------------------------------


def _delete_failure(exc: OSError, display: str) -> ToolError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return ToolError(f"File not found: {display}.")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{display} is a directory; delete_file deletes files only.")
    return ToolError(f"Cannot delete {display}: {exc.strerror or exc}.")


def _lstat(place: Place) -> os.stat_result:
    if not place.name:
        raise IsADirectoryError
    info = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError
    return info


def _delete(stop: Stop, workspace: Workspace, raw: str, root: Path) -> tuple[Path, str]:
    def work(place: Place) -> tuple[Path, str]:
        _lstat(place)
        stop.check()
        os.unlink(place.name, dir_fd=place.dir_fd)  # never follows; a directory fails
        return place.path, place.display

    return at(workspace, raw, work, root=root, fail=_delete_failure, follow_last=False)


class DeleteFileTool(_FileTool):
    """``delete_file``: delete one file (dangerous).

    A symbolic link is removed itself, wherever it points (in the workspace or out of it); its
    target is never touched. Directories are refused.

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

    def preview(self, **kwargs: Any) -> str:
        """A unified diff removing the file's content."""
        stop = _preview_stop()

        def show(place: Place) -> str:
            info = _lstat(place)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(place.name, dir_fd=place.dir_fd)
                return f"delete the symbolic link {place.display} -> {target}"
            if not stat.S_ISREG(info.st_mode):
                return f"delete {place.display} (not a regular file: a pipe, socket or device)"
            old = _current_text(place, stop, _PREVIEW_BYTES)
            return unified_diff(old, None, place.display)

        def build(kw: dict[str, Any]) -> str:
            raw = arg_str(kw, "path")
            root = self.workspace.root
            return at(self.workspace, raw, show, root=root, fail=_delete_failure, follow_last=False)

        return self._safe_preview(build, kwargs)

    async def run(self, **kwargs: Any) -> ToolResult:
        """Delete the file; see the class docstring."""
        raw = arg_str(kwargs, "path")
        path, display = await run_blocking(_delete, self.workspace, raw, self.workspace.root)
        await self._log(path, "delete")
        return ToolResult(f"Deleted {display}.")
