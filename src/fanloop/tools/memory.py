"""Memory: the ``remember`` tool and the memory file it writes.

``remember`` appends a standing correction or preference ("use tabs in this repo", "never
push to main") as one line to ``.fanloop/memory.md`` under the workspace root. When memory is
on, :func:`memory_prompt` turns the file into a section of the system prompt, so later
conversations start with what earlier ones were told. The file is plain Markdown; people may
edit it by hand.

Memory is opt-in for a library agent (``Agent(memory=True)``) and on by default in the command
line: an agent embedded in a service gains no tool and writes no file it was not asked to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.to_thread

from .._log import logger
from ..errors import ToolError
from ._workspace import StrPath, Workspace, arg_str
from .base import Tool, ToolResult

__all__ = ["MEMORY_FILE", "RememberTool", "load_memory", "memory_prompt"]

MEMORY_FILE = ".fanloop/memory.md"
"""Where the memory lives, relative to the workspace root."""

_HEADER = (
    "# fanloop memory\n\n"
    "Standing corrections and preferences, one per line, added by the `remember` tool.\n"
    "Edit or delete lines freely.\n\n"
)


def _memory_path(workspace: Workspace, root: Path) -> Path:
    return workspace.resolve(MEMORY_FILE, root=root)


class RememberTool(Tool):
    """``remember``: save a standing correction or preference to the memory file.

    Args:
        root: the workspace root (default: the current directory at call time).
        max_note_chars: the longest note accepted.
    """

    name = "remember"
    description = (
        "Save a standing correction or preference the user gave you, so it applies in future "
        "conversations too (e.g. 'Use pytest, not unittest, in this project'). Write one short, "
        "self-contained sentence. Do not save secrets or one-off task details."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "note": {"type": "string", "description": "The preference or correction to keep."},
        },
        "required": ["note"],
        "additionalProperties": False,
    }

    def __init__(self, *, root: StrPath | None = None, max_note_chars: int = 1000) -> None:
        self.workspace = Workspace(root)
        self.max_note_chars = max_note_chars

    async def run(self, **kwargs: Any) -> ToolResult:
        """Append the note; see the class docstring."""
        note = " ".join(arg_str(kwargs, "note").split())
        if not note:
            raise ToolError("The note is empty; say what to remember.")
        if len(note) > self.max_note_chars:
            raise ToolError(
                f"The note is {len(note)} characters; keep it under {self.max_note_chars}."
            )
        root = self.workspace.root
        path = _memory_path(self.workspace, root)
        added = await anyio.to_thread.run_sync(_append, path, note)
        if not added:
            return ToolResult(f"Already remembered: {note}")
        return ToolResult(f"Remembered (saved to {MEMORY_FILE}): {note}")


def _append(path: Path, note: str) -> bool:
    try:
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        if f"- {note}" in (line.strip() for line in existing.splitlines()):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            if not existing:
                fh.write(_HEADER)
            elif not existing.endswith("\n"):
                fh.write("\n")
            fh.write(f"- {note}\n")
    except OSError as exc:
        raise ToolError(f"Cannot write {MEMORY_FILE}: {exc.strerror or exc}.") from None
    return True


def load_memory(root: StrPath | None = None) -> str:
    """The text of the memory file under ``root`` (default: the current directory).

    Returns ``""`` when there is no memory file, or when it cannot be read safely (it resolves
    outside the root, or reading fails; a warning is logged).
    """
    workspace = Workspace(root)
    try:
        path = _memory_path(workspace, workspace.root)
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except (ToolError, OSError) as exc:
        logger.warning("memory_unreadable", root=str(workspace.root), error=str(exc))
        return ""


def memory_prompt(root: StrPath | None = None, *, max_chars: int = 10_000) -> str | None:
    """The memory as a system-prompt section, or ``None`` when nothing is remembered.

    The most recent notes are kept when the file is longer than ``max_chars``.

    Example:
        >>> import tempfile
        >>> memory_prompt(tempfile.mkdtemp()) is None
        True
    """
    text = load_memory(root).strip()
    if not text or text == _HEADER.strip():
        return None
    if len(text) > max_chars:
        text = "[older notes omitted]\n" + text[-max_chars:].split("\n", 1)[-1]
    return (
        f"The user asked you to remember the following standing preferences and corrections "
        f"(from {MEMORY_FILE}); follow them unless told otherwise:\n\n{text}"
    )
