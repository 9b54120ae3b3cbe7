"""Model settings and native output formats on the two wires (docs/model-settings.md).

Setting: OpenAI Chat Completions / Anthropic Messages

- ``temperature``, ``top_p``: the same field on both.
- ``max_tokens``: ``max_completion_tokens`` (or the provider's ``max_tokens_field``) /
  ``max_tokens``.
- ``stop``: ``stop`` / ``stop_sequences``.
- ``tool_choice``: ``"auto"``, ``"required"``, ``"none"`` or ``{"type": "function",
  "function": {"name": ...}}`` / ``{"type": "auto" | "any" | "none"}`` or ``{"type": "tool",
  "name": ...}``.
- ``parallel_tool_calls``: ``parallel_tool_calls`` / ``disable_parallel_tool_use`` (negated)
  inside ``tool_choice``.
- ``seed``: ``seed`` / not supported (a ``ConfigurationError``).
- ``extra``: merged into the body last, on both.
- a typed answer: ``response_format`` ``json_schema`` / ``output_config.format``
  ``json_schema``.

- ``reasoning_effort``, ``verbosity``, ``prompt_cache_key``: the same fields / not supported.
- ``service_tier``: ``service_tier`` on both.

The OpenAI Responses API takes ``temperature``, ``top_p``, ``max_output_tokens``,
``tool_choice`` (``"auto"``, ``"required"``, ``"none"`` or ``{"type": "function", "name": ...}``),
``parallel_tool_calls``, ``reasoning.effort`` and ``reasoning.summary``, ``text.verbosity``,
``service_tier``, ``prompt_cache_key`` and ``extra``; it has no ``stop`` and no ``seed``
(refused). A typed
answer goes out as ``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``).

``tool_choice`` and ``parallel_tool_calls`` are sent only with tools (both APIs refuse them
without); a ``tool_choice`` that demands a tool when there is none is a ``ConfigurationError``.
"""

from __future__ import annotations

from typing import Any

from .._settings import ALL_SETTINGS, LOOP_SETTINGS, NO_SETTINGS, ModelSettings
from ..errors import ConfigurationError
from ._schema import FormatCache, anthropic_schema, openai_strict_schema, schema_name
from ._types import ModelRequest, OutputFormat

__all__ = [
    "ANTHROPIC_SETTINGS",
    "OPENAI_SETTINGS",
    "RESPONSES_SETTINGS",
    "anthropic_accepts",
    "anthropic_fields",
    "anthropic_output_format",
    "openai_fields",
    "openai_response_format",
    "responses_fields",
    "responses_reasoning",
    "responses_text_format",
    "settings_extra",
]

_OPENAI_ONLY = frozenset({"reasoning_effort", "reasoning_summary", "verbosity", "prompt_cache_key"})
OPENAI_SETTINGS = ALL_SETTINGS - {"reasoning_summary"}
ANTHROPIC_SETTINGS = ALL_SETTINGS - {"seed"} - _OPENAI_ONLY
RESPONSES_SETTINGS = ALL_SETTINGS - {"seed", "stop"}


def _check(settings: ModelSettings, supported: frozenset[str], provider: str) -> None:
    missing = sorted(
        [k for k in settings._set_values() if k not in LOOP_SETTINGS and k not in supported]
    )
    if missing:
        raise ConfigurationError(
            f"provider {provider!r} cannot honour the model setting(s) {', '.join(missing)}"
        )


def _forced(settings: ModelSettings, has_tools: bool) -> bool:
    """Whether ``tool_choice`` goes out; raises when it demands a tool there is none of."""
    choice = settings.tool_choice
    if choice is None:
        return False
    if has_tools:
        return True
    if choice in ("auto", "none"):
        return False  # nothing to choose from: the same as not saying it
    raise ConfigurationError(f"tool_choice={choice!r} but the request offers no tools")


