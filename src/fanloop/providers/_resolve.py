"""Turning ``"anthropic:MODEL"`` strings and environment variables into providers.

The provider modules are imported only here, and only when a provider is actually built; the
vendor SDKs are not imported at all unless a user passes an SDK client (``client=``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import Provider

__all__ = ["DEFAULT_MODELS", "VENDORS", "from_env", "resolve_provider"]

VENDORS = ("anthropic", "openai", "openai-chat", "openrouter", "vllm", "ollama", "gemini")
"""The vendor prefixes of model strings and the values of ``LLM_PROVIDER``: ``openai`` is
OpenAI's Responses API, ``openai-chat`` its Chat Completions API (as every OpenAI-compatible
preset)."""

_ANTHROPIC_URL = "https://api.anthropic.com"
_OPENAI_URL = "https://api.openai.com/v1"


def resolve_provider(spec: str, **options: Any) -> Provider:
    """Build a provider from a ``"vendor:model"`` string.

    ``vendor`` is one of ``anthropic``, ``openai`` (the Responses API:
    :class:`~fanloop.providers.openai.OpenAIResponsesProvider`), ``openai-chat`` (Chat
    Completions: :class:`~fanloop.providers.openai.OpenAIProvider`), ``openrouter``, ``vllm``,
    ``ollama`` and ``gemini`` (Chat Completions; Gemini through Google's OpenAI-compatible
    endpoint), or ``azure`` (a deployment on Azure OpenAI, Chat Completions:
    :meth:`~fanloop.providers.openai.OpenAIProvider.azure`, which reads
    ``AZURE_OPENAI_ENDPOINT`` and ``AZURE_OPENAI_API_KEY``);
    everything after the first colon is the model name (``"openrouter:meta-llama/llama-3:free"``
    is the model ``meta-llama/llama-3:free``). ``options`` go to the provider's constructor
    (``api_key``, ``base_url``, ``http_client``, ``timeout``...).

    Example:
        >>> provider = resolve_provider("anthropic:claude-sonnet-5", api_key="sk-test")
        >>> provider.name, provider.model
        ('anthropic', 'claude-sonnet-5')

    Raises:
        ConfigurationError: the string has no vendor prefix, names an unknown vendor, or the
            provider cannot be configured (e.g. no API key).
    """
    vendor, sep, model = spec.partition(":")
    if not sep or not model or not vendor:
        raise ConfigurationError(
            f"model string {spec!r} must look like 'anthropic:MODEL' or 'openai:MODEL'"
        )
    if vendor == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(model, **options)
    if vendor == "azure":
        from .openai import OpenAIProvider

        return OpenAIProvider.azure(model, **options)
    if vendor not in VENDORS:
        raise ConfigurationError(
            f"unknown provider {vendor!r} in {spec!r}; expected one of {', '.join(VENDORS)}, azure"
        )
    from .openai import OpenAIProvider, OpenAIResponsesProvider

    if vendor == "openai":
        return OpenAIResponsesProvider(model, **options)
    if vendor == "openai-chat":
        return OpenAIProvider(model, **options)
    if vendor == "openrouter":
        return OpenAIProvider.openrouter(model, **options)
    if vendor == "vllm":
        return OpenAIProvider.vllm(model, **options)
    if vendor == "gemini":
        return OpenAIProvider.gemini(model, **options)
    return OpenAIProvider.ollama(model, **options)


def _require(env: Mapping[str, str], name: str, why: str) -> str:
    value = env.get(name)
    if not value:
        raise ConfigurationError(f"{name} is not set ({why})")
    return value


DEFAULT_MODELS: dict[str, str] = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1",
    "openai-chat": "gpt-4.1",
    "openrouter": "anthropic/claude-sonnet-4.5",
    "gemini": "gemini-2.5-flash",
}
"""The model ``from_env`` uses when ``LLM_MODEL`` is not set (vLLM and Ollama serve whatever
model they were started with: name it)."""


_OWN_VARIABLES = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openai-chat": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openrouter": ("OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"),
    "vllm": ("VLLM_API_KEY", "VLLM_BASE_URL"),
    "ollama": ("OLLAMA_API_KEY", "OLLAMA_BASE_URL"),
    "gemini": ("GEMINI_API_KEY", "GEMINI_BASE_URL"),
}


def _generic(env: Mapping[str, str], vendor: str) -> tuple[Mapping[str, str], bool]:
    """``env`` with ``LLM_API_KEY`` and ``LLM_BASE_URL`` (when set) in place of the vendor's
    own key and URL variables, and whether ``LLM_API_KEY`` is the key."""
    key, url = env.get("LLM_API_KEY", "").strip(), env.get("LLM_BASE_URL", "").strip()
    if not key and not url:
        return env, False
    own_key, own_url = _OWN_VARIABLES[vendor]
    out = dict(env)
    if key:
        out[own_key] = key
    if url:
        out[own_url] = url
    return out, bool(key)


def from_env(environ: Mapping[str, str] | None = None, **options: Any) -> Provider:
    """Build the provider that the environment describes.

    Variables:

    - ``LLM_PROVIDER``: ``anthropic``, ``openai`` (the Responses API), ``openai-chat`` (Chat
      Completions), ``openrouter``, ``vllm``, ``ollama`` or ``gemini``;
    - ``LLM_MODEL``: the model name (default: ``DEFAULT_MODELS[vendor]``, for the vendors that
      have one: anthropic ``claude-sonnet-4-5``, openai and openai-chat ``gpt-4.1``,
      openrouter ``anthropic/claude-sonnet-4.5``, gemini ``gemini-2.5-flash``);
    - ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY`` / ``OPENROUTER_API_KEY``: required for those
      vendors (``openai-chat`` reads ``OPENAI_API_KEY`` too; ``VLLM_API_KEY`` is optional);
    - ``GEMINI_API_KEY`` (else ``GOOGLE_API_KEY``): required for gemini;
    - ``ANTHROPIC_AUTH_TOKEN``: the anthropic key when ``ANTHROPIC_API_KEY`` is not set (as
      :class:`~fanloop.providers.anthropic.AnthropicProvider` reads it);
    - ``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``, ``OPENROUTER_BASE_URL``, ``VLLM_BASE_URL``,
      ``OLLAMA_BASE_URL``, ``GEMINI_BASE_URL``: optional endpoints (OpenAI-style ones end in
      ``/v1``; Gemini's in ``/openai``);
    - ``LLM_API_KEY``, ``LLM_BASE_URL``: the key and endpoint of whichever vendor
      ``LLM_PROVIDER`` names; when set, they take the place of the vendor's own variables above.

    Only ``environ`` is read (``os.environ`` when it is ``None``). ``options`` go to the
    provider's constructor, e.g. ``http_client=`` for a shared pool.

    Example:
        >>> env = {"LLM_PROVIDER": "openai", "LLM_MODEL": "gpt-5", "OPENAI_API_KEY": "sk-x"}
        >>> type(from_env(env)).__name__
        'OpenAIResponsesProvider'

    Raises:
        ConfigurationError: a required variable is missing or invalid; the message names it.
    """
    import os

    env = os.environ if environ is None else environ
    vendor = _require(env, "LLM_PROVIDER", f"one of {', '.join(VENDORS)}").strip().lower()
    if vendor not in VENDORS:
        raise ConfigurationError(
            f"LLM_PROVIDER={vendor!r} is not supported; expected one of {', '.join(VENDORS)}"
        )
    model = env.get("LLM_MODEL", "").strip() or DEFAULT_MODELS.get(vendor)
    if not model:
        raise ConfigurationError(f"LLM_MODEL is not set (the model name; {vendor} has no default)")
    env, generic_key = _generic(env, vendor)
    key_variable = {
        "anthropic": "ANTHROPIC_API_KEY"
        if env.get("ANTHROPIC_API_KEY")
        else "ANTHROPIC_AUTH_TOKEN",
        "openai": "OPENAI_API_KEY",
        "openai-chat": "OPENAI_API_KEY",
        "openrouter": "OPENROUTER_API_KEY",
        "vllm": "VLLM_API_KEY",
        "gemini": "GEMINI_API_KEY" if env.get("GEMINI_API_KEY") else "GOOGLE_API_KEY",
    }.get(vendor)
    if generic_key:
        key_variable = "LLM_API_KEY"  # named in the error for a rejected key
    from_environ = key_variable is not None and "api_key" not in options
    if vendor == "anthropic":
        if "api_key" not in options:
            if not (env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN")):
                raise ConfigurationError(
                    "ANTHROPIC_API_KEY is not set (needed for anthropic; ANTHROPIC_AUTH_TOKEN "
                    "also works)"
                )
            options["api_key"] = env.get("ANTHROPIC_API_KEY") or env["ANTHROPIC_AUTH_TOKEN"]
        options.setdefault("base_url", env.get("ANTHROPIC_BASE_URL") or _ANTHROPIC_URL)
    elif vendor == "openai" or vendor == "openai-chat":
        options.setdefault("api_key", _require(env, "OPENAI_API_KEY", f"needed for {vendor}"))
        options.setdefault("base_url", env.get("OPENAI_BASE_URL") or _OPENAI_URL)
    elif vendor == "openrouter":
        options.setdefault("api_key", _require(env, "OPENROUTER_API_KEY", "needed for openrouter"))
        if env.get("OPENROUTER_BASE_URL"):
            options.setdefault("base_url", env["OPENROUTER_BASE_URL"])
    elif vendor == "gemini":
        if "api_key" not in options:
            if not (env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY")):
                raise ConfigurationError(
                    "GEMINI_API_KEY is not set (needed for gemini; GOOGLE_API_KEY also works)"
                )
            options["api_key"] = env.get("GEMINI_API_KEY") or env["GOOGLE_API_KEY"]
        if env.get("GEMINI_BASE_URL"):
            options.setdefault("base_url", env["GEMINI_BASE_URL"])
    elif vendor == "vllm":
        if env.get("VLLM_API_KEY"):
            options.setdefault("api_key", env["VLLM_API_KEY"])
        else:
            from_environ = False
        if env.get("VLLM_BASE_URL"):
            options.setdefault("base_url", env["VLLM_BASE_URL"])
    else:
        if generic_key:
            options.setdefault("api_key", env["OLLAMA_API_KEY"])
        if env.get("OLLAMA_BASE_URL"):
            options.setdefault("base_url", env["OLLAMA_BASE_URL"])
    provider = resolve_provider(f"{vendor}:{model}", **options)
    # The error for a rejected key names the variable to check, not "api_key=".
    if from_environ:
        provider._key_source = f"the key in {key_variable}"  # type: ignore[attr-defined]
    elif vendor == "vllm" and "api_key" not in options:
        provider._key_source = "the placeholder key 'EMPTY' (VLLM_API_KEY is not set)"  # type: ignore[attr-defined]
    return provider
