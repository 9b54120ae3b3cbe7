"""Reading the user's lines and asking before dangerous tools.

Lines are read from the standard-input file descriptor through the event loop (``anyio``
waits for it to become readable), so a read can always be cancelled: Ctrl-C at a prompt
never leaves a thread blocked on ``input()``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Literal, TextIO

import anyio

from .._approvals import DEFER
from ._terminal import safe, safe_lines

__all__ = ["ApproveMode", "Approver", "LineReader", "stdin_reader"]

ApproveMode = Literal["ask", "yes", "demo", "decline", "defer"]

QUESTION = "[y]es / [n]o / [a]lways for this tool: "
NO_TERMINAL = (
    "The user could not be asked (no terminal to ask on, and --yes was not given), so the "
    "tool was not run."
)


class LineReader:
    """Reads lines from a file descriptor without blocking the event loop.

    Works on terminals and pipes (and regular files, which are always readable).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self._eof = False

    @property
    def interactive(self) -> bool:
        """Whether the descriptor is a terminal."""
        try:
            return os.isatty(self.fd)
        except OSError:
            return False

    async def readline(self) -> str | None:
        """The next line without its line ending, or ``None`` at end of input."""
        while b"\n" not in self._buffer and not self._eof:
            # (a regular file is always readable, and the event loop cannot watch it)
            with contextlib.suppress(OSError):
                await anyio.wait_readable(self.fd)
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                self._buffer += data
            else:
                self._eof = True
        if not self._buffer and self._eof:
            return None
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = rest
        return line.decode("utf-8", errors="replace").rstrip("\r")


class Approver:
    """The confirmation gate: ``await approver(name, preview)`` → ``True``, ``False``, a reason
    or :data:`~fanloop.DEFER`.

    Modes: ``ask`` asks ``[y]es / [n]o / [a]lways for this tool`` on the terminal (an empty
    answer or end of input is *no*; anything else unrecognised asks again); ``yes`` approves
    everything (``--yes``); ``demo`` approves and says so; ``decline`` refuses, because there
    is no terminal to ask on; ``defer`` parks the call in the session until a person answers
    with ``fanloop sessions approve`` (``--defer``). Nothing is ever approved by a timeout.

    Args:
        mode: see above.
        reader: where answers come from.
        write: writes the question (and the preview, when ``show_preview``).
        show_preview: print the preview before the question (when the view does not).
        answered: called when an answer was read (its newline is on the screen).
        style: colours, a :class:`~fanloop.cli._render.Style`.
    """

    def __init__(
        self,
        mode: ApproveMode,
        *,
        reader: LineReader | None,
        write: Callable[[str], None],
        colour: Callable[[str], str] = str,
        show_preview: bool = False,
        answered: Callable[[], None] | None = None,
    ) -> None:
        self.mode = mode
        self.reader = reader
        self.write = write
        self.answered = answered
        self.colour = colour
        self.show_preview = show_preview
        self.always: set[str] = set()

    async def __call__(self, name: str, preview: str) -> bool | str | object:
        if self.show_preview and self.mode == "ask":
            self.write(
                f"{safe(name)} wants to run:\n" + "".join(f"  {x}\n" for x in safe_lines(preview))
            )
        if self.mode == "defer":
            self.write(
                f"    {self.colour('⏸ deferred:')} {safe(name)} waits for a person's approval\n"
            )
            return DEFER
        ask = f"    {self.colour('allow?')} {QUESTION}"
        if name in self.always:
            self.write(f"{ask}a  (always for {name})\n")
            return True
        if self.mode == "yes":
            self.write(f"{ask}y  (approved by --yes)\n")
            return True
        if self.mode == "demo":
            self.write(f"{ask}y  — auto-approved (demo mode)\n")
            return True
        if self.mode == "decline" or self.reader is None:
            self.write(f"{ask}n  — declined: no terminal to ask on (pass --yes to approve)\n")
            return NO_TERMINAL
        while True:
            self.write(ask)
            answer = await self.reader.readline()
            if answer is not None and self.answered is not None:
                self.answered()  # the terminal echoed the answer's newline
            if answer is None:
                self.write("\n")
                return False
            choice = answer.strip().lower()
            if choice in ("y", "yes"):
                return True
            if choice in ("a", "always"):
                self.always.add(name)
                return True
            if choice in ("", "n", "no"):
                return False
            self.write("    please answer y, n or a\n")


def stdin_reader(stream: TextIO | None) -> LineReader | None:
    """A :class:`LineReader` on ``stream``'s descriptor (``None`` when it has none)."""
    if stream is None:
        return None
    try:
        return LineReader(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
