"""Fixtures for the input tests: a FakeLLMServer and the real providers pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture
async def anthropic_of(
    server: FakeLLMServer,
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """Builds Anthropic providers against ``server`` (closed after the test)."""
    made: list[AnthropicProvider] = []

    def make(**options: Any) -> AnthropicProvider:
        provider = AnthropicProvider(
            options.pop("model", "claude-sonnet-4-5"),
            api_key="sk-ant-test",
            base_url=server.anthropic_base_url,
            **options,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def anthropic(anthropic_of: Callable[..., AnthropicProvider]) -> AnthropicProvider:
    return anthropic_of()


@pytest.fixture
async def openai(server: FakeLLMServer) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider("gpt-4.1", api_key="sk-test", base_url=server.openai_base_url)
    yield provider
    await provider.aclose()
