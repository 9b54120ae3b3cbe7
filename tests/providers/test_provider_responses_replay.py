"""Recorded Responses API traffic, read by fanloop and by the official ``openai`` SDK.

Each interaction of ``data/responses_cassettes`` (real answers of api.openai.com and one
OpenRouter stream, see its README) is served over loopback HTTP with its recorded bytes; the
provider (streamed or not, as recorded) and the SDK (``client.responses.stream()`` /
``client.responses.create()``) read the same bytes, and what each made of them is compared
field by field: text, function calls, reasoning items, hosted-tool items, usage, status and
response id. The next turn's request must then carry every output item back, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import openai
import pytest
from provider_helpers import stream_all
from responses_replay import Interaction, ReplayServer, load

from fanloop.errors import BadRequest, ConfigurationError, ProviderError, ResponseInvalid
from fanloop.events import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from fanloop.messages import (
    INVALID_ARGUMENTS_KEY,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from fanloop.providers import ModelRequest, ModelResponse, StopReason
from fanloop.providers.openai import OpenAIResponsesProvider

# The SDK warns while it copies an item holding a value newer than its models (a web search
# action of type "api"); that is the SDK's own business.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

INTERACTIONS = load()
QUEUED = [i for i in INTERACTIONS if not i.streamed and b'"status":"queued"' in i.body]
FINISHED = [i for i in INTERACTIONS if i.status == 200 and i not in QUEUED]
KEY = "sk-replay"


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    with ReplayServer(INTERACTIONS) as server:
        yield server


def _request() -> ModelRequest:
    return ModelRequest(messages=(Message.user("Hello"),), max_tokens=1024)


Transport = Literal["httpx", "aiohttp", "sdk-client"]


async def _fanloop(
    server: ReplayServer, item: Interaction, transport: Transport = "httpx"
) -> tuple[ModelResponse, list[Any]]:
    """fanloop's answer (and its deltas, when streamed) on ``transport``: one of its own
    pools, or the ``openai`` SDK's client carrying fanloop's requests (``client=``)."""
    client = None
    if transport == "sdk-client":
        client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url(item.name))
        provider = OpenAIResponsesProvider("gpt-5", client=client)
    else:
        provider = OpenAIResponsesProvider(
            "gpt-5", api_key=KEY, base_url=server.base_url(item.name), transport=transport
        )
    try:
        if item.streamed:
            deltas, response = await stream_all(provider, _request())
            return response, deltas
        return await provider.complete(_request()), []
    finally:
        await provider.aclose()
        if client is not None:
            await client.close()


async def _sdk(server: ReplayServer, item: Interaction) -> tuple[Any, list[Any]]:
    async with openai.AsyncOpenAI(
        api_key=KEY, base_url=server.base_url(item.name), max_retries=0
    ) as client:
        if not item.streamed:
            return await client.responses.create(model="gpt-5", input="Hello"), []
        events: list[Any] = []
        async with client.responses.stream(model="gpt-5", input="Hello") as stream:
            async for event in stream:
                events.append(event)
            return await stream.get_final_response(), events


def _sdk_usage(usage: Any) -> tuple[int, int, int, int]:
    inputs = usage.input_tokens_details
    outputs = usage.output_tokens_details
    return (
        usage.input_tokens,
        inputs.cached_tokens if inputs else 0,
        usage.output_tokens,
        outputs.reasoning_tokens if outputs else 0,
    )


def _text(item: Any) -> str:
    """A message item's text as fanloop reads it: ``output_text`` and ``refusal`` parts."""
    out = []
    for part in item.content or []:
        if part.type == "output_text":
            out.append(part.text)
        elif part.type == "refusal":
            out.append(part.refusal)
    return "".join(out)


def _reasoning_text(item: Any) -> str:
    summary = [s.text for s in item.summary or [] if s.text]
    if summary:
        return "\n\n".join(summary)
    return "".join(c.text for c in item.content or [] if c.type == "reasoning_text" and c.text)


def _expected_parts(sdk: Any) -> list[tuple[str, Any]]:
    """The parts fanloop should make of the SDK's output items, as comparable tuples."""
    out: list[tuple[str, Any]] = []
    for item in sdk.output:
        if item.type == "message":
            if text := _text(item):
                out.append(("text", text))
        elif item.type == "function_call":
            try:
                arguments = json.loads(item.arguments) if item.arguments else {}
            except ValueError:
                arguments = {INVALID_ARGUMENTS_KEY: item.arguments}
            out.append(("call", (item.call_id, item.name, arguments)))
        elif item.type == "reasoning" and (text := _reasoning_text(item)):
            out.append(("thinking", text))
    return out


def _parts(response: ModelResponse) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for part in response.content:
        if isinstance(part, TextPart):
            out.append(("text", part.text))
        elif isinstance(part, ToolCallPart):
            out.append(("call", (part.id, part.name, part.arguments)))
        elif isinstance(part, ThinkingPart):
            out.append(("thinking", part.text))
    return out


