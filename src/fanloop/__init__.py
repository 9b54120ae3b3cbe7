"""fanloop: an async-first agent framework.

Drive a language model through a tool-use loop on asyncio: stream its deltas as they arrive,
fan the requested tool calls out concurrently, retry transient provider failures, and run
sub-agents in parallel.
"""

from ._agent import Agent
from ._approvals import DEFER, PendingApproval
from ._delegate import Delegation
from ._gather import gather
from ._result import RunResult, TerminationReason
from ._retry import RetryPolicy
from ._settings import ModelSettings
from ._stream import RunStream
from .limits import Limits
from .observers import (
    ConsoleObserver,
    ConversationContext,
    ConversationSummary,
    GuardedObserver,
    Hooks,
    LoopObserver,
    MultiObserver,
    NullObserver,
    guarded,
)
from .tools.base import RunContext, Tool, ToolResult, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "ConsoleObserver",
    "ConversationContext",
    "ConversationSummary",
    "DEFER",
    "Delegation",
    "GuardedObserver",
    "Hooks",
    "Limits",
    "LoopObserver",
    "ModelSettings",
    "MultiObserver",
    "NullObserver",
    "PendingApproval",
    "RetryPolicy",
    "RunContext",
    "RunResult",
    "RunStream",
    "TerminationReason",
    "Tool",
    "ToolResult",
    "gather",
    "guarded",
    "tool",
]
