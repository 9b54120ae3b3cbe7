"""Keyword names other agent libraries use, refused with fanloop's own spelling.

A user arriving from pydantic-ai or the OpenAI Agents SDK writes ``system_prompt=``,
``result_type=`` or ``message_history=`` first; Python's own error ("unexpected keyword
argument") does not say what to write instead. :func:`refuse_migrant_names` checks the keyword
names of a call against one table before the call binds them, and only names the function does
not take: a call with the right names pays one loop over its keywords.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

__all__ = ["AGENT_NAMES", "RUN_NAMES", "refuse_migrant_names"]

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
    table: Mapping[str, str],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a function (or coroutine function) so a keyword from ``table`` that it does not
    take raises a :class:`TypeError` that names fanloop's spelling."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        taken = frozenset(inspect.signature(fn).parameters)
        refused = {name: hint for name, hint in table.items() if name not in taken}
        where = fn.__qualname__.replace(".__init__", "")

        def check(kwargs: Mapping[str, Any]) -> None:
            for name in kwargs:
                if name in refused:
                    raise TypeError(
                        f"{where}() got an unexpected keyword argument {name!r}: "
                        f"in fanloop, use {refused[name]}"
                    )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def checked_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                check(kwargs)
                return await fn(*args, **kwargs)

            return cast(Callable[P, R], checked_async)

        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            check(kwargs)
            return fn(*args, **kwargs)

        return checked

    return wrap
