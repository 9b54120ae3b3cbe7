"""Fixtures for the provider tests: a FakeLLMServer per test and providers pointed at it.

Everything goes over real HTTP; the providers send prebuilt requests themselves (the SDK path,
``client=AsyncAnthropic(...)``, is tested in test_provider_sdk_client.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from provider_helpers import make_anthropic, make_openai, make_responses

from fanloop.providers._http import HTTPProvider
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer

ProviderFactory = Callable[..., HTTPProvider]


# Tests of the shared ``api`` fixture that check Chat Completions' own request JSON (messages,
# usage field names); the Responses API has its own in test_provider_responses.py.
_CHAT_SHAPED = frozenset(
    {
        "test_tool_loop_over_http",
        "test_multi_turn_tool_conversation",
        "test_usage_with_cache",
        "test_temperature_stop_sequences_and_extra",
        "test_many_concurrent_streams_on_one_provider",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="checks Chat Completions' own wire; see test_provider_responses")
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (
            callspec is not None
            and callspec.params.get("api") == "responses"
            and getattr(item, "originalname", "") in _CHAT_SHAPED
        ):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDKs' default pools honour proxy variables; the fake server is always local.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(chars_per_delta=5) as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture(params=["anthropic", "openai", "responses"])
def api(request: pytest.FixtureRequest) -> str:
    """Runs a test once per wire API."""
    return str(request.param)


@pytest.fixture
async def make(server: FakeLLMServer, api: str) -> AsyncIterator[ProviderFactory]:
    """Builds providers of the current ``api`` against ``server``; closes them afterwards."""
    made: list[HTTPProvider] = []

    def factory(**options: Any) -> HTTPProvider:
        build = {"anthropic": make_anthropic, "openai": make_openai, "responses": make_responses}
        provider = build[api](server, **options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def anthropic_provider(server: FakeLLMServer) -> AsyncIterator[AnthropicProvider]:
    provider = make_anthropic(server)
    yield provider
    await provider.aclose()


@pytest.fixture
async def openai_provider(server: FakeLLMServer) -> AsyncIterator[OpenAIProvider]:
    provider = make_openai(server)
    yield provider
    await provider.aclose()
