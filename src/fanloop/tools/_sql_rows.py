"""Rows read from a database, bounded: at most ``max_rows`` rows and ``max_chars`` characters,
every cell cut to :data:`CELL_CHARS` characters (bytes shown as their length)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._record import record

__all__ = ["CELL_CHARS", "QueryRows", "RowReader", "cut_cell"]

CELL_CHARS = 200
"""Characters of a cell that are shown; a longer cell is kept as ``CELL_CHARS + 1`` characters,
so it still reads as cut."""


@record(frozen=True)
class QueryRows:
    """What a statement returned.

    Attributes:
        columns: the column names (empty when the statement returns no rows).
        rows: at most ``max_rows`` rows; text cut to ``CELL_CHARS + 1`` characters, bytes as
            ``"<N bytes>"``.
        more: rows were left unread: there were more than ``max_rows``, or the rows read so
            far reached the size cap.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    more: bool


def cut_cell(value: Any) -> Any:
    """A cell as it is kept: long text cut, bytes replaced by their length."""
    if isinstance(value, str):
        return value if len(value) <= CELL_CHARS else value[: CELL_CHARS + 1]
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    return value


class RowReader:
    """Collects rows until ``max_rows`` rows or ``max_chars`` characters, whichever is first."""

    __slots__ = ("chars", "max_chars", "max_rows", "more", "rows")

    def __init__(self, max_rows: int, max_chars: int) -> None:
        self.max_rows = max_rows
        self.max_chars = max_chars
        self.rows: list[tuple[Any, ...]] = []
        self.chars = 0
        self.more = False

    def add(self, row: Sequence[Any]) -> bool:
        """Keep ``row`` (cut) if it fits; return whether to read on."""
        if len(self.rows) >= self.max_rows:
            self.more = True
            return False
        kept = tuple(cut_cell(value) for value in row)
        size = sum(len(str(value)) + 3 for value in kept)
        if self.rows and self.chars + size > self.max_chars:
            self.more = True
            return False
        self.rows.append(kept)
        self.chars += size
        return True

    def result(self, columns: Sequence[str]) -> QueryRows:
        """The rows read, as a :class:`QueryRows`."""
        return QueryRows(tuple(columns), tuple(self.rows), self.more)
