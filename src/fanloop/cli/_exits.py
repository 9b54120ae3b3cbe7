"""The command line's exit codes and its expected failure (a leaf: every CLI module uses them)."""

from __future__ import annotations

__all__ = [
    "EXIT_AWAITING",
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "CommandError",
]

EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_AWAITING = 3
"""The run stopped to wait for a person: ``fanloop sessions approve`` goes on with it."""
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """An expected failure: printed as one line on stderr, no traceback."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code
