"""Every failure the wire can produce, translated into the fanloop error tree."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from provider_helpers import request

from fanloop.errors import (
    AuthenticationError,
    BadRequest,
    Conflict,
    ContextWindowExceeded,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamIncomplete,
)
from fanloop.events import TextDelta
from fanloop.testing import FakeLLMServer, Fault, reply

STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])


async def fail(provider: Any, *, streaming: bool) -> tuple[ProviderError, list[Any]]:
    """Make one call that must fail; return the error and the deltas seen before it."""
    seen: list[Any] = []

    async def call() -> None:
        if streaming:
            async with provider.stream(request("go")) as events:
                async for item in events:
                    seen.append(item)
        else:
            await provider.complete(request("go"))

    with pytest.raises(ProviderError) as info:
        await call()
    error = info.value
    assert type(error).__module__ == "fanloop.errors", "vendor types never leak"
    assert error.provider == provider.name
    return error, seen


@pytest.mark.parametrize(
    ("status", "cls", "transient"),
    [
        (429, RateLimited, True),
        (529, Overloaded, True),
        (500, ServerError, True),
        (502, ServerError, True),
        (503, ServerError, True),
        (408, ProviderTimeout, True),
        (409, Conflict, True),
        (400, BadRequest, False),
        (403, AuthenticationError, False),
        (404, BadRequest, False),
        (422, BadRequest, False),
    ],
)
@STREAMING
async def test_http_status(
    server: FakeLLMServer, make, status: int, cls: type, transient: bool, streaming: bool
) -> None:
    server.add(Fault.http(status, message=f"injected {status}"))
    error, _ = await fail(make(), streaming=streaming)
    assert type(error) is cls
    assert error.status_code == status
    assert error.transient is transient
    assert error.request_id == server.requests[-1].request_id
    assert error.message.endswith(f"injected {status}")
    assert error.body is not None
    assert error.retry_after is None


@STREAMING
async def test_retry_after_seconds(server: FakeLLMServer, make, streaming: bool) -> None:
    server.add(Fault.http(429, retry_after=1.5))
    error, _ = await fail(make(), streaming=streaming)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 1.5


@STREAMING
async def test_retry_after_ms_wins(server: FakeLLMServer, make, streaming: bool) -> None:
    server.add(Fault.http(529, retry_after=9, retry_after_ms=250))
    error, _ = await fail(make(), streaming=streaming)
    assert isinstance(error, Overloaded)
    assert error.retry_after == 0.25


async def test_unauthorized(make) -> None:
    with FakeLLMServer(api_key="the-right-key") as guarded:
        from provider_helpers import make_anthropic, make_openai

        for provider in (
            make_anthropic(guarded, api_key="wrong"),
            make_openai(guarded, api_key="wrong"),
        ):
            async with provider:
                error, _ = await fail(provider, streaming=True)
                assert type(error) is AuthenticationError
                assert error.status_code == 401
                assert not error.transient


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "This model's maximum context length is 128000 tokens.",
    ],
)
async def test_context_window_exceeded(server: FakeLLMServer, make, message: str) -> None:
    server.add(Fault.http(400, message=message))
    error, _ = await fail(make(), streaming=True)
    assert type(error) is ContextWindowExceeded
    assert isinstance(error, BadRequest)
    assert error.status_code == 400


@pytest.mark.parametrize(
    ("error_type", "cls"),
    [
        ("overloaded_error", Overloaded),
        ("rate_limit_error", RateLimited),
        ("api_error", ServerError),
        ("something_new", ServerError),
    ],
)
async def test_error_inside_stream(server: FakeLLMServer, make, error_type: str, cls: type) -> None:
    server.add(
        Fault.stream_error(reply("partial output here"), error_type=error_type, after_events=2)
    )
    error, seen = await fail(make(), streaming=True)
    assert type(error) is cls
    assert error.transient
    assert error.status_code is None  # the HTTP status was 200
    assert error.request_id == server.requests[-1].request_id
    assert [type(d) for d in seen] == [TextDelta, TextDelta], "partial output came first"


async def test_error_event_for_a_non_streamed_call(server: FakeLLMServer, make) -> None:
    server.add(Fault.stream_error(error_type="overloaded_error"))
    error, _ = await fail(make(), streaming=False)
    assert type(error) is Overloaded
    assert error.status_code == 529


@STREAMING
async def test_dropped_connection(server: FakeLLMServer, make, streaming: bool) -> None:
    server.add(Fault.drop(reply("this will be cut"), after_events=1))
    error, seen = await fail(make(), streaming=streaming)
    assert type(error) is ProviderConnectionError
    assert error.transient
    if streaming:
        assert len(seen) == 1


async def test_stream_cut_before_end_marker(server: FakeLLMServer, make) -> None:
    server.add(Fault.truncate(reply("an answer that never finishes"), after_events=3))
    error, seen = await fail(make(), streaming=True)
    assert type(error) is StreamIncomplete
    assert error.transient
    assert error.request_id == server.requests[-1].request_id
    assert len(seen) == 3


async def test_stream_cut_with_all_content_still_incomplete(server: FakeLLMServer, make) -> None:
    server.add(Fault.truncate(reply("short"), after_events=99))
    error, _ = await fail(make(), streaming=True)
    assert type(error) is StreamIncomplete


@STREAMING
async def test_slow_first_byte_times_out(server: FakeLLMServer, make, streaming: bool) -> None:
    server.add(Fault.slow(2.0, reply("too late")))
    error, _ = await fail(make(timeout=0.2), streaming=streaming)
    assert type(error) is ProviderTimeout
    assert error.transient


async def test_slow_first_byte_within_timeout(server: FakeLLMServer, make) -> None:
    server.add(Fault.slow(0.05, reply("in time")))
    response = await make(timeout=5.0).complete(request("go"))
    assert response.text == "in time"


async def test_connection_refused(api: str) -> None:
    from fanloop.providers.anthropic import AnthropicProvider
    from fanloop.providers.openai import OpenAIProvider

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    provider = (
        AnthropicProvider("m", api_key="k", base_url=url)
        if api == "anthropic"
        else OpenAIProvider("m", api_key="k", base_url=f"{url}/v1")
    )
    async with provider:
        for streaming in (True, False):
            error, _ = await fail(provider, streaming=streaming)
            assert type(error) is ProviderConnectionError
            assert error.transient


async def test_script_exhausted_is_a_bad_request(server: FakeLLMServer, make) -> None:
    error, _ = await fail(make(), streaming=True)
    assert type(error) is BadRequest
    assert "no scripted turn left" in error.message


async def test_a_stream_longer_than_the_read_timeout_is_not_cut(
    server: FakeLLMServer, make
) -> None:
    # The read timeout counts from the last bytes that arrived, not from the request: deltas
    # 50 ms apart keep a 0.25 s timeout from firing over a stream of 0.6 s or more.
    server.delta_delay = 0.05
    server.add(reply("twelve chars" * 5))  # 12 deltas of 5 characters
    response = await make(timeout=0.25).complete(request("go"))
    assert response.text == "twelve chars" * 5
    provider = make(timeout=0.25)
    server.add(reply("twelve chars" * 5))
    async with provider.stream(request("go")) as events:
        items = [item async for item in events]
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "twelve chars" * 5
