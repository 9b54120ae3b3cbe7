"""``read_file``: a text file, or a range of its lines, read in bounded pieces.

The file is opened beneath the workspace root (see :mod:`fanloop.tools._fsafe`) and read
through a :class:`~fanloop.tools._fread.LineReader`: memory stays within a few times the
character budget whatever the size of the file or of its lines. Lines are counted, and the
content hashed for the read cache, over the first gigabyte at most; a range read again
unchanged in the same conversation gets a short notice instead (see
:mod:`fanloop.tools._readcache`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .._record import record
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._filebase import _SNIFF, _FileTool, _is_binary, _read_failure, _size
from ._fread import LineReader
from ._fsafe import Place, at, open_regular
from ._readcache import ReadCache, cache_scope
from ._workspace import StrPath, Workspace, arg_bool, arg_int, arg_str, count
from .base import ToolResult

__all__ = ["ReadFileTool"]

_SCAN_LIMIT = 1 << 30  # read_file counts lines (and hashes) this many bytes at most


@record(frozen=True)
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
                lines = count(piece.total_lines, "line")
                raise ToolError(
                    f"offset {offset} is past the part of {display} read_file reads (the first "
                    f"{_size(_SCAN_LIMIT)} of {_size(piece.size)}, {lines})."
                )
            raise ToolError(
                f"offset {offset} is past the end of {display}, which has "
                f"{count(piece.total_lines, 'line')}."
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
