"""Fixtures for the provider tests: a FakeLLMServer per test and providers pointed at it.

Everything goes over real HTTP; the providers send prebuilt requests themselves (the SDK path,
``client=AsyncAnthropic(...)``, is tested in test_provider_sdk_client.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from provider_helpers import make_anthropic, make_openai

from fanloop.providers._http import HTTPProvider
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer

ProviderFactory = Callable[..., HTTPProvider]


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


@pytest.fixture(params=["anthropic", "openai"])
def api(request: pytest.FixtureRequest) -> str:
    """Runs a test once per wire API."""
    return str(request.param)


@pytest.fixture
async def make(server: FakeLLMServer, api: str) -> AsyncIterator[ProviderFactory]:
    """Builds providers of the current ``api`` against ``server``; closes them afterwards."""
    made: list[HTTPProvider] = []

    def factory(**options: Any) -> HTTPProvider:
        provider = (make_anthropic if api == "anthropic" else make_openai)(server, **options)
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
