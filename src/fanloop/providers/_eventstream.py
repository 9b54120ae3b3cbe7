"""A decoder for the AWS event-stream framing of Amazon Bedrock's streamed responses.

``POST /model/{model}/invoke-with-response-stream`` answers with binary messages, not SSE.
Each message is::

    total length (u32) | headers length (u32) | CRC-32 of the 8 bytes before (u32)
    headers | payload | CRC-32 of everything before (u32)

and each header is ``name length (u8) | name | type (u8) | value``. An ``event`` message of
type ``chunk`` carries ``{"bytes": "<base64 of one Anthropic stream event>"}``; an
``exception`` or ``error`` message ends the stream with an error. :class:`EventStreamDecoder`
turns the bytes into the ``(event, data)`` pairs the Anthropic stream parser reads from SSE:
``(b"chunk", event JSON)``, or ``(b"error", an Anthropic error event)``.

The body comes from the server: a message larger than ``max_frame_bytes`` (or than the 16 MiB
the format allows) raises :class:`~fanloop.providers._wire.ResponseTooLarge` before it is
buffered whole, and a bad length, checksum, header or payload raises
:class:`~fanloop.providers._wire.Malformed`; the decoder keeps the unfinished message as a list
of chunks, so the work stays linear in the body's size.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from typing import Any

from ._wire import Malformed, ResponseTooLarge

__all__ = ["MAX_MESSAGE_BYTES", "EventStreamDecoder", "exception_event"]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The largest message the format allows (botocore's limit too)."""

_MAX_HEADERS_BYTES = 128 * 1024
_PRELUDE = struct.Struct(">III")
_U16 = struct.Struct(">H")
# Value sizes of the fixed-width header types (0 and 1 are true and false: no value).
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}

# Bedrock's exception types as the Anthropic error types fanloop classifies.
_EXCEPTIONS = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "modelStreamErrorException": "api_error",
    "internalServerException": "api_error",
    "modelTimeoutException": "timeout_error",
    "validationException": "invalid_request_error",
    "accessDeniedException": "permission_error",
}


def exception_event(kind: str, message: str) -> bytes:
    """The Anthropic ``error`` event for a Bedrock exception (``throttlingException``...)."""
    error_type = _EXCEPTIONS.get(kind, "api_error")
    body = {"type": "error", "error": {"type": error_type, "message": message or kind}}
    return json.dumps(body).encode()


def _headers(raw: bytes) -> dict[str, Any]:
    """The headers of one message (string, bytes and fixed-width values; names ASCII)."""
    headers: dict[str, Any] = {}
    at, end = 0, len(raw)
    while at < end:
        size = raw[at]
        name = raw[at + 1 : at + 1 + size].decode("ascii")
        at += 1 + size
        if at >= end:
            raise Malformed("an event-stream header has no value")
        kind = raw[at]
        at += 1
        if kind in (6, 7):
            (length,) = _U16.unpack_from(raw, at)
            value: Any = raw[at + 2 : at + 2 + length]
            at += 2 + length
            if kind == 7:
                value = value.decode("utf-8")
        elif kind in _FIXED:
            value = kind == 0 if kind < 2 else raw[at : at + _FIXED[kind]]
            at += _FIXED[kind]
        else:
            raise Malformed(f"an event-stream header of unknown type {kind}")
        if at > end:
            raise Malformed("an event-stream header runs past the headers")
        headers[name] = value
    return headers


class EventStreamDecoder:
    """Turns chunks of an AWS event-stream body into ``(event, data)`` pairs of bytes.

    Args:
        max_frame_bytes: the largest message accepted (at most :data:`MAX_MESSAGE_BYTES`).

    Example:
        >>> from fanloop.testing._cloud import event_stream_message
        >>> frame = event_stream_message({":message-type": "event", ":event-type": "chunk"},
        ...                              b'{"bytes":"eyJ0eXBlIjoicGluZyJ9"}')
        >>> EventStreamDecoder().feed(frame)
        [(b'chunk', b'{"type":"ping"}')]
    """

    __slots__ = ("_max", "_need", "_parts", "_size")

    def __init__(self, max_frame_bytes: int = MAX_MESSAGE_BYTES) -> None:
        if max_frame_bytes < 16:
            raise ValueError("max_frame_bytes must be >= 16")
        self._max = min(max_frame_bytes, MAX_MESSAGE_BYTES)
        self._parts: list[bytes] = []
        self._size = 0
        self._need = 12  # the prelude, then the whole message it announces

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        """Add ``chunk`` and return the frames of the messages it completed, in order.

        Raises:
            ResponseTooLarge: a message is over ``max_frame_bytes``.
            Malformed: a bad length, checksum, header or payload.
        """
        if not chunk:
            return []
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size < self._need:
            return []
        # One join per call, then every whole message in it read by offset (a slice of the
        # rest per message would make a chunk of many tiny messages quadratic).
        data = b"".join(self._parts) if len(self._parts) > 1 else self._parts[0]
        out: list[tuple[bytes, bytes]] = []
        at, end, need = 0, len(data), 12
        while end - at >= 12:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(data, at)
            if zlib.crc32(data[at : at + 8]) != prelude_crc:
                raise Malformed("an event-stream message has a bad prelude checksum")
            if total > self._max:
                raise ResponseTooLarge(
                    f"an event-stream message of {total:,} bytes is over the "
                    f"{self._max:,}-byte limit (max_frame_bytes)"
                )
            if total < 16 or headers_length > min(total - 16, _MAX_HEADERS_BYTES):
                raise Malformed("an event-stream message has impossible lengths")
            if end - at < total:
                need = total  # its prelude is checked: wait for the rest of it
                break
            out += self._message(data[at : at + total], headers_length)
            at += total
        rest = data[at:] if at else data
        self._parts = [rest] if rest else []
        self._size = len(rest)
        self._need = need
        return out

    @staticmethod
    def _message(message: bytes, headers_length: int) -> list[tuple[bytes, bytes]]:
        (crc,) = struct.unpack_from(">I", message, len(message) - 4)
        if zlib.crc32(message[:-4]) != crc:
            raise Malformed("an event-stream message has a bad checksum")
        try:
            headers = _headers(message[12 : 12 + headers_length])
        except (IndexError, struct.error, UnicodeDecodeError):
            raise Malformed("an event-stream message has malformed headers") from None
        payload = message[12 + headers_length : -4]
        kind = headers.get(":message-type")
        if kind == "exception":
            exception = str(headers.get(":exception-type") or "exception")
            try:
                detail = json.loads(payload) if payload else {}
            except ValueError:
                detail = {}
            text = detail.get("message") if isinstance(detail, dict) else None
            return [(b"error", exception_event(exception, str(text or "")[:2000]))]
        if kind == "error":
            code = str(headers.get(":error-code") or "error")
            said = str(headers.get(":error-message") or "")[:2000]
            return [(b"error", exception_event(code, said))]
        if kind != "event" or headers.get(":event-type") != "chunk":
            return []  # an event type this version does not know
        try:
            wrapper = json.loads(payload)
            data = base64.b64decode(wrapper["bytes"], validate=True)
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise Malformed("an event-stream chunk is not base64 in a JSON object") from None
        return [(b"chunk", data)]
