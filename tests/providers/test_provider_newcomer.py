"""What a newcomer trips over first (issue #14): errors that say what to check, and a provider
that works from whichever event loop uses it.

- a rejected key (401, 403) names the variable the key came from, or says it was passed;
- a refused plain-http connection names host and port, never aiohttp's ``ssl:default``;
- one provider serves successive ``asyncio.run()`` / ``anyio.run()`` calls and two threads
  with their own loops, and leaves no unclosed pool behind.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import socket
import ssl
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import anyio
import httpx2
import openai
import pytest
from provider_helpers import request

from fanloop.errors import AuthenticationError, ProviderConnectionError, ProviderError
from fanloop.providers import from_env
from fanloop.providers._http import HTTPProvider, connect_reason
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, Fault

TRANSPORTS = pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
KEY_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "VLLM_API_KEY",
)


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A server that accepts only the key ``right-key``; no key variable set."""
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with FakeLLMServer(api_key="right-key") as server:
        yield server


async def rejected(provider: Any) -> ProviderError:
    async with provider:
        with pytest.raises(ProviderError) as info:
            await provider.complete(request("hi"))
    return info.value


# -- a rejected key names where it came from ---------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "build"),
    [
        ("ANTHROPIC_API_KEY", lambda s: AnthropicProvider("m", base_url=s.anthropic_base_url)),
        ("ANTHROPIC_AUTH_TOKEN", lambda s: AnthropicProvider("m", base_url=s.anthropic_base_url)),
        ("OPENAI_API_KEY", lambda s: OpenAIProvider("m", base_url=s.openai_base_url)),
        (
            "OPENROUTER_API_KEY",
            lambda s: OpenAIProvider.openrouter("a/b", base_url=s.openai_base_url),
        ),
    ],
)
async def test_a_rejected_key_names_its_variable(
    guarded: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    build: Callable[[FakeLLMServer], HTTPProvider],
) -> None:
    monkeypatch.setenv(variable, "wrong-key")
    error = await rejected(build(guarded))
    assert type(error) is AuthenticationError
    assert error.status_code == 401
    assert f"the key in {variable} was rejected" in str(error)
    assert "wrong-key" not in str(error)


@pytest.mark.parametrize(
    ("vendor", "variable"),
    [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openai", "OPENAI_API_KEY"),
        ("openrouter", "OPENROUTER_API_KEY"),
        ("vllm", "VLLM_API_KEY"),
    ],
)
async def test_from_env_names_the_variable_it_read(
    guarded: FakeLLMServer, vendor: str, variable: str
) -> None:
    url = guarded.anthropic_base_url if vendor == "anthropic" else guarded.openai_base_url
    env = {
        "LLM_PROVIDER": vendor,
        "LLM_MODEL": "m",
        variable: "wrong-key",
        f"{vendor.upper()}_BASE_URL": url,
    }
    error = await rejected(from_env(env))
    assert type(error) is AuthenticationError
    assert f"the key in {variable} was rejected" in error.message


async def test_an_explicit_key_is_named_as_passed(
    guarded: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The variable holds the right key, but it is not the one that was sent.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "right-key")
    monkeypatch.setenv("OPENAI_API_KEY", "right-key")
    for provider, owner in (
        (AnthropicProvider("m", api_key="bad", base_url=guarded.anthropic_base_url), "Anthropic"),
        (OpenAIProvider("m", api_key="bad", base_url=guarded.openai_base_url), "OpenAI"),
    ):
        error = await rejected(provider)
        assert error.message.startswith(f"the api_key passed to {owner}Provider was rejected: ")
        assert "_API_KEY" not in error.message


async def test_a_forbidden_key_names_its_variable_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "limited-key")
    with FakeLLMServer([Fault.http(403, message="not allowed")]) as server:
        error = await rejected(OpenAIProvider("m", base_url=server.openai_base_url))
    assert type(error) is AuthenticationError and error.status_code == 403
    assert error.message == (
        "the key in OPENAI_API_KEY lacks permission for this request: not allowed"
    )


