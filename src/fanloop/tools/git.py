"""Git tools: ``git_status``, ``git_diff``, ``git_log`` and ``git_commit``.

Each runs the ``git`` program in the workspace root, non-interactively (no pager, no prompt,
no colour), with a timeout, and returns its bounded output. ``git_commit`` is dangerous: it
stages exactly the files it is given and commits only those, whatever else is staged.

The repository is untrusted: the model may have written its ``.git/config``, its hooks and its
``.gitattributes``. So git runs nothing the repository asks for:

- settings that name a program are overridden on every call (``core.fsmonitor``,
  ``core.hooksPath`` so no hook runs, pagers, editors, ``gpg.*``, ``credential.helper``,
  ``core.askPass``, ``core.sshCommand``, ``diff.external``; ``protocol.allow=never`` so nothing
  is fetched), and diffs run with ``--no-ext-diff --no-textconv``;
- filter, diff and merge drivers (``filter.<name>.clean/smudge/process``, which git runs on
  status, diff and add) are read from the effective configuration first (``git config --list``
  runs nothing); each one the repository's own configuration (or a file it includes) defines
  is overridden: back to the host's value (so a Git LFS filter installed in the global config
  keeps working) or to nothing;
- the overrides travel as ``GIT_CONFIG_COUNT`` variables, which outrank every config file and
  reach every git process git starts; the environment is the host's without its secrets and
  without any ``GIT_*`` variable that redirects git (``GIT_DIR``, ``GIT_CONFIG_PARAMETERS``...);
- submodules are ignored (git would run in them with their own configuration).

And git stays in the workspace. The repository is located once per call and then pinned
(``--git-dir``, ``--work-tree``). When the workspace has its own ``.git`` (a directory, a link
or a ``gitdir:`` file), the repository it names must lie inside the workspace (pass
``allow_external_git_dir=True`` for a linked worktree or a submodule checkout). When the
workspace is a subdirectory of a bigger repository, every tool is limited to the workspace:
status, diff and log show only its files (with paths relative to it), and a commit holds only
the files given, all inside it. Paths are resolved through the workspace and reach git as
literal pathspecs after ``--`` (no ``:(top)``, ``:/`` or glob magic, never an option).

The checks and the environment are built in :mod:`fanloop.tools._gitsafe`.
"""

from __future__ import annotations

import os
import posixpath
import time
from pathlib import Path
from typing import Any

from .._record import record
from ..errors import ToolError
from ._blocking import run_blocking
from ._gitsafe import _FIXED_CONFIG, _base_environ, _check_layout, _driver_overrides, _environ
from ._workspace import StrPath, Workspace, arg_bool, arg_int, arg_str, arg_str_list, truncate
from .base import Tool, ToolResult
from .shell import run_command

__all__ = ["GitCommitTool", "GitDiffTool", "GitLogTool", "GitStatusTool"]

_MAX_OVERRIDES = 1000
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
_MAX_FILES = 1000
_MAX_MESSAGE_BYTES = 100_000


@record(frozen=True)
class _Repo:
    """A located, checked repository: where it is and how to run git in it."""

    root: Path
    git_dir: Path
    work_tree: Path
    prefix: str  # the workspace root relative to the work tree, "" or ending with "/"
    env: dict[str, str]


