"""Unified diffs for the previews of the tools that change files, bounded in time and size.

:func:`unified_diff` cuts the common start and end before it compares, shows a middle too
large to compare (``difflib`` is quadratic at worst) as replaced whole, and stops at 20,000
characters. Previews run on the event loop, so the file a diff starts from is read with a short
deadline and a size cap (:func:`_current_text`). :func:`_near_miss` tells the model where an
``edit_file`` string would match but for whitespace.
"""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Iterator

from ._blocking import Stop
from ._filebase import _is_binary, _size
from ._fsafe import Place, open_regular, read_capped

__all__ = ["unified_diff"]

_MAX_PREVIEW = 20_000
_DIFF_CELLS = 1_000_000  # the most line pairs difflib compares (it is quadratic at worst)
_PREVIEW_SECONDS = 2.0  # previews run on the event loop: their reads stop after this
_PREVIEW_BYTES = 5_000_000  # a larger file is not read for a preview's diff


def _preview_stop() -> Stop:
    return Stop(time.monotonic() + _PREVIEW_SECONDS)


class _Opcodes(difflib.SequenceMatcher[str]):
    """A matcher that answers with opcodes computed elsewhere (for the hunk grouping)."""

    def __init__(self, opcodes: list[tuple[str, int, int, int, int]]) -> None:
        super().__init__(None, [], [])
        self._given = opcodes

    def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:  # type: ignore[override]
        return self._given


def _opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Opcodes from ``a`` to ``b``: the common ends are cut first, and a middle too large to
    compare in bounded time is shown as replaced whole."""
    lo, n = 0, min(len(a), len(b))
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and a[len(a) - 1 - hi] == b[len(b) - 1 - hi]:
        hi += 1
    ea, eb = len(a) - hi, len(b) - hi
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, lo, 0, lo)] if lo else []
    mid_a, mid_b = a[lo:ea], b[lo:eb]
    if mid_a and mid_b and len(mid_a) * len(mid_b) <= _DIFF_CELLS:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_a, mid_b).get_opcodes():
            ops.append((tag, i1 + lo, i2 + lo, j1 + lo, j2 + lo))
    elif mid_a or mid_b:
        tag = "replace" if mid_a and mid_b else ("delete" if mid_a else "insert")
        ops.append((tag, lo, ea, lo, eb))
    if hi:
        ops.append(("equal", ea, len(a), eb, len(b)))
    return ops


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"


def _diff_lines(a: list[str], b: list[str], before: str, after: str) -> Iterator[str]:
    first = True
    for group in _Opcodes(_opcodes(a, b)).get_grouped_opcodes(3):
        if first:
            yield f"--- {before}\n"
            yield f"+++ {after}\n"
            first = False
        yield f"@@ -{_range(group[0][1], group[-1][2])} +{_range(group[0][3], group[-1][4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def unified_diff(old: str | None, new: str | None, display: str) -> str:
    """A unified diff from ``old`` to ``new`` (``None`` meaning the file does not exist).

    Bounded in time and size: the common start and end are cut before the comparison, a middle
    too large to compare is shown as replaced whole, and the text stops at 20,000 characters.
    """
    before = "/dev/null" if old is None else f"a/{display}"
    after = "/dev/null" if new is None else f"b/{display}"
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    parts: list[str] = []
    used = 0
    for line in _diff_lines(a, b, before, after):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if used + len(line) > _MAX_PREVIEW:
            parts.append(f"[diff cut at {_MAX_PREVIEW:,} characters]\n")
            break
        parts.append(line)
        used += len(line)
    return "".join(parts) or f"(no changes to {display})"


def _current_text(place: Place, stop: Stop, cap: int) -> str | None:
    """The text of the place's file for a diff, a note for a large or binary one, ``None``
    when it does not exist."""
    try:
        fd, info = open_regular(place)
    except FileNotFoundError:
        return None
    try:
        data = None if info.st_size > cap else read_capped(fd, cap, stop)
    finally:
        os.close(fd)
    if data is None:
        return f"(a file of {_size(info.st_size)}, too large to show)\n"
    if _is_binary(data):
        return f"(binary file, {len(data):,} bytes)\n"
    return data.decode("utf-8", errors="replace")


def _near_miss(text: str, old: str) -> str:
    """A hint when ``old`` matches except for whitespace (linear in the file's size)."""
    wanted = [line.strip() for line in old.splitlines() if line.strip()]
    if not wanted:
        return " It must match the file exactly, including whitespace."
    numbers: list[int] = []
    kept: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped:
            numbers.append(number)
            kept.append(stripped)
    haystack = "\n" + "\n".join(kept) + "\n"
    found = haystack.find("\n" + "\n".join(wanted) + "\n")
    if found != -1:
        return (
            f" A match that differs only in whitespace or indentation starts on line "
            f"{numbers[haystack.count(chr(10), 0, found)]}; copy the text exactly as "
            "read_file shows it."
        )
    return " It must match the file exactly, including whitespace; read the file again."
