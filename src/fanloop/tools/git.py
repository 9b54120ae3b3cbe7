"""Git tools: ``git_status``, ``git_diff``, ``git_log`` and ``git_commit``.

Each runs the ``git`` program in the workspace root, non-interactively (no pager, no prompt,
no colour), with a timeout, and returns its bounded output. ``git_commit`` is dangerous: it
stages exactly the files it is given and commits only those, whatever else is staged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ._workspace import StrPath, Workspace, arg_bool, arg_int, arg_str, arg_str_list, truncate
from .base import Tool, ToolResult
from .shell import run_command

__all__ = ["GitCommitTool", "GitDiffTool", "GitLogTool", "GitStatusTool"]

_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}


class _GitTool(Tool):
    def __init__(
        self, *, root: StrPath | None = None, timeout: float = 30.0, max_chars: int = 30_000
    ) -> None:
        self.workspace = Workspace(root)
        self.git_timeout = timeout
        self.max_chars = max_chars

    async def _git(self, *args: str, root: Path | None = None) -> str:
        """Run ``git ARGS`` in the root; its stdout (stderr merged), or a ToolError."""
        root = self.workspace.root if root is None else root
        argv = ["git", "--no-pager", "-c", "color.ui=false", "-c", "core.quotepath=off", *args]
        outcome = await run_command(
            argv,
            cwd=root,
            timeout=self.git_timeout,
            max_output=4 * self.max_chars,
            kill_grace=1.0,
            env={**os.environ, **_GIT_ENV},
        )
        if outcome.timed_out:
            raise ToolError(f"git {args[0]} timed out after {self.git_timeout:g} s.")
        if outcome.exit_code != 0:
            message = outcome.output.strip() or f"exit code {outcome.exit_code}"
            raise ToolError(f"git {args[0]} failed: {message}")
        return outcome.output

    def _bounded(self, text: str, empty: str) -> str:
        return truncate(text, self.max_chars, what="git output") if text.strip() else empty


class GitStatusTool(_GitTool):
    """``git_status``: the branch and changed files (``git status --porcelain=v1 --branch``).

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
    """

    name = "git_status"
    description = (
        "Show the current branch and the changed, staged and untracked files of the git "
        "repository (git status --porcelain=v1 --branch)."
    )
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}  # noqa: RUF012
    concurrent_safe = True

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run git status; see the class docstring."""
        out = await self._git("status", "--porcelain=v1", "--branch")
        return ToolResult(self._bounded(out, "(no output)"))


class GitDiffTool(_GitTool):
    """``git_diff``: unstaged (or, with ``staged``, staged) changes as a unified diff.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
    """

    name = "git_diff"
    description = (
        "Show the changes in the git working tree as a unified diff: unstaged changes by "
        "default, staged ones with staged=true. Optionally limited to some paths."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "staged": {
                "type": "boolean",
                "description": "Show staged changes (git diff --cached) instead of unstaged.",
            },
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only these files or directories.",
            },
        },
        "additionalProperties": False,
    }
    concurrent_safe = True

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run git diff; see the class docstring."""
        root = self.workspace.root
        args = ["diff", "--no-ext-diff"]
        staged = arg_bool(kwargs, "staged")
        if staged:
            args.append("--cached")
        paths = arg_str_list(kwargs, "paths") or []
        args += ["--", *(_repo_path(self.workspace, p, root) for p in paths)]
        out = await self._git(*args, root=root)
        return ToolResult(self._bounded(out, f"(no {'staged' if staged else 'unstaged'} changes)"))


class GitLogTool(_GitTool):
    """``git_log``: recent commits, one line each (hash, date, author, subject).

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
    """

    name = "git_log"
    description = (
        "Show recent commits of the git repository, newest first, one line each: short hash, "
        "date, author and subject. Optionally only commits touching a path."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "max_count": {
                "type": "integer",
                "minimum": 1,
                "maximum": 500,
                "description": "How many commits to show. Default: 20.",
            },
            "path": {"type": "string", "description": "Only commits touching this path."},
        },
        "additionalProperties": False,
    }
    concurrent_safe = True

    async def run(self, **kwargs: Any) -> ToolResult:
        """Run git log; see the class docstring."""
        root = self.workspace.root
        count = arg_int(kwargs, "max_count", 20, minimum=1, maximum=500)
        args = [
            "log",
            f"--max-count={count}",
            "--date=short",
            "--format=%h %ad %an: %s",
            "--no-decorate",
        ]
        path = kwargs.get("path")
        if path is not None:
            args += ["--", _repo_path(self.workspace, arg_str(kwargs, "path"), root)]
        try:
            out = await self._git(*args, root=root)
        except ToolError as exc:
            if "does not have any commits" in str(exc):
                return ToolResult("(no commits yet)")
            raise
        return ToolResult(self._bounded(out, "(no commits)"))


class GitCommitTool(_GitTool):
    """``git_commit``: stage the given files and commit them with a message (dangerous).

    Only the given files are committed (``git commit --only``), even if others are staged.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed (hooks included).
        max_chars: characters returned at most.
    """

    name = "git_commit"
    description = (
        "Stage the given files (new, modified or deleted) and commit exactly those files with "
        "the given message."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "files": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Files to stage and commit, relative to the workspace root.",
            },
            "message": {"type": "string", "description": "The commit message."},
        },
        "required": ["files", "message"],
        "additionalProperties": False,
    }
    dangerous = True

    def preview(self, **kwargs: Any) -> str:
        """The files to be committed and the message."""
        files = kwargs.get("files")
        if isinstance(files, str):
            files = [files]
        listed = "\n".join(f"  {f}" for f in files) if isinstance(files, list) else f"  {files!r}"
        return f"git commit of:\n{listed}\nmessage:\n{kwargs.get('message', '')}"

    async def run(self, **kwargs: Any) -> ToolResult:
        """Stage and commit; see the class docstring."""
        root = self.workspace.root
        files = arg_str_list(kwargs, "files")
        if not files:
            raise ToolError("Give at least one file to commit in 'files'.")
        message = arg_str(kwargs, "message")
        if not message.strip():
            raise ToolError("The commit message is empty.")
        paths = [_repo_path(self.workspace, f, root) for f in files]
        await self._git("add", "--all", "--", *paths, root=root)
        out = await self._git(
            "commit", "--only", "--no-edit", "-m", message, "--", *paths, root=root
        )
        head = (await self._git("log", "-1", "--format=%H", root=root)).strip()
        return ToolResult(
            self._bounded(out, "(committed)") + f"\ncommit {head}", metadata={"commit": head}
        )


def _repo_path(workspace: Workspace, path: str, root: Path) -> str:
    """``path`` checked against the workspace, relative to the root (deleted files allowed)."""
    resolved = workspace.resolve(path, root=root)  # refuses escapes, links included
    lexical = Path(os.path.normpath(root / path))  # but a link itself is what git tracks
    if lexical.is_relative_to(root):
        return lexical.relative_to(root).as_posix() or "."
    return workspace.display(resolved, root=root)
