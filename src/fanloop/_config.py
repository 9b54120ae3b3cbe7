"""Two groups of :class:`~fanloop.Agent` arguments: how many tool calls run at once
(:class:`Concurrency`) and how the conversation is kept inside the model's context
(:class:`ContextPolicy`). Frozen, so one instance may serve any number of agents
(docs/reference.md, "Agent arguments")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType

from ._record import record
from .errors import ConfigurationError

__all__ = ["DEFAULT_CONTEXT", "NO_CONCURRENCY", "Concurrency", "ContextPolicy"]

_EMPTY: Mapping[str, int] = MappingProxyType({})


def _positive(name: str, value: object, *, infinite: bool = False) -> None:
    if infinite and value == math.inf:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, not {value!r}")


def _caps(
    name: str, value: Mapping[str, int] | None, *, infinite: bool = False
) -> Mapping[str, int]:
    if not value:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} maps names to limits, not {type(value).__name__}")
    frozen = dict(value)
    for key, limit in frozen.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"{name} keys are non-empty strings, not {key!r}")
        _positive(f"{name}[{key!r}]", limit, infinite=infinite)
    return MappingProxyType(frozen)


@record(frozen=True)
class Concurrency:
    """How many of an agent's tool calls run at once: ``Agent(concurrency=Concurrency(...))``
    (docs/fanout.md).

    Attributes:
        max_concurrency: cap on this agent's tool calls running at once, across its runs
            (``None``: no cap).
        tool_concurrency: caps per tool name, e.g. ``{"bash": 2}`` (over a tool's own
            ``max_concurrency``).
        concurrency_limits: named keyed caps, e.g. ``{"db": 1}``, shared by every tool whose
            ``concurrency_key`` names them, across runs, sub-agents and every other agent of
            the process (one limiter per key per event loop). Two live agents giving one key
            different limits is a ``ConfigurationError``.
        tool_threads: worker threads for synchronous tools.

    The mappings are copied into read-only mappings; every limit must be a whole number
    ``>= 1`` (a keyed limit may also be ``math.inf``), or it is a
    :class:`~fanloop.errors.ConfigurationError`.
    """

    max_concurrency: int | None = None
    tool_concurrency: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    concurrency_limits: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    tool_threads: int = 64

    def __post_init__(self) -> None:
        if self.max_concurrency is not None:
            _positive("max_concurrency", self.max_concurrency)
        _positive("tool_threads", self.tool_threads)
        set_ = object.__setattr__
        set_(self, "tool_concurrency", _caps("tool_concurrency", self.tool_concurrency))
        keyed = _caps("concurrency_limits", self.concurrency_limits, infinite=True)
        set_(self, "concurrency_limits", keyed)


@record(frozen=True)
class ContextPolicy:
    """How a conversation is kept inside the model's context window:
    ``Agent(context=ContextPolicy(...))`` (docs/limits.md).

    Attributes:
        context_window: the model's context window in tokens (``None``: the model table's).
        compact_threshold: share of the context window past which older history is compacted
            (in ``(0, 1]``).
        max_tool_result_chars: tool output longer than this is cut, with a note saying so
            (``None``: never cut).
    """

    context_window: int | None = None
    compact_threshold: float = 0.8
    max_tool_result_chars: int | None = 100_000

    def __post_init__(self) -> None:
        if self.context_window is not None:
            _positive("context_window", self.context_window)
        threshold = self.compact_threshold
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0 < threshold <= 1
        ):
            raise ConfigurationError("compact_threshold must be in (0, 1]")
        if self.max_tool_result_chars is not None:
            _positive("max_tool_result_chars", self.max_tool_result_chars)


NO_CONCURRENCY = Concurrency()
"""An agent's concurrency when it is given none (frozen, so shared)."""
DEFAULT_CONTEXT = ContextPolicy()
"""An agent's context policy when it is given none (frozen, so shared)."""
