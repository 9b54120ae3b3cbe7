"""fanloop: an async-first agent framework."""

from ._result import RunResult, TerminationReason
from ._retry import RetryPolicy
from .limits import Limits
from .observers import (
    ConsoleObserver,
    GuardedObserver,
    Hooks,
    LoopObserver,
    MultiObserver,
    NullObserver,
    guarded,
)
from .tools.base import RunContext, Tool, ToolResult, tool

__all__ = [
    "ConsoleObserver",
    "GuardedObserver",
    "Hooks",
    "Limits",
    "LoopObserver",
    "MultiObserver",
    "NullObserver",
    "RetryPolicy",
    "RunContext",
    "RunResult",
    "TerminationReason",
    "Tool",
    "ToolResult",
    "guarded",
    "tool",
]