class _GitTool(Tool):
    def __init__(
        self,
        *,
        root: StrPath | None = None,
        timeout: float = 30.0,
        max_chars: int = 30_000,
        allow_external_git_dir: bool = False,
    ) -> None:
        self.workspace = Workspace(root)
        self.git_timeout = timeout
        self.max_chars = max_chars
        self.allow_external_git_dir = allow_external_git_dir

    async def _open(self, op: str) -> tuple[_Repo, float]:
        """Locate and check the repository; returns it and the deadline for this call."""
        deadline = time.monotonic() + self.git_timeout
        root = self.workspace.root
        base = await run_blocking(_base_environ)  # scanning for secrets: off the event loop
        env = _environ(base, _FIXED_CONFIG)
        out = await self._run(
            op, deadline, root, env, "rev-parse", "--absolute-git-dir", "--git-common-dir",
            "--show-toplevel",
        )  # fmt: skip
        lines = out.splitlines()
        if len(lines) != 3:
            raise ToolError(f"git {op} failed: unexpected output of git rev-parse: {out!r}")
        git_dir, work_tree = await run_blocking(
            _check_layout, root, *lines, self.allow_external_git_dir
        )
        pinned = [f"--git-dir={git_dir}", f"--work-tree={work_tree}"]
        listing = await run_command(
            ["git", *pinned, "config", "--list", "--show-scope", "-z"],
            cwd=root,
            timeout=_remaining(deadline, op),
            max_output=_MAX_CONFIG_BYTES,
            kill_grace=1.0,
            env=env,
            merge_stderr=False,
            decode_errors="surrogateescape",  # driver names are bytes: override them exactly
        )
        if listing.timed_out or listing.exit_code != 0 or listing.truncated:
            raise ToolError(
                f"git {op} failed: cannot read the repository's configuration"
                + (" (it is too large)." if listing.truncated else ".")
            )
        overrides = _driver_overrides(listing.output)
        if len(overrides) > _MAX_OVERRIDES:
            raise ToolError(
                f"Refused: the repository's configuration defines {len(overrides)} filter, "
                "diff or merge driver settings; git tools will not run in it."
            )
        prefix = root.relative_to(work_tree).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        env = _environ(base, (*_FIXED_CONFIG, *overrides))
        return _Repo(root, git_dir, work_tree, prefix, env), deadline

    async def _git(self, repo: _Repo, deadline: float, *args: str) -> str:
        """Run ``git ARGS`` in the pinned repository; its stdout (stderr merged)."""
        pinned = (f"--git-dir={repo.git_dir}", f"--work-tree={repo.work_tree}", "--no-pager")
        return await self._run(args[0], deadline, repo.root, repo.env, *pinned, *args)

    async def _run(
        self, op: str, deadline: float, cwd: Path, env: dict[str, str], *args: str
    ) -> str:
        outcome = await run_command(
            ["git", *args],
            cwd=cwd,
            timeout=_remaining(deadline, op),
            max_output=4 * self.max_chars,
            kill_grace=1.0,
            env=env,
        )
        if outcome.timed_out:
            raise ToolError(f"git {op} timed out after {self.git_timeout:g} s.")
        if outcome.exit_code != 0:
            message = outcome.output.strip() or f"exit code {outcome.exit_code}"
            raise ToolError(f"git {op} failed: {message}")
        return outcome.output

    def _bounded(self, text: str, empty: str) -> str:
        return truncate(text, self.max_chars, what="git output") if text.strip() else empty


class GitStatusTool(_GitTool):
    """``git_status``: the branch and changed files (``git status --porcelain=v1 --branch``).

    Paths are relative to the workspace root; in a workspace that is a subdirectory of the
    repository, only its files are listed.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
        allow_external_git_dir: accept a workspace whose ``.git`` names a repository outside
            it (a linked worktree, a submodule checkout).
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
        repo, deadline = await self._open("status")
        out = await self._git(
            repo, deadline, "status", "--porcelain=v1", "--branch", "-z",
            "--ignore-submodules=all", "--", ".",
        )  # fmt: skip
        return ToolResult(self._bounded(_render_status(out, repo.prefix), "(no output)"))


class GitDiffTool(_GitTool):
    """``git_diff``: unstaged (or, with ``staged``, staged) changes as a unified diff.

    External diff programs and text conversions are never run.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
        allow_external_git_dir: see :class:`GitStatusTool`.
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
        staged = arg_bool(kwargs, "staged")
        paths = _repo_paths(self.workspace, arg_str_list(kwargs, "paths") or [])
        repo, deadline = await self._open("diff")
        args = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", "--relative"]
        args.append("--ignore-submodules=all")
        if staged:
            args.append("--cached")
        out = await self._git(repo, deadline, *args, "--", *(paths or ["."]))
        return ToolResult(self._bounded(out, f"(no {'staged' if staged else 'unstaged'} changes)"))


