"""Hostile servers against the citation, cloud (Bedrock event stream, Azure OpenAI) and
server-tool code: work that stays linear in what a server sends, caps that hold, offsets that
fit the text they index, and an Azure deployment name or token provider that cannot steer or
stall a request.

Wire answers come from ``FakeLLMServer`` (``Hostile.raw``) over real HTTP; the event-stream
decoder's cost is measured as a ratio (the same bytes fed at once and in small pieces), so it
holds on a busy machine.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from typing import Any

import anyio
import pytest
from provider_helpers import make_anthropic, make_openai, request, stream_all

from fanloop.errors import (
    AuthenticationError,
    ConfigurationError,
    ProviderTimeout,
    ResponseInvalid,
    ResponseTooLarge,
)
from fanloop.events import CitationAdded
from fanloop.messages import MAX_CITATIONS, TextPart
from fanloop.providers import _azure
from fanloop.providers._eventstream import EventStreamDecoder
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider, _annotations
from fanloop.testing import FakeLLMServer
from fanloop.testing._cloud import event_stream_message
from fanloop.testing._faults import Hostile


def sse(*events: dict[str, Any]) -> bytes:
    """Anthropic SSE frames for ``events`` (the event name is each one's ``type``)."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def chunks(*objs: dict[str, Any]) -> bytes:
    """Chat Completions SSE chunks for ``objs``, then ``[DONE]``."""
    return b"".join(f"data: {json.dumps(o)}\n\n".encode() for o in objs) + b"data: [DONE]\n\n"


def empty_message() -> bytes:
    """The smallest event-stream message: no headers, no payload (16 bytes)."""
    prelude = struct.pack(">II", 16, 0)
    message = prelude + struct.pack(">I", zlib.crc32(prelude))
    return message + struct.pack(">I", zlib.crc32(message))


# -- the Bedrock event-stream decoder ------------------------------------------------------


def _feed_seconds(body: bytes, piece: int) -> float:
    decoder = EventStreamDecoder()
    started = time.process_time()
    for at in range(0, len(body), piece):
        assert decoder.feed(body[at : at + piece]) == []
    return time.process_time() - started


def test_many_tiny_messages_in_one_chunk_cost_what_they_cost_in_small_chunks() -> None:
    # 262,144 empty messages: cut out of the buffer one by one (a copy of the rest each
    # time), one 4 MiB chunk took ~16 s against ~0.4 s for the same bytes in 16 KiB chunks.
    body = empty_message() * (4 * 1024 * 1024 // 16)
    small = _feed_seconds(body, 16 * 1024)
    whole = _feed_seconds(body, len(body))
    assert whole < 4 * small + 0.5, (whole, small)


def test_event_stream_lengths_from_the_server_are_checked_before_buffering() -> None:
    def prelude(total: int, headers: int) -> bytes:
        head = struct.pack(">II", total, headers)
        return head + struct.pack(">I", zlib.crc32(head))

    with pytest.raises(ResponseTooLarge):
        EventStreamDecoder().feed(prelude(2**32 - 1, 0))
    for total, headers in ((0, 0), (15, 0), (16, 1), (200, 190)):
        with pytest.raises(ValueError, match="impossible lengths"):
            EventStreamDecoder().feed(prelude(total, headers))
    assert EventStreamDecoder().feed(b"") == []
    # A message cut across reads at every byte, then many in one read.
    frame = event_stream_message(
        {":message-type": "event", ":event-type": "chunk"}, b'{"bytes":"eyJ0eXBlIjoicGluZyJ9"}'
    )
    decoder = EventStreamDecoder()
    got = [pair for i in range(len(frame)) for pair in decoder.feed(frame[i : i + 1])]
    assert got == [(b"chunk", b'{"type":"ping"}')]
    assert decoder.feed(frame * 3 + frame[:5]) == [(b"chunk", b'{"type":"ping"}')] * 3
    assert decoder.feed(frame[5:]) == [(b"chunk", b'{"type":"ping"}')]


def test_an_error_message_header_is_cut() -> None:
    frame = event_stream_message(
        {":message-type": "error", ":error-code": "Boom", ":error-message": "x" * 60_000}, b""
    )
    [(event, data)] = EventStreamDecoder().feed(frame)
    assert event == b"error"
    message = json.loads(data)["error"]["message"]
    assert 0 < len(message) <= 2000


# -- Anthropic: server tools and citations -------------------------------------------------


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


_MESSAGE_START = {
    "type": "message_start",
    "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 1}},
}
_END = (
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
)


async def test_a_server_tool_block_stopped_again_is_malformed(server: FakeLLMServer) -> None:
    # Each content_block_stop of a server tool joined and parsed its whole input again: a
    # block with a large input, then thousands of 50-byte stops, was quadratic.
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    body = sse(
        _MESSAGE_START,
        _start(0, use),
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {
                "type": "input_json_delta",
                "partial_json": '{"query": "' + "q" * 1000 + '"}',
            },
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_stop", "index": 0},
        *_END,
    )
    server.add(Hostile.raw([body]))
    async with make_anthropic(server) as provider:
        with pytest.raises(ResponseInvalid, match="stopped twice"):
            await stream_all(provider, request("hi"))


async def test_streamed_anthropic_citations_are_kept_up_to_the_cap(server: FakeLLMServer) -> None:
    cite = {"type": "char_location", "cited_text": "c", "document_index": 0}
    deltas = [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "citations_delta", "citation": dict(cite, start_char_index=i)},
        }
        for i in range(MAX_CITATIONS + 300)
    ]
    text = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "hi"},
    }
    body = sse(
        _MESSAGE_START,
        _start(0, {"type": "text", "text": ""}),
        text,
        *deltas,
        {"type": "content_block_stop", "index": 0},
        *_END,
    )
    server.add(Hostile.raw([body]))
    async with make_anthropic(server) as provider:
        events, final = await stream_all(provider, request("hi"))
    assert sum(isinstance(e, CitationAdded) for e in events) == MAX_CITATIONS
    [part] = final.content
    assert isinstance(part, TextPart) and len(part.citations) == MAX_CITATIONS
    assert final.origin is not None
    [block] = final.origin.raw
    assert len(block["citations"]) == MAX_CITATIONS  # was every one the server sent


