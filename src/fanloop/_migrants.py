"""Keyword names other agent libraries use, refused with fanloop's own spelling.

A user arriving from pydantic-ai or the OpenAI Agents SDK writes ``system_prompt=``,
``result_type=`` or ``message_history=`` first; Python's own error ("unexpected keyword
argument") does not say what to write instead. :func:`refuse_migrant_names` checks the keyword
names of a call against one table before the call binds them, and only names the function does
not take: a call with the right names pays one loop over its keywords.

The same check refuses fanloop's own old spellings (:data:`MOVED_AGENT_NAMES`: ``Agent``
arguments that moved into a group) with the exact new one: ``Agent(max_tokens=...) moved: use
model_settings=ModelSettings(max_tokens=...)``. There are no silent aliases.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

__all__ = ["AGENT_NAMES", "MOVED_AGENT_NAMES", "RUN_NAMES", "refuse_migrant_names"]

P = ParamSpec("P")
R = TypeVar("R")

AGENT_NAMES: Mapping[str, str] = {
    "system_prompt": "system=",
    "instructions": "system=",
    "result_type": "output_type=",
    "model": 'the first argument: Agent("anthropic:claude-sonnet-4-5") or Agent(provider)',
    "message_history": "messages= on agent.run() / agent.stream()",
    "max_turns": "limits=Limits(max_turns=...)",
    "usage_limits": "limits=Limits(...)",
    "deps_type": "deps= on agent.run() (any object; tools read it from their context)",
    "toolsets": "tools= (MCP servers: fanloop.mcp)",
    "input_guardrails": "guardrails=[...] (input and output guardrails in one list)",
    "output_guardrails": "guardrails=[...] (input and output guardrails in one list)",
}
MOVED_AGENT_NAMES: Mapping[str, str] = {
    **{
        name: f"model_settings=ModelSettings({name}=...)"
        for name in ("max_tokens", "temperature", "thinking_budget", "max_tokens_ceiling")
    },
    **{
        name: f"concurrency=Concurrency({name}=...)"
        for name in ("max_concurrency", "tool_concurrency", "concurrency_limits", "tool_threads")
    },
    **{
        name: f"context=ContextPolicy({name}=...)"
        for name in ("context_window", "compact_threshold", "max_tool_result_chars")
    },
    "max_depth": "delegation=Delegation(max_depth=...)",
    "delegate_tools": "delegation=Delegation(tools=[...])",
    "hosted_tools": "tools=[...] (a HostedTool goes in tools= beside the other tools)",
}
"""``Agent`` arguments of earlier fanloop versions and where they moved (docs/reference.md)."""
RUN_NAMES: Mapping[str, str] = {
    "message_history": "messages=",
    "user_prompt": "the prompt, as the first argument",
    "input": "the prompt, as the first argument",
    "result_type": "output_type= on Agent(...)",
    "output_type": "output_type= on Agent(...)",
    "max_turns": "limits=Limits(max_turns=...) on Agent(...)",
    "usage_limits": "limits=Limits(...) on Agent(...)",
    "context": "deps=",
    "model": "agent.override(provider=...) or agent.with_options(provider=...)",
}


def refuse_migrant_names(
    table: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a function (or coroutine function) so a keyword from ``table`` that it does not
    take raises a :class:`TypeError` that names fanloop's spelling, and one from ``moved`` (an
    old fanloop spelling) a :class:`TypeError` that names where it moved."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        taken = frozenset(inspect.signature(fn).parameters)
        where = fn.__qualname__.replace(".__init__", "")
        refused = {
            name: f"{where}() got an unexpected keyword argument {name!r}: in fanloop, use {hint}"
            for name, hint in table.items()
            if name not in taken
        }
        refused.update(
            (name, f"{where}({name}=...) moved: use {hint}")
            for name, hint in (moved or {}).items()
            if name not in taken
        )

        def check(kwargs: Mapping[str, Any]) -> None:
            for name in kwargs:
                if name in refused:
                    raise TypeError(refused[name])

        if inspect.iscoroutinefunction(fn):
            return cast(Callable[P, R], _CheckedCoroutineFunction(fn, check))

        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            check(kwargs)
            return fn(*args, **kwargs)

        return checked

    return wrap


class _CheckedCoroutineFunction:
    """``fn``, a coroutine function, with its keywords checked when it is called, and no
    coroutine of its own: the call returns ``fn``'s coroutine, so a run in flight holds one
    frame (and one argument tuple) less than under an ``async def`` wrapper that awaits it.

    It still passes for a coroutine function: it carries ``fn``'s code, defaults and
    annotations as a function-like object does (``inspect.iscoroutinefunction`` and
    ``inspect.signature`` read them, and ``pydoc`` shows it as ``async``), and it binds to an
    instance as a method."""

    def __init__(self, fn: Callable[..., Any], check: Callable[[Mapping[str, Any]], None]) -> None:
        functools.update_wrapper(self, fn)
        self.__code__ = fn.__code__
        self.__defaults__ = fn.__defaults__
        self.__kwdefaults__ = fn.__kwdefaults__
        self._fn = fn
        self._check = check

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            self._check(kwargs)
        return self._fn(*args, **kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<function {self.__qualname__}>"  # type: ignore[attr-defined]