class GitLogTool(_GitTool):
    """``git_log``: recent commits, one line each (hash, date, author, subject).

    In a workspace that is a subdirectory of the repository, only commits touching it.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
        allow_external_git_dir: see :class:`GitStatusTool`.
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
        count = arg_int(kwargs, "max_count", 20, minimum=1, maximum=500)
        path = kwargs.get("path")
        paths = [] if path is None else _repo_paths(self.workspace, [arg_str(kwargs, "path")])
        repo, deadline = await self._open("log")
        args = [
            "log",
            f"--max-count={count}",
            "--date=short",
            "--format=%h %ad %an: %s",
            "--no-decorate",
            "--no-color",
        ]
        if paths or repo.prefix:
            args += ["--", *(paths or ["."])]
        try:
            out = await self._git(repo, deadline, *args)
        except ToolError as exc:
            if "does not have any commits" in str(exc):
                return ToolResult("(no commits yet)")
            raise
        return ToolResult(self._bounded(out, "(no commits)"))


class GitCommitTool(_GitTool):
    """``git_commit``: stage the given files and commit them with a message (dangerous).

    Only the given files are committed (``git commit --only``), even if others are staged;
    each must lie inside the workspace. No hook runs and nothing is signed.

    Args:
        root: the repository (default: the current directory at call time).
        timeout: seconds before git is killed.
        max_chars: characters returned at most.
        allow_external_git_dir: see :class:`GitStatusTool`.
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
        files = arg_str_list(kwargs, "files")
        if not files:
            raise ToolError("Give at least one file to commit in 'files'.")
        if len(files) > _MAX_FILES:
            raise ToolError(f"Too many files ({len(files)}): commit at most {_MAX_FILES} at once.")
        message = arg_str(kwargs, "message")
        if not message.strip():
            raise ToolError("The commit message is empty.")
        if "\x00" in message:
            raise ToolError("The commit message contains a NUL byte.")
        if len(message.encode("utf-8", "surrogatepass")) > _MAX_MESSAGE_BYTES:
            raise ToolError(f"The commit message is too long (at most {_MAX_MESSAGE_BYTES} bytes).")
        paths = _repo_paths(self.workspace, files)
        repo, deadline = await self._open("commit")
        await self._git(repo, deadline, "add", "--all", "--", *paths)
        out = await self._git(
            repo, deadline, "commit", "--only", "--no-edit", "--no-verify", "--no-gpg-sign",
            "-m", message, "--", *paths,
        )  # fmt: skip
        head = (await self._git(repo, deadline, "rev-parse", "--verify", "HEAD")).strip()
        return ToolResult(
            self._bounded(out, "(committed)") + f"\ncommit {head}", metadata={"commit": head}
        )


def _remaining(deadline: float, op: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ToolError(f"git {op} timed out.")
    return left


def _repo_paths(workspace: Workspace, paths: list[str]) -> list[str]:
    """Each path checked against the workspace, relative to its root (deleted files allowed)."""
    root = workspace.root
    return [_repo_path(workspace, p, root) for p in paths]


def _repo_path(workspace: Workspace, path: str, root: Path) -> str:
    """``path`` checked against the workspace, relative to the root (deleted files allowed)."""
    resolved = workspace.resolve(path, root=root)  # refuses escapes, links included
    lexical = Path(os.path.normpath(root / path))  # but a link itself is what git tracks
    if lexical.is_relative_to(root):
        return lexical.relative_to(root).as_posix() or "."
    return workspace.display(resolved, root=root)


def _render_status(raw: str, prefix: str) -> str:
    """``git status --porcelain=v1 --branch -z`` as the text form, paths relative to ``prefix``.

    Porcelain paths are relative to the top of the work tree, whatever the current directory.
    """
    entries = raw.split("\0")
    lines = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        if entry.startswith("## "):
            lines.append(entry)
            continue
        status, path = entry[:2], entry[3:]
        shown = _quote(_relative(path, prefix))
        if ("R" in status or "C" in status) and i < len(entries):
            shown = f"{_quote(_relative(entries[i], prefix))} -> {shown}"
            i += 1
        lines.append(f"{status} {shown}")
    return "".join(line + "\n" for line in lines)


def _relative(path: str, prefix: str) -> str:
    if not prefix:
        return path
    if path.startswith(prefix):
        return path[len(prefix) :] or "./"
    relative = posixpath.relpath(path, prefix.rstrip("/"))
    return relative + "/" if path.endswith("/") else relative


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f"}
_ESCAPES |= {"\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _quote(path: str) -> str:
    """``path`` C-quoted, as git status does when it holds a space, quote, backslash or control."""
    if not any(ch in _ESCAPES or ch == " " or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        return path
    quoted = "".join(
        _ESCAPES.get(ch) or (f"\\{ord(ch):03o}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch)
        for ch in path
    )
    return f'"{quoted}"'
