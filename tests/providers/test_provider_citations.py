"""Citations and hosted-tool progress on every wire, over real HTTP against FakeLLMServer.

A scripted text part's citations go out in each API's own form (Anthropic text-block
``citations`` and ``citations_delta``, Chat Completions ``annotations``, Responses
``output_text.annotations`` and ``annotation.added``); the providers read them back typed onto
the text (``TextPart.citations``), stream them as ``CitationAdded``, store them in sessions and
send them back where the API takes them. The SDKs parse what the fake server sends. Hosted
tools' progress (Responses events, Anthropic server-tool blocks) streams as
``HostedToolProgress`` while the tools' items stay in the turn for replay. What a server
sends is capped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from provider_helpers import make_anthropic, make_openai, make_responses, request, stream_all

from fanloop import Agent, Citation, TerminationReason
from fanloop.errors import ResponseInvalid
from fanloop.events import (
    CitationAdded,
    HostedToolProgress,
    ResponseCompleted,
    TextDelta,
)
from fanloop.messages import MAX_CITATION_CHARS, MAX_CITATIONS, Message, Origin, TextPart
from fanloop.providers import ModelResponse
from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer, ScriptedProvider, reply
from fanloop.testing._faults import Hostile

PARIS = Citation(
    type="url_citation",
    url="https://example.com/paris",
    title="Paris facts",
    cited_text="Paris is the capital of France.",
    start_index=0,
    end_index=5,
)
ANSWER = "Paris is the capital."
MAKE = {"anthropic": make_anthropic, "openai": make_openai, "responses": make_responses}
# What the fake server makes of PARIS on each wire.
WIRE_TYPE = {
    "anthropic": "web_search_result_location",
    "openai": "url_citation",
    "responses": "url_citation",
}


def _check_paris(citations: tuple[Citation, ...], api: str) -> None:
    assert len(citations) == 1
    (got,) = citations
    assert got.type == WIRE_TYPE[api]
    assert got.url == PARIS.url
    assert got.title == PARIS.title
    assert got.raw is not None and got.raw["type"] == WIRE_TYPE[api]
    if api == "anthropic":
        assert got.cited_text == PARIS.cited_text
        assert got.start_index is None  # an Anthropic citation supports its whole block
    else:
        assert (got.start_index, got.end_index) == (0, 5)


def _sent_back(body: dict[str, Any], api: str) -> Any:
    """The citations the second request carries on the first answer's text."""
    if api == "anthropic":
        (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
        return assistant["content"][0].get("citations")
    if api == "openai":
        (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
        return assistant.get("annotations")
    (message,) = [i for i in body["input"] if i.get("role") == "assistant"]
    return message["content"][0].get("annotations")


async def test_citations_stream_and_round_trip_through_a_session(
    server: FakeLLMServer, api: str, tmp_path: Path
) -> None:
    server.add(reply(ANSWER, citations=[PARIS]), reply("Yes."))
    provider = MAKE[api](server)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        session = await store.open("cited")
        async with Agent(provider).stream("Capital of France?", session=session) as run:
            events = [event async for event in run]
        reloaded = await SQLiteStore(tmp_path / "s.db").open("cited")
        second = await Agent(provider).run("Sure?", session=reloaded)
    finally:
        await provider.aclose()
    result = run.result
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == ANSWER
    _check_paris(result.citations, api)
    kinds = [e.kind for e in events]
    cited = [e for e in events if isinstance(e, CitationAdded)]
    assert [c.citation for c in cited] == list(result.citations)
    # Streamed with the answer (Anthropic sends a passage's citations before its text).
    assert kinds.index("request_started") < kinds.index("citation_added")
    assert kinds.index("citation_added") < kinds.index("response_completed")
    completed = next(e for e in events if isinstance(e, ResponseCompleted))
    assert completed.response.citations == result.citations
    json.dumps([e.to_dict() for e in cited])  # JSON-ready
    # Stored and reloaded as they were.
    assert reloaded.messages[1].citations == result.citations
    assert second.citations == ()
    # Sent back in the API's own form where it takes them (Chat Completions does not).
    sent = _sent_back(server.requests[1].body, api)
    if api == "openai":
        assert sent is None
    else:
        assert sent == [result.citations[0].raw]


@pytest.mark.parametrize("replay", [True, False])
async def test_citations_without_streaming_and_without_exact_replay(
    server: FakeLLMServer, api: str, replay: bool
) -> None:
    server.add(reply(ANSWER, citations=[PARIS]), reply("Yes."))
    provider = MAKE[api](server)
    try:
        first = await provider.complete(request("Capital of France?"))
        turn = first.to_message()
        if not replay:  # translated from its parts: the citations' raw objects go back
            turn = Message(role="assistant", content=turn.content)
        await provider.complete(request("Capital of France?", turn, "Sure?"))
    finally:
        await provider.aclose()
    assert server.requests[0].body.get("stream") is None
    _check_paris(first.citations, api)
    assert first.content[0] == TextPart(text=ANSWER, citations=first.citations)
    sent = _sent_back(server.requests[1].body, api)
    assert sent == (None if api == "openai" else [first.citations[0].raw])


async def test_scripted_provider_streams_citations() -> None:
    provider = ScriptedProvider([reply(ANSWER, citations=[PARIS])], chunk_size=4)
    async with Agent(provider).stream("Capital?") as run:
        events = [event async for event in run]
    cited = [e for e in events if isinstance(e, CitationAdded)]
    assert [c.citation for c in cited] == [PARIS]
    last_text = max(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(cited[0]) > last_text
    assert run.result.citations == (PARIS,)
    # Without stream(), the loop still emits the citations after the text.
    plain = ScriptedProvider([reply(ANSWER, citations=[PARIS])], stream=False)
    async with Agent(plain).stream("Capital?") as run:
        events = [event async for event in run]
    assert [e.citation for e in events if isinstance(e, CitationAdded)] == [PARIS]


# -- the SDKs read what the fake server sends --------------------------------------------------


async def test_the_sdks_parse_the_fake_servers_citations(server: FakeLLMServer) -> None:
    server.add(*[reply(ANSWER, citations=[PARIS])] * 6)
    claude = anthropic.AsyncAnthropic(
        api_key="k", base_url=server.anthropic_base_url, max_retries=0
    )
    gpt = openai.AsyncOpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
    ask: Any = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "q"}]}
    try:
        message = await claude.messages.create(**ask)
        async with claude.messages.stream(**ask) as stream:
            kinds = [event.type async for event in stream]
            streamed = await stream.get_final_message()
        chat = await gpt.chat.completions.create(model="m", messages=ask["messages"])
        chat_stream = await gpt.chat.completions.create(
            model="m", messages=ask["messages"], stream=True
        )
        chunks = [chunk async for chunk in chat_stream]
        made = await gpt.responses.create(model="m", input="q")
        async with gpt.responses.stream(model="m", input="q") as events:
            response_kinds = [event.type async for event in events]
            final = await events.get_final_response()
    finally:
        await claude.close()
        await gpt.close()
    for got in (message, streamed):
        block = got.content[0]
        assert block.type == "text" and block.citations is not None
        assert block.citations[0].type == "web_search_result_location"
        assert block.citations[0].url == PARIS.url
    assert "citation" in kinds
    annotation = chat.choices[0].message.annotations[0]  # type: ignore[index]
    assert annotation.url_citation.url == PARIS.url
    assert any(c.choices and c.choices[0].delta.model_extra.get("annotations") for c in chunks)
    for response in (made, final):
        part = response.output[0].content[0]  # type: ignore[union-attr]
        assert part.type == "output_text"
        assert part.annotations[0].type == "url_citation"
        assert part.annotations[0].url == PARIS.url  # type: ignore[union-attr]
    assert "response.output_text.annotation.added" in response_kinds


