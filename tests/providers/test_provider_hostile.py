"""The providers against a hostile server: every size capped, every value checked, the event
loop never held, and nothing but a ``ProviderError`` ever leaves a provider.

The hostile answers come from ``FakeLLMServer`` (``Hostile`` turns), through the real SDK
clients, over both transports (``httpx2``'s pool and the ``aiohttp`` one).
"""

from __future__ import annotations

import email.utils
import gc
import gzip
import json
import math
import os
import random
import re
import subprocess
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from provider_helpers import make_anthropic, make_openai, make_responses, request

from fanloop import RetryPolicy
from fanloop.errors import ProviderError, ResponseInvalid, StreamIncomplete
from fanloop.events import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from fanloop.messages import INVALID_ARGUMENTS_KEY, TextPart, ThinkingPart, ToolCallPart
from fanloop.providers import ModelResponse, Usage
from fanloop.providers._http import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_RETRY_AFTER,
    HTTPProvider,
    create_pool,
    parse_retry_after,
)
from fanloop.providers._sse import MAX_FRAME_LINES, SSEDecoder
from fanloop.providers._wire import (
    MAX_NAME_CHARS,
    Malformed,
    ResponseTooLarge,
    content_codings,
    loads,
    read_count,
)
from fanloop.testing import FakeLLMServer, Hostile, call, reply
from fanloop.testing._faults import render_stream
from heartbeat import cpu_seconds, heartbeat

MiB = 1024 * 1024
STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
INVENTED = re.compile(r"call_[0-9a-f]{24}")
MAKE = {"anthropic": make_anthropic, "openai": make_openai, "responses": make_responses}


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """Keep full garbage collections of the test process out of a heartbeat's measure.

    A full collection walks every object of the process (pytest's, every module's): 60-300 ms
    here, whatever the code under test does. Freezing what exists before the test (cheap)
    leaves the collector only what the test allocates.
    """
    gc.freeze()
    yield
    gc.unfreeze()


HEARTBEAT = pytest.mark.usefixtures("frozen_heap")


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    """Runs a test once per transport."""
    return str(request.param)


