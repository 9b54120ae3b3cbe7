"""Repository safety for the git tools: run nothing the repository asks for, stay in the workspace.

- :func:`_environ` builds the environment every git call runs in: the host's, without its
  secrets and without the ``GIT_*`` variables that redirect git (:func:`_base_environ`),
  non-interactive, with :data:`_FIXED_CONFIG` and the driver overrides on top of every config
  file as ``GIT_CONFIG_COUNT`` variables.
- :func:`_driver_overrides` reads ``git config --list --show-scope`` and overrides each filter,
  diff or merge driver the repository's own configuration defines.
- :func:`_check_layout` and :func:`_check_git_dir` refuse a repository whose work tree, git
  directory, object store, refs or alternates lead outside the workspace.

The policy as a whole is described in :mod:`fanloop.tools.git`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ToolError
from ._blocking import Stop
from ._secrets import scrub_environ

_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": ":",
    "GIT_SEQUENCE_EDITOR": ":",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_LITERAL_PATHSPECS": "1",
    "LC_ALL": "C",
}
# The host's GIT_* variables that are kept: identity and where the host's own config lives.
_KEEP_GIT_ENV = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CEILING_DIRECTORIES",
    }
)
_DROP_ENV = frozenset({"SSH_ASKPASS", "EDITOR", "VISUAL"})
# Settings that would make git run a program, reach out, or write more than asked.
_FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", "false"),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.bareRepository", "explicit"),
    ("color.ui", "false"),
    ("core.quotepath", "off"),
    ("diff.noprefix", "false"),
    ("diff.mnemonicPrefix", "false"),
)
# <section>.<name>.<variable> settings that name a program (a driver's command).
_DRIVER_KEYS = frozenset(
    {
        ("filter", "clean"),
        ("filter", "smudge"),
        ("filter", "process"),
        ("filter", "required"),
        ("diff", "textconv"),
        ("diff", "command"),
        ("merge", "driver"),
    }
)
_TRUSTED_SCOPES = frozenset({"system", "global"})  # the host's files, not the repository's
_MAX_REFS = 20_000
# The parts of a git directory that must not be links out of the workspace.
_GIT_DIR_PARTS = (
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "config",
    "config.worktree",
    "commondir",
    "index",
    "sharedindex",
    "packed-refs",
    "shallow",
    "objects",
    "objects/info",
    "objects/info/alternates",
    "objects/pack",
    "refs",
    "info",
    "info/attributes",
    "info/exclude",
    "info/grafts",
    "logs",
    "hooks",
)


def _base_environ(stop: Stop) -> dict[str, str]:
    """This process's environment without secrets and without variables that redirect git."""
    return {
        name: value
        for name, value in scrub_environ(os.environ).items()
        if (not name.startswith("GIT_") or name in _KEEP_GIT_ENV) and name not in _DROP_ENV
    }


def _environ(base: dict[str, str], config: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The environment git runs in: ``base``, non-interactive, ``config`` on top of all files."""
    env = {**base, **_GIT_ENV}
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def _check_layout(
    stop: Stop, root: Path, git_dir_: str, common_dir_: str, work_tree_: str, allow_external: bool
) -> tuple[Path, Path]:
    """The resolved git directory and work tree, if they keep git in the workspace.

    Raises:
        ToolError: the repository reaches outside the workspace (see the module docstring).
    """
    git_dir = Path(git_dir_).resolve()
    common_dir = (root / common_dir_).resolve()
    work_tree = Path(work_tree_).resolve()
    if not root.is_relative_to(work_tree):
        raise ToolError(
            f"Refused: the repository's work tree ({work_tree}) does not contain the workspace "
            f"({root}); git tools only work on the workspace."
        )
    if allow_external or not os.path.lexists(root / ".git"):
        return git_dir, work_tree  # no .git in the workspace: the workspace lies in the repo
    for what, path in (("git directory", git_dir), ("object store", common_dir)):
        if not path.is_relative_to(root):
            raise ToolError(
                f"Refused: the workspace's .git points to a {what} outside the workspace "
                f"({path}); git tools only work on a repository inside the workspace."
            )
    for directory in {git_dir, common_dir}:
        _check_git_dir(stop, root, directory)
    return git_dir, work_tree


def _check_git_dir(stop: Stop, root: Path, git_dir: Path) -> None:
    """Refuse a git directory in the workspace that borrows from outside it.

    Its parts (``HEAD``, refs, the index, the object store...) must not be symbolic links
    leading out, and no alternate object store may lie outside: else a ref or an index from
    another repository, with its objects, would show that repository's files.
    """
    links = [git_dir / name for name in _GIT_DIR_PARTS]
    seen = 0
    for top, dirs, files in os.walk(git_dir / "refs"):
        for name in (*dirs, *files):
            links.append(Path(top, name))
            seen += 1
        if seen > _MAX_REFS:
            raise ToolError(f"Refused: the repository has over {_MAX_REFS} refs to check.")
        stop.check()
    for path in links:
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise ToolError(
                f"Refused: {path} is a symbolic link to {path.resolve()}, outside the workspace."
            )
    for name in ("alternates", "http-alternates"):
        try:
            text = (git_dir / "objects" / "info" / name).read_text(errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ToolError(f"Refused: cannot read objects/info/{name}: {exc}.") from None
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "://" in line or not (git_dir / "objects" / line).resolve().is_relative_to(root):
                raise ToolError(
                    f"Refused: the repository borrows objects from {line!r}, outside the "
                    "workspace (objects/info/alternates)."
                )


def _driver_overrides(listing: str) -> list[tuple[str, str]]:
    """Overrides for the driver settings the repository's own configuration defines.

    ``listing`` is ``git config --list --show-scope -z``: ``scope NUL key LF value NUL``.
    Each such setting last set by the repository (not the host's system or global files) gets
    the host's value back, or an empty command (``required`` gets ``false``).
    """
    last_scope: dict[str, str] = {}
    trusted: dict[str, str | None] = {}
    fields = listing.split("\0")
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, newline, value = entry.partition("\n")
        section, _, rest = key.partition(".")
        _, dot, variable = rest.rpartition(".")
        if not dot or (section.lower(), variable.lower()) not in _DRIVER_KEYS:
            continue
        if scope == "command":  # ours, from the environment
            continue
        last_scope[key] = scope
        if scope in _TRUSTED_SCOPES:
            trusted[key] = value if newline else None
    overrides = []
    for key, scope in last_scope.items():
        if scope in _TRUSTED_SCOPES:
            continue
        required = key.lower().endswith(".required")
        restored = trusted.get(key)
        if restored is None:
            restored = ("true" if key in trusted else "false") if required else ""
        overrides.append((key, restored))
    return overrides