def _items(response: ModelResponse) -> list[dict[str, Any]]:
    assert response.origin is not None and isinstance(response.origin.raw, dict)
    output = response.origin.raw["output"]
    assert isinstance(output, list)
    return output


def _compare(ours: ModelResponse, sdk: Any) -> None:
    """Everything fanloop made of the bytes matches what the SDK made of them."""
    assert ours.response_id == sdk.id
    if not any(p.type == "refusal" for i in sdk.output if i.type == "message" for p in i.content):
        assert ours.text == sdk.output_text
    assert _parts(ours) == _expected_parts(sdk)
    assert "".join(p.text for p in ours.content if isinstance(p, TextPart)) == "".join(
        _text(i) for i in sdk.output if i.type == "message"
    )
    # Every output item is kept, in order, with its id: reasoning, hosted tools, unknown types.
    items = _items(ours)
    assert [(i.get("type"), i.get("id")) for i in items] == [
        (i.type, getattr(i, "id", None)) for i in sdk.output
    ]
    for raw, parsed in zip(items, sdk.output, strict=True):
        if parsed.type == "reasoning":
            assert raw.get("encrypted_content") == parsed.encrypted_content
            assert [s["text"] for s in raw.get("summary") or []] == [s.text for s in parsed.summary]
        elif parsed.type == "function_call":
            assert (raw["call_id"], raw["name"], raw["arguments"]) == (
                parsed.call_id,
                parsed.name,
                parsed.arguments,
            )
    # Usage: fanloop's input excludes the cached tokens the API counts in input_tokens.
    if sdk.usage is not None:
        usage = ours.usage
        total = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        assert (total, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
            _sdk_usage(sdk.usage)
        )
    # Status and stop reason.
    assert sdk.status in ("completed", "incomplete")
    calls = any(i.type == "function_call" for i in sdk.output)
    if sdk.status == "completed":
        assert ours.raw_stop_reason == "completed"
        refused = any(
            p.type == "refusal" for i in sdk.output if i.type == "message" for p in i.content
        )
        expected = (
            StopReason.REFUSAL
            if refused
            else (StopReason.TOOL_USE if calls else StopReason.END_TURN)
        )
        assert ours.stop_reason is expected
    else:
        assert ours.raw_stop_reason == sdk.incomplete_details.reason
    assert ours.model == sdk.model


def _compare_deltas(deltas: list[Any], ours: ModelResponse, events: list[Any]) -> None:
    """The streamed deltas add up to the final turn, and to the SDK's own deltas."""
    text = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert text == "".join(
        e.delta
        for e in events
        if e.type in ("response.output_text.delta", "response.refusal.delta")
    )
    assert text == "".join(p.text for p in ours.content if isinstance(p, TextPart))
    thinking = "".join(d.text for d in deltas if isinstance(d, ThinkingDelta))
    assert thinking.replace("\n\n", "") == "".join(
        e.delta
        for e in events
        if e.type in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")
    ).replace("\n\n", "")
    started = [(d.call_id, d.name) for d in deltas if isinstance(d, ToolCallStarted)]
    calls = [p for p in ours.content if isinstance(p, ToolCallPart)]
    assert started == [(c.id, c.name) for c in calls]
    for call in calls:
        streamed = "".join(
            d.arguments_delta
            for d in deltas
            if isinstance(d, ToolCallDelta) and d.call_id == call.id
        )
        assert json.loads(streamed or "{}") == call.arguments


def _recorded_output(item: Interaction) -> list[dict[str, Any]]:
    """The output items as recorded: the final response's, else each ``output_item.done``'s."""
    if not item.streamed:
        output: list[dict[str, Any]] = json.loads(item.body)["output"]
        return output
    done: list[dict[str, Any]] = []
    for line in item.body.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        if event["type"] == "response.output_item.done":
            done.append(event["item"])
        elif event["type"] in ("response.completed", "response.incomplete"):
            return event["response"]["output"] or done
    raise AssertionError("no final response recorded")


async def _next_turn(
    server: ReplayServer, item: Interaction, ours: ModelResponse
) -> list[dict[str, Any]]:
    """The ``input`` fanloop sends after ``ours`` (with a result for every call), as the
    server received it."""
    results = [
        ToolResultPart(call_id=p.id, content="42")
        for p in ours.content
        if isinstance(p, ToolCallPart)
    ]
    messages = [Message.user("Hello"), ours.to_message()]
    if results:
        messages.append(Message.tool_results(results))
    provider = OpenAIResponsesProvider("gpt-5", api_key=KEY, base_url=server.base_url(item.name))
    try:  # the server answers with the same recording: only the request matters here
        await provider.complete(ModelRequest(messages=tuple(messages), max_tokens=64))
    except ProviderError:
        pass  # a recorded stream is no JSON body
    finally:
        await provider.aclose()
    inputs = server.received[item.name][-1]["input"]
    assert isinstance(inputs, list)
    return inputs


