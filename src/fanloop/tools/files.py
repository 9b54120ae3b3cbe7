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
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import regex

from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._fsafe import (
    Budget,
    LineReader,
    NotRegularFile,
    Place,
    Raced,
    at,
    existing,
    open_directory,
    open_regular,
    read_capped,
    replace,
    sort_in_pieces,
    walk,
)
from ._readcache import Op, ReadCache, cache_scope, default_read_cache
from ._workspace import (
    StrPath,
    Workspace,
    arg_bool,
    arg_int,
    arg_opt_str,
    arg_str,
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
_DIFF_CELLS = 1_000_000  # the most line pairs difflib compares (it is quadratic at worst)
_PREVIEW_SECONDS = 2.0  # previews run on the event loop: their reads stop after this
_PREVIEW_BYTES = 5_000_000  # a larger file is not read for a preview's diff
_SCAN_LIMIT = 1 << 30  # read_file counts lines (and hashes) this many bytes at most
_MAX_PATTERN = 1000  # characters in a grep or glob pattern
_MAX_EXPANSION = 10_000  # what a regular expression may expand to when compiled
_MAX_NESTING = 100
_MAX_DEPTH = 64  # walks enter no deeper
_LINE_SECONDS = 0.5  # one regular-expression search; a slower line is skipped and counted
_MAX_SLOW_LINES = 5  # then the search stops: the pattern is hopeless on this text
_WINDOW = 64 * 1024  # grep tries blocks of lines of about this many bytes before each line


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


def _preview_stop() -> Stop:
    return Stop(time.monotonic() + _PREVIEW_SECONDS)


# -- diffs ----------------------------------------------------------------------------------


class _Opcodes(difflib.SequenceMatcher[str]):
    """A matcher that answers with opcodes computed elsewhere (for the hunk grouping)."""

    def __init__(self, opcodes: list[tuple[str, int, int, int, int]]) -> None:
        super().__init__(None, [], [])
        self._given = opcodes

    def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:  # type: ignore[override]
        return self._given


def _opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Opcodes from ``a`` to ``b``: the common ends are cut first, and a middle too large to
    compare in bounded time is shown as replaced whole."""
    lo, n = 0, min(len(a), len(b))
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and a[len(a) - 1 - hi] == b[len(b) - 1 - hi]:
        hi += 1
    ea, eb = len(a) - hi, len(b) - hi
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, lo, 0, lo)] if lo else []
    mid_a, mid_b = a[lo:ea], b[lo:eb]
    if mid_a and mid_b and len(mid_a) * len(mid_b) <= _DIFF_CELLS:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_a, mid_b).get_opcodes():
            ops.append((tag, i1 + lo, i2 + lo, j1 + lo, j2 + lo))
    elif mid_a or mid_b:
        tag = "replace" if mid_a and mid_b else ("delete" if mid_a else "insert")
        ops.append((tag, lo, ea, lo, eb))
    if hi:
        ops.append(("equal", ea, len(a), eb, len(b)))
    return ops


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"


def _diff_lines(a: list[str], b: list[str], before: str, after: str) -> Iterator[str]:
    first = True
    for group in _Opcodes(_opcodes(a, b)).get_grouped_opcodes(3):
        if first:
            yield f"--- {before}\n"
            yield f"+++ {after}\n"
            first = False
        yield f"@@ -{_range(group[0][1], group[-1][2])} +{_range(group[0][3], group[-1][4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def unified_diff(old: str | None, new: str | None, display: str) -> str:
    """A unified diff from ``old`` to ``new`` (``None`` meaning the file does not exist).

    Bounded in time and size: the common start and end are cut before the comparison, a middle
    too large to compare is shown as replaced whole, and the text stops at 20,000 characters.
    """
    before = "/dev/null" if old is None else f"a/{display}"
    after = "/dev/null" if new is None else f"b/{display}"
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    parts: list[str] = []
    used = 0
    for line in _diff_lines(a, b, before, after):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if used + len(line) > _MAX_PREVIEW:
            parts.append(f"[diff cut at {_MAX_PREVIEW:,} characters]\n")
            break
        parts.append(line)
        used += len(line)
    return "".join(parts) or f"(no changes to {display})"


# -- the shared base ------------------------------------------------------------------------


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


def _current_text(place: Place, stop: Stop, cap: int) -> str | None:
    """The text of the place's file for a diff, a note for a large or binary one, ``None``
    when it does not exist."""
    try:
        fd, info = open_regular(place)
    except FileNotFoundError:
        return None
    try:
        data = None if info.st_size > cap else read_capped(fd, cap, stop)
    finally:
        os.close(fd)
    if data is None:
        return f"(a file of {_size(info.st_size)}, too large to show)\n"
    if _is_binary(data):
        return f"(binary file, {len(data):,} bytes)\n"
    return data.decode("utf-8", errors="replace")


# -- read_file ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Slice:
    path: Path
    display: str
    text: str
    digest: str
    total_lines: int
    counted: bool  # False: the file is larger than _SCAN_LIMIT; total_lines is a floor
    size: int
    first: int
    last: int
    cut: bool  # the character budget ended the slice early


def _read_slice(
    stop: Stop,
    workspace: Workspace,
    raw: str,
    root: Path,
    offset: int,
    limit: int | None,
    budget: int,
) -> _Slice:
    def work(place: Place) -> _Slice:
        fd, info = open_regular(place)
        try:
            return _slice_of(stop, fd, info, place, offset, limit, budget)
        finally:
            os.close(fd)

    return at(workspace, raw, work, root=root, fail=_read_failure)


def _slice_of(
    stop: Stop,
    fd: int,
    info: os.stat_result,
    place: Place,
    offset: int,
    limit: int | None,
    budget: int,
) -> _Slice:
    """Lines ``offset..offset+limit`` of ``fd``, at most ``budget`` characters; the file is
    read in pieces, and a line longer than the budget is cut, never loaded whole."""
    if _is_binary(os.pread(fd, _SNIFF, 0)):
        raise ToolError(
            f"{place.display} is a binary file ({info.st_size:,} bytes); read_file shows text."
        )
    digest = hashlib.sha256()
    reader = LineReader(fd, stop, max_bytes=_SCAN_LIMIT, digest=digest)
    reader.skip(offset - 1)
    parts: list[str] = []
    used = 0
    last = offset - 1
    cut = False
    longest = 4 * budget + 4  # bytes: at least ``budget`` characters in UTF-8
    while limit is None or reader.lines < offset - 1 + limit:
        got = reader.readline(longest)
        if got is None:
            break
        line = got[0].decode("utf-8", errors="replace")
        if used + len(line) > budget:
            if not parts:  # one enormous line: show its start
                parts.append(line[: budget - used])
                last = reader.lines
            cut = True
            break
        parts.append(line)
        used += len(line)
        last = reader.lines
    reader.count_rest()
    size = os.fstat(fd).st_size
    counted = reader.bytes_read < _SCAN_LIMIT or size <= _SCAN_LIMIT
    if not counted:  # the hash covers only the start: let a change of size or time show
        digest.update(f"\0{size}\0{info.st_mtime_ns}".encode())
    return _Slice(
        place.path,
        place.display,
        "".join(parts),
        digest.hexdigest(),
        reader.lines,
        counted,
        size,
        offset,
        last,
        cut,
    )


class ReadFileTool(_FileTool):
    """``read_file``: read a text file, optionally a range of lines.

    The file is read in pieces: memory stays within a few times ``max_chars`` whatever the
    size of the file or of its lines.

    Args:
        root: the workspace root (default: the current directory at call time).
        read_cache: ``True`` for the shared cache at ``~/.fanloop/fanloop.db``, a
            :class:`~fanloop.tools._readcache.ReadCache` for another, ``False`` for none.
        max_chars: the most characters one call returns; longer content is cut at a line
            boundary (a single longer line is cut inside) with a note telling the model how
            to read on.
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
        piece = await run_blocking(
            _read_slice, self.workspace, raw_path, root, offset, limit, self.max_chars
        )
        text = self._render(piece, offset)
        cache = self.read_cache
        scope = cache_scope()
        path = str(piece.path)
        if cache is not None:
            if not force and await cache.seen(
                scope, path, offset=offset, limit=limit, digest=piece.digest
            ):
                return ToolResult(
                    f"[{piece.display}{_range_label(offset, limit)} is unchanged since you last "
                    "read it in this conversation; its content is earlier in your context. "
                    "Pass force=true to read it again.]",
                    metadata={"cached": True},
                )
            await cache.record(scope, path, "read", offset=offset, limit=limit, digest=piece.digest)
        return ToolResult(text)

    def _render(self, piece: _Slice, offset: int) -> str:
        display = piece.display
        if piece.total_lines == 0:
            return f"[{display} is empty]"
        if offset > piece.total_lines:
            if not piece.counted:
                raise ToolError(
                    f"offset {offset} is past the part of {display} read_file reads (the first "
                    f"{_size(_SCAN_LIMIT)} of {_size(piece.size)}, {piece.total_lines} lines)."
                )
            raise ToolError(
                f"offset {offset} is past the end of {display}, which has "
                f"{piece.total_lines} lines."
            )
        whole = offset == 1 and piece.last == piece.total_lines and not piece.cut and piece.counted
        if whole:
            return piece.text
        text = piece.text if piece.text.endswith("\n") else piece.text + "\n"
        if piece.counted:
            note = f"[lines {piece.first}-{piece.last} of {piece.total_lines} in {display}"
        else:
            note = (
                f"[lines {piece.first}-{piece.last} of more than {piece.total_lines} in "
                f"{display} ({_size(piece.size)}; only its first {_size(_SCAN_LIMIT)} is read)"
            )
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


@dataclass(frozen=True, slots=True)
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
        return ToolResult(f"{verb} {done.display} ({lines} lines, {len(data):,} bytes).")


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


def _near_miss(text: str, old: str) -> str:
    """A hint when ``old`` matches except for whitespace (linear in the file's size)."""
    wanted = [line.strip() for line in old.splitlines() if line.strip()]
    if not wanted:
        return " It must match the file exactly, including whitespace."
    numbers: list[int] = []
    kept: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped:
            numbers.append(number)
            kept.append(stripped)
    haystack = "\n" + "\n".join(kept) + "\n"
    found = haystack.find("\n" + "\n".join(wanted) + "\n")
    if found != -1:
        return (
            f" A match that differs only in whitespace or indentation starts on line "
            f"{numbers[haystack.count(chr(10), 0, found)]}; copy the text exactly as "
            "read_file shows it."
        )
    return " It must match the file exactly, including whitespace; read the file again."


@dataclass(frozen=True, slots=True)
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


# -- list_dir -------------------------------------------------------------------------------


def _dir_failure(exc: OSError, display: str) -> ToolError:
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"Directory not found: {display}.")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"{display} is a file, not a directory. Use read_file.")
    return ToolError(f"Cannot list {display}: {exc.strerror or exc}.")


