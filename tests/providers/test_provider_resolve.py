"""from_env and model strings."""

from __future__ import annotations

import pytest

from fanloop.errors import ConfigurationError
from fanloop.providers import from_env, resolve_provider
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider


@pytest.mark.parametrize(
    ("env", "cls", "name", "base_url"),
    [
        (
            {"LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "k"},
            AnthropicProvider,
            "anthropic",
            "https://api.anthropic.com",
        ),
        (
            {
                "LLM_PROVIDER": "anthropic",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": "http://a.test",
            },
            AnthropicProvider,
            "anthropic",
            "http://a.test",
        ),
        (
            {"LLM_PROVIDER": "openai", "OPENAI_API_KEY": "k"},
            OpenAIResponsesProvider,
            "openai",
            "https://api.openai.com/v1/",
        ),
        (
            {"LLM_PROVIDER": "openai-chat", "OPENAI_API_KEY": "k"},
            OpenAIProvider,
            "openai",
            "https://api.openai.com/v1/",
        ),
        (
            {
                "LLM_PROVIDER": "OpenAI",
                "OPENAI_API_KEY": "k",
                "OPENAI_BASE_URL": "http://o.test/v1",
            },
            OpenAIResponsesProvider,
            "openai",
            "http://o.test/v1/",
        ),
        (
            {"LLM_PROVIDER": "openrouter", "OPENROUTER_API_KEY": "k"},
            OpenAIProvider,
            "openrouter",
            "https://openrouter.ai/api/v1/",
        ),
        ({"LLM_PROVIDER": "vllm"}, OpenAIProvider, "vllm", "http://localhost:8000/v1/"),
        (
            {"LLM_PROVIDER": "vllm", "VLLM_BASE_URL": "http://gpu:9000/v1", "VLLM_API_KEY": "v"},
            OpenAIProvider,
            "vllm",
            "http://gpu:9000/v1/",
        ),
        ({"LLM_PROVIDER": "ollama"}, OpenAIProvider, "ollama", "http://localhost:11434/v1/"),
    ],
    ids=lambda v: v.get("LLM_PROVIDER") if isinstance(v, dict) else None,
)
def test_from_env(env: dict[str, str], cls: type, name: str, base_url: str) -> None:
    provider = from_env({**env, "LLM_MODEL": "some-model"})
    assert isinstance(provider, cls)
    assert provider.name == name
    assert provider.model == "some-model"
    assert str(provider._client.base_url).rstrip("/") == base_url.rstrip("/")


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "LLM_PROVIDER"),
        ({"LLM_PROVIDER": "vllm"}, "LLM_MODEL"),
        ({"LLM_PROVIDER": "anthropic", "LLM_MODEL": "m"}, "ANTHROPIC_API_KEY"),
        ({"LLM_PROVIDER": "openai", "LLM_MODEL": "m"}, "OPENAI_API_KEY"),
        ({"LLM_PROVIDER": "openrouter", "LLM_MODEL": "m"}, "OPENROUTER_API_KEY"),
    ],
)
def test_from_env_names_the_missing_variable(
    env: dict[str, str], missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.setenv(name, "from-process-env-must-not-be-used")
    with pytest.raises(ConfigurationError, match=f"^{missing} is not set"):
        from_env(env)


def test_from_env_rejects_unknown_vendor() -> None:
    with pytest.raises(ConfigurationError, match="LLM_PROVIDER='bard'"):
        from_env({"LLM_PROVIDER": "bard", "LLM_MODEL": "m"})


def test_from_env_passes_options() -> None:
    provider = from_env(
        {"LLM_PROVIDER": "anthropic", "LLM_MODEL": "m", "ANTHROPIC_API_KEY": "k"}, timeout=3.0
    )
    assert provider._client.timeout == 3.0


def test_resolve_provider_strings() -> None:
    assert isinstance(resolve_provider("anthropic:claude-x", api_key="k"), AnthropicProvider)
    openai = resolve_provider("openai:gpt-x", api_key="k")
    assert isinstance(openai, OpenAIResponsesProvider)  # OpenAI's own endpoint: Responses
    assert (openai.name, openai.model) == ("openai", "gpt-x")
    chat = resolve_provider("openai-chat:gpt-x", api_key="k")
    assert isinstance(chat, OpenAIProvider) and (chat.name, chat.model) == ("openai", "gpt-x")
    for preset in ("openrouter:m", "vllm:m", "ollama:m"):
        assert type(resolve_provider(preset, api_key="k")) is OpenAIProvider
    routed = resolve_provider("openrouter:meta-llama/llama-3:free", api_key="k")
    assert (routed.name, routed.model) == ("openrouter", "meta-llama/llama-3:free")
    assert resolve_provider("ollama:qwen3").name == "ollama"


@pytest.mark.parametrize("spec", ["claude", ":m", "anthropic:", "mistral:large"])
def test_resolve_provider_rejects(spec: str) -> None:
    with pytest.raises(ConfigurationError):
        resolve_provider(spec, api_key="k")


@pytest.mark.parametrize(
    ("vendor", "key", "model"),
    [
        ("openai", "OPENAI_API_KEY", "gpt-4.1"),
        ("anthropic", "ANTHROPIC_API_KEY", "claude-sonnet-4-5"),
    ],
)
def test_each_vendor_has_a_default_model(vendor: str, key: str, model: str) -> None:
    """The from_env example in docs/providers.md sets the vendor and the key, and no model."""
    assert from_env({"LLM_PROVIDER": vendor, key: "sk-test"}).model == model


def test_a_vendor_without_a_default_needs_the_model() -> None:
    with pytest.raises(ConfigurationError, match="LLM_MODEL is not set"):
        from_env({"LLM_PROVIDER": "vllm"})
