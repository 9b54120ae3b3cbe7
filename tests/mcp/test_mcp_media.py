"""MCP image and PDF content passes through to the model instead of being reduced to text."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
)
from mcp_types import Tool as RemoteTool

from fanloop import Agent, ToolResult
from fanloop.mcp import MCPServer, MCPTool, convert_result, load_mcp_tools
from fanloop.messages import MAX_PART_BYTES, MAX_RESULT_PARTS, DocumentPart, ImagePart
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, call, reply
from heartbeat import heartbeat

ServerFactory = Callable[..., MCPServer]


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + idat + chunk(b"IEND", b"")


PNG = _png()
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
FAKE_PNG = b"\x89PNG fake"  # what the test server's ``picture`` tool sends


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def convert(*blocks: Any) -> ToolResult:
    return convert_result(CallToolResult(content=list(blocks)), tool="t", server="s")


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as srv:
        yield srv


def test_images_and_pdfs_pass_through() -> None:
    result = convert(
        TextContent(text="two things"),
        ImageContent(data=b64(PNG), mime_type="image/png"),
        EmbeddedResource(
            resource=BlobResourceContents(
                uri="file:///docs/q3.pdf", mime_type="application/pdf", blob=b64(PDF)
            )
        ),
        EmbeddedResource(
            resource=BlobResourceContents(uri="mem://shot", mime_type="IMAGE/PNG", blob=b64(PNG))
        ),
    )
    assert result.content == "two things"
    assert result.parts == (
        ImagePart(data=PNG, media_type="image/png"),
        DocumentPart(data=PDF, title="q3.pdf"),
        ImagePart(data=PNG, media_type="image/png"),
    )


def test_a_mislabelled_image_goes_as_what_its_bytes_are() -> None:
    jpeg = b"\xff\xd8\xff\xe0 a jpeg"
    result = convert(
        ImageContent(data=b64(jpeg), mime_type="image/png"),  # JPEG bytes: sent as JPEG
        ImageContent(data=b64(b"opaque"), mime_type="image/webp"),  # unknown bytes: as declared
    )
    assert result.parts == (
        ImagePart(data=jpeg, media_type="image/jpeg"),
        ImagePart(data=b"opaque", media_type="image/webp"),
    )
    assert result.content == ""


def test_what_cannot_pass_is_summarised_with_the_reason() -> None:
    result = convert(
        ImageContent(data=b64(PNG), mime_type="image/bmp"),
        ImageContent(data="!!!not base64!!!x", mime_type="image/png"),
        AudioContent(data=b64(b"RIFF"), mime_type="audio/wav"),
        EmbeddedResource(
            resource=BlobResourceContents(
                uri="file:///a.zip", mime_type="application/zip", blob=b64(b"PK")
            )
        ),
    )
    assert result.parts == ()
    assert result.content.splitlines() == [
        f"[image: image/bmp, {len(PNG)} bytes]",
        "[image: image/png, 12 bytes; not shown: not valid base64]",
        "[audio: audio/wav, 4 bytes]",
        "[resource <file:///a.zip>: application/zip, 2 bytes]",
    ]


def test_pass_through_is_capped_in_count_and_bytes() -> None:
    many = convert(*[ImageContent(data=b64(PNG), mime_type="image/png")] * (MAX_RESULT_PARTS + 3))
    assert len(many.parts) == MAX_RESULT_PARTS
    assert many.content.count(f"not shown: over {MAX_RESULT_PARTS} images and documents") == 3

    big = PNG + b"\0" * (MAX_PART_BYTES // 2)
    heavy = convert(*[ImageContent(data=b64(big), mime_type="image/png")] * 3)
    assert len(heavy.parts) == 1
    assert heavy.content.count("not shown: over 20 MiB in all") == 2


async def test_decoding_megabytes_keeps_the_loop_ticking() -> None:
    """A result near the caps is decoded in a worker thread, not on the event loop."""
    blocks = [
        ImageContent(data=b64(PNG + b"\0" * (MAX_PART_BYTES // 12)), mime_type="image/png")
    ] * 11

    class Server:
        name = "fake"

        async def call_tool(self, name: str, arguments: dict[str, Any], **_: Any) -> CallToolResult:
            return CallToolResult(content=blocks)

    remote = RemoteTool(name="shots", input_schema={"type": "object", "properties": {}})
    tool = MCPTool(Server(), remote)  # type: ignore[arg-type]
    async with heartbeat() as beat:
        for _ in range(3):
            result = await tool.run()
    assert len(result.parts) == 11
    assert beat.max_stall < 0.1, beat


async def test_a_real_server_sends_images_and_pdfs(stdio_server: ServerFactory) -> None:
    with anyio.fail_after(30):
        async with stdio_server(include=["picture", "report", "mislabeled"]) as server:
            tools = {t.name: t for t in await load_mcp_tools(server)}
            picture = await tools["picture"].run()
            report = await tools["report"].run()
            mislabeled = await tools["mislabeled"].run()
    assert picture.content == "here is a picture"
    assert picture.parts == (ImagePart(data=FAKE_PNG, media_type="image/png"),)
    assert report.parts == (DocumentPart(data=PDF, title="q3.pdf"),)
    assert [p.media_type for p in mislabeled.parts] == ["image/jpeg"]  # what the bytes are


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_mcp_images_reach_the_model(
    stdio_server: ServerFactory, llm: FakeLLMServer, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    provider: AnthropicProvider | OpenAIProvider = (
        AnthropicProvider("claude-sonnet-4-5", api_key="k", base_url=llm.anthropic_base_url)
        if api == "anthropic"
        else OpenAIProvider("gpt-4.1", api_key="k", base_url=llm.openai_base_url)
    )
    llm.add(reply(tool_calls=[call("picture", "p1")]), "A picture.")
    with anyio.fail_after(30):
        async with provider, stdio_server(include=["picture"]) as server:
            agent = Agent(provider, tools=await load_mcp_tools(server), auto_approve=True)
            result = await agent.run("Show me.")
    assert result.text == "A picture."
    sent = llm.requests[1].messages
    data = b64(FAKE_PNG)
    if api == "anthropic":
        assert sent[-1]["content"][0]["content"] == [
            {"type": "text", "text": "here is a picture"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": data},
            },
        ]
    else:
        assert sent[-1]["content"][-1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{data}"},
        }