class ListDirTool(_FileTool):
    """``list_dir``: list a directory's entries.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_entries: the most entries one call lists.
        max_visited: the most entries read from the directory (to sort and count them).
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

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        max_entries: int = 1000,
        max_visited: int = 100_000,
    ) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_entries = max_entries
        self.max_visited = max_visited

    async def run(self, **kwargs: Any) -> ToolResult:
        """List the directory; see the class docstring."""
        raw = arg_str(kwargs, "path", ".")
        root = self.workspace.root
        return ToolResult(await run_blocking(self._list, raw, root))

    def _list(self, stop: Stop, raw: str, root: Path) -> str:
        def work(place: Place) -> str:
            fd = open_directory(place)
            try:
                return self._entries(stop, fd, place.display)
            finally:
                os.close(fd)

        return at(self.workspace, raw, work, root=root, fail=_dir_failure)

    def _entries(self, stop: Stop, fd: int, display: str) -> str:
        budget = Budget(stop, entries=self.max_visited)
        entries: list[os.DirEntry[str]] = []
        with os.scandir(fd) as it:
            for entry in it:
                if not budget.visit():
                    break
                entries.append(entry)
        if not entries:
            return f"[{display} is empty]"
        keys = sort_in_pieces([(not _is_dir(e), e.name, i) for i, e in enumerate(entries)])
        found = [entries[i] for _, _, i in keys]
        lines = [f"{display}/" if display != "." else "./"]
        lines.extend("  " + _describe(entry, fd) for entry in found[: self.max_entries])
        if budget.capped:
            lines.append(
                f"[listing cut at {min(self.max_entries, len(found))} of more than "
                f"{self.max_visited:,} entries]"
            )
        elif budget.reason is not None:
            lines.append(
                f"[listing stopped: out of time after reading {len(found):,} entries; "
                "those shown are sorted among them only]"
            )
        elif len(found) > self.max_entries:
            lines.append(f"[listing cut at {self.max_entries} of {len(found)} entries]")
        return "\n".join(lines)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _describe(entry: os.DirEntry[str], dir_fd: int) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.name, dir_fd=dir_fd)}"
        if entry.is_dir(follow_symlinks=False):
            return f"{entry.name}/"
        return f"{entry.name}  ({_size(entry.stat(follow_symlinks=False).st_size)})"
    except OSError:
        return entry.name


# -- glob -----------------------------------------------------------------------------------


States = frozenset[int]


class _GlobPattern:
    """A glob pattern matched one path component at a time, so a walk can prune.

    ``*``, ``?`` and ``[...]`` match within one component (hidden names included); ``**`` as a
    whole component matches any number of directories, none included.
    """

    def __init__(self, pattern: str) -> None:
        segments: list[str] = []
        for s in pattern.split("/"):
            if s not in ("", ".") and not (s == "**" and segments[-1:] == ["**"]):
                segments.append(s)
        if len(segments) > _MAX_DEPTH:
            raise ToolError(f"The pattern has more than {_MAX_DEPTH} path components.")
        self._matchers = [
            None if s == "**" else re.compile(fnmatch.translate(s)).match for s in segments
        ]
        self.end = len(self._matchers)
        self.start = self._close({0})

    def _close(self, states: Iterable[int]) -> States:
        out = set(states)
        for i in sorted(out):  # a ``**`` may match no directory at all
            j = i
            while j < self.end and self._matchers[j] is None:
                j += 1
                out.add(j)
        return frozenset(out)

    def step(self, states: States, name: str) -> States:
        """The states after one more component ``name``."""
        nxt: set[int] = set()
        for i in states:
            if i >= self.end:
                continue
            match = self._matchers[i]
            if match is None:
                nxt.add(i)
            elif match(name):
                nxt.add(i + 1)
        return self._close(nxt)

    def matches(self, states: States) -> bool:
        """Whether the path so far matches the whole pattern."""
        return self.end in states

    def alive(self, states: States) -> bool:
        """Whether a longer path could still match."""
        return any(i < self.end for i in states)


def _check_pattern(pattern: str, what: str) -> None:
    if len(pattern) > _MAX_PATTERN:
        raise ToolError(
            f"The {what} is {len(pattern):,} characters long; at most {_MAX_PATTERN:,} are allowed."
        )


def _inside(root: Path, lexical: Path) -> tuple[bool, bool]:
    """Whether the link at ``lexical`` resolves inside ``root``, and to a directory."""
    real = os.path.realpath(lexical)
    if not Path(real).is_relative_to(root):
        return False, False
    return True, os.path.isdir(real)


class GlobTool(_FileTool):
    """``glob``: find files whose path matches a glob pattern.

    The walk never enters a symbolic link to a directory; a link is listed only when its
    target is inside the workspace. It visits at most ``max_visited`` entries and stops after
    ``time_budget`` seconds, or with the tool's timeout or the run's deadline, saying so.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_results: the most paths one call returns.
        max_visited: the most directory entries one call visits.
        time_budget: seconds after which the walk stops and reports what it found.
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

    def __init__(
        self,
        *,
        root: StrPath | None = None,
        max_results: int = 500,
        max_visited: int = 200_000,
        time_budget: float = 20.0,
    ) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_results = max_results
        self.max_visited = max_visited
        self.time_budget = time_budget

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run the glob; see the class docstring."""
        pattern = arg_str(kwargs, "pattern").strip()
        if not pattern:
            raise ToolError("The pattern is empty; give a glob such as '**/*.py'.")
        _check_pattern(pattern, "pattern")
        if pattern.startswith(("/", "\\")) or ".." in PurePosixPath(pattern).parts:
            raise ToolError("The pattern must be relative and must not contain '..'.")
        raw = arg_str(kwargs, "path", ".")
        root = self.workspace.root
        found, budget = await run_blocking(self._glob, raw, _GlobPattern(pattern), root)
        note = _walk_note(budget, self.max_visited)
        if not found:
            return ToolResult(f"No files match {pattern!r}." + (f" [{note}]" if note else ""))
        shown = found[: self.max_results]
        text = "\n".join(shown)
        if len(found) > self.max_results:
            text += f"\n[{len(found)} matches; showing the first {self.max_results}]"
        return ToolResult(text + (f"\n[{note}]" if note else ""))

    def _glob(
        self, stop: Stop, raw: str, pattern: _GlobPattern, root: Path
    ) -> tuple[list[str], Budget]:
        def work(place: Place) -> tuple[list[str], Budget]:
            fd = open_directory(place)
            try:
                return self._matches(stop, fd, place.path.relative_to(root).parts, pattern, root)
            finally:
                os.close(fd)

        return at(
            self.workspace,
            raw,
            work,
            root=root,
            fail=_glob_failure,
        )

    def _matches(
        self, stop: Stop, fd: int, base: tuple[str, ...], pattern: _GlobPattern, root: Path
    ) -> tuple[list[str], Budget]:
        budget = Budget(stop, seconds=self.time_budget, entries=self.max_visited)
        states: dict[tuple[str, ...], States] = {(): pattern.start}
        out: list[str] = []
        for entry in walk(
            fd, budget, skip=_SKIP_DIRS, descend=lambda parts: pattern.alive(states[parts])
        ):
            now = pattern.step(states[entry.parts[:-1]], entry.name)
            is_dir = entry.kind == "dir"
            if is_dir:
                states[entry.parts] = now
            if not pattern.matches(now):
                continue
            if entry.kind == "link":
                inside, is_dir = _inside(root, root.joinpath(*base, *entry.parts))
                if not inside:
                    continue  # a link out of the workspace: not ours to show
            shown = "/".join((*base, *entry.parts))
            out.append(shown + "/" if is_dir else shown)
            if len(out) >= 20 * self.max_results:
                break
        return sort_in_pieces(out), budget


def _glob_failure(exc: OSError, display: str) -> ToolError:
    return ToolError(f"{display} is not a directory (or is missing).")


def _walk_note(budget: Budget, max_visited: int) -> str:
    if budget.reason is not None:
        return "the search timed out; the results are incomplete"
    if budget.capped:
        return f"stopped after visiting {max_visited:,} entries; the results are incomplete"
    return ""


# -- grep -----------------------------------------------------------------------------------


_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_UNSUPPORTED = re.compile(r"\(\?[a-zA-Z0-9^-]*(?:V1|x)")
_LINE_BOUND = re.compile(r"\\[AZzGK]|\(\?[=!<]|\(\?[a-zA-Z]*-")


def _expansion(pattern: str) -> int:
    """An upper estimate of what ``pattern`` expands to when compiled (the regex engine
    unrolls counted repeats: ``(?:x{1000}){1000}`` is a million items and gigabytes)."""
    stack = [[0, 0]]  # per open group: [total, weight of the last item]
    i, n = 0, len(pattern)

    def item(weight: int) -> None:
        stack[-1][0] += weight
        stack[-1][1] = weight

    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            if i < n and pattern[i - 1] in "pPNxXuUgk" and pattern[i] in "{<":
                end = pattern.find("}" if pattern[i] == "{" else ">", i)
                i = n if end == -1 else end + 1
            item(1)
        elif c == "[":
            i = _class_end(pattern, i)
            item(1)
        elif c == "(":
            if pattern.startswith("(?#", i):
                end = pattern.find(")", i)
                i = n if end == -1 else end + 1
                continue
            stack.append([0, 0])
            if len(stack) > _MAX_NESTING:
                raise ToolError(f"The pattern nests groups more than {_MAX_NESTING} deep.")
            i += 1
        elif c == ")":
            if len(stack) > 1:
                item(max(1, stack.pop()[0]))
            i += 1
        elif c == "|":
            stack[-1][1] = 0
            i += 1
        elif c == "{" and (m := _QUANTIFIER.match(pattern, i)) and any(m.groups()):
            times = max(int(g) for g in m.groups() if g)
            total, last = stack[-1]
            stack[-1] = [total + last * (times - 1), last * times]
            i = m.end()
        else:
            if c not in "*+?":
                item(1)
            i += 1
        if stack[-1][0] > _MAX_EXPANSION:
            return stack[-1][0]
    while len(stack) > 1:
        item(max(1, stack.pop()[0]))
    return stack[0][0]


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class that starts at ``pattern[i] == '['``."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern):
        if pattern[j] == "\\":
            j += 2
        elif pattern[j] == "]":
            return j + 1
        else:
            j += 1
    return len(pattern)


@dataclass(frozen=True, slots=True)
class _Regex:
    line: Any  # regex.Pattern[str]: searched line by line
    window: Any  # the same pattern with MULTILINE, to rule out many lines at once; or None
    pattern: str


def _compile(pattern: str, ignore_case: bool) -> _Regex:
    """Compile a model's pattern with the ``regex`` engine, its cost bounded first."""
    _check_pattern(pattern, "pattern")
    if _UNSUPPORTED.search(pattern):
        raise ToolError(
            "The pattern turns on verbose mode (?x) or the regex module's version 1 (V1); "
            "neither is supported here: write a plain pattern."
        )
    if _expansion(pattern) > _MAX_EXPANSION:
        raise ToolError(
            "The pattern repeats too much: its counted repeats ({m,n}) multiply to more than "
            f"{_MAX_EXPANSION:,} items. Use smaller counts, or + and *."
        )
    flags = regex.V0 | (regex.IGNORECASE if ignore_case else 0)
    try:
        line = regex.compile(pattern, flags)
        window = None if _LINE_BOUND.search(pattern) else regex.compile(pattern, flags | regex.M)
    except regex.error as exc:
        raise ToolError(f"Invalid regular expression {pattern!r}: {exc}.") from None
    except (RecursionError, OverflowError, ValueError, MemoryError) as exc:
        raise ToolError(f"The regular expression {pattern!r} is too complex: {exc}.") from None
    return _Regex(line, window, pattern)


