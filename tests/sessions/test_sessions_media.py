"""The SessionStore contract for images and documents: every store round-trips them, in
messages and in committed tool-effect receipts (bytes that are not UTF-8 included)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Awaitable, Callable

from fanloop.messages import (
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from fanloop.sessions import EffectStatus, SessionStore

Reopen = Callable[[], Awaitable[SessionStore]]


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
        + chunk(b"IEND", b"")
    )


PNG = _png() + bytes(range(256))  # trailing bytes of every value: not UTF-8, NULs included
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
SHOT = ToolCallPart(id="call_shot", name="screenshot", arguments={})
SHOT_RESULT = ToolResultPart(
    call_id="call_shot", content="the screen:", parts=(ImagePart(data=PNG), DocumentPart(data=PDF))
)


def media_conversation() -> list[Message]:
    return [
        Message(
            role="user",
            content=(
                TextPart(text="What are these?"),
                ImagePart(data=PNG),
                ImagePart(url="https://example.com/cat.jpg"),
                DocumentPart(data=PDF, title="Q3 report"),
                DocumentPart(url="https://example.com/paper.pdf"),
            ),
        ),
        Message.assistant("Let me look closer.", SHOT),
        Message.tool_results([SHOT_RESULT]),
        Message.assistant("A red pixel and a page."),
    ]


async def test_images_and_documents_round_trip(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("media")
    await session.extend(media_conversation())
    loaded = (await (await reopen()).load("media")).messages
    assert loaded == tuple(media_conversation())
    image = loaded[0].content[1]
    assert isinstance(image, ImagePart) and image.data == PNG and image.media_type == "image/png"
    assert loaded[2].tool_results_parts[0].parts == SHOT_RESULT.parts


async def test_receipts_keep_tool_result_media(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("receipt")
    await session.begin_effect(turn=1, call=SHOT)
    await session.commit_effect(SHOT.id, SHOT_RESULT)
    again = await (await reopen()).load("receipt")
    [receipt] = await again.effects()
    assert receipt.status == EffectStatus.COMMITTED
    assert receipt.result == SHOT_RESULT
