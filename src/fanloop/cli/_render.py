"""Terminal rendering: colour only on a terminal, ``NO_COLOR`` respected."""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["Style"]


class Style:
    """ANSI styles that turn themselves off where colour does not belong."""

    def __init__(self, stream: TextIO | None = None) -> None:
        stream = stream or sys.stdout
        self.enabled = (
            hasattr(stream, "isatty")
            and stream.isatty()
            and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb"
        )

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)