@pytest.mark.parametrize("transport", ["httpx", "sdk-client"])
@pytest.mark.parametrize("item", FINISHED, ids=lambda i: i.name)
async def test_fanloop_reads_recorded_answers_as_the_sdk_does(
    replay: ReplayServer, item: Interaction, transport: Transport
) -> None:
    ours, deltas = await _fanloop(replay, item, transport)
    sdk, events = await _sdk(replay, item)
    _compare(ours, sdk)
    if item.streamed:
        _compare_deltas(deltas, ours, events)


@pytest.mark.parametrize("item", FINISHED, ids=lambda i: i.name)
async def test_the_next_turn_sends_every_output_item_back_in_order(
    replay: ReplayServer, item: Interaction
) -> None:
    ours, _ = await _fanloop(replay, item, transport="aiohttp")
    sdk, _ = await _sdk(replay, item)
    inputs = await _next_turn(replay, item, ours)
    assert inputs[0] == {"role": "user", "content": "Hello"}
    sent = inputs[1 : 1 + len(sdk.output)]
    # Unchanged and in order: each reasoning item right before the item it preceded.
    assert sent == _recorded_output(item)
    assert [(i.get("type"), i.get("id")) for i in sent] == [
        (i.type, getattr(i, "id", None)) for i in sdk.output
    ]
    for index, parsed in enumerate(sdk.output):
        if parsed.type == "reasoning":
            assert sent[index].get("encrypted_content") == parsed.encrypted_content
            assert index + 1 < len(sent), "a reasoning item sent back last"
            assert sent[index + 1]["id"] == sdk.output[index + 1].id
    rest = inputs[1 + len(sdk.output) :]
    calls = [i.call_id for i in sdk.output if i.type == "function_call"]
    assert [r["call_id"] for r in rest] == calls
    assert all(r["type"] == "function_call_output" for r in rest)


def test_the_recordings_cover_the_cases_that_matter() -> None:
    """Streamed and not; tool loops with reasoning; hosted tools; another server's stream."""
    bodies = b"".join(i.body for i in FINISHED)
    assert sum(i.streamed for i in FINISHED) >= 10
    assert sum(not i.streamed for i in FINISHED) >= 20
    for kind in (
        b'"type":"reasoning"',
        b'"encrypted_content":"',
        b'"type":"function_call"',
        b'"type":"web_search_call"',
        b'"type":"file_search_call"',
        b'"type":"code_interpreter_call"',
        b'"type":"mcp_call"',
        b'"type":"mcp_list_tools"',
        b'"type":"compaction"',
        b'"type":"tool_search_call"',
        b'"type":"response.reasoning_text.delta"',
        b'"type":"response.reasoning_summary_text.delta"',
    ):
        assert kind in bodies, kind
    turns = [json.loads(i.body) for i in FINISHED if not i.streamed]
    assert any(
        [o["type"] for o in t["output"][:2]] == ["reasoning", "function_call"] for t in turns
    )


@pytest.mark.parametrize("item", [i for i in INTERACTIONS if i.status >= 400], ids=lambda i: i.name)
async def test_recorded_errors_are_bad_requests_as_for_the_sdk(
    replay: ReplayServer, item: Interaction
) -> None:
    with pytest.raises(BadRequest) as ours:
        await _fanloop(replay, item)
    with pytest.raises(openai.BadRequestError) as sdk:
        await _sdk(replay, item)
    assert ours.value.status_code == sdk.value.status_code == 400
    assert sdk.value.message.endswith(ours.value.message) or sdk.value.body["message"] in str(
        ours.value
    )
    assert not ours.value.transient


@pytest.mark.parametrize("transport", ["httpx", "aiohttp", "sdk-client"])
async def test_a_background_answer_is_a_clear_error_that_is_not_retried(
    replay: ReplayServer, transport: Transport
) -> None:
    (item,) = QUEUED
    sdk, _ = await _sdk(replay, item)
    assert sdk.status == "queued" and sdk.background is True
    with pytest.raises(ResponseInvalid, match="background mode is not supported") as caught:
        await _fanloop(replay, item, transport)
    assert caught.value.transient is False


async def test_background_true_is_refused_before_anything_is_sent(
    replay: ReplayServer,
) -> None:
    (item,) = QUEUED
    before = len(replay.received.get(item.name, []))
    provider = OpenAIResponsesProvider(
        "gpt-5", api_key=KEY, base_url=replay.base_url(item.name), extra_body={"background": True}
    )
    with pytest.raises(ConfigurationError, match="background mode"):
        await provider.complete(_request())
    await provider.aclose()
    extra = ModelRequest(messages=(Message.user("Hi"),), max_tokens=64, extra={"background": 1})
    provider = OpenAIResponsesProvider("gpt-5", api_key=KEY, base_url=replay.base_url(item.name))
    with pytest.raises(ConfigurationError, match="background mode"):
        await provider.complete(extra)
    with pytest.raises(ConfigurationError, match="background mode"):
        await stream_all(provider, extra)
    await provider.aclose()
    assert len(replay.received.get(item.name, [])) == before
