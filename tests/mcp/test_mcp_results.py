"""How a ``CallToolResult`` becomes a ``ToolResult`` (no server needed), and tool naming."""

from __future__ import annotations

import base64

import pytest
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from mcp_types import Tool as RemoteTool

from fanloop import ToolResult
from fanloop.mcp import MCPServer, MCPTool, convert_result


def convert(result: CallToolResult) -> ToolResult:
    return convert_result(result, tool="t", server="s")


def b64(n: int) -> str:
    return base64.b64encode(b"x" * n).decode()


def test_text_blocks_are_joined() -> None:
    result = convert(CallToolResult(content=[TextContent(text="one"), TextContent(text="two")]))
    assert result == ToolResult("one\ntwo", metadata={"mcp_server": "s"})


def test_structured_content_is_json_when_there_is_no_text() -> None:
    result = convert(CallToolResult(content=[], structured_content={"n": 1, "s": "é"}))
    assert result.content == '{"n": 1, "s": "é"}'
    assert result.metadata == {"mcp_server": "s", "structured_content": {"n": 1, "s": "é"}}


def test_text_wins_over_structured_content() -> None:
    result = convert(
        CallToolResult(content=[TextContent(text="5")], structured_content={"result": 5})
    )
    assert result.content == "5"


def test_media_and_resources_are_summarised() -> None:
    result = convert(
        CallToolResult(
            content=[
                ImageContent(data=b64(300), mime_type="image/png"),
                AudioContent(data=b64(10), mime_type="audio/wav"),
                ResourceLink(name="report", uri="file:///r.pdf"),
                EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="hello")),
                EmbeddedResource(resource=BlobResourceContents(uri="file:///b.bin", blob=b64(7))),
            ]
        )
    )
    assert [(p.kind, len(p.data or b"")) for p in result.parts] == [("image", 300)]  # passed on
    assert result.content.splitlines() == [
        "[audio: audio/wav, 10 bytes]",
        "[resource link: report <file:///r.pdf>]",
        "[resource <file:///a.txt>]",
        "hello",
        "[resource <file:///b.bin>: application/octet-stream, 7 bytes]",
    ]


def test_is_error_is_carried_over() -> None:
    failed = convert(CallToolResult(content=[TextContent(text="bad")], is_error=True))
    silent = convert(CallToolResult(content=[], is_error=True))
    assert failed.is_error
    assert failed.content == "bad"
    assert silent.is_error
    assert silent.content == "MCP tool 't' failed without a message."


@pytest.mark.parametrize(
    ("remote", "prefix", "expected"),
    [
        ("search", None, "search"),
        ("search", "gh", "gh_search"),
        ("repo.search/v2", None, "repo_search_v2"),
        ("x" * 80, None, "x" * 64),
    ],
)
async def test_tool_names_are_safe_for_model_apis(
    remote: str, prefix: str | None, expected: str
) -> None:
    from fanloop.mcp._tool import _local_name

    assert _local_name(remote, prefix) == expected


def test_mcp_tool_from_a_listing() -> None:
    server = MCPServer.http("http://127.0.0.1:1/mcp", name="remote")
    remote = RemoteTool(
        name="read",
        title="Read a thing",
        input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    tool = MCPTool(server, remote, name="r_read", timeout=3)

    assert tool.name == "r_read"
    assert tool.remote_name == "read"
    assert tool.description == "Read a thing"  # the title, when there is no description
    assert tool.parameters == {"type": "object", "properties": {"id": {"type": "string"}}}
    assert tool.annotations == {"read_only_hint": True, "open_world_hint": False}
    assert (tool.dangerous, tool.concurrent_safe, tool.timeout) == (False, True, 3)
    assert repr(tool) == "<MCPTool 'r_read' concurrent_safe>"
    assert repr(server) == "<MCPServer http 'remote' open=0>"