def _sampling(request: ModelRequest, settings: ModelSettings, stop_field: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if request.temperature is None and settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if not request.stop_sequences and settings.stop:
        out[stop_field] = list(settings.stop)
    return out


def openai_fields(request: ModelRequest, provider: str) -> dict[str, Any]:
    """The Chat Completions body fields for ``request.settings`` (before the extras)."""
    settings = request.settings
    if settings is None or settings is NO_SETTINGS:  # (an agent's without settings: no fields)
        return {}
    _check(settings, OPENAI_SETTINGS, provider)
    out = _sampling(request, settings, "stop")
    if settings.seed is not None:
        out["seed"] = settings.seed
    has_tools = bool(request.tools)
    if _forced(settings, has_tools):
        choice = settings.tool_choice
        forced = settings.forced_tool
        out["tool_choice"] = (
            choice if forced is None else {"type": "function", "function": {"name": forced}}
        )
    if settings.parallel_tool_calls is not None and has_tools:
        out["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.reasoning_effort is not None:
        out["reasoning_effort"] = settings.reasoning_effort
    if settings.verbosity is not None:
        out["verbosity"] = settings.verbosity
    _tiers(settings, out)
    return out


def _tiers(settings: ModelSettings, out: dict[str, Any]) -> None:
    if settings.service_tier is not None:
        out["service_tier"] = settings.service_tier
    if settings.prompt_cache_key is not None:
        out["prompt_cache_key"] = settings.prompt_cache_key


def responses_fields(request: ModelRequest, provider: str) -> dict[str, Any]:
    """The Responses API body fields for ``request.settings`` (before the extras)."""
    settings = request.settings
    if settings is None or settings is NO_SETTINGS:  # (an agent's without settings: no fields)
        return {}
    _check(settings, RESPONSES_SETTINGS, provider)
    out: dict[str, Any] = {}
    if request.temperature is None and settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    has_tools = bool(request.tools or request.hosted_tools)
    if _forced(settings, has_tools):
        forced = settings.forced_tool
        out["tool_choice"] = (
            settings.tool_choice if forced is None else {"type": "function", "name": forced}
        )
    if settings.parallel_tool_calls is not None and has_tools:
        out["parallel_tool_calls"] = settings.parallel_tool_calls
    _tiers(settings, out)
    return out


def responses_reasoning(
    settings: ModelSettings | None, head: dict[str, Any]
) -> dict[str, Any] | None:
    """``head``'s ``reasoning`` and ``text`` objects with ``settings``' reasoning effort and
    summary and verbosity applied (new dicts: ``head``'s may be shared), or ``None``."""
    if settings is None or (
        settings.reasoning_effort is None
        and settings.reasoning_summary is None
        and settings.verbosity is None
    ):
        return None
    out: dict[str, Any] = {}
    if settings.reasoning_effort is not None or settings.reasoning_summary is not None:
        reasoning = dict(head.get("reasoning") or {})
        if settings.reasoning_effort is not None:
            reasoning["effort"] = settings.reasoning_effort
            reasoning.setdefault("summary", "auto")
        if settings.reasoning_summary is not None:
            reasoning["summary"] = settings.reasoning_summary
        out["reasoning"] = reasoning
    if settings.verbosity is not None:
        out["text"] = {**(head.get("text") or {}), "verbosity": settings.verbosity}
    return out


def anthropic_fields(request: ModelRequest, provider: str) -> dict[str, Any]:
    """The Messages body fields for ``request.settings`` (before the extras)."""
    settings = request.settings
    if settings is None or settings is NO_SETTINGS:  # (an agent's without settings: no fields)
        return {}
    _check(settings, ANTHROPIC_SETTINGS, provider)
    out = _sampling(request, settings, "stop_sequences")
    has_tools = bool(request.tools or request.hosted_tools)
    choice: dict[str, Any] | None = None
    if _forced(settings, has_tools):
        forced = settings.forced_tool
        if forced is not None:
            choice = {"type": "tool", "name": forced}
        else:
            choice = {
                "type": {"auto": "auto", "required": "any", "none": "none"}[
                    settings.tool_choice or "auto"
                ]
            }
        if choice["type"] in ("any", "tool") and request.thinking_budget:
            raise ConfigurationError(
                f"tool_choice={settings.tool_choice!r} forces a tool call, which Anthropic "
                "does not allow with extended thinking (thinking_budget)"
            )
    if settings.parallel_tool_calls is False and has_tools:
        if choice is None:
            choice = {"type": "auto"}
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    if choice is not None:
        out["tool_choice"] = choice
    if settings.service_tier is not None:
        out["service_tier"] = settings.service_tier
    return out


def settings_extra(request: ModelRequest) -> dict[str, Any] | None:
    """``request.settings.extra``: merged into the body after everything else."""
    settings = request.settings
    return settings.extra if settings is not None and settings.extra else None


def _openai_format(output: OutputFormat) -> dict[str, Any]:
    schema = output.json_schema
    strict = None if output.strict is False else openai_strict_schema(schema)
    if strict is None and output.strict:
        raise ConfigurationError(
            f"the output schema {output.name!r} cannot be made strict for OpenAI"
        )
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema_name(output.name),
            "schema": strict if strict is not None else schema,
            "strict": strict is not None,
        },
    }


def _anthropic_format(output: OutputFormat) -> dict[str, Any]:
    schema = anthropic_schema(output.json_schema)
    if schema is None:
        raise ConfigurationError(
            f"the output schema {output.name!r} has a free-form part (a dict, Any, a tuple) "
            "that Anthropic's structured output cannot express; use output_mode='tool'"
        )
    return {"type": "json_schema", "schema": schema}


def _responses_format(output: OutputFormat) -> dict[str, Any]:
    return {"type": "json_schema", **_openai_format(output)["json_schema"]}


_OPENAI_FORMATS = FormatCache(_openai_format)
_RESPONSES_FORMATS = FormatCache(_responses_format)
_ANTHROPIC_FORMATS = FormatCache(_anthropic_format)


def openai_response_format(output: OutputFormat) -> dict[str, Any]:
    """The ``response_format`` for ``output`` (made once per ``OutputFormat`` object)."""
    value: dict[str, Any] = _OPENAI_FORMATS.get(output)
    return value


def responses_text_format(output: OutputFormat) -> dict[str, Any]:
    """The Responses API ``text.format`` for ``output`` (made once per ``OutputFormat``)."""
    value: dict[str, Any] = _RESPONSES_FORMATS.get(output)
    return value


def anthropic_output_format(output: OutputFormat) -> dict[str, Any]:
    """The ``output_config.format`` for ``output`` (made once per ``OutputFormat`` object)."""
    value: dict[str, Any] = _ANTHROPIC_FORMATS.get(output)
    return value


def anthropic_accepts(schema: dict[str, Any]) -> bool:
    """Whether Anthropic's structured output can express ``schema``."""
    return anthropic_schema(schema) is not None
