"""A small, fast server-sent-events decoder with a cap on the size of one frame.

The provider SDKs build a pydantic model for every streamed event; fanloop's providers feed the
raw bytes of the response through :class:`SSEDecoder` instead and parse the JSON themselves.

The decoder follows the parts of the SSE format that model APIs use: frames end at a blank
line; ``event:`` names the frame; ``data:`` lines (joined with ``\\n``) carry the payload;
comment lines (``:``), ``id:`` and ``retry:`` are ignored; lines may end in ``\\n``, ``\\r\\n``
or ``\\r``, split across chunks anywhere. A frame still open when the body ends is dropped, as
the format requires.

The body comes from the server, so the work is linear in its size: the unfinished frame is
kept as a list of chunks (joined once, when it completes), only the new bytes are searched for
the blank line that ends it, and a frame that grows past ``max_frame_bytes`` raises
:class:`~fanloop.providers._wire.ResponseTooLarge` before more of it is buffered. A line
cannot be longer than its frame, so the cap bounds lines too; a frame of more than
:data:`MAX_FRAME_LINES` lines is refused the same way before it is taken apart.
"""

from __future__ import annotations

from ._wire import ResponseTooLarge

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "MAX_FRAME_LINES", "SSEDecoder"]

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
"""The largest SSE frame (and so line) accepted by default: 16 MiB."""

MAX_FRAME_LINES = 10_000
"""The most lines one SSE frame may hold. The model APIs send one or two a frame; a frame of
16 MiB in seven-byte lines would take seconds of the event loop to take apart."""


class SSEDecoder:
    """Turns chunks of an SSE body into ``(event, data)`` pairs of bytes.

    ``event`` is ``b""`` for a frame without an ``event:`` line; frames without data
    (keep-alive comments among them) are skipped.

    Args:
        max_frame_bytes: the largest frame accepted; a longer one raises
            :class:`~fanloop.providers._wire.ResponseTooLarge` (not transient).

    Example:
        >>> decoder = SSEDecoder()
        >>> decoder.feed(b'event: ping\\ndata: {"type":"ping"}\\n\\nevent: message')
        [(b'ping', b'{"type":"ping"}')]
        >>> decoder.feed(b'_stop\\ndata: {}\\n\\n')
        [(b'message_stop', b'{}')]
    """

    __slots__ = ("_cr", "_max", "_parts", "_size")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be >= 1")
        self._max = max_frame_bytes
        self._parts: list[bytes] = []  # the unfinished frame, line endings already "\n"
        self._size = 0
        self._cr = False  # the last chunk ended in "\r": a "\n" opening the next is its pair

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        """Add ``chunk`` and return the frames it completed, in order.

        Raises:
            ResponseTooLarge: the frame being read is over ``max_frame_bytes``, or a frame
                holds :data:`MAX_FRAME_LINES` lines or more.
        """
        if not chunk:
            return []
        if self._cr:
            self._cr = False
            if chunk[0] == 10:  # the "\n" of a "\r\n" split across chunks
                chunk = chunk[1:]
                if not chunk:
                    return []
        if 13 in chunk:  # "\r" (an int: ``bytes in bytes`` first fails as an index, a raised
            # and cleared TypeError each time; ``find`` does not)
            self._cr = chunk[-1] == 13
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        parts = self._parts
        if parts:
            # Only the new bytes are searched; a separator may straddle the boundary.
            if chunk.find(b"\n\n") < 0 and not (chunk[0] == 10 and parts[-1][-1] == 10):
                self._grow(len(chunk))
                parts.append(chunk)
                return []
            parts.append(chunk)
            buffer = b"".join(parts)
            parts.clear()
            self._size = 0
        elif chunk.find(b"\n\n") < 0:
            self._grow(len(chunk))
            parts.append(chunk)
            return []
        else:
            buffer = chunk
        *frames, rest = buffer.split(b"\n\n")
        if rest:
            self._grow(len(rest))
            parts.append(rest)
        limit = self._max
        out: list[tuple[bytes, bytes]] = []
        for frame in frames:
            if not frame:
                continue
            if len(frame) > limit:
                self._too_large()
            if frame[:6] == b"data: ":  # the common frames: "data: ..." (OpenAI) ...
                if 10 not in frame:  # "\n"
                    if len(frame) > 6:
                        out.append((b"", frame[6:]))
                    continue
            elif frame[:7] == b"event: ":  # ... and "event: ...\ndata: ..." (Anthropic)
                head, _, rest = frame.partition(b"\n")
                if rest[:6] == b"data: " and 10 not in rest:
                    if len(rest) > 6:
                        out.append((head[7:].strip(), rest[6:]))
                    continue
            if frame.count(b"\n") >= MAX_FRAME_LINES:
                raise ResponseTooLarge(
                    f"a stream event holds over {MAX_FRAME_LINES:,} lines (the limit)"
                )
            event = b""
            data: list[bytes] = []
            for line in frame.split(b"\n"):
                if line[:5] == b"data:":
                    data.append(line[6:] if line[5:6] == b" " else line[5:])
                elif line[:6] == b"event:":
                    event = line[6:].strip()
            if data:
                payload = data[0] if len(data) == 1 else b"\n".join(data)
                if payload:
                    out.append((event, payload))
        return out

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self._max:
            self._parts.clear()
            self._size = 0
            self._too_large()

    def _too_large(self) -> None:
        raise ResponseTooLarge(
            f"a stream event is over the {self._max:,}-byte limit (max_frame_bytes)"
        )
