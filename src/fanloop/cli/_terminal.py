"""What the command line needs from the terminal and its pipes.

- :class:`GuardedStream`: stdout that a closed pipe (``fanloop ... | head -1``) turns quiet:
  the first failed write points the descriptor at ``/dev/null`` and tells the command to stop.
- :func:`safe`: text from the model, a tool or a file, with control characters shown instead
  of obeyed (an escape sequence in a previewed command must not hide part of it).
- :func:`display_width`, :func:`fit` and :func:`terminal_width`: lines that fit the terminal.
- :class:`Spinner`: "thinking…" while the first token is awaited, on a terminal only.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import time
import unicodedata
from collections.abc import Callable
from typing import Any, TextIO

__all__ = [
    "EXIT_BROKEN_PIPE",
    "GuardedStream",
    "Stream",
    "Spinner",
    "display_width",
    "fit",
    "is_terminal",
    "safe",
    "safe_lines",
    "terminal_width",
]

Stream = TextIO | io.TextIOBase
"""Where text is written: a file object, or a :class:`GuardedStream`."""

EXIT_BROKEN_PIPE = 141
"""The exit code after the reader of stdout went away: 128 + SIGPIPE, as a shell reports for a
Unix tool that a closed pipe ended."""


class GuardedStream(io.TextIOBase):
    """A text stream whose writes cannot fail with a closed pipe.

    The first ``BrokenPipeError`` points the descriptor at ``/dev/null`` (so the interpreter's
    last flush is quiet too), makes every later write a no-op, sets :attr:`broken` and calls
    :attr:`on_broken` (the command line cancels the command there).
    """

    def __init__(self, stream: TextIO, on_broken: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.on_broken = on_broken
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self.mark_broken()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self.mark_broken()

    def isatty(self) -> bool:
        try:
            return not self.broken and self.stream.isatty()
        except (ValueError, OSError):
            return False

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"

    def mark_broken(self) -> None:
        """Treat the stream as closed: point it at /dev/null, stop writing, tell the owner."""
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        if self.on_broken is not None:
            self.on_broken()


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (``False`` for anything without ``isatty``)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (ValueError, OSError):
        return False


def terminal_width(stream: Any) -> int | None:
    """The terminal's width in columns; ``None`` for a pipe or a file (lines are not cut)."""
    if not is_terminal(stream):
        return None
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    if columns <= 0:
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            return None
    return columns if columns > 0 else None


# -- showing untrusted text ------------------------------------------------------------------

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), and the
# bidirectional overrides and isolates that reorder what a line appears to say.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """``text`` with control characters (escape sequences, ``\\r``, bidi overrides...) shown
    as ``\\x1b``-style escapes instead of being obeyed by the terminal."""
    return _UNSAFE.sub(_escape, text)


def safe_lines(text: str) -> list[str]:
    """The lines of ``text`` as :func:`safe` shows them: split at ``\n`` (and ``\r\n``)
    only, so a lone ``\r`` stays visible on its line instead of starting a new one."""
    return safe(text.replace("\r\n", "\n").removesuffix("\n")).split("\n")


# -- widths ----------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """How many terminal columns ``text`` takes (colour codes take none, wide characters 2)."""
    return sum(_char_width(ch) for ch in _ANSI.sub("", text))


def fit(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` columns, ending in ``…`` when cut (colour codes are kept
    whole, and the colour is reset after a cut). ``None`` leaves it as it is."""
    if width is None or display_width(text) <= width:
        return text
    out: list[str] = []
    used = 0
    pos = 0
    styled = False
    while pos < len(text):
        match = _ANSI.match(text, pos)
        if match:
            out.append(match.group())
            styled = True
            pos = match.end()
            continue
        ch = text[pos]
        w = _char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
        pos += 1
    return "".join(out) + "…" + ("\x1b[0m" if styled else "")


# -- the spinner -----------------------------------------------------------------------------

_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_TICK = 0.12
CLEAR_LINE = "\r\x1b[K"


class Spinner:
    """``⠋ thinking… 3s`` on the current (empty) line until :meth:`hide`.

    Driven by the running asyncio loop's timers (no thread, no task); without a running loop
    it does nothing. The caller writes nothing to the line while it shows: every write hides
    it first.
    """

    def __init__(self, out: Stream, style: Callable[[str], str] = str) -> None:
        self.out = out
        self.style = style
        self.visible = False
        self._handle: asyncio.TimerHandle | None = None
        self._started = 0.0
        self._frame = 0

    @property
    def active(self) -> bool:
        return self._handle is not None or self.visible

    def show(self) -> None:
        """Start it (the first frame appears after a moment, so a quick answer never
        flickers)."""
        if self.active:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._started = time.monotonic()
        self._handle = loop.call_later(_TICK, self._tick)

    def _tick(self) -> None:
        elapsed = time.monotonic() - self._started
        frame = _FRAMES[self._frame % len(_FRAMES)]
        self._frame += 1
        text = f"{frame} thinking…" + (f" {elapsed:.0f}s" if elapsed >= 1 else "")
        self.out.write(CLEAR_LINE + self.style(text))
        self.out.flush()
        self.visible = True
        self._handle = asyncio.get_running_loop().call_later(_TICK, self._tick)

    def hide(self) -> None:
        """Stop it and clear its line."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.visible:
            self.visible = False
            self.out.write(CLEAR_LINE)
            self.out.flush()
