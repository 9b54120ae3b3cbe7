"""Turning ``"anthropic:MODEL"`` strings and environment variables into providers.

The provider SDKs are imported only here, and only when a provider is actually built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import Provider

__all__ = ["from_env", "resolve_provider"]


def resolve_provider(spec: str, **options: Any) -> Provider:
    """Build a provider from a ``"vendor:model"`` string such as ``"anthropic:claude-sonnet-4-5"``.

    Raises:
        ConfigurationError: the string has no vendor prefix or names an unknown vendor.
    """
    vendor, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigurationError(
            f"model string {spec!r} must look like 'anthropic:MODEL' or 'openai:MODEL'"
        )
    if vendor == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(model, **options)
    if vendor == "openai":
        from .openai import OpenAIProvider

        return OpenAIProvider(model, **options)
    raise ConfigurationError(
        f"unknown provider {vendor!r} in {spec!r}; expected 'anthropic' or 'openai'"
    )


def from_env(environ: Mapping[str, str] | None = None) -> Provider:
    """Build the provider that ``LLM_PROVIDER`` / ``LLM_MODEL`` and the key variables describe.

    Raises:
        ConfigurationError: a required variable is missing; the message names it.
    """
    import os

    env = os.environ if environ is None else environ
    vendor = env.get("LLM_PROVIDER")
    model = env.get("LLM_MODEL")
    if not vendor:
        raise ConfigurationError("LLM_PROVIDER is not set (anthropic or openai)")
    if not model:
        raise ConfigurationError("LLM_MODEL is not set")
    return resolve_provider(f"{vendor}:{model}")
