"""Connection pools: owned pools are closed, borrowed ones never; one pool serves many."""

from __future__ import annotations

import subprocess
import sys

import httpx2
import pytest
from provider_helpers import make_anthropic, make_openai, request

from fanloop.providers._aiohttp import AiohttpTransport
from fanloop.testing import FakeLLMServer


async def test_borrowed_pool_is_shared_and_never_closed(server: FakeLLMServer) -> None:
    pool = httpx2.AsyncClient()
    try:
        anthropic = make_anthropic(server, http_client=pool)
        openai = make_openai(server, http_client=pool)
        server.add("a", "b")
        assert (await anthropic.complete(request("x"))).text == "a"
        assert (await openai.complete(request("x"))).text == "b"
        async with anthropic:
            pass
        await openai.aclose()
        assert not pool.is_closed
        server.add("still usable")
        response = await pool.post(
            f"{server.anthropic_base_url}/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": []},
        )
        assert response.status_code == 200
    finally:
        await pool.aclose()


async def test_owned_pool_is_closed(server: FakeLLMServer, make) -> None:
    provider = make()
    server.add("hi")
    await provider.complete(request("x"))
    pool = provider._client._client
    assert isinstance(pool, httpx2.AsyncClient)
    transport = pool._transport
    if isinstance(transport, AiohttpTransport):  # the default where aiohttp is installed
        assert transport._session is not None
        assert transport._session.connector is not None
        assert transport._session.connector.limit == 1000  # sized for heavy concurrency
    else:
        assert transport._pool._max_connections == 1000
        assert transport._pool._max_keepalive_connections == 100
    await provider.aclose()
    assert pool.is_closed
    await provider.aclose()  # idempotent


async def test_many_concurrent_streams_on_one_provider(server: FakeLLMServer, make) -> None:
    import anyio

    provider = make()
    server.responder = lambda body: f"answer to {body['messages'][-1]['content']}"
    texts: dict[int, str] = {}

    async def one(n: int) -> None:
        async with provider.stream(request(f"q{n}", tools=())) as events:
            async for item in events:
                final = item
        texts[n] = final.text

    async with anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(one, n)
    marked = "'cache_control': {'type': 'ephemeral'}"  # Anthropic's prompt-cache breakpoint
    assert all(
        texts[n]
        in (
            f"answer to q{n}",
            f"answer to [{{'type': 'text', 'text': 'q{n}'}}]",
            f"answer to [{{'type': 'text', 'text': 'q{n}', {marked}}}]",
        )
        for n in range(50)
    )


async def test_abandoned_stream_frees_its_connection(server: FakeLLMServer, make) -> None:
    provider = make()
    server.add("a long answer " * 20, "next")
    async with provider.stream(request("x")) as events:
        async for _ in events:
            break
    assert (await provider.complete(request("y"))).text == "next"


def test_sdks_not_imported_by_fanloop() -> None:
    code = (
        "import sys, fanloop, fanloop.providers, fanloop.testing\n"
        "from fanloop.providers import from_env, resolve_provider\n"
        "leaked = [m for m in ('anthropic', 'openai') if m in sys.modules]\n"
        "assert not leaked, leaked\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_stream_outside_async_with_is_an_error(server: FakeLLMServer, api: str) -> None:
    provider = (make_anthropic if api == "anthropic" else make_openai)(server)
    with pytest.raises(RuntimeError, match="async with"):
        aiter(provider.stream(request("x")))


async def test_a_request_yields_a_loop_turn_only_when_it_may_connect(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before opening a connection a request lets the runs started beside it do their set-up
    first (one loop turn); one that finds a kept-alive connection in the pool takes it at
    once (that turn cost every request of ten thousand runs a loop pass)."""
    import asyncio

    from fanloop.providers import _aiohttp

    yields: list[float] = []
    real_sleep = asyncio.sleep

    async def counted(delay: float, *args: object) -> object:
        yields.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(_aiohttp.asyncio, "sleep", counted)
    pool = _aiohttp_pool()
    provider = make_openai(server, http_client=pool)
    try:
        server.add("a", "b")
        assert (await provider.complete(request("x"))).text == "a"
        assert yields == [0]  # a fresh pool: it connects
        assert (await provider.complete(request("x"))).text == "b"
        assert yields == [0]  # the first one's connection, kept alive
        with FakeLLMServer() as other:  # another host on the same pool: it connects
            other.add("c")
            elsewhere = make_openai(other, http_client=pool)
            assert (await elsewhere.complete(request("x"))).text == "c"
            await elsewhere.aclose()
        assert yields == [0, 0]
    finally:
        await provider.aclose()
        await pool.aclose()


def _aiohttp_pool() -> httpx2.AsyncClient:
    from fanloop.providers._http import create_pool

    return create_pool(transport="aiohttp")


async def test_aiohttp_sends_the_headers_a_request_names_and_adds_none_of_its_own(
    server: FakeLLMServer,
) -> None:
    """``aiohttp`` would add its own ``User-Agent`` and ``Accept-Encoding`` to a request that
    does not name them: fanloop's requests name both (sent as they are), and a request
    through the pool that names neither goes out without them."""
    pool = _aiohttp_pool()
    provider = make_openai(server, http_client=pool)
    try:
        server.add("a")
        await provider.complete(request("x"))
        server.add("b")
        bare_request = pool.build_request(
            "POST",
            f"{server.openai_base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        del bare_request.headers["User-Agent"], bare_request.headers["Accept-Encoding"]
        response = await pool.send(bare_request)
        assert response.status_code == 200
    finally:
        await provider.aclose()
        await pool.aclose()
    ours, bare = server.requests[-2:]
    assert ours.headers["user-agent"].startswith("fanloop/")
    assert ours.headers["accept-encoding"] == "gzip, deflate"
    assert "user-agent" not in bare.headers
    assert "accept-encoding" not in bare.headers


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_a_borrowed_pool_its_owner_closed_is_a_configuration_error(
    server: FakeLLMServer, transport: str
) -> None:
    from fanloop.errors import ConfigurationError
    from fanloop.providers._http import create_pool

    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    provider = make_openai(server, http_client=pool)
    server.add("a")
    assert (await provider.complete(request("x"))).text == "a"
    await pool.aclose()
    with pytest.raises(ConfigurationError, match="http_client given to OpenAIProvider is closed"):
        await provider.complete(request("x"))
    await provider.aclose()


async def test_a_borrowed_pool_closed_under_a_request_is_a_configuration_error(
    server: FakeLLMServer,
) -> None:
    """The owner closes the pool while the request waits for its first loop turn (a fresh
    pool connects): the request fails as a closed pool, not as a bare RuntimeError."""
    import asyncio

    from fanloop.errors import ConfigurationError

    pool = _aiohttp_pool()
    provider = make_openai(server, http_client=pool)
    server.add("a")
    closing = asyncio.ensure_future(pool.aclose())  # runs at the request's first yield
    with pytest.raises(ConfigurationError, match="is closed"):
        await provider.complete(request("x"))
    await closing
    await provider.aclose()
