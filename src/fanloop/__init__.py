"""fanloop: an async-first agent framework.

Drive a language model through a tool-use loop on asyncio: stream its deltas as they arrive,
fan the requested tool calls out concurrently, retry transient provider failures, and run
sub-agents in parallel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._agent import Agent
from ._approvals import DEFER, PendingApproval
from ._config import Concurrency, ContextPolicy
from ._gather import gather
from ._lazy import lazy
from ._result import GuardrailTrip, RunResult, TerminationReason
from ._retry import RetryPolicy
from ._settings import ModelSettings
from ._version import __version__ as __version__
from .limits import Limits
from .messages import Citation
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

if TYPE_CHECKING:
    from ._delegate import Delegation
    from ._guardrails import (
        GuardrailResult,
        InputGuardrail,
        OutputGuardrail,
        input_guardrail,
        output_guardrail,
    )
    from ._handoff import Handoff, handoff
    from ._stream import RunStream

# Loaded on first use: ``import fanloop`` does not pay for what only some programs need
# (``RunStream`` is what ``agent.stream()`` returns; ``Delegation`` configures sub-agents;
# guardrails and handoffs are loaded by the agents that have some).
_LAZY = {
    "Delegation": "._delegate",
    "RunStream": "._stream",
    "GuardrailResult": "._guardrails",
    "InputGuardrail": "._guardrails",
    "OutputGuardrail": "._guardrails",
    "input_guardrail": "._guardrails",
    "output_guardrail": "._guardrails",
    "Handoff": "._handoff",
    "handoff": "._handoff",
}

__getattr__, __dir__ = lazy(__name__, _LAZY)

__all__ = [
    "Agent",
    "Citation",
    "Concurrency",
    "ConsoleObserver",
    "ContextPolicy",
    "ConversationContext",
    "ConversationSummary",
    "DEFER",
    "Delegation",
    "GuardedObserver",
    "GuardrailResult",
    "GuardrailTrip",
    "Handoff",
    "Hooks",
    "InputGuardrail",
    "Limits",
    "LoopObserver",
    "ModelSettings",
    "MultiObserver",
    "NullObserver",
    "OutputGuardrail",
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
    "handoff",
    "input_guardrail",
    "output_guardrail",
    "tool",
]
