"""``list_dir`` and ``glob``: the tools that walk directories and name what they find.

Neither follows a symbolic link to a directory, so both stay in the tree and survive link
loops; ``glob`` shows a link only when its target is inside the workspace. Both are bounded by
the entries they visit and by time (a :class:`~fanloop.tools._fsafe.Budget`) and say so when a
bound cut the answer short. ``glob`` matches its pattern one path component at a time
(:class:`_GlobPattern`), so the walk does not enter a directory that cannot match.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._filebase import _SKIP_DIRS, _check_pattern, _FileTool, _size
from ._fsafe import Budget, Place, at, open_directory, sort_in_pieces, walk
from ._workspace import StrPath, arg_str
from .base import ToolResult

__all__ = ["GlobTool", "ListDirTool", "States"]

_MAX_DEPTH = 64  # walks enter no deeper


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
