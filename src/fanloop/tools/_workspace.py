"""The workspace the built-in tools work in, and small helpers they share.

Every file a built-in tool touches goes through :meth:`Workspace.resolve`, which refuses a path
that resolves outside the workspace root, whether it escapes with ``..``, is an absolute path
elsewhere, or passes through a symbolic link that points out. The root is fixed per tool
instance or, by default, is the current working directory at the time of the call.

A checked path can still change before it is opened; the file tools therefore open what was
checked through :mod:`fanloop.tools._fsafe`, which refuses a component that has become a
symbolic link since.

The argument helpers (:func:`arg_str` and friends) read a tool's keyword arguments with a
clear :class:`~fanloop.errors.ToolError` when one has the wrong type, so a tool called directly
(without the agent's schema validation) fails the same way the model would see it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ToolError

__all__ = [
    "Workspace",
    "arg_bool",
    "arg_int",
    "arg_str",
    "arg_str_list",
    "count",
    "arg_opt_str",
    "truncate",
]

StrPath = str | os.PathLike[str]


class Workspace:
    """A directory tree the file tools are confined to.

    Args:
        root: the workspace root. ``None`` means the current working directory, read anew at
            every call (so one tool instance follows ``os.chdir``).
    """

    __slots__ = ("_root",)

    def __init__(self, root: StrPath | None = None) -> None:
        self._root = None if root is None else Path(root)

    @property
    def root(self) -> Path:
        """The resolved root directory."""
        base = Path.cwd() if self._root is None else self._root
        return base.resolve()

    def resolve(self, path: str, *, root: Path | None = None) -> Path:
        """Resolve ``path`` (relative to the root, or absolute) to a real path inside the root.

        Symbolic links are followed; the final path must lie inside the root.

        Args:
            path: the path the model gave.
            root: the resolved root, when the caller already has it.

        Raises:
            ToolError: the path is empty, malformed, or resolves outside the root.
        """
        root = self.root if root is None else root
        _check_raw(path)
        candidate = root / path  # an absolute path replaces the root, then gets checked
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops, permission errors
            raise ToolError(f"Cannot resolve the path {path!r}: {exc}.") from None
        if not resolved.is_relative_to(root):
            how = "through a symbolic link " if _via_symlink(root, candidate) else ""
            raise ToolError(
                f"Refused: the path {path!r} resolves {how}outside the workspace root "
                f"({root}). Only paths inside the workspace may be used."
            )
        return resolved

    def resolve_parent(self, path: str, *, root: Path | None = None) -> tuple[Path, str]:
        """Resolve all of ``path`` but its last component: ``(real parent, name)``.

        For acting on a name itself (deleting a symbolic link, not its target). A path whose
        last component is ``.`` or ``..``, or that ends in ``/``, names a directory: it is
        resolved whole and split after.

        Raises:
            ToolError: as :meth:`resolve`, for the parent; or the path names the root.
        """
        root = self.root if root is None else root
        _check_raw(path)
        head, name = os.path.split(path)
        if name in ("", ".", ".."):
            resolved = self.resolve(path, root=root)
            if resolved == root:
                raise ToolError("The path names the workspace root itself.")
            return resolved.parent, resolved.name
        return self.resolve(head or ".", root=root), name

    def display(self, path: Path, *, root: Path | None = None) -> str:
        """``path`` relative to the root, for messages (``.`` for the root itself)."""
        root = self.root if root is None else root
        try:
            rel = path.relative_to(root)
        except ValueError:
            return str(path)
        return rel.as_posix() or "."

    def __repr__(self) -> str:
        return f"Workspace({'cwd' if self._root is None else str(self._root)!r})"


def _check_raw(path: object) -> None:
    if not isinstance(path, str) or not path.strip():
        raise ToolError("The path is empty: give a path relative to the workspace root.")
    if "\x00" in path:
        raise ToolError(f"The path {path!r} contains a NUL byte.")


def _via_symlink(root: Path, candidate: Path) -> bool:
    """Whether the lexically normalised ``candidate`` stays inside ``root`` (so a link escaped)."""
    normal = Path(os.path.normpath(candidate))
    return normal.is_relative_to(root)


def count(n: int, noun: str) -> str:
    """``n`` and the noun, pluralised: ``1 line``, ``2 lines``, ``1,000 bytes``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def truncate(text: str, limit: int, *, what: str = "output", hint: str = "") -> str:
    """Cut ``text`` to ``limit`` characters, appending a note that says so."""
    if len(text) <= limit:
        return text
    note = f"\n[{what} truncated: showing {limit:,} of {len(text):,} characters"
    note += f"; {hint}]" if hint else "]"
    return text[:limit] + note


def arg_str(kwargs: Mapping[str, Any], name: str, default: str | None = None) -> str:
    """A required (or defaulted) string argument."""
    value = kwargs.get(name, default)
    if value is None:
        raise ToolError(f"Missing required argument {name!r} (a string).")
    if not isinstance(value, str):
        raise ToolError(f"Argument {name!r} must be a string, got {value!r}.")
    return value


def arg_opt_str(kwargs: Mapping[str, Any], name: str) -> str | None:
    """An optional string argument."""
    value = kwargs.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"Argument {name!r} must be a string, got {value!r}.")
    return value


def arg_int(
    kwargs: Mapping[str, Any],
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    """An optional integer argument within ``[minimum, maximum]``."""
    value = kwargs.get(name, default)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"Argument {name!r} must be an integer, got {value!r}.")
    if minimum is not None and value < minimum:
        raise ToolError(f"Argument {name!r} must be at least {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ToolError(f"Argument {name!r} must be at most {maximum}, got {value}.")
    return value


def arg_bool(kwargs: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """A boolean argument."""
    value = kwargs.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"Argument {name!r} must be true or false, got {value!r}.")
    return value


def arg_str_list(kwargs: Mapping[str, Any], name: str) -> list[str] | None:
    """An optional list of strings (a single string is accepted as a list of one)."""
    value = kwargs.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ToolError(f"Argument {name!r} must be a list of strings, got {value!r}.")
    return list(value)