async def test_a_placeholder_key_says_none_was_given(guarded: FakeLLMServer) -> None:
    error = await rejected(OpenAIProvider.vllm("m", base_url=guarded.openai_base_url))
    assert "placeholder key 'EMPTY' (no api_key= was given) was rejected" in error.message


async def test_an_sdk_client_key_is_traced_through_the_client(
    guarded: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong-key")
    sdk = anthropic.AsyncAnthropic(base_url=guarded.anthropic_base_url)  # reads the variable
    error = await rejected(AnthropicProvider("m", client=sdk))
    assert type(error) is AuthenticationError and error.status_code == 401
    assert "the key in ANTHROPIC_API_KEY (read by the client passed to AnthropicProvider)" in (
        error.message
    )
    own = openai.AsyncOpenAI(api_key="other", base_url=guarded.openai_base_url)
    error = await rejected(OpenAIProvider("m", client=own))
    assert "the credentials of the client passed to OpenAIProvider were" not in error.message
    assert error.message.startswith("the credentials of the client passed to OpenAIProvider")
    await sdk.close()
    await own.close()


def test_the_command_line_names_the_variable(guarded: FakeLLMServer, tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "ANTHROPIC_"))}
    env.update(
        LLM_PROVIDER="anthropic",
        ANTHROPIC_API_KEY="wrong-key",
        ANTHROPIC_BASE_URL=guarded.anthropic_base_url,
    )
    out = subprocess.run(
        [sys.executable, "-m", "fanloop", "run", "hi", "--no-memory"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "ANTHROPIC_API_KEY" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# -- a refused connection says where and why ------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ask(provider: HTTPProvider, *, streaming: bool) -> None:
    if streaming:
        async with provider.stream(request("hi")) as events:
            async for _ in events:
                pass
    else:
        await provider.complete(request("hi"))


@TRANSPORTS
@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])
async def test_a_refused_connection_names_host_and_port(
    monkeypatch: pytest.MonkeyPatch, transport: str, streaming: bool
) -> None:
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport)
    port = closed_port()
    for provider in (
        AnthropicProvider("m", api_key="k", base_url=f"http://127.0.0.1:{port}"),
        OpenAIProvider("m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1"),
    ):
        async with provider:
            with pytest.raises(ProviderConnectionError) as info:
                await ask(provider, streaming=streaming)
        assert str(info.value) == f"cannot connect to 127.0.0.1:{port} (connection refused)"
        assert info.value.transient


def test_the_reason_is_read_from_the_cause_chain() -> None:
    # Without a lookup on the network: the errors as the transports chain them.
    def chained(*errors: BaseException) -> BaseException:
        for outer, inner in itertools.pairwise(errors):
            outer.__cause__ = inner
        return errors[0]

    dns = chained(httpx2.ConnectError("x"), OSError("y"), socket.gaierror(-2, "not known"))
    assert connect_reason(dns) == "the host name cannot be resolved"
    refused = chained(httpx2.ConnectError("[Errno 111] Connection refused"))
    assert connect_reason(refused) == "connection refused"
    tls = chained(httpx2.ConnectError("x"), ssl.SSLCertVerificationError(1, "bad"))
    assert connect_reason(tls).startswith("TLS certificate not accepted")
    late = chained(httpx2.ConnectTimeout("x"), TimeoutError())
    assert connect_reason(late) == "timed out"


# -- one provider, any event loop -------------------------------------------------------------


def providers(server: FakeLLMServer) -> list[HTTPProvider]:
    return [
        AnthropicProvider("m", api_key="k", base_url=server.anthropic_base_url),
        OpenAIProvider("m", api_key="k", base_url=server.openai_base_url),
    ]


def collect_garbage() -> None:
    """Collect now, so that an unclosed pool's warning fails this test (warnings are errors)."""
    gc.collect()


async def answer(provider: HTTPProvider, server: FakeLLMServer, text: str) -> tuple[str, Any]:
    """Ask once; the answer and the pool that carried it."""
    server.add(text)
    response = await provider.complete(request("hi"))
    return response.text, provider._client._client


