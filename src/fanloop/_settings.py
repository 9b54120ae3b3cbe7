"""Model settings: the one home of sampling and tool-choice options (docs/model-settings.md).

``Agent(model_settings=ModelSettings(temperature=0))`` sets them for every run; ``run(...,
model_settings=...)`` overrides them field by field for one run. The loop carries the merged
settings on each :class:`~fanloop.providers.ModelRequest` (``request.settings``) and each
provider maps them onto its wire.

A provider says which settings it honours with a ``supported_settings`` attribute (a frozenset
of field names). A setting it does not honour is a :class:`~fanloop.errors.ConfigurationError`
when the agent is made (or when a run starts, for per-run settings), never silently dropped. A
provider without the attribute (a custom provider) receives every setting on the request and is
trusted to honour them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigurationError

__all__ = [
    "ALL_SETTINGS",
    "LOOP_SETTINGS",
    "NO_SETTINGS",
    "ModelSettings",
    "check_settings",
    "unsupported_settings",
]

ALL_SETTINGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "tool_choice",
        "parallel_tool_calls",
        "seed",
        "reasoning_effort",
        "reasoning_summary",
        "verbosity",
        "service_tier",
        "prompt_cache_key",
        "extra",
        "thinking_budget",
        "max_tokens_ceiling",
    }
)
"""The name of every :class:`ModelSettings` field."""

LOOP_SETTINGS = frozenset({"max_tokens", "max_tokens_ceiling", "thinking_budget"})
"""Settings every provider takes: ``max_tokens`` and ``thinking_budget`` travel on every
request's own fields (a provider without extended thinking ignores ``thinking_budget``, as it
ignores ``ModelRequest.thinking_budget``), and ``max_tokens_ceiling`` is the loop's alone (never
sent)."""

_CHOICES = frozenset({"auto", "required", "none"})


class ModelSettings(BaseModel):
    """Sampling and tool-choice options of model calls; ``None`` leaves a field to the
    provider's default (or to the agent's settings, for per-run settings).

    Attributes:
        temperature: sampling temperature (``>= 0``).
        top_p: nucleus sampling share (``0..1``).
        max_tokens: the output budget of a model call. The loop still clamps it to what the
            run's token and cost limits leave, and may grow it when a tool call is cut off.
        stop: stop sequences (a string or several).
        tool_choice: ``"auto"``, ``"required"`` (some tool must be called), ``"none"`` (no tool
            may be called) or the name of one of the agent's tools (that tool must be called).
            It holds for every turn of the run: with ``"required"`` or a tool name and a plain
            text output, the model can never give a final answer (the run ends at
            ``max_turns``), so use it with a typed output (``output_mode="tool"``), where the
            ``final_result`` tool ends the run.
        parallel_tool_calls: whether the model may ask for several tool calls in one turn.
        seed: a seed for (best-effort) deterministic sampling (OpenAI only).
        reasoning_effort: how hard a reasoning model thinks (``"none"``, ``"minimal"``,
            ``"low"``, ``"medium"``, ``"high"``, ``"xhigh"``; OpenAI's two APIs).
        reasoning_summary: the reasoning summary a Responses model streams (``"auto"``,
            ``"concise"``, ``"detailed"``; the Responses API).
        verbosity: how long the answer is (``"low"``, ``"medium"``, ``"high"``; OpenAI's two
            APIs, GPT-5 models).
        service_tier: the processing tier (OpenAI: ``"auto"``, ``"default"``, ``"flex"``,
            ``"priority"``; Anthropic: ``"auto"``, ``"standard_only"``).
        prompt_cache_key: requests sharing it share OpenAI's prompt cache (OpenAI's two APIs).
        extra: fields merged into the request body last, for options fanloop does not model
            (``{"top_k": 5}``). Nothing checks them.
        thinking_budget: tokens of extended thinking (Anthropic; the Responses API asks for a
            matching reasoning effort); other providers ignore it. It reaches providers as
            ``ModelRequest.thinking_budget``.
        max_tokens_ceiling: how far the loop may grow ``max_tokens`` when a tool call is cut
            off, by retrying the turn with twice the budget (default: the model's output
            ceiling from the model table). The loop's own: never sent to the provider.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    top_p: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: tuple[str, ...] | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    seed: int | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    service_tier: str | None = Field(default=None, min_length=1, max_length=64)
    prompt_cache_key: str | None = Field(default=None, min_length=1, max_length=1024)
    extra: dict[str, Any] | None = None
    thinking_budget: int | None = Field(default=None, ge=0)
    max_tokens_ceiling: int | None = Field(default=None, ge=1)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = (value,)
        elif isinstance(value, Iterable) and not isinstance(value, Mapping):
            value = tuple(value)
        if isinstance(value, tuple) and not all(isinstance(s, str) and s for s in value):
            raise ValueError("stop sequences must be non-empty strings")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError('tool_choice must be "auto", "required", "none" or a tool name')
        return value

    @field_validator("extra")
    @classmethod
    def _extra(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and "messages" in value:
            raise ValueError("'messages' cannot be set through extra")
        return value

    def merge(self, other: ModelSettings | None) -> ModelSettings:
        """These settings with every field ``other`` sets replacing this one's (``extra``
        dicts are merged key by key, ``other``'s keys winning)."""
        if other is None:
            return self
        changes = {k: v for k, v in other._set_values().items() if k != "extra"}
        if other.extra is not None:
            changes["extra"] = {**(self.extra or {}), **other.extra}
        if not changes:
            return self
        return self.model_copy(update=changes)

    def _set_values(self) -> dict[str, Any]:
        """The fields that are not ``None``."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @property
    def forced_tool(self) -> str | None:
        """The tool ``tool_choice`` names, when it names one."""
        choice = self.tool_choice
        return None if choice is None or choice in _CHOICES else choice


NO_SETTINGS = ModelSettings.model_construct()  # all defaults; validating would build the model
"""Settings that set nothing: the agent's when it is given none (frozen, so shared)."""


def as_settings(value: Any) -> ModelSettings:
    """``model_settings=``: a :class:`~fanloop.ModelSettings`, or a mapping of its fields."""
    if isinstance(value, ModelSettings):
        return value
    if isinstance(value, Mapping):
        return ModelSettings(**value)
    raise ConfigurationError(f"model_settings must be a ModelSettings, not {type(value).__name__}")


def unsupported_settings(settings: ModelSettings | None, provider: Any) -> list[str]:
    """The fields ``settings`` sets that ``provider`` does not declare it honours.

    The :data:`LOOP_SETTINGS` are always honoured (``max_tokens``: every request carries it).
    A provider without a ``supported_settings`` attribute is trusted with all of them.
    """
    if settings is None:
        return []
    supported = getattr(provider, "supported_settings", None)
    if supported is None:
        return []
    return sorted(
        k for k in settings._set_values() if k not in LOOP_SETTINGS and k not in supported
    )


def check_settings(
    settings: ModelSettings | None, provider: Any, tool_names: Iterable[str] | None = None
) -> None:
    """Raise :class:`~fanloop.errors.ConfigurationError` for settings that cannot work.

    Args:
        settings: the settings to check.
        provider: the provider that will receive them.
        tool_names: the tools the requests will offer; when given, ``tool_choice`` is checked
            against them (a named tool must be one of them; ``"required"`` needs one).
    """
    if settings is None or settings is NO_SETTINGS:  # nothing set: nothing to refuse
        return
    missing = unsupported_settings(settings, provider)
    if missing:
        name = getattr(provider, "name", type(provider).__name__)
        raise ConfigurationError(
            f"provider {name!r} cannot honour the model setting(s) {', '.join(missing)}; "
            f"it supports: {', '.join(sorted(getattr(provider, 'supported_settings', ())))}"
        )
    choice = settings.tool_choice
    if tool_names is None or choice is None or choice in ("auto", "none"):
        return
    names = set(tool_names)
    if choice == "required":
        if not names:
            raise ConfigurationError('tool_choice="required" needs at least one tool')
    elif choice not in names:
        raise ConfigurationError(
            f"tool_choice names {choice!r}, which is not one of the agent's tools "
            f"({', '.join(sorted(names)) or 'none'})"
        )
