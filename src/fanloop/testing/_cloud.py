"""The cloud platforms' paths and framing, for :class:`~fanloop.testing.FakeLLMServer`.

Claude on Google Vertex AI is posted to
``/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``
(``:streamRawPredict`` for a stream: SSE as usual), on Amazon Bedrock to
``/model/{model}/invoke`` or ``/model/{model}/invoke-with-response-stream``, whose stream is
AWS event-stream binary messages (:func:`event_stream_message`). Both take the Messages API
body without ``model`` (it is in the path) and with ``anthropic_version``. Azure OpenAI's
paths (``/openai/deployments/{deployment}/chat/completions``, ``/openai/v1/responses``...)
end like OpenAI's and need nothing here.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from dataclasses import dataclass
from urllib.parse import unquote

__all__ = ["CloudRoute", "bedrock_frames", "event_stream_message", "route"]

_VERTEX = re.compile(
    r"^/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/([^/]+?):"
    r"(rawPredict|streamRawPredict)$"
)
_BEDROCK = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream)$")


@dataclass(frozen=True, slots=True)
class CloudRoute:
    """A Messages API request on a cloud platform, as its path says.

    Attributes:
        platform: ``"vertex"`` or ``"bedrock"``.
        model: the model named in the path.
        stream: whether the path asks for a stream.
    """

    platform: str
    model: str
    stream: bool


def route(path: str) -> CloudRoute | None:
    """The platform request ``path`` is, or ``None`` (a first-party path, or unknown)."""
    if match := _VERTEX.match(path):
        return CloudRoute("vertex", unquote(match[1]), match[2] == "streamRawPredict")
    if match := _BEDROCK.match(path):
        return CloudRoute("bedrock", unquote(match[1]), match[2] != "invoke")
    return None


def event_stream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message with string ``headers`` and ``payload``, as Bedrock
    frames its streams (lengths and CRC-32 checksums included).

    Example:
        >>> len(event_stream_message({":message-type": "event"}, b"{}"))
        40
    """
    encoded = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value
        for name, value in ((n, v.encode()) for n, v in headers.items())
    )
    total = 16 + len(encoded) + len(payload)
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def bedrock_frames(frames: list[bytes]) -> list[bytes]:
    """Rendered Anthropic SSE frames as Bedrock's event-stream messages: each event a
    ``chunk`` (its JSON in base64), an ``error`` event an exception message."""
    out: list[bytes] = []
    for frame in frames:
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in frame.split(b"\n") if line.startswith(b"data:")
        )
        if not data:
            continue
        event = json.loads(data)
        if event.get("type") == "error":
            error = event.get("error") or {}
            kind = {
                "rate_limit_error": "throttlingException",
                "overloaded_error": "serviceUnavailableException",
            }.get(str(error.get("type")), "internalServerException")
            message = json.dumps({"message": error.get("message", "")}).encode()
            headers = {
                ":message-type": "exception",
                ":exception-type": kind,
                ":content-type": "application/json",
            }
            out.append(event_stream_message(headers, message))
            continue
        wrapped = json.dumps({"bytes": base64.b64encode(data).decode(), "p": "abcd"}).encode()
        headers = {
            ":event-type": "chunk",
            ":content-type": "application/json",
            ":message-type": "event",
        }
        out.append(event_stream_message(headers, wrapped))
    return out