async def test_the_provider_over_the_anthropic_sdk_client(server: FakeLLMServer) -> None:
    from fanloop.providers.anthropic import AnthropicProvider

    server.add(reply(ANSWER, citations=[PARIS]))
    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.anthropic_base_url)
    try:
        deltas, final = await stream_all(
            AnthropicProvider("claude-sonnet-4-5", client=client), request("q")
        )
    finally:
        await client.close()
    _check_paris(final.citations, "anthropic")
    assert [d.citation for d in deltas if isinstance(d, CitationAdded)] == list(final.citations)


# -- hosted-tool progress ----------------------------------------------------------------------


def _responses_turn(items: list[dict[str, Any]]) -> ModelResponse:
    """A turn the fake server plays with exactly these output items."""
    origin = Origin(provider="openai", api="responses", model="gpt-5", raw={"output": items})
    text = "".join(p["text"] for i in items if i["type"] == "message" for p in i["content"])
    return ModelResponse(content=(TextPart(text=text),), origin=origin)


HOSTED_ITEMS: list[dict[str, Any]] = [
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "capital of France"},
    },
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "code": "print(1 + 1)",
        "container_id": "cntr_1",
        "outputs": None,
    },
    {
        "type": "mcp_call",
        "id": "mcp_1",
        "status": "completed",
        "name": "lookup",
        "server_label": "atlas",
        "arguments": '{"city": "Paris"}',
        "output": "capital",
    },
    {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "Intro. ", "annotations": []},
            {
                "type": "output_text",
                "text": ANSWER,
                "annotations": [
                    {
                        "type": "url_citation",
                        "url": PARIS.url,
                        "title": "Paris facts",
                        "start_index": 0,
                        "end_index": 5,
                    }
                ],
            },
        ],
    },
]