@TRANSPORTS
def test_one_provider_serves_successive_asyncio_runs(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport)
    for provider in providers(server):
        runs = [
            asyncio.run(answer(provider, server, "first")),
            asyncio.run(answer(provider, server, "second")),  # was: "Event loop is closed"
            anyio.run(answer, provider, server, "third"),
            anyio.run(answer, provider, server, "fourth"),
        ]
        assert [text for text, _ in runs] == ["first", "second", "third", "fourth"]
        # A pool per loop, each closed when its loop shut down, though nobody closed the
        # provider: nothing is left for the garbage collector to warn about.
        pools = [pool for _, pool in runs]
        assert len({id(pool) for pool in pools}) == 4
        assert all(pool.is_closed for pool in pools)
        collect_garbage()


def in_two_threads(provider: HTTPProvider) -> list[str]:
    """Six requests from each of two threads, both loops alive at once; the answers."""
    both_running = threading.Barrier(2, timeout=30)
    answers: list[str] = []
    failures: list[BaseException] = []

    async def chat() -> None:
        answers.append((await provider.complete(request("ping"))).text)
        both_running.wait()  # both loops are alive, each with its own pool
        for _ in range(5):
            answers.append((await provider.complete(request("ping"))).text)

    def thread_main() -> None:
        try:
            asyncio.run(chat())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=thread_main) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    return answers


@TRANSPORTS
def test_one_provider_serves_two_threads_with_their_own_loops(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport)
    server.responder = lambda body: "pong"
    for provider in providers(server):
        assert in_two_threads(provider) == ["pong"] * 12
        assert asyncio.run(provider.complete(request("after"))).text == "pong"
        collect_garbage()


def test_aclose_closes_the_pool_and_the_provider_stays_usable(server: FakeLLMServer) -> None:
    provider = AnthropicProvider("m", api_key="k", base_url=server.anthropic_base_url)

    async def main() -> None:
        server.add("one", "two")
        assert (await provider.complete(request("hi"))).text == "one"
        pool = provider._client._client
        await provider.aclose()
        assert pool.is_closed and provider._client._client is None
        await provider.aclose()  # idempotent
        assert (await provider.complete(request("hi"))).text == "two"  # a new pool
        assert provider._client._client is not pool
        await provider.aclose()

    asyncio.run(main())
    collect_garbage()


def test_a_provider_dropped_in_a_running_loop_closes_its_pool(server: FakeLLMServer) -> None:
    async def main() -> None:
        provider = OpenAIProvider("m", api_key="k", base_url=server.openai_base_url)
        server.add("hello")
        assert (await provider.complete(request("hi"))).text == "hello"
        pool = provider._client._client
        del provider
        collect_garbage()  # the loop is asked to close the pool
        for _ in range(100):  # a few turns of the loop, no sleeping
            if pool.is_closed:
                break
            await asyncio.sleep(0)
        assert pool.is_closed

    asyncio.run(main())
    collect_garbage()


@TRANSPORTS
def test_a_provider_dropped_as_its_loop_ends_closes_its_pool(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    """Dropped in the loop's last turn, its close is not left to a task that the loop's
    shutdown cancels before it starts (the pool was left open, its connections unclosed)."""
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport)
    pools: list[Any] = []

    async def main() -> None:
        provider = OpenAIProvider("m", api_key="k", base_url=server.openai_base_url)
        server.add("hello")
        assert (await provider.complete(request("hi"))).text == "hello"
        pools.append(provider._client._client)
        del provider
        collect_garbage()  # whatever the provider was part of is gone now, as the loop ends

    asyncio.run(main())
    assert pools[0].is_closed
    collect_garbage()


