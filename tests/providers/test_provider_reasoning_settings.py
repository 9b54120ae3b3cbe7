"""Reasoning effort and summary, verbosity, service tier and prompt cache key as ModelSettings,
mapped onto each wire (docs/model-settings.md), checked in the bodies the fake server received."""

from __future__ import annotations

from typing import Any

import pytest

from fanloop import Agent, ModelSettings
from fanloop.errors import ConfigurationError
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer

ALL = ModelSettings(
    reasoning_effort="high",
    reasoning_summary="detailed",
    verbosity="low",
    service_tier="flex",
    prompt_cache_key="tenant-7",
)


async def _body(provider_for: Any, settings: ModelSettings, **agent: Any) -> dict[str, Any]:
    async with FakeLLMServer(["ok"]) as server:
        provider = provider_for(server.url)
        result = await Agent(provider, **agent).run("hi", model_settings=settings)
        assert result.text == "ok"
        body: dict[str, Any] = server.requests[-1].body
        return body


def _responses(url: str, **options: Any) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider("gpt-5", base_url=f"{url}/v1", api_key="k", **options)


async def test_responses_maps_every_reasoning_setting() -> None:
    body = await _body(_responses, ALL)
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"}
    assert body["text"] == {"verbosity": "low"}
    assert (body["service_tier"], body["prompt_cache_key"]) == ("flex", "tenant-7")


async def test_run_settings_override_the_providers_options_field_by_field() -> None:
    def provider(url: str) -> OpenAIResponsesProvider:
        return _responses(
            url, reasoning_effort="low", reasoning_summary="concise", verbosity="high"
        )

    body = await _body(provider, ModelSettings(reasoning_effort="medium"))
    assert body["reasoning"] == {"effort": "medium", "summary": "concise"}
    assert body["text"] == {"verbosity": "high"}
    # The provider's own options are untouched for the next request (no shared dict changed).
    body = await _body(provider, ModelSettings(verbosity="low"))
    assert body["reasoning"] == {"effort": "low", "summary": "concise"}
    assert body["text"] == {"verbosity": "low"}


async def test_an_effort_alone_asks_for_the_automatic_summary() -> None:
    body = await _body(_responses, ModelSettings(reasoning_effort="minimal"))
    assert body["reasoning"] == {"effort": "minimal", "summary": "auto"}
    assert "text" not in body


async def test_verbosity_sits_beside_a_typed_answers_format() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    async with FakeLLMServer(['{"name": "Oslo"}']) as server:
        agent = Agent(_responses(server.url), output_type=City, output_mode="native")
        result = await agent.run("hi", model_settings=ModelSettings(verbosity="medium"))
        assert result.output == City(name="Oslo")
        text = server.requests[-1].body["text"]
    assert text["verbosity"] == "medium" and text["format"]["type"] == "json_schema"


async def test_chat_completions_sends_the_top_level_fields() -> None:
    def provider(url: str) -> OpenAIProvider:
        return OpenAIProvider("gpt-5", base_url=f"{url}/v1", api_key="k")

    settings = ALL.model_copy(update={"reasoning_summary": None})
    body = await _body(provider, settings)
    assert body["reasoning_effort"] == "high" and body["verbosity"] == "low"
    assert (body["service_tier"], body["prompt_cache_key"]) == ("flex", "tenant-7")


async def test_anthropic_takes_the_service_tier() -> None:
    def provider(url: str) -> AnthropicProvider:
        return AnthropicProvider("claude-sonnet-4-5", base_url=url, api_key="k")

    body = await _body(provider, ModelSettings(service_tier="standard_only"))
    assert body["service_tier"] == "standard_only"


@pytest.mark.parametrize(
    ("make", "setting"),
    [
        (lambda: AnthropicProvider("claude-sonnet-4-5", api_key="k"), "reasoning_effort"),
        (lambda: AnthropicProvider("claude-sonnet-4-5", api_key="k"), "prompt_cache_key"),
        (lambda: OpenAIProvider("gpt-5", api_key="k"), "reasoning_summary"),
    ],
)
def test_a_wire_without_the_field_refuses_it_when_the_agent_is_made(
    make: Any, setting: str
) -> None:
    value = {"reasoning_effort": "low", "prompt_cache_key": "x", "reasoning_summary": "auto"}
    with pytest.raises(ConfigurationError, match=setting):
        Agent(make(), model_settings=ModelSettings(**{setting: value[setting]}))


def test_values_are_checked() -> None:
    with pytest.raises(ValueError, match="reasoning_effort"):
        ModelSettings(reasoning_effort="extreme")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="service_tier"):
        ModelSettings(service_tier="x" * 65)
