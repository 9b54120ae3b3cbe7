"""Reading an open file within bounds: whole up to a cap, or line by line in pieces.

- :func:`read_capped` reads the rest of a file, or gives up as soon as it holds more than the
  cap.
- :class:`LineReader` reads lines in bounded pieces: a line longer than its cap is cut, never
  loaded whole.

Both check the caller's :class:`~fanloop.tools._blocking.Stop` before every read. The file is
opened by :mod:`fanloop.tools._fsafe`.
"""

from __future__ import annotations

import hashlib
import os

from ._blocking import Stop

__all__ = ["LineReader", "read_capped"]

_CHUNK = 64 * 1024


def read_capped(fd: int, cap: int, stop: Stop) -> bytes | None:
    """The rest of ``fd``, or ``None`` when it holds more than ``cap`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        stop.check()
        data = os.read(fd, min(1 << 20, cap + 1 - size))
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        size += len(data)
        if size > cap:
            return None


class LineReader:
    """Lines of an open file, read in bounded pieces.

    Args:
        fd: the file, read from its current position.
        stop: checked before every read.
        max_bytes: read no more than this many bytes in all (``None``: to the end).
        digest: fed every byte read, when given.

    Attributes:
        lines: how many lines were returned or skipped so far.
        exhausted: the end of the file (or ``max_bytes``) was reached.
    """

    def __init__(
        self,
        fd: int,
        stop: Stop,
        *,
        max_bytes: int | None = None,
        digest: hashlib._Hash | None = None,
    ) -> None:
        self._fd = fd
        self._stop = stop
        self._left = max_bytes
        self._digest = digest
        self._buf = b""
        self._pos = 0
        self.lines = 0
        self.exhausted = False
        self.bytes_read = 0

    def _fill(self) -> bool:
        """Append one piece to the buffer; ``False`` at the end."""
        if self.exhausted:
            return False
        self._stop.check()
        size = _CHUNK if self._left is None else min(_CHUNK, self._left)
        data = os.read(self._fd, size) if size > 0 else b""
        if not data:
            self.exhausted = True
            return False
        if self._left is not None:
            self._left -= len(data)
        if self._digest is not None:
            self._digest.update(data)
        self.bytes_read += len(data)
        self._buf = self._buf[self._pos :] + data
        self._pos = 0
        return True

    def readline(self, limit: int) -> tuple[bytes, bool] | None:
        """The next line with its newline, at most ``limit`` bytes; ``None`` at the end.

        Returns:
            ``(line, cut)``: ``cut`` says the line was longer than ``limit``; its first
            ``limit`` bytes are returned and the rest is skipped.
        """
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end != -1:
                start, self._pos = self._pos, end + 1
                self.lines += 1
                if end + 1 - start > limit:
                    return self._buf[start : start + limit], True
                return self._buf[start : end + 1], False
            if len(self._buf) - self._pos > limit:
                line = self._buf[self._pos : self._pos + limit]
                self._pos += limit
                self._skip_line()
                self.lines += 1
                return line, True
            if not self._fill():
                if self._pos >= len(self._buf):
                    return None
                line = self._buf[self._pos :]
                self._buf, self._pos = b"", 0
                self.lines += 1
                return line, False

    def read_block(self, size: int, limit: int) -> tuple[bytes, bool] | None:
        """Whole lines, at most ``size`` bytes of them; ``None`` at the end.

        A line longer than ``size`` comes alone, as :meth:`readline` gives it (cut at
        ``limit`` bytes).

        Returns:
            ``(lines, cut)``, as :meth:`readline`.
        """
        size = min(size, limit)
        while len(self._buf) - self._pos < size and self._fill():
            pass
        if self._pos >= len(self._buf):
            return None
        end = self._buf.rfind(b"\n", self._pos, self._pos + size)
        if end == -1:
            if self.exhausted and len(self._buf) - self._pos <= min(size, limit):
                block = self._buf[self._pos :]  # the last line, without a newline
                self._buf, self._pos = b"", 0
                self.lines += 1
                return block, False
            return self.readline(limit)
        block = self._buf[self._pos : end + 1]
        self._pos = end + 1
        self.lines += block.count(b"\n")
        return block, False

    def _skip_line(self) -> None:
        """Drop the rest of the current line, newline included."""
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end != -1:
                self._pos = end + 1
                return
            self._buf, self._pos = b"", 0
            if not self._fill():
                return

    def skip(self, count: int) -> None:
        """Skip ``count`` lines (fewer at the end of the file), keeping none of them."""
        partial = False  # bytes of an unterminated line were dropped
        while count > 0:
            pending = self._buf.count(b"\n", self._pos)
            if pending >= count:
                for _ in range(count):
                    self._pos = self._buf.index(b"\n", self._pos) + 1
                self.lines += count
                return
            count -= pending
            self.lines += pending
            if pending:
                partial = not self._buf.endswith(b"\n")
            else:
                partial = partial or len(self._buf) > self._pos
            self._buf, self._pos = b"", 0
            if not self._fill():
                self.lines += partial
                return

    def count_rest(self) -> None:
        """Count the remaining lines without keeping them (``lines`` ends as the total)."""
        tail = self._buf[self._pos :]
        self._buf, self._pos = b"", 0
        newlines = tail.count(b"\n")
        last = tail[-1:]
        while self._fill():
            newlines += self._buf.count(b"\n")
            last = self._buf[-1:]
            self._buf = b""
        self.lines += newlines + (1 if last and last != b"\n" else 0)