# -- Chat Completions and Responses: annotations -------------------------------------------


def _seconds(items: list[Any]) -> float:
    seen: set[Any] = set()
    _annotations(items[:255], seen)
    started = time.process_time()
    _annotations(items[255:], seen)
    return time.process_time() - started


def test_repeated_annotations_cost_little_whatever_their_number() -> None:
    # Each repeat was compared (deep dict equality) with every annotation already read.
    def item(n: int) -> dict[str, Any]:
        return {"type": "url_citation", "url_citation": {"url": "https://e.com/", "n": n}}

    distinct = [item(n) for n in range(255)]
    few = _seconds(distinct + [item(254) for _ in range(1000)])
    many = _seconds(distinct + [item(254) for _ in range(100_000)])
    assert many < 5 * few + 0.2, (many, few)


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 10**9), (5, 2), (-1, 3), (3, 4.5), (True, 2), ("0", "2"), (0, 5)],
)
async def test_chat_citation_offsets_always_slice_their_text(
    server: FakeLLMServer, start: Any, end: Any
) -> None:
    annotation = {
        "type": "url_citation",
        "url_citation": {
            "url": "https://e.com/",
            "title": "t",
            "start_index": start,
            "end_index": end,
        },
    }
    body = chunks(
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
        {
            "id": "c1",
            "choices": [
                {"index": 0, "delta": {"annotations": [annotation]}, "finish_reason": "stop"}
            ],
        },
    )
    server.add(Hostile.raw([body]))
    async with make_openai(server) as provider:
        _, final = await stream_all(provider, request("hi"))
    [part] = final.content
    assert isinstance(part, TextPart) and part.text == "Hello"
    [citation] = part.citations
    assert citation.url == "https://e.com/"
    if (start, end) == (0, 5):
        assert (citation.start_index, citation.end_index) == (0, 5)
    else:
        assert citation.start_index is None and citation.end_index is None


# -- Azure OpenAI --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["team/../../admin", "a?api-version=x#y", "50%"])
def test_a_deployment_name_is_one_path_segment(name: str) -> None:
    provider = OpenAIProvider.azure(
        name, azure_endpoint="https://r.example", api_version="2024-10-21", api_key="k"
    )
    url = provider._client.url  # type: ignore[attr-defined]
    prefix = "https://r.example/openai/deployments/"
    assert url.startswith(prefix) and url.endswith("/chat/completions?api-version=2024-10-21")
    segment = url[len(prefix) : -len("/chat/completions?api-version=2024-10-21")]
    assert "/" not in segment and "?" not in segment and "#" not in segment


@pytest.mark.parametrize("name", ["..", ".", "a\nb"])
def test_a_deployment_name_that_is_a_path_step_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError):
        OpenAIProvider.azure(
            name, azure_endpoint="https://r.example", api_version="2024-10-21", api_key="k"
        )


async def test_a_deployment_name_reaches_the_server_escaped(server: FakeLLMServer) -> None:
    server.add("ok")
    provider = OpenAIProvider.azure(
        "team/x?y", azure_endpoint=server.url, api_version="2024-10-21", api_key="k"
    )
    async with provider:
        await provider.complete(request("hi"))
    seen = server.requests[-1]
    assert seen.path.endswith("/chat/completions")
    assert seen.query == {"api-version": "2024-10-21"}


@pytest.mark.parametrize("cls", [OpenAIProvider, OpenAIResponsesProvider])
async def test_a_token_provider_that_never_answers_times_out(
    server: FakeLLMServer, cls: type[OpenAIProvider]
) -> None:
    never = anyio.Event()

    async def hanging() -> str:
        await never.wait()
        return "token"

    provider = cls.azure(
        "dep", azure_endpoint=server.url, azure_ad_token_provider=hanging, timeout=0.5
    )
    async with provider:
        with anyio.fail_after(10):  # it waited forever
            with pytest.raises(ProviderTimeout, match="azure_ad_token_provider"):
                await provider.complete(request("hi"))
    assert not server.requests  # nothing was sent without a token
    assert _azure.token_seconds(provider._client.wire_timeout) == 0.5  # type: ignore[attr-defined]


async def test_an_api_key_stays_out_of_errors_and_reprs(server: FakeLLMServer) -> None:
    key = "azure-secret-key-1234567890"
    server.add(Hostile.error(401))
    provider = OpenAIProvider.azure(
        "dep", azure_endpoint=server.url, api_version="2024-10-21", api_key=key
    )
    async with provider:
        with pytest.raises(AuthenticationError) as caught:
            await provider.complete(request("hi"))
    assert server.requests[-1].headers.get("api-key") == key
    for text in (str(caught.value), repr(caught.value), repr(provider), repr(provider._client)):
        assert key not in text