@pytest.mark.parametrize("streaming", [True, False])
async def test_responses_hosted_tool_progress_and_replay(
    server: FakeLLMServer, streaming: bool
) -> None:
    server.add(_responses_turn(HOSTED_ITEMS), reply("Yes."))
    provider = make_responses(server)
    try:
        if streaming:
            deltas, final = await stream_all(provider, request("q"))
        else:
            deltas, final = [], await provider.complete(request("q"))
        await provider.complete(request("q", final.to_message(), "Sure?"))
    finally:
        await provider.aclose()
    assert final.text == "Intro. " + ANSWER
    # The second content part's offsets count from the start of the whole text.
    (citation,) = final.citations
    assert (citation.start_index, citation.end_index) == (7, 12)
    assert final.text[citation.start_index : citation.end_index] == "Paris"
    assert citation.raw == HOSTED_ITEMS[3]["content"][1]["annotations"][0]
    # The hosted items go back unchanged, in order.
    assert server.requests[1].body["input"][1:5] == HOSTED_ITEMS
    if not streaming:
        return
    progress = [(d.tool, d.call_id, d.status) for d in deltas if isinstance(d, HostedToolProgress)]
    assert progress == [
        ("web_search", "ws_1", "in_progress"),
        ("web_search", "ws_1", "searching"),
        ("web_search", "ws_1", "completed"),
        ("code_interpreter", "ci_1", "in_progress"),
        ("code_interpreter", "ci_1", "code_delta"),
        ("code_interpreter", "ci_1", "code_done"),
        ("code_interpreter", "ci_1", "interpreting"),
        ("code_interpreter", "ci_1", "completed"),
        ("mcp", "mcp_1", "in_progress"),
        ("mcp", "mcp_1", "arguments_delta"),
        ("mcp", "mcp_1", "arguments_done"),
        ("mcp", "mcp_1", "completed"),
    ]
    details = [d.detail for d in deltas if isinstance(d, HostedToolProgress)]
    assert details[4] == {"delta": "print(1 + 1)"}
    assert details[10] == {"arguments": '{"city": "Paris"}'}
    cited = [d for d in deltas if isinstance(d, CitationAdded)]
    assert [c.citation for c in cited] == [citation] and cited[0].index == 3


async def test_responses_progress_reaches_the_agent_stream(server: FakeLLMServer) -> None:
    server.add(_responses_turn(HOSTED_ITEMS[:1] + HOSTED_ITEMS[3:]))
    provider = make_responses(server)
    try:
        async with Agent(provider).stream("q") as run:
            events = [event async for event in run]
    finally:
        await provider.aclose()
    kinds = [e.kind for e in events]
    assert kinds.count("hosted_tool_progress") == 3
    assert kinds.index("hosted_tool_progress") < kinds.index("text_delta")
    assert kinds.index("citation_added") < kinds.index("response_completed")
    json.dumps([e.to_dict() for e in events if e.kind == "hosted_tool_progress"])
    assert run.result.citations[0].url == PARIS.url