def _excerpt(line: str, start: int) -> str:
    """The line, or the part of a long one around the match."""
    if len(line) <= 300:
        return line
    if start <= 200:
        return line[:300] + " [line cut]"
    return "[...]" + line[start - 100 : start + 200] + " [line cut]"


class _Search:
    """One grep call: its results, counters and budget."""

    def __init__(self, tool: GrepTool, rx: _Regex, limit: int, budget: Budget) -> None:
        self.tool = tool
        self.rx = rx
        self.limit = limit
        self.budget = budget
        self.out: list[str] = []
        self.used = 0
        self.files = 0
        self.full = ""  # why the search ended early: a limit, or a hopeless pattern
        self.big_files = 0
        self.cut_lines = 0
        self.slow_lines = 0

    def file(self, fd: int, display: str) -> None:
        """Search one open regular file (binary files are skipped)."""
        info = os.fstat(fd)
        if info.st_size > self.tool.max_file_bytes:
            self.big_files += 1
            return
        if _is_binary(os.pread(fd, _SNIFF, 0)):
            return
        self.files += 1
        reader = LineReader(fd, self.budget.stop, max_bytes=self.tool.max_file_bytes)
        while not self.budget.spent() and not self.full:
            first = reader.lines + 1
            got = reader.read_block(_WINDOW, self.tool.max_line_bytes)
            if got is None:
                break
            data, cut = got
            self.cut_lines += cut
            text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
            text = text[:-1] if text.endswith("\n") else text
            text = text[:-1] if text.endswith("\r") else text
            self._block(text, first, display)

    def _search(self, rx: Any, text: str, pos: int = 0) -> Any:
        """``rx.search(text, pos)`` within the budget; ``False`` when it was too slow."""
        timeout = self.budget.left(_LINE_SECONDS)
        if timeout <= 0:
            return False
        try:
            return rx.search(text, pos, timeout=timeout, concurrent=True)
        except TimeoutError:
            return False

    def _block(self, text: str, first: int, display: str) -> None:
        """Search whole lines ``text`` (joined by newlines), the first being line ``first``.

        The pattern is tried on the whole block first (with ``^`` and ``$`` at line ends): no
        line can match where the block has no match, and lines before a block's match cannot
        match either; each candidate line is then searched on its own.
        """
        window = self.rx.window
        if window is None or "\n" not in text:
            for index, line in enumerate(text.split("\n")):
                if not self._line(line, first + index, display):
                    return
            return
        pos, index = 0, 0  # pos starts line ``index`` of the block
        while pos <= len(text) and not self.budget.spent():
            hit = self._search(window, text, pos)
            if hit is None:
                return
            if hit is False:  # too slow on the block: line by line for the rest
                for offset, line in enumerate(text[pos:].split("\n")):
                    if not self._line(line, first + index + offset, display):
                        return
                return
            newline = text.rfind("\n", pos, hit.start())
            start = pos if newline == -1 else newline + 1
            index += text.count("\n", pos, start)
            end = text.find("\n", start)
            end = len(text) if end == -1 else end
            if not self._line(text[start:end], first + index, display):
                return
            pos, index = end + 1, index + 1

    def _line(self, line: str, lineno: int, display: str) -> bool:
        """Search one line; ``False`` when the search must end."""
        if self.budget.spent() or self.full:
            return False
        match = self._search(self.rx.line, line)
        if match is None:
            return True
        if match is not False:
            return self._add(f"{display}:{lineno}: {_excerpt(line, match.start())}")
        if self.budget.spent():
            return False
        self.slow_lines += 1
        if self.slow_lines >= _MAX_SLOW_LINES:
            self.full = (
                f"the search stopped: the pattern took over {_LINE_SECONDS} s on each of "
                f"{self.slow_lines} lines (nested repeats such as (a+)+ backtrack "
                "catastrophically); simplify it"
            )
            return False
        return True

    def _add(self, entry: str) -> bool:
        if len(self.out) >= self.limit:
            self.full = f"stopped at {self.limit} matches; narrow the pattern, path or include"
            return False
        if self.used + len(entry) > self.tool.max_chars:
            self.full = f"output cut at {self.tool.max_chars:,} characters; narrow the search"
            return False
        self.out.append(entry)
        self.used += len(entry) + 1
        return True

    def report(self) -> str:
        notes = [self.full] if self.full else []
        if self.budget.reason is not None:
            notes.append(
                f"the search timed out after {self.budget.elapsed:.1f} s; "
                + ("the matches shown are partial" if self.out else "the results are incomplete")
            )
        elif self.budget.capped:
            notes.append(
                f"stopped after visiting {self.tool.max_visited:,} entries; the results are "
                "incomplete"
            )
        if self.slow_lines and self.slow_lines < _MAX_SLOW_LINES:
            notes.append(
                f"{self.slow_lines} lines were skipped: the pattern took over {_LINE_SECONDS} s "
                "on each (nested repeats such as (a+)+ backtrack catastrophically)"
            )
        if self.cut_lines:
            notes.append(
                f"{self.cut_lines} lines longer than {self.tool.max_line_bytes:,} bytes were "
                "searched in their start only"
            )
        if self.big_files:
            notes.append(
                f"{self.big_files} files over {self.tool.max_file_bytes:,} bytes were skipped"
            )
        if not self.out:
            tail = f" ({'; '.join(notes)})" if notes else ""
            return f"No matches for /{self.rx.pattern}/ in {self.files} files searched.{tail}"
        return "\n".join(self.out) + (f"\n[{'; '.join(notes)}]" if notes else "")


