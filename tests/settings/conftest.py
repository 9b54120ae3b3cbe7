"""Fixtures for the model-settings tests: a FakeLLMServer and the real providers on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fanloop.providers._http import HTTPProvider
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(chars_per_delta=8) as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture(params=["anthropic", "openai"])
def api(request: pytest.FixtureRequest) -> str:
    """Runs a test once per wire API."""
    return str(request.param)


@pytest.fixture
async def providers(server: FakeLLMServer) -> AsyncIterator[Callable[..., HTTPProvider]]:
    """``providers(api, **options)``: a real provider of ``api`` on ``server``."""
    made: list[HTTPProvider] = []

    def make(api: str, **options: Any) -> HTTPProvider:
        provider: HTTPProvider
        if api == "anthropic":
            provider = AnthropicProvider(
                options.pop("model", "claude-sonnet-4-5"),
                api_key="sk-ant-test",
                base_url=server.anthropic_base_url,
                **options,
            )
        else:
            provider = OpenAIProvider(
                options.pop("model", "gpt-4.1"),
                api_key="sk-openai-test",
                base_url=server.openai_base_url,
                **options,
            )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
def make(providers: Callable[..., HTTPProvider], api: str) -> Callable[..., HTTPProvider]:
    """A real provider of the current ``api`` on the server."""

    def build(**options: Any) -> HTTPProvider:
        return providers(api, **options)

    return build
