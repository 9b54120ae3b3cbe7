"""What ``Agent(...)`` checks and builds from its arguments: the provider, the tools (functions,
:class:`~fanloop.Tool` instances and hosted tools in one list), the tools the agent adds itself
(``delegate``, ``remember``, ``read_skill``, ``final_result``), the output spec and the model
settings. The class and its runs are in :mod:`fanloop._agent`; the old spellings of arguments
that moved are refused by :mod:`fanloop._migrants` (docs/reference.md, "Agent arguments")."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._model_types import HostedTool, OutputFormat, ToolSpec
from ._output import FINAL_TOOL, OutputSpec
from ._retry import RetryPolicy
from ._settings import as_settings
from .errors import ConfigurationError
from .limits import Limits
from .tools.base import FunctionTool, Tool, tool

if TYPE_CHECKING:
    from ._fanout import LimiterPool

__all__ = [
    "AUTO_TOOLS",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_RETRY",
    "as_settings",
    "check_hosted",
    "check_provider",
    "delegate_tool",
    "index_tools",
    "native_output",
    "output_format",
    "split_tools",
    "tool_spec",
    "tools_async",
]

AUTO_TOOLS = frozenset({"delegate", "remember", "read_skill", FINAL_TOOL})
"""The names of the tools an agent adds itself."""

DEFAULT_MAX_TOKENS = 4096
"""The output budget of a model call when the settings do not give ``max_tokens``."""

# Frozen, so one instance of each default serves every agent that does not give its own.
DEFAULT_LIMITS = Limits()
DEFAULT_RETRY = RetryPolicy()


def check_provider(provider: Any, client: Any, tools: Iterable[Any]) -> tuple[Any, Iterable[Any]]:
    """The provider and the tools, from ``Agent(provider, tools=...)`` or the older spelling
    ``Agent(tools, client=provider)``."""
    if client is not None:
        if provider is not None and not isinstance(provider, list | tuple):
            raise ConfigurationError("pass the provider once: positionally or as client=")
        tools = [*(provider or ()), *tools]
        provider = client
    if provider is None:
        raise ConfigurationError("Agent needs a provider (or a 'vendor:model' string)")
    return provider, tools


def split_tools(
    tools: Iterable[Tool | HostedTool | Callable[..., Any]],
) -> tuple[tuple[Tool, ...], tuple[HostedTool, ...]]:
    """``tools=`` as the agent's own tools (functions made into tools) and the hosted tools
    the provider runs itself."""
    own: list[Tool] = []
    hosted: list[HostedTool] = []
    for t in tools:
        if isinstance(t, Tool):
            own.append(t)
        elif isinstance(t, HostedTool):
            hosted.append(t)
        else:
            own.append(tool(t))
    return tuple(own), tuple(hosted)


def check_hosted(hosted: Sequence[HostedTool], provider: Any, provider_name: str) -> None:
    """Refuse hosted tools the provider does not declare in its ``hosted_tools``."""
    supported: frozenset[str] = getattr(provider, "hosted_tools", frozenset())
    for h in hosted:
        if h.kind not in supported:
            raise ConfigurationError(
                f"provider {provider_name!r} does not support hosted tool {h.kind!r}"
                f" (supported: {', '.join(sorted(supported)) or 'none'})"
            )


def delegate_tool(delegation: Any) -> tuple[Tool | None, int]:
    """The ``delegate`` tool ``Agent(delegation=...)`` asks for (``None`` at ``max_depth=0``),
    and how deep delegation may nest."""
    from ._delegate import DelegateTool, Delegation

    if delegation is True:
        config = Delegation()
    elif isinstance(delegation, Delegation):
        config = delegation
    else:
        raise ConfigurationError(
            f"delegation is True, False or a Delegation, not {type(delegation).__name__}"
        )
    if config.max_depth == 0:
        return None, 0
    return DelegateTool.from_config(config), config.max_depth


def index_tools(all_tools: Sequence[Tool], limiters: LimiterPool) -> dict[str, Tool]:
    """The tools by name; two of one name, or a concurrency key without a limit, are refused."""
    by_name: dict[str, Tool] = {}
    for t in all_tools:
        if t.name in by_name:
            raise ConfigurationError(f"two tools are named {t.name!r}")
        if t.concurrency_key is not None and t.concurrency_key not in limiters.keys:
            raise ConfigurationError(
                f"tool {t.name!r} uses concurrency key {t.concurrency_key!r}; give its limit "
                f"with Agent(concurrency=Concurrency(concurrency_limits={{{t.concurrency_key!r}: "
                "N}))"
            )
        by_name[t.name] = t
    return by_name


def tools_async(all_tools: Sequence[Tool]) -> dict[str, bool]:
    """Whether each tool's ``run`` is a coroutine function (decided once, at construction)."""
    return {
        t.name: (
            t.is_async if isinstance(t, FunctionTool) else inspect.iscoroutinefunction(type(t).run)
        )
        for t in all_tools
    }


def tool_spec(t: Tool) -> ToolSpec:
    """``t``'s spec, trusted as is (``model_construct`` without its per-call overhead: this
    runs for every tool of every agent made)."""
    spec = _new_spec(ToolSpec)
    _set_attr(
        spec, "__dict__", {"name": t.name, "description": t.description, "parameters": t.parameters}
    )
    _set_attr(spec, "__pydantic_fields_set__", {"name", "description", "parameters"})
    _set_attr(spec, "__pydantic_extra__", None)
    _set_attr(spec, "__pydantic_private__", None)
    return spec


_new_spec = ToolSpec.__new__
_set_attr = object.__setattr__


def native_output(spec: OutputSpec, provider: Any) -> bool:
    """Whether typed answers use the provider's native structured output.

    A provider may also judge the schema (``accepts_output_schema(schema) -> bool``): in
    ``"auto"`` mode a schema it cannot express goes through the ``final_result`` tool.
    """
    if spec.is_text or spec.mode == "tool":
        return False
    supported = bool(getattr(provider, "native_output", False))
    name = getattr(provider, "name", provider)
    if spec.mode == "native" and not supported:
        raise ConfigurationError(
            f"provider {name!r} has no native structured output; use output_mode='tool' or 'auto'"
        )
    accepts = getattr(provider, "accepts_output_schema", None)
    if supported and callable(accepts) and not accepts(spec.parameters):
        if spec.mode == "native":
            raise ConfigurationError(
                f"provider {name!r} cannot constrain its answer to the schema of "
                f"{spec.name!r} (a free-form dict, Any or a tuple in it); use "
                "output_mode='tool' or 'auto'"
            )
        return False
    return supported


def output_format(spec: OutputSpec) -> OutputFormat:
    """The schema a native typed answer must follow, made once per agent."""
    from .providers._schema import schema_name

    return OutputFormat(name=schema_name(spec.name), json_schema=spec.parameters)