@TRANSPORTS
def test_a_provider_collected_in_a_reference_cycle_closes_its_pool_quietly(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    """A provider the garbage collector finds in a cycle (here, of the caller's own making)
    is collected with everything only it reaches. Its pool must not be among that garbage: the
    finalizers of one collection all run first, so the pool's connections would be finalized
    (aiohttp warns: "Unclosed connector") before its close could run."""
    monkeypatch.setenv("FANLOOP_HTTP_TRANSPORT", transport)

    async def main() -> None:
        provider = OpenAIProvider("m", api_key="k", base_url=server.openai_base_url)
        server.add("hello")
        assert (await provider.complete(request("hi"))).text == "hello"
        pool = weakref.ref(provider._client._client)
        cycle: list[Any] = [provider]
        cycle.append(cycle)
        del provider, cycle
        collect_garbage()  # an unclosed connection's warning (an error here) comes now
        for _ in range(100):  # a few turns of the loop, no sleeping
            if (open_pool := pool()) is None or open_pool.is_closed:
                break
            await asyncio.sleep(0)
        assert pool() is None or pool().is_closed  # type: ignore[union-attr]

    asyncio.run(main())
    collect_garbage()


@TRANSPORTS
def test_a_provider_collected_just_before_its_loop_shuts_down_closes_its_pool_once(
    server: FakeLLMServer, transport: str
) -> None:
    """The collection asks the loop to close the pool; the loop's shutdown closes the pool's
    generator meanwhile. Both closing the generator at once was an error the loop reported
    ("aclose(): asynchronous generator is already running")."""
    reported: list[dict[str, Any]] = []
    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(lambda loop, context: reported.append(context))
        provider = OpenAIProvider(
            "m", api_key="k", base_url=server.openai_base_url, transport=transport
        )
        server.add("hello")

        async def ask(asked: HTTPProvider) -> tuple[str, Any]:
            return (await asked.complete(request("hi"))).text, asked._client._client

        text, pool = runner.run(ask(provider))
        cycle: list[Any] = [provider]
        cycle.append(cycle)  # as providers often are: freed by the collector, not at once
        del provider, cycle
        collect_garbage()
    assert text == "hello"
    assert pool.is_closed
    assert reported == []
    collect_garbage()


def test_trio_runs_in_two_threads_have_a_pool_each(server: FakeLLMServer) -> None:
    """Each ``trio.run`` has its own pool, as each asyncio loop does (they shared one: a
    request of one run could wait on a connection of the other, or on a pool it closed)."""
    trio = pytest.importorskip("trio", reason="trio is not installed")
    server.responder = lambda body: "pong"
    provider = OpenAIProvider("m", api_key="k", base_url=server.openai_base_url, transport="httpx")
    both_running = threading.Barrier(2, timeout=30)
    pools: dict[str, Any] = {}
    failures: list[BaseException] = []

    async def chat(name: str) -> None:
        assert (await provider.complete(request("ping"))).text == "pong"
        pools[name] = provider._client._client
        both_running.wait()  # both runs are alive, each with its pool
        for _ in range(5):
            assert (await provider.complete(request("ping"))).text == "pong"

    def thread_main(name: str) -> None:
        try:
            trio.run(chat, name)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=thread_main, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert pools["a"] is not pools["b"]
    assert pools["a"].is_closed and pools["b"].is_closed  # each closed as its run ended
    collect_garbage()


def test_a_provider_dropped_in_a_trio_run_closes_its_pool_in_that_run(
    server: FakeLLMServer,
) -> None:
    trio = pytest.importorskip("trio", reason="trio is not installed")

    async def main() -> None:
        provider = OpenAIProvider(
            "m", api_key="k", base_url=server.openai_base_url, transport="httpx"
        )
        server.add("hello")
        assert (await provider.complete(request("hi"))).text == "hello"
        pool = provider._client._client
        cycle: list[Any] = [provider]
        cycle.append(cycle)
        del provider, cycle
        collect_garbage()  # the run is asked to close the pool
        for _ in range(100):  # a few turns of the run, no sleeping
            if pool.is_closed:
                break
            await trio.lowlevel.checkpoint()
        assert pool.is_closed

    trio.run(main)
    collect_garbage()