ANTHROPIC_BLOCKS: list[dict[str, Any]] = [
    {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "capital of France"},
    },
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": PARIS.url,
                "title": "Paris facts",
                "encrypted_content": "enc",
                "page_age": None,
            }
        ],
    },
    {
        "type": "server_tool_use",
        "id": "srvtoolu_2",
        "name": "web_fetch",
        "input": {"url": PARIS.url},
    },
    {
        "type": "web_fetch_tool_result",
        "tool_use_id": "srvtoolu_2",
        "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"},
    },
    {
        "type": "text",
        "text": ANSWER,
        "citations": [
            {
                "type": "web_search_result_location",
                "url": PARIS.url,
                "title": "Paris facts",
                "cited_text": "Paris is the capital of France.",
                "encrypted_index": "Eo8BCioIAhgBIiQ",
            }
        ],
    },
]


async def test_anthropic_server_tool_progress_and_replay(server: FakeLLMServer) -> None:
    origin = Origin(provider="anthropic", api="messages", model="m", raw=ANTHROPIC_BLOCKS)
    server.add(ModelResponse(content=(TextPart(text=ANSWER),), origin=origin), reply("Yes."))
    provider = make_anthropic(server)
    try:
        deltas, final = await stream_all(provider, request("q"))
        await provider.complete(request("q", final.to_message(), "Sure?"))
    finally:
        await provider.aclose()
    progress = [
        (d.tool, d.call_id, d.status, d.detail) for d in deltas if isinstance(d, HostedToolProgress)
    ]
    assert progress == [
        ("web_search", "srvtoolu_1", "in_progress", {}),
        ("web_search", "srvtoolu_1", "input_complete", {"query": "capital of France"}),
        ("web_search", "srvtoolu_1", "completed", {}),
        ("web_fetch", "srvtoolu_2", "in_progress", {}),
        ("web_fetch", "srvtoolu_2", "input_complete", {"url": PARIS.url}),
        ("web_fetch", "srvtoolu_2", "failed", {"error_code": "url_not_accessible"}),
    ]
    (citation,) = final.citations
    assert citation.cited_text == "Paris is the capital of France."
    assert [d.citation for d in deltas if isinstance(d, CitationAdded)] == [citation]
    (assistant,) = [m for m in server.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == ANTHROPIC_BLOCKS  # replayed as received


# -- what a server sends is capped -------------------------------------------------------------


def _many(n: int, api: str) -> list[dict[str, Any]]:
    if api == "anthropic":
        return [
            {
                "type": "char_location",
                "cited_text": "x" * 20_000 if i == 0 else "c",
                "document_index": 0,
                "start_char_index": 0,
                "end_char_index": 1,
                "nested": {"deep": [1, 2]} if i == 0 else None,
            }
            for i in range(n)
        ]
    return [
        {
            "type": "url_citation",
            "url": f"https://example.com/{i}",
            "title": "t" * 20_000 if i == 0 else "t",
            "start_index": 0,
            "end_index": 1,
            "nested": {"deep": [1, 2]} if i == 0 else None,
        }
        for i in range(n)
    ]


def _sse(*events: dict[str, Any], name: bool = True) -> bytes:
    out = b""
    for event in events:
        head = b"event: %s\n" % event["type"].encode() if name else b""
        out += head + b"data: %s\n\n" % json.dumps(event).encode()
    return out


def _hostile_turn(api: str, n: int) -> tuple[Hostile, Hostile]:
    """A streamed and a plain answer carrying ``n`` citations on one text."""
    cites = _many(n, api)
    if api == "anthropic":
        start = {"type": "message_start", "message": {"id": "m", "model": "m", "usage": {}}}
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        deltas = [
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "citations_delta", "citation": c},
            }
            for c in cites
        ]
        text = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "cited"},
        }
        end = [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
            {"type": "message_stop"},
        ]
        body = {
            "id": "m",
            "type": "message",
            "model": "m",
            "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "cited", "citations": cites}],
        }
        return Hostile.raw(_sse(start, block, *deltas, text, *end)), Hostile.raw(
            json.dumps(body).encode()
        )
    if api == "openai":
        wrapped = [
            {"type": "url_citation", "url_citation": {k: v for k, v in c.items() if k != "type"}}
            for c in cites
        ]
        chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "cited"}}]}
        # OpenRouter's way: annotations in deltas of their own, without an index; some
        # servers repeat the ones already sent.
        notes = [
            {"id": "c", "choices": [{"index": 0, "delta": {"annotations": wrapped[i : i + 50]}}]}
            for i in range(0, n, 50)
        ]
        again = {"id": "c", "choices": [{"index": 0, "delta": {"annotations": wrapped[:10]}}]}
        finish = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        stream = _sse(chunk, *notes, again, finish, name=False) + b"data: [DONE]\n\n"
        message = {"role": "assistant", "content": "cited", "annotations": wrapped}
        body = {"id": "c", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        return Hostile.raw(stream), Hostile.raw(json.dumps(body).encode())
    item = {
        "type": "message",
        "id": "msg",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "cited", "annotations": cites}],
    }
    at = {"item_id": "msg", "output_index": 0, "content_index": 0}
    events = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {"type": "response.output_text.delta", **at, "delta": "cited"},
        *({"type": "response.output_text.annotation.added", **at, "annotation": c} for c in cites),
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    ]
    body = {"id": "r", "status": "completed", "output": [item]}
    return Hostile.raw(_sse(*events)), Hostile.raw(json.dumps(body).encode())