@pytest.fixture
async def hostile(
    server: FakeLLMServer, api: str, transport: str
) -> AsyncIterator[Callable[..., HTTPProvider]]:
    """Builds providers of the current ``api`` on a pool of the current ``transport``."""
    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    made: list[HTTPProvider] = []

    def factory(**options: Any) -> HTTPProvider:
        provider = MAKE[api](server, http_client=pool, **options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()
    await pool.aclose()


async def outcome(provider: Any, *, streaming: bool, keep: bool = False) -> Any:
    """The final response of one call, or the exception it raised; with ``keep``, also the
    deltas. Deltas are otherwise counted, not kept (a flood would keep the GC busy)."""
    deltas: list[Any] = []
    count = 0
    try:
        if not streaming:
            return await provider.complete(request("go"))
        async with provider.stream(request("go")) as events:
            async for item in events:
                if isinstance(item, ModelResponse):
                    final = item
                    continue
                check_delta(item)
                count += 1
                if keep:
                    deltas.append(item)
        return (final, deltas) if keep else (final, count)
    except Exception as exc:
        return exc


def check_delta(delta: Any) -> None:
    if isinstance(delta, TextDelta | ThinkingDelta):
        assert type(delta.text) is str
    elif isinstance(delta, ToolCallStarted):
        assert type(delta.call_id) is str and delta.call_id
        assert type(delta.name) is str and len(delta.name) <= MAX_NAME_CHARS
        assert type(delta.index) is int
    else:
        assert isinstance(delta, ToolCallDelta)
        assert type(delta.arguments_delta) is str and type(delta.call_id) is str


def check_response(response: ModelResponse) -> None:
    """A response built from server data is a valid model with sane values."""
    ModelResponse.model_validate(response.model_dump())
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        value = getattr(response.usage, field)
        assert type(value) is int and 0 <= value <= 10**9
    for part in response.content:
        if isinstance(part, TextPart | ThinkingPart):
            assert type(part.text) is str
        elif isinstance(part, ToolCallPart):
            assert type(part.id) is str and 0 < len(part.id) <= 256
            assert type(part.name) is str and len(part.name) <= MAX_NAME_CHARS
            assert type(part.arguments) is dict
    assert response.raw_stop_reason is None or type(response.raw_stop_reason) is str
    assert response.response_id is None or type(response.response_id) is str


def provider_error(result: Any, provider: HTTPProvider) -> ProviderError:
    assert isinstance(result, ProviderError), f"not a ProviderError: {result!r}"
    assert result.provider == provider.name
    return result


# -- the SSE decoder ------------------------------------------------------------------------


def test_sse_decoding_is_linear_in_one_huge_frame() -> None:
    decoder = SSEDecoder(max_frame_bytes=64 * MiB)
    chunk = b"x" * (64 * 1024)
    frames: list[tuple[bytes, bytes]] = []

    def decode() -> None:
        assert decoder.feed(b"data: ") == []
        for _ in range(32 * 16):  # 32 MiB
            assert decoder.feed(chunk) == []
        frames.extend(decoder.feed(b"\r\n\r\n"))

    # Linear decoding takes 0.13 s of CPU here, quadratic decoding took ~10 s.
    assert cpu_seconds(decode) < 1.0
    assert len(frames) == 1 and len(frames[0][1]) == 32 * MiB


def test_a_frame_over_the_cap_raises_before_more_is_buffered() -> None:
    decoder = SSEDecoder(max_frame_bytes=MiB)
    chunk = b"y" * (64 * 1024)
    decoder.feed(b"data: ")
    for _ in range(15):  # 15 * 64 KiB + 6 bytes: under 1 MiB
        assert decoder.feed(chunk) == []
    with pytest.raises(ResponseTooLarge) as info:  # the chunk that crosses 1 MiB
        decoder.feed(chunk)
    assert isinstance(info.value, ResponseInvalid) and not info.value.transient
    assert decoder._size == 0 and not decoder._parts, "what was buffered is let go"
    # A complete frame over the cap inside one big chunk is refused too.
    with pytest.raises(ResponseTooLarge):
        SSEDecoder(max_frame_bytes=MiB).feed(b"data: " + b"z" * MiB + b"\n\nevent: x")


def test_many_lines_and_frames_decode_in_linear_time() -> None:
    decoder = SSEDecoder()

    def decode() -> None:
        lines = MAX_FRAME_LINES  # one frame of as many lines as allowed
        frames = decoder.feed(b"data: x\n" * lines + b"\n")
        assert frames == [(b"", b"\n".join([b"x"] * lines))]
        assert decoder.feed(b": keep-alive\n\n" * 300_000) == []  # comments yield nothing

    assert cpu_seconds(decode) < 1.0


@pytest.mark.parametrize("line", [b"data: x\n", b": keep-alive\n", b"event: x\n", b"data: x\r\n"])
def test_a_frame_of_too_many_lines_is_refused_before_it_is_taken_apart(line: bytes) -> None:
    decoder = SSEDecoder()
    body = line * (MAX_FRAME_LINES + 1) + b"data: {}\n\n"
    assert decoder.feed(body[: len(body) // 2]) == []
    with pytest.raises(ResponseTooLarge, match="10,000 lines") as info:
        decoder.feed(body[len(body) // 2 :])
    assert not info.value.transient

    # A frame of 15 MiB in short lines (under max_frame_bytes), fed 64 KiB at a time as the
    # providers do: the call that completed it held the event loop 1-2 s to split and walk
    # it. Now it costs about what a frame of that size in one line does (joining, copying).
    def longest_feed(body: bytes) -> tuple[float, Exception | None]:
        decoder = SSEDecoder()
        longest = 0.0
        for start in range(0, len(body), 64 * 1024):
            began = time.perf_counter()
            try:
                decoder.feed(body[start : start + 64 * 1024])
            except ResponseTooLarge as exc:
                return max(longest, time.perf_counter() - began), exc
            longest = max(longest, time.perf_counter() - began)
        return longest, None

    size = 15 * MiB // len(line) * len(line)
    control, error = longest_feed(b"data: " + b"x" * (size - 8) + b"\n\n")
    assert error is None
    longest, error = longest_feed(line * (size // len(line)) + b"\n")
    assert isinstance(error, ResponseTooLarge)
    assert longest < 2 * control + 0.05, (longest, control)


def test_line_endings_split_anywhere_decode_alike() -> None:
    body = (
        b"event: a\r\ndata: 1\r\n\r\n"
        b"event: b\rdata: 2\r\r"
        b"data: 3\ndata: 4\n\n"
        b": comment\r\n\r\n"
        b"data: 5\r\n\r"
        b"\ndata: 6\n\n"
    )
    expected = [(b"a", b"1"), (b"b", b"2"), (b"", b"3\n4"), (b"", b"5"), (b"", b"6")]
    for size in range(1, 12):
        decoder = SSEDecoder()
        frames = []
        for i in range(0, len(body), size):
            frames += decoder.feed(body[i : i + size])
        assert frames == expected, size
    # Every two-way split, byte by byte.
    for cut in range(len(body)):
        decoder = SSEDecoder()
        assert decoder.feed(body[:cut]) + decoder.feed(body[cut:]) == expected, cut


# -- the value checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["5", "", -1, 10**30, 1e300, math.inf, math.nan, 1.5, True, [1], {"a": 1}, -0.5]
)
def test_a_count_that_is_not_a_count_is_malformed(value: Any) -> None:
    with pytest.raises(Malformed):
        read_count(value, "usage.output_tokens")


def test_counts_that_are_counts() -> None:
    assert read_count(None, "n") == 0
    assert read_count(7, "n") == 7
    assert read_count(7.0, "n") == 7
    assert read_count(10**9, "n") == 10**9


def test_usage_rejects_negative_counts() -> None:
    with pytest.raises(ValueError):
        Usage(output_tokens=-1)
    with pytest.raises(ValueError):
        Usage(input_tokens=3, cache_read_tokens=-10)
    assert Usage(input_tokens=3).total_tokens == 3


def test_json_that_would_hold_the_loop_is_refused() -> None:
    with pytest.raises(ResponseTooLarge):
        loads(b"[" + b"0," * 600_000 + b"0]")  # 1.2 MiB, 600,001 values
    with pytest.raises(Malformed):
        loads(b"[" * 100_000 + b"]" * 100_000)  # too deep
    assert loads(b'{"text": "' + b"a" * (3 * MiB) + b'"}')["text"] == "a" * (3 * MiB)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "nan"},
        {"retry-after": "NaN", "retry-after-ms": "nan"},
        {"retry-after": "inf"},
        {"retry-after": "-inf"},
        {"retry-after": "1e400"},
        {"retry-after-ms": "1e400"},
        {"retry-after": "-5"},
        {"retry-after": "9" * 5000},
        {"retry-after": "soon"},
        {"retry-after": ""},
        {"retry-after": "   "},
        {"retry-after": "1,5"},
        {"retry-after": "0x10"},
        {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"},
        {"retry-after": "Fri, 31 Dec 99999 23:59:59 GMT"},
        {"retry-after": "Mon, 01 Jan 1900 00:00:00 GMT"},
        {"retry-after": "Mon, 99 Foo 2024 99:99:99 GMT"},
        {"retry-after": "\x00\xff"},
        {"retry-after-ms": "-1", "retry-after": "3"},
    ],
)
def test_hostile_retry_after_never_crashes_and_is_bounded(headers: dict[str, str]) -> None:
    value = parse_retry_after(headers)
    assert value is None or (type(value) is float and 0.0 <= value <= MAX_RETRY_AFTER)
    assert 0 <= RetryPolicy(max_retry_after=2.0).delay(1, _Waiting(value)) <= 2.0


def test_retry_after_dates_and_numbers() -> None:
    assert parse_retry_after({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}) == MAX_RETRY_AFTER
    assert parse_retry_after({"retry-after": "Mon, 01 Jan 1990 00:00:00 GMT"}) == 0.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after({"retry-after": date}) <= 30  # type: ignore[operator]
    assert parse_retry_after({"retry-after": "nan", "retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "nan", "retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "inf"}) == MAX_RETRY_AFTER


class _Waiting(Exception):
    def __init__(self, retry_after: float | None) -> None:
        self.retry_after = retry_after


# -- sizes ----------------------------------------------------------------------------------


@HEARTBEAT
@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@STREAMING
async def test_a_huge_answer_is_refused_without_holding_the_loop(
    server: FakeLLMServer, hostile, streaming: bool, gzip: bool
) -> None:
    server.add(Hostile.huge_frame(96 * MiB if streaming else 100 * MiB, gzip=gzip))
    provider = hostile()
    started = time.monotonic()
    async with heartbeat() as beat:
        result = await outcome(provider, streaming=streaming)
    error = provider_error(result, provider)
    assert isinstance(error, ResponseTooLarge) and isinstance(error, ResponseInvalid)
    assert not error.transient, "the same request would fetch the same huge answer"
    assert ("max_frame_bytes" if streaming else "max_response_bytes") in error.message
    assert error.request_id == server.requests[-1].request_id
    assert beat.max_stall < 0.1, beat
    assert time.monotonic() - started < 10


async def test_the_caps_are_the_providers_to_set(server: FakeLLMServer, hostile) -> None:
    server.add(Hostile.huge_frame(300 * 1024), Hostile.huge_frame(300 * 1024), reply("fits"))
    provider = hostile(max_frame_bytes=256 * 1024, max_response_bytes=256 * 1024)
    assert isinstance(await outcome(provider, streaming=True), ResponseTooLarge)
    assert isinstance(await outcome(provider, streaming=False), ResponseTooLarge)
    final, _ = await outcome(provider, streaming=True)
    assert final.text == "fits"
    with pytest.raises(ValueError):
        hostile(max_frame_bytes=0)


@HEARTBEAT
async def test_a_flood_of_tiny_frames_completes_without_holding_the_loop(
    server: FakeLLMServer, hostile
) -> None:
    server.add(Hostile.flood(50_000))
    provider = hostile()
    async with heartbeat() as beat:
        final, count = await outcome(provider, streaming=True)
    assert count == 50_000
    assert final.text == "x" * 50_000
    assert beat.max_stall < 0.1, beat


@HEARTBEAT
async def test_a_compressed_flood_of_tiny_frames_is_taken_apart_between_turns(
    server: FakeLLMServer, hostile, api: str
) -> None:
    # 6 MiB of empty keep-alive frames in 6 KiB on the wire: each decoded step is a MiB of
    # them, which the SSE decoder took apart in one go: 0.2 s of the event loop per step on
    # an idle machine, 0.4-0.5 s on a loaded one. Now 64 KiB at a time, with turns between.
    answer = b"".join(render_stream(api, reply("done"), "m", "req_1", 100))
    packed = zlib.compressobj(wbits=31)
    body = packed.compress(b":\n\n" * (2 * MiB)) + packed.compress(answer) + packed.flush()
    server.add(Hostile.raw(body, headers={"content-encoding": "gzip"}))
    provider = hostile()
    async with heartbeat() as beat:
        final, _ = await outcome(provider, streaming=True)
    assert final.text == "done"
    assert beat.max_stall < 0.15, beat


@HEARTBEAT
@STREAMING
async def test_too_many_tool_calls_are_refused(
    server: FakeLLMServer, hostile, streaming: bool
) -> None:
    # 5,000 calls in a stream (refused at the 1,025th) or 20,000 in one body: more calls only
    # add the in-process server's own work (its thread competes for the GIL with the loop the
    # heartbeat watches), not the client's, which stops reading at the cap.
    calls = 5_000 if streaming else 20_000
    server.add(Hostile.flood(calls, kind="tool_calls"), Hostile.flood(1024, kind="tool_calls"))
    provider = hostile()
    async with heartbeat() as beat:
        result = await outcome(provider, streaming=streaming)
    error = provider_error(result, provider)
    assert isinstance(error, ResponseInvalid) and not error.transient
    assert beat.max_stall < 0.1, beat
    result = await outcome(provider, streaming=streaming)  # at the cap: accepted
    final = result[0] if streaming else result
    assert len(final.tool_calls) == 1024


@HEARTBEAT
@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@STREAMING
async def test_a_huge_error_body_is_read_and_quoted_only_in_part(
    server: FakeLLMServer, hostile, streaming: bool, gzip: bool
) -> None:
    server.add(Hostile.error(500, size=200 * MiB, gzip=gzip))
    provider = hostile()
    started = time.monotonic()
    async with heartbeat() as beat:
        result = await outcome(provider, streaming=streaming)
    error = provider_error(result, provider)
    assert error.status_code == 500 and error.transient
    assert len(error.message) <= MAX_ERROR_MESSAGE_CHARS + 40
    assert beat.max_stall < 0.1, beat
    assert time.monotonic() - started < 5  # 200 MiB were not read


@pytest.mark.parametrize("transport_name", ["httpx", "aiohttp"])
async def test_the_providers_own_pools_cut_error_bodies_too(
    server: FakeLLMServer, api: str, transport_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport_name)
    server.add(Hostile.error(429, size=200 * MiB, headers={"retry-after": "nan"}))
    provider = MAKE[api](server)
    async with provider:
        started = time.monotonic()
        error = provider_error(await outcome(provider, streaming=True), provider)
    assert error.status_code == 429 and error.retry_after is None
    assert len(error.message) <= MAX_ERROR_MESSAGE_CHARS + 40
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("value", "expected"),
    [("nan", None), ("-3", 0.0), ("1e400", MAX_RETRY_AFTER), ("garbage", None)],
)
async def test_hostile_retry_after_from_the_server(
    server: FakeLLMServer, hostile, value: str, expected: float | None
) -> None:
    server.add(Hostile.error(429, headers={"retry-after": value, "retry-after-ms": value}))
    provider = hostile()
    error = provider_error(await outcome(provider, streaming=True), provider)
    assert error.retry_after == expected
    assert RetryPolicy(max_retry_after=0.5).delay(1, error) <= 0.5


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nx-huge: " + b"a" * (2 * MiB) + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"x-many: header\r\n" * 20_000 + b"\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: "
        + b"r" * 8000
        + b"\r\ncontent-length: 2\r\n\r\n{}",
        b"\x00\xff garbage, not HTTP at all\r\n\r\n",
        b"HTTP/1.1 999999999999999999999 Nope\r\n\r\n",
    ],
    ids=["huge-header", "many-headers", "long-request-id", "not-http", "absurd-status"],
)
@STREAMING
async def test_hostile_heads_are_provider_errors(
    server: FakeLLMServer, hostile, head: bytes, streaming: bool
) -> None:
    server.add(Hostile.raw_http(head))
    provider = hostile()
    result = await outcome(provider, streaming=streaming)
    error = provider_error(result, provider)
    assert len(error.message) <= MAX_ERROR_MESSAGE_CHARS + 40
    assert error.request_id is None or len(error.request_id) <= 256


# -- streams that never end, or end wrong ---------------------------------------------------


@pytest.mark.parametrize("ping", [False, True], ids=["comments", "ping-events"])
async def test_a_keepalive_only_stream_yields_nothing_and_the_server_lets_go(
    server: FakeLLMServer, hostile, ping: bool
) -> None:
    server.add(Hostile.keepalive(0.01, ping=ping), reply("after"))
    provider = hostile()
    seen: list[Any] = []
    with anyio.move_on_after(0.3) as scope:
        async with provider.stream(request("go")) as events:
            async for item in events:
                seen.append(item)
    assert scope.cancelled_caught
    assert seen == [], "keep-alives are no stream events"
    final, _ = await outcome(provider, streaming=True)  # the server and pool carry on
    assert final.text == "after"


async def test_a_body_that_never_ends_after_the_end_marker_still_finishes(
    server: FakeLLMServer, hostile
) -> None:
    server.add(Hostile.keepalive(0.01, after="All done."))
    provider = hostile()
    started = time.monotonic()
    final, count = await outcome(provider, streaming=True)
    assert final.text == "All done." and count >= 1
    assert time.monotonic() - started < 5


async def test_a_non_streamed_body_that_never_ends_can_be_abandoned(
    server: FakeLLMServer, hostile
) -> None:
    server.add(Hostile.keepalive(0.01), "next")
    provider = hostile()
    with anyio.move_on_after(0.3) as scope:
        await provider.complete(request("go"))
    assert scope.cancelled_caught
    assert (await provider.complete(request("go"))).text == "next"


@STREAMING
async def test_garbage_and_missing_end_markers(
    server: FakeLLMServer, hostile, streaming: bool
) -> None:
    server.add(
        Hostile.garbage(size=8192),
        Hostile.garbage(b"\xff\xfe\x00data: \xff\n\n{" * 100),
        Hostile.raw(b"\x1f\x8b not gzip at all", headers={"content-encoding": "gzip"}),
        Hostile.no_end_marker(),
        Hostile.raw(b"data: [1, 2]\n\n" if streaming else b"[1, 2]"),
        Hostile.raw(b"data: " + b"[" * 50_000 + b"\n\n" if streaming else b"[" * 50_000),
    )
    provider = hostile()
    errors = [await outcome(provider, streaming=streaming) for _ in range(6)]
    for error in errors:
        assert isinstance(provider_error(error, provider), ResponseInvalid), error
    assert isinstance(errors[3], StreamIncomplete) is streaming


# -- values ---------------------------------------------------------------------------------

BAD_USAGE: list[dict[str, Any]] = [
    {"output_tokens": "5"},
    {"output_tokens": -5},
    {"input_tokens": -1},
    {"cache_read_tokens": -100},
    {"output_tokens": 10**30},
    {"output_tokens": 1e300},
    {"output_tokens": 2.5},
    {"output_tokens": True},
    {"output_tokens": [5]},
    {"output_tokens": {"n": 5}},
    {"raw": "lots"},
    {"raw": [1, 2]},
    {"raw": 12},
]


@pytest.mark.parametrize("fields", BAD_USAGE, ids=lambda f: repr(f)[:40])
@STREAMING
async def test_malformed_usage_is_response_invalid(
    server: FakeLLMServer, hostile, fields: dict[str, Any], streaming: bool
) -> None:
    server.add(Hostile.usage(**fields))
    provider = hostile()
    error = provider_error(await outcome(provider, streaming=streaming), provider)
    assert type(error) is ResponseInvalid and error.transient
    assert error.request_id == server.requests[-1].request_id


@STREAMING
async def test_well_formed_usage_still_counts(server: FakeLLMServer, make, streaming: bool) -> None:
    server.add(Hostile.usage(output_tokens=7.0, cache_read_tokens=None))
    result = await outcome(make(), streaming=streaming)
    final = result[0] if streaming else result
    assert final.usage.output_tokens == 7
    check_response(final)


def _anthropic_patches() -> list[Callable[[dict[str, Any]], Any]]:
    def at(kind: str, fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        return lambda p: fn(p) if p.get("type") == kind else None

    def delta(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        return at("content_block_delta", lambda p: p["delta"].__setitem__(key, value))

    return [
        delta("text", 5),
        delta("text", None),
        delta("text", ["a"]),
        at("content_block_delta", lambda p: p.pop("delta")),
        at("content_block_delta", lambda p: p.__setitem__("delta", "text")),
        at("content_block_delta", lambda p: p.__setitem__("index", [0])),
        at("content_block_delta", lambda p: p.__setitem__("index", 99)),
        at("content_block_start", lambda p: p.__setitem__("index", "0")),
        at("content_block_start", lambda p: p.__setitem__("index", -1)),
        at("content_block_start", lambda p: p.__setitem__("index", 2**40)),
        at("content_block_start", lambda p: p.__setitem__("content_block", "text")),
        at("content_block_start", lambda p: p["content_block"].__setitem__("type", 7)),
        at("message_delta", lambda p: p["delta"].__setitem__("stop_reason", ["end_turn"])),
        at("message_delta", lambda p: p["delta"].__setitem__("stop_reason", 3)),
        at("message_delta", lambda p: p.__setitem__("delta", [1])),
        at("message_start", lambda p: p.__setitem__("message", "hi")),
        lambda p: [p],
        lambda p: "just a string",
        lambda p: None if p.get("type") != "message_stop" else 42,
    ]


def _openai_patches() -> list[Callable[[dict[str, Any]], Any]]:
    def delta(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def patch(p: dict[str, Any]) -> None:
            for choice in p.get("choices") or ():
                holder = choice.get("delta") or choice.get("message")
                if holder and (holder.get("content") or holder.get("tool_calls")):
                    holder[key] = value

        return patch

    def first_call(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def patch(p: dict[str, Any]) -> None:
            for choice in p.get("choices") or ():
                holder = choice.get("delta") or choice.get("message") or {}
                for c in holder.get("tool_calls") or ():
                    c[key] = value

        return patch

    return [
        delta("content", 5),
        delta("content", {"text": "x"}),
        delta("tool_calls", "call"),
        delta("tool_calls", [7]),
        first_call("index", "0"),
        first_call("index", -3),
        first_call("index", 2**40),
        first_call("function", "get_weather"),
        first_call("function", {"name": ["x"], "arguments": "{}"}),
        first_call("function", {"name": "get_weather", "arguments": 5}),
        lambda p: p.__setitem__("choices", {"0": 1}) if p.get("choices") else None,
        lambda p: p.__setitem__("choices", ["x"]) if p.get("choices") else None,
        lambda p: [p.get(k) for k in p] if p.get("choices") and p.get("usage") is None else None,
        lambda p: [c.__setitem__("finish_reason", ["stop"]) for c in p.get("choices") or () if c],
        lambda p: [c.__setitem__("finish_reason", 0.5) for c in p.get("choices") or () if c],
        lambda p: "just a string",
    ]


def _responses_patches() -> list[Callable[[dict[str, Any]], Any]]:
    def at(kind: str, fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        return lambda p: fn(p) if p.get("type") == kind else None

    def items(kind: str, key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        """Set ``key`` of every ``kind`` item: in events, in the final response, in a body."""

        def patch(p: dict[str, Any]) -> None:
            final = p.get("response") if isinstance(p.get("response"), dict) else p
            for item in [p.get("item"), *(final.get("output") or ())]:
                if isinstance(item, dict) and item.get("type") == kind:
                    item[key] = value

        return patch

    def final(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def patch(p: dict[str, Any]) -> None:
            holder = p.get("response") if p.get("type") == "response.completed" else p
            if isinstance(holder, dict) and "output" in holder:
                holder[key] = value

        return patch

    text_delta = "response.output_text.delta"
    return [
        at(text_delta, lambda p: p.__setitem__("delta", 5)),
        at(text_delta, lambda p: p.__setitem__("delta", None)),
        at(text_delta, lambda p: p.pop("delta")),
        at(text_delta, lambda p: p.__setitem__("output_index", "0")),
        at(text_delta, lambda p: p.__setitem__("output_index", -1)),
        at(text_delta, lambda p: p.__setitem__("output_index", 2**40)),
        at("response.output_item.added", lambda p: p.__setitem__("item", "message")),
        at("response.output_item.added", lambda p: p.__setitem__("output_index", [0])),
        at("response.output_item.done", lambda p: p.__setitem__("item", 7)),
        at("response.reasoning_summary_text.delta", lambda p: p.__setitem__("delta", ["a"])),
        at("response.reasoning_summary_text.delta", lambda p: p.__setitem__("summary_index", -2)),
        at("response.function_call_arguments.delta", lambda p: p.__setitem__("delta", {})),
        at("response.function_call_arguments.delta", lambda p: p.__setitem__("output_index", 9)),
        at("response.completed", lambda p: p.__setitem__("response", "done")),
        items("function_call", "name", ["get_weather"]),
        items("function_call", "arguments", 5),
        items("message", "content", "Hello there."),
        items("message", "content", [{"type": "output_text", "text": 5}]),
        items("reasoning", "summary", {"text": "hmm"}),
        items("reasoning", "encrypted_content", 12),
        final("output", {"0": 1}),
        final("output", ["x"]),
        final("output", [{"type": 7}]),
        final("status", "queued"),
        final("status", ["completed"]),
        final("usage", [1, 2]),
        lambda p: "just a string",
        lambda p: [p],
        lambda p: None if p.get("type") != "response.completed" else 42,
    ]


TURN = reply("Hello there.", tool_calls=[call("get_weather", city="Paris")], thinking="hmm")
PATCHES = {
    "anthropic": _anthropic_patches(),
    "openai": _openai_patches(),
    "responses": _responses_patches(),
}


@pytest.mark.parametrize(
    ("api", "index"), [(api, i) for api, patches in PATCHES.items() for i in range(len(patches))]
)
@STREAMING
async def test_malformed_fields_are_response_invalid(
    server: FakeLLMServer, make, api: str, index: int, streaming: bool
) -> None:
    server.add(Hostile.patched(PATCHES[api][index], TURN))
    provider = make()
    result = await outcome(provider, streaming=streaming)
    if isinstance(result, ModelResponse | tuple):
        # Some patches only hit streamed events (or the body); what passed must be sane.
        check_response(result[0] if isinstance(result, tuple) else result)
        return
    error = provider_error(result, provider)
    assert isinstance(error, ResponseInvalid), error


@STREAMING
async def test_odd_but_usable_values_are_normalised(
    server: FakeLLMServer, make, api: str, streaming: bool
) -> None:
    long_name = "n" * MiB

    def patch(payload: dict[str, Any]) -> None:
        holders = [payload.get("content_block"), *(payload.get("content") or ())]
        for choice in payload.get("choices") or ():
            holder = choice.get("delta") or choice.get("message") or {}
            holders += [c.get("function") for c in holder.get("tool_calls") or ()]
            holders += list(holder.get("tool_calls") or ())
        for h in holders:
            if isinstance(h, dict) and h.get("name"):
                h["name"] = long_name
            if isinstance(h, dict) and str(h.get("id", "")).startswith(("call_", "toolu")):
                h["id"] = "bad id\n\x00" if api == "anthropic" else "x" * 1000
            if isinstance(h, dict) and h.get("arguments") and not streaming:
                h["arguments"] = {"city": "Paris"}  # an object where text belongs
            if isinstance(h, dict) and h.get("type") == "tool_use" and not streaming:
                h["input"] = ["not", "an", "object"]
        final = payload.get("response") if isinstance(payload.get("response"), dict) else payload
        for item in [payload.get("item"), *(final.get("output") or ())]:
            if isinstance(item, dict) and item.get("type") == "function_call":
                item["name"] = long_name
                item["call_id"] = "x" * 1000
                if not streaming:
                    item["arguments"] = {"city": "Paris"}  # an object where text belongs
        if "id" in final and str(final.get("object", "")).startswith(("chat", "response")):
            final["id"] = {"not": "a string"}
            if final["object"] == "response":
                final["model"] = ["m"]
        if isinstance(payload.get("message"), dict):
            payload["message"]["model"] = ["m"]

    server.add(Hostile.patched(patch, TURN))
    result = await outcome(make(), streaming=streaming, keep=True)
    assert not isinstance(result, Exception), result
    final, deltas = result if streaming else (result, [])
    check_response(final)
    (tool_call,) = final.tool_calls
    assert tool_call.name == "n" * MAX_NAME_CHARS
    assert INVENTED.fullmatch(tool_call.id)
    if api != "anthropic" or streaming:
        assert tool_call.arguments == {"city": "Paris"}
    else:
        assert tool_call.arguments == {INVALID_ARGUMENTS_KEY: '["not","an","object"]'}
    started = [d for d in deltas if isinstance(d, ToolCallStarted)]
    assert [(d.call_id, d.name) for d in started] == [(tool_call.id, tool_call.name)] * bool(
        streaming
    )


@STREAMING
async def test_invented_tool_call_ids_are_unique_across_turns(
    server: FakeLLMServer, make, streaming: bool
) -> None:
    two = reply(tool_calls=[call("get_weather", city="Paris"), call("get_time", tz="UTC")])
    server.add(Hostile.missing_ids(two), Hostile.missing_ids(two))
    provider = make()
    ids: list[str] = []
    for _ in range(2):
        result = await outcome(provider, streaming=streaming, keep=True)
        final, deltas = result if streaming else (result, [])
        turn_ids = [c.id for c in final.tool_calls]
        assert all(INVENTED.fullmatch(i) for i in turn_ids), turn_ids
        if streaming:
            assert [d.call_id for d in deltas if isinstance(d, ToolCallStarted)] == turn_ids
            assert {d.call_id for d in deltas if isinstance(d, ToolCallDelta)} <= set(turn_ids)
        ids += turn_ids
    assert len(set(ids)) == 4, ids


# -- no raw exception, whatever the server sends -------------------------------------------

_ODD_VALUES: list[Any] = [
    None,
    "",
    "5",
    -1,
    0,
    10**30,
    1e300,
    1.5,
    True,
    [],
    {},
    [1],
    {"a": 1},
    "x" * 300,
    "\x00\n",
]


def _mutate(value: Any, rng: random.Random) -> Any:
    """``value`` with one randomly chosen field (at any depth) replaced or removed."""
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                paths.append((node, key))
                walk(child)
        elif isinstance(node, list):
            for i, child in enumerate(node):
                paths.append((node, i))
                walk(child)

    walk(value)
    if not paths:
        return rng.choice(_ODD_VALUES)
    holder, key = rng.choice(paths)
    if isinstance(holder, dict) and rng.random() < 0.2:
        del holder[key]
    else:
        holder[key] = rng.choice(_ODD_VALUES)
    return value


@pytest.mark.parametrize("seed", range(2))
@STREAMING
async def test_randomly_damaged_answers_never_raise_anything_but_provider_errors(
    server: FakeLLMServer, hostile, api: str, transport: str, seed: int, streaming: bool
) -> None:
    rng = random.Random(f"{api}-{transport}-{seed}-{streaming}")
    turns = 40
    for _ in range(turns):
        hits = {rng.randrange(12) for _ in range(rng.randint(1, 3))}
        count = iter(range(10**6))

        def patch(payload: dict[str, Any], hits: set[int] = hits, count: Any = count) -> Any:
            return _mutate(payload, rng) if next(count) in hits else None

        server.add(Hostile.patched(patch, TURN))
    provider = hostile()
    outcomes = {"ok": 0, "invalid": 0}
    for _ in range(turns):
        result = await outcome(provider, streaming=streaming)
        if isinstance(result, Exception):
            provider_error(result, provider)
            outcomes["invalid"] += 1
        else:
            check_response(result[0] if streaming else result)
            outcomes["ok"] += 1
    assert outcomes["invalid"], outcomes  # the damage was noticed, not only survived


def test_the_fake_server_renders_hostile_streams_lazily() -> None:
    # A huge frame is generated in chunks: the server holds one chunk, not the whole frame.
    from fanloop.testing._faults import _huge

    for api in ("anthropic", "openai", "responses"):
        pieces = _huge(api, "m", "r", Hostile.huge_frame(10 * MiB, chunk_size=MiB), True)
        sizes = [len(p) for p in pieces]
        assert max(sizes) <= MiB and sum(sizes) > 10 * MiB


# -- redirects and content encodings ----------------------------------------------------------


@STREAMING
@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_an_error_and_nothing_is_sent_on(
    server: FakeLLMServer, hostile, streaming: bool, status: int
) -> None:
    # The key would travel on to wherever the server points (x-api-key is not dropped on a
    # change of origin) and the body would be sent again: neither happens.
    server.add(Hostile.raw(b"", status=status, headers={"location": "http://127.0.0.1:9/x"}))
    provider = hostile()
    error = provider_error(await outcome(provider, streaming=streaming), provider)
    assert error.status_code == status and not error.transient
    assert "redirected to http://127.0.0.1:9/x" in str(error)
    assert "does not follow redirects" in str(error)
    assert len(server.requests) == 1


def _openai_body(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


def _anthropic_body(text: str) -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    ).encode()


def _responses_body(text: str) -> bytes:
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    answer = {"id": "resp_1", "object": "response", "status": "completed", "model": "m"}
    return json.dumps({**answer, "output": [message], "usage": usage}).encode()


BODY = {"anthropic": _anthropic_body, "openai": _openai_body, "responses": _responses_body}


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_answer_is_decoded(
    server: FakeLLMServer, hostile, api: str, coding: str
) -> None:
    text = "compressed " * 20_000  # 220 kB: many chunks on the wire, each decoded as it comes
    body = BODY[api](text)
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    chunks = [packed[i : i + 1000] for i in range(0, len(packed), 1000)]
    server.add(Hostile.raw(chunks, headers={"content-encoding": coding}))
    provider = hostile()
    response = await outcome(provider, streaming=False)
    assert isinstance(response, ModelResponse), response
    assert response.text == text


async def test_an_unknown_content_encoding_is_passed_through(
    server: FakeLLMServer, hostile, api: str
) -> None:
    # As httpx2 does: a coding that was not asked for and is not known reads as it is (then
    # fails as JSON if it was really compressed).
    body = BODY[api]("hi")
    server.add(
        Hostile.raw(body, headers={"content-encoding": "x-unknown"}),
        Hostile.raw(zlib.compress(body), headers={"content-encoding": "br"}),
    )
    provider = hostile()
    assert (await outcome(provider, streaming=False)).text == "hi"
    assert isinstance(await outcome(provider, streaming=False), ResponseInvalid)


@pytest.mark.parametrize(
    ("values", "codings"),
    [
        ([], []),
        (["gzip"], ["gzip"]),
        (["identity, Deflate", " , X-Gzip "], ["deflate", "x-gzip"]),
        (["gzip, br, zstd, x-unknown", "identity"], ["gzip", "br", "zstd", "x-unknown"]),
        (["gzip"] * 5, None),
        (["gzip, " * 4 + "gzip"], None),
        (["identity"] * 17, None),
        ([", ".join(["gzip"] * 50_000)], None),
    ],
)
def test_content_codings_are_read_up_to_the_cap(values: list[str], codings: Any) -> None:
    if codings is not None:
        assert content_codings(values) == codings
        return
    started = time.perf_counter()
    with pytest.raises(ResponseTooLarge, match="content codings") as info:
        content_codings(values)
    assert not info.value.transient
    assert time.perf_counter() - started < 0.05


REFUSED = ("five gzip", "12,000 mixed", "one long value", "20 identity")


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_hostile_content_encodings_never_crash_or_stall_the_process(transport: str) -> None:
    # One decoder stage per listed coding: 50,000 codings in 300 KB of headers crashed the
    # process (SIGSEGV) on the aiohttp pool, a thousand raised a bare RecursionError. The
    # client runs in a child process, so a crash is a failed test here.
    import fanloop

    here = Path(__file__).parent
    paths = [str(Path(fanloop.__file__).parents[1]), str(here.parent), str(here)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    child = subprocess.run(
        [sys.executable, str(here / "hostile_headers_child.py"), transport],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,  # under pytest's own 120 s: run() kills and reaps the child first
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    results = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(results) == 3 * 2 * 10, child.stdout
    for result in results:
        case, outcome = result["case"], result["outcome"]
        # Each case is a few milliseconds of work: a gap of a quarter second is the machine.
        assert result["seconds"] < 5 and result["max_stall"] < 0.25, result
        if case in ("gzip", "identity and gzip"):
            assert outcome == "the answer", result
        elif case in REFUSED:
            assert outcome == "ResponseTooLarge" and result["transient"] is False, result
        elif case.startswith("503"):  # the error body is unreadable, the status is not
            assert result["provider_error"] and result["status"] in (503, None), result
        elif outcome != "the answer":  # 50,000 codings, a 90 KB header: over a header cap
            assert result["provider_error"], result


async def test_a_gzip_bomb_is_decoded_a_step_at_a_time(
    server: FakeLLMServer, api: str, transport: str
) -> None:
    # 64 KiB on the wire that decode to 64 MiB: the reader sees it 1 MiB at a time (the
    # aiohttp pool's decoder, httpx2's own on the httpx transport) and stops at the cap, so
    # memory stays near the cap, not at the chunk's full size.
    import tracemalloc

    bomb = zlib.compressobj(wbits=31)
    packed = bomb.compress(b"\0" * (64 * MiB)) + bomb.flush()
    assert len(packed) < 128 * 1024
    server.add(Hostile.raw(packed, headers={"content-encoding": "gzip"}))
    provider = MAKE[api](server, transport=transport, max_response_bytes=2 * MiB)
    tracemalloc.start()
    try:
        error = await outcome(provider, streaming=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await provider.aclose()
    assert isinstance(error, ResponseInvalid), error  # ResponseTooLarge, at the 2 MiB cap
    assert peak < 16 * MiB, peak