class GrepTool(_FileTool):
    """``grep``: search file contents with a regular expression.

    The pattern runs on the ``regex`` engine with a time limit, in a thread that lets the rest
    of the process run; a pattern whose compiled form would be huge is refused. Binary files,
    files over ``max_file_bytes`` and ``.git`` directories are skipped; lines are read in
    bounded pieces and a line over ``max_line_bytes`` is searched in its start only. Output is
    bounded by ``max_matches`` and ``max_chars``; the search by ``time_budget`` seconds, the
    tool's timeout and the run's deadline (whichever comes first: it then reports what it
    found, marked as partial), and by ``max_visited`` directory entries.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_matches: the default (and ceiling) number of matching lines returned.
        max_chars: the most characters one call returns.
        max_file_bytes: larger files are skipped.
        max_line_bytes: a longer line is searched in its first ``max_line_bytes`` only.
        time_budget: seconds after which the search stops and reports what it found.
        max_visited: the most directory entries one call visits.
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
        max_line_bytes: int = 1_000_000,
        time_budget: float = 20.0,
        max_visited: int = 200_000,
    ) -> None:
        super().__init__(root=root, read_cache=False)
        self.max_matches = max_matches
        self.max_chars = max_chars
        self.max_file_bytes = max_file_bytes
        self.max_line_bytes = max_line_bytes
        self.time_budget = time_budget
        self.max_visited = max_visited

    async def run(self, **kwargs: Any) -> ToolResult:
        """Search; see the class docstring."""
        pattern = arg_str(kwargs, "pattern")
        ignore_case = arg_bool(kwargs, "ignore_case")
        include = arg_opt_str(kwargs, "include")
        if include is not None:
            _check_pattern(include, "include glob")
        limit = min(arg_int(kwargs, "max_matches", minimum=1) or self.max_matches, self.max_matches)
        raw = arg_str(kwargs, "path", ".")
        root = self.workspace.root
        text = await run_blocking(self._grep, pattern, ignore_case, raw, root, include, limit)
        return ToolResult(text)

    def _grep(
        self,
        stop: Stop,
        pattern: str,
        ignore_case: bool,
        raw: str,
        root: Path,
        include: str | None,
        limit: int,
    ) -> str:
        rx = _compile(pattern, ignore_case)
        budget = Budget(stop, seconds=self.time_budget, entries=self.max_visited)
        search = _Search(self, rx, limit, budget)

        def work(place: Place) -> None:
            if place.name:
                try:
                    fd, _ = open_regular(place)
                except IsADirectoryError:
                    pass
                else:
                    try:
                        search.file(fd, place.display)
                    finally:
                        os.close(fd)
                    return
            fd = open_directory(place)
            try:
                self._tree(search, fd, place.path.relative_to(root).parts, root, include)
            finally:
                os.close(fd)

        def fail(exc: OSError, display: str) -> ToolError:
            if isinstance(exc, FileNotFoundError):
                return ToolError(f"Not found: {display}.")
            return _read_failure(exc, display)

        at(self.workspace, raw, work, root=root, fail=fail)
        return search.report()

    def _tree(
        self,
        search: _Search,
        fd: int,
        base: tuple[str, ...],
        root: Path,
        include: str | None,
    ) -> None:
        for entry in walk(fd, search.budget, skip=_SKIP_DIRS):
            if search.full:
                return
            if entry.kind not in ("file", "link"):
                continue
            if include is not None and not PurePosixPath(*entry.parts).match(include):
                continue
            display = "/".join((*base, *entry.parts))
            if entry.kind == "file":
                place = Place(root.joinpath(display), display, entry.dir_fd, entry.name)
                _search_place(search, display, place)
            else:  # a link: searched when it leads to a regular file inside the workspace
                with contextlib.suppress(ToolError):
                    search_it = functools.partial(_search_place, search, display)
                    at(self.workspace, display, search_it, root=root, fail=_read_failure)


def _search_place(search: _Search, display: str, place: Place) -> None:
    """Search the regular file at ``place``, shown as ``display``; skip anything else."""
    try:
        fd, _ = open_regular(place)
    except (OSError, Raced):  # gone, not a regular file, or a link swapped in: skip it
        return
    try:
        search.file(fd, display)
    finally:
        os.close(fd)
