"""``grep``: search file contents with the model's regular expression, within bounds.

The pattern is checked before it is compiled (its length, how deep its groups nest, and what
its counted repeats expand to) and runs on the ``regex`` engine with a time limit on each
search, in a thread that lets the rest of the process run. Files are read in blocks of whole
lines; the pattern is tried on a block first, then on each line that can match. A line too
slow to search is skipped and counted, a hopeless pattern ends the search, and the search
ends with its time budget, the tool's timeout or the run's deadline, reporting what it found
as partial.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from .._record import record
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._filebase import _SKIP_DIRS, _SNIFF, _check_pattern, _FileTool, _is_binary, _read_failure
from ._fread import LineReader
from ._fsafe import Budget, Place, Raced, at, open_directory, open_regular, walk
from ._workspace import StrPath, arg_bool, arg_int, arg_opt_str, arg_str, count
from .base import ToolResult

__all__ = ["GrepTool"]

_MAX_EXPANSION = 10_000  # what a regular expression may expand to when compiled
_MAX_NESTING = 100
_LINE_SECONDS = 0.5  # one regular-expression search; a slower line is skipped and counted
_MAX_SLOW_LINES = 5  # then the search stops: the pattern is hopeless on this text
_WINDOW = 64 * 1024  # grep tries blocks of lines of about this many bytes before each line


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


@record(frozen=True)
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
    import regex  # here, not at import: tens of ms of every start that never greps

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
                f"{count(self.slow_lines, 'line')} skipped: the pattern took over "
                f"{_LINE_SECONDS} s on each (nested repeats such as (a+)+ backtrack "
                "catastrophically)"
            )
        if self.cut_lines:
            notes.append(
                f"{count(self.cut_lines, 'line')} longer than {self.tool.max_line_bytes:,} bytes "
                "searched in their start only"
            )
        if self.big_files:
            notes.append(
                f"{count(self.big_files, 'file')} over {self.tool.max_file_bytes:,} bytes skipped"
            )
        if not self.out:
            tail = f" ({'; '.join(notes)})" if notes else ""
            searched = count(self.files, "file")
            return f"No matches for /{self.rx.pattern}/ in {searched} searched.{tail}"
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