async def test_citations_a_server_sends_are_capped(
    server: FakeLLMServer, api: str, tmp_path: Path
) -> None:
    n = MAX_CITATIONS + 44
    streamed, plain = _hostile_turn(api, n)
    server.add(streamed, plain)
    provider = MAKE[api](server)
    try:
        deltas, final = await stream_all(provider, request("q"))
        whole = await provider.complete(request("q"))
        store = SQLiteStore(tmp_path / "s.db")
        session = await store.open("capped")
        for message in (Message.user("q"), final.to_message(), whole.to_message()):
            await session.append(message)
        reloaded = await SQLiteStore(tmp_path / "s.db").load("capped")
    finally:
        await provider.aclose()
    cited = [d for d in deltas if isinstance(d, CitationAdded)]
    assert len(cited) == MAX_CITATIONS
    for response in (final, whole):
        citations = response.citations
        assert len(citations) == MAX_CITATIONS
        first = citations[0]
        assert first.raw is not None and "nested" not in first.raw  # nested values dropped
        long = first.cited_text if api == "anthropic" else first.title
        assert long is not None and len(long) == MAX_CITATION_CHARS
    assert [c.citation for c in cited] == list(final.citations)
    assert reloaded.messages[1].citations == final.citations
    assert reloaded.messages[2].citations == whole.citations


async def test_hosted_progress_detail_is_capped(server: FakeLLMServer) -> None:
    code = "x" * 50_000
    at = {"item_id": "ci_1", "output_index": 0}
    item = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "code": code}
    message = {
        "type": "message",
        "id": "msg",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "done", "annotations": []}],
    }
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.code_interpreter_call_code.delta", **at, "delta": code},
        {"type": "response.code_interpreter_call.interpreting", **at, "extra": {"deep": [1]}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        {
            "type": "response.completed",
            "response": {"id": "r", "status": "completed", "output": [item, message]},
        },
    ]
    server.add(Hostile.raw(_sse(*events)))
    provider = make_responses(server)
    try:
        deltas, final = await stream_all(provider, request("q"))
    finally:
        await provider.aclose()
    progress = [d for d in deltas if isinstance(d, HostedToolProgress)]
    assert [p.status for p in progress] == ["code_delta", "interpreting"]
    assert len(progress[0].detail["delta"]) == 4096
    assert progress[1].detail == {}
    assert final.origin is not None and final.origin.raw["output"][0]["code"] == code


async def test_a_citations_delta_without_a_citation_is_invalid(server: FakeLLMServer) -> None:
    start = {"type": "message_start", "message": {"id": "m", "model": "m", "usage": {}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    bad = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "citations_delta", "citation": "not an object"},
    }
    server.add(Hostile.raw(_sse(start, block, bad)))
    provider = make_anthropic(server)
    try:
        with pytest.raises(ResponseInvalid, match="citations_delta"):
            await stream_all(provider, request("q"))
    finally:
        await provider.aclose()
