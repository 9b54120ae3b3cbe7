"""Images and PDFs on the wire: each vendor's documented shape, through the real SDK clients."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from input_media import PDF, PNG

from fanloop import Agent, ToolResult, tool
from fanloop.errors import ConfigurationError
from fanloop.messages import DocumentPart, ImagePart, Message, TextPart
from fanloop.providers import ModelRequest
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, call, reply

PNG64 = base64.b64encode(PNG).decode()
PDF64 = base64.b64encode(PDF).decode()
EPHEMERAL = {"type": "ephemeral"}


def user(*parts: Any) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=parts),), max_tokens=64)


@tool
async def snapshot() -> ToolResult:
    """Take a picture of the screen."""
    return ToolResult("the screen:", parts=(ImagePart(data=PNG),))


async def test_anthropic_sends_images_and_documents_natively(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    server.add("A red pixel and a page.")
    await anthropic.complete(
        user(
            TextPart(text="What are these?"),
            ImagePart(data=PNG),
            ImagePart(url="https://example.com/cat.jpg"),
            DocumentPart(data=PDF, title="Q3 report"),
            DocumentPart(url="https://example.com/paper.pdf"),
        )
    )
    assert server.requests[0].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What are these?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG64},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
                    "title": "Q3 report",
                },
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.com/paper.pdf"},
                    "cache_control": EPHEMERAL,  # the last block of the request
                },
            ],
        }
    ]


async def test_openai_sends_images_and_documents_natively(
    server: FakeLLMServer, openai: OpenAIProvider
) -> None:
    server.add("A red pixel and a page.")
    await openai.complete(
        user(
            TextPart(text="What are these?"),
            ImagePart(data=PNG),
            ImagePart(url="https://example.com/cat.jpg"),
            DocumentPart(data=PDF, title="Q3 report"),
            DocumentPart(data=PDF),
        )
    )
    assert server.requests[0].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {
                    "type": "file",
                    "file": {
                        "filename": "Q3 report.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF64}",
                    },
                },
                {
                    "type": "file",
                    "file": {
                        "filename": "document.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF64}",
                    },
                },
            ],
        }
    ]


async def test_openai_refuses_a_document_by_url_before_sending(
    server: FakeLLMServer, openai: OpenAIProvider
) -> None:
    with pytest.raises(ConfigurationError, match="PDF documents as data only"):
        await openai.complete(user(DocumentPart(url="https://example.com/a.pdf")))
    assert server.requests == []


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_prompt_of_parts_reaches_the_wire(
    server: FakeLLMServer, anthropic: AnthropicProvider, openai: OpenAIProvider, api: str
) -> None:
    server.add("A red pixel.")
    agent = Agent(anthropic if api == "anthropic" else openai)
    result = await agent.run([TextPart(text="What is this?"), ImagePart(data=PNG)])
    assert result.text == "A red pixel."
    sent = server.requests[0].messages[-1]["content"]
    if api == "anthropic":
        assert sent[1]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG64}
    else:
        assert sent[1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{PNG64}"},
        }
    assert result.messages[0].content == (TextPart(text="What is this?"), ImagePart(data=PNG))


async def test_tool_result_images_reach_anthropic_inside_the_tool_result(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    server.add(reply(tool_calls=[call("snapshot", "s1")]), "A red pixel.")
    result = await Agent(anthropic, tools=[snapshot]).run("Look at the screen.")
    assert result.text == "A red pixel."
    assert server.requests[1].messages[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "s1",
                "content": [
                    {"type": "text", "text": "the screen:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG64},
                    },
                ],
                "cache_control": EPHEMERAL,
            }
        ],
    }
    assert result.messages[2].tool_results_parts[0].parts == (ImagePart(data=PNG),)


async def test_tool_result_images_reach_openai_in_the_next_user_message(
    server: FakeLLMServer, openai: OpenAIProvider
) -> None:
    # Chat Completions tool messages are text only: the image follows in a user message.
    server.add(reply(tool_calls=[call("snapshot", "s1")]), "A red pixel.")
    result = await Agent(openai, tools=[snapshot]).run("Look at the screen.")
    assert result.text == "A red pixel."
    assert server.requests[1].messages[-2:] == [
        {
            "role": "tool",
            "tool_call_id": "s1",
            "content": "the screen:\n[1 attachment in the next message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attachments from tool call s1:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
            ],
        },
    ]


async def test_openai_puts_every_tool_message_before_the_attachments(
    server: FakeLLMServer, openai: OpenAIProvider
) -> None:
    @tool(concurrent_safe=True)
    async def page(n: int) -> list[Any]:
        """A page of a PDF."""
        return [TextPart(text=f"page {n}"), DocumentPart(data=PDF, title=f"p{n}")]

    server.add(reply(tool_calls=[call("page", "a", n=1), call("page", "b", n=2)]), "Two pages.")
    await Agent(openai, tools=[page]).run("Read both pages.")
    sent = server.requests[1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [p.get("text") or p["file"]["filename"] for p in sent[-1]["content"]] == [
        "Attachments from tool call a:",
        "p1.pdf",
        "Attachments from tool call b:",
        "p2.pdf",
    ]


async def test_a_tool_returning_too_much_media_gets_an_error_result(
    server: FakeLLMServer, anthropic: AnthropicProvider
) -> None:
    @tool
    async def flood() -> ToolResult:
        """Too many pictures."""
        return ToolResult("x", parts=(ImagePart(data=PNG),) * 50)

    server.add(reply(tool_calls=[call("flood", "f1")]), "ok")
    await Agent(anthropic, tools=[flood]).run("go")
    block = server.requests[1].messages[-1]["content"][0]
    assert block["is_error"] is True
    assert "over the limit of 20" in block["content"]
