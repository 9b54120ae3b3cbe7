"""A small, fast server-sent-events decoder.

The provider SDKs build a pydantic model for every streamed event; fanloop's providers feed the
raw bytes of the response through :class:`SSEDecoder` instead and parse the JSON themselves.

The decoder follows the parts of the SSE format that model APIs use: frames end at a blank
line; ``event:`` names the frame; ``data:`` lines (joined with ``\\n``) carry the payload;
comment lines (``:``), ``id:`` and ``retry:`` are ignored; lines may end in ``\\n``, ``\\r\\n``
or ``\\r``. A frame still open when the body ends is dropped, as the format requires.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Turns chunks of an SSE body into ``(event, data)`` pairs of bytes.

    ``event`` is ``b""`` for a frame without an ``event:`` line; frames without data are
    skipped.

    Example:
        >>> decoder = SSEDecoder()
        >>> decoder.feed(b'event: ping\\ndata: {"type":"ping"}\\n\\nevent: message')
        [(b'ping', b'{"type":"ping"}')]
        >>> decoder.feed(b'_stop\\ndata: {}\\n\\n')
        [(b'message_stop', b'{}')]
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        """Add ``chunk`` and return the frames it completed, in order."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            # Keep a trailing "\r": its "\n" may arrive with the next chunk.
            tail = b"\r" if buffer.endswith(b"\r") else b""
            if tail:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        if b"\n\n" not in buffer:
            self._buffer = buffer
            return []
        *frames, self._buffer = buffer.split(b"\n\n")
        out: list[tuple[bytes, bytes]] = []
        for frame in frames:
            if not frame:
                continue
            event = b""
            data: bytes | None = None
            for line in frame.split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[6:] if line[5:6] == b" " else line[5:]
                    data = value if data is None else data + b"\n" + value
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
            if data:
                out.append((event, data))
        return out
