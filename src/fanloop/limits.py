"""Limits, budget accounting, and stall detection.

:class:`Limits` is configuration. A :class:`Budget` is the running account of one run tree: the
root run makes it and every sub-agent spends from the same one, so parallel sub-agents cannot
overshoot a limit together. Output tokens are reserved before each model call (the request's
``max_tokens`` is clamped to what is left), so the output-side limits hold exactly even when
many calls are in flight; input tokens are checked before each call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ._result import TerminationReason
from .catalog import cost_of, model_info
from .events import BudgetKind
from .messages import ToolCallPart
from .providers._types import Usage

__all__ = ["Budget", "Limits", "StallDetector"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What a run may spend before it ends.

    Attributes:
        max_turns: model rounds per agent run (``None``: no limit).
        timeout: wall-clock seconds for the whole run, enforced with a cancel scope: a turn in
            flight is interrupted and the run ends with ``deadline``.
        max_input_tokens: input tokens (cache reads and writes included) across the run tree.
        max_output_tokens: output tokens across the run tree.
        max_total_tokens: input plus output tokens across the run tree.
        max_cost_usd: dollars across the run tree, priced from :mod:`fanloop.catalog`.
        max_tool_calls: tool calls across the run tree.
        warn_at: share of a limit at which a budget warning fires (once per limit).
        stall_threshold: same tool, same arguments this many times in a row is a stall.
        stop_on_stall: end the run with ``stalled`` when a stall is detected.
    """

    max_turns: int | None = 25
    timeout: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None
    warn_at: float = 0.8
    stall_threshold: int = 3
    stop_on_stall: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_turns",
            "timeout",
            "max_input_tokens",
            "max_output_tokens",
            "max_total_tokens",
            "max_cost_usd",
            "max_tool_calls",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"Limits.{name} must be >= 0, got {value!r}")
        if not 0 < self.warn_at <= 1:
            raise ValueError(f"Limits.warn_at must be in (0, 1], got {self.warn_at!r}")
        if self.stall_threshold < 2:
            raise ValueError("Limits.stall_threshold must be >= 2")


@dataclass(slots=True)
class Budget:
    """The running account of a run tree, shared by the root run and its sub-agents."""

    limits: Limits
    started: float = field(default_factory=time.monotonic)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    priced: bool = True
    tool_calls: int = 0
    reserved_output: int = 0
    _warned: set[str] = field(default_factory=set)
    _watching: bool = True

    def __post_init__(self) -> None:
        lim = self.limits
        self._watching = any(
            v is not None
            for v in (
                lim.timeout,
                lim.max_input_tokens,
                lim.max_output_tokens,
                lim.max_total_tokens,
                lim.max_cost_usd,
                lim.max_tool_calls,
            )
        )

    @property
    def watching(self) -> bool:
        """Whether any shared limit is set (else the checks are skipped)."""
        return self._watching

    @property
    def elapsed(self) -> float:
        """Seconds since the root run started."""
        return time.monotonic() - self.started

    # -- guards --------------------------------------------------------------------------

    def exhausted(self) -> tuple[TerminationReason, str] | None:
        """The budget limit already reached, if any, with a sentence saying which."""
        if not self._watching:
            return None
        lim = self.limits
        u = self.usage
        if lim.max_input_tokens is not None and u.total_input_tokens >= lim.max_input_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"input token budget spent ({u.total_input_tokens} of {lim.max_input_tokens})"
            )
        if lim.max_output_tokens is not None and u.output_tokens >= lim.max_output_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"output token budget spent ({u.output_tokens} of {lim.max_output_tokens})"
            )
        if lim.max_total_tokens is not None and u.total_tokens >= lim.max_total_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"token budget spent ({u.total_tokens} of {lim.max_total_tokens})"
            )
        if lim.max_cost_usd is not None and self.cost_usd >= lim.max_cost_usd:
            return TerminationReason.COST_BUDGET, (
                f"cost budget spent (${self.cost_usd:.4f} of ${lim.max_cost_usd:.4f})"
            )
        if lim.max_tool_calls is not None and self.tool_calls >= lim.max_tool_calls:
            return TerminationReason.TOOL_CALL_BUDGET, (
                f"tool call budget spent ({self.tool_calls} of {lim.max_tool_calls})"
            )
        return None

    def output_allowance(self, requested: int, model: str) -> int:
        """How many output tokens the next call may use (``requested`` clamped to the budget).

        The result is reserved until :meth:`settle` is called for that call.
        """
        if not self._watching:
            return requested
        lim = self.limits
        allowed = requested
        spare = []
        if lim.max_output_tokens is not None:
            spare.append(lim.max_output_tokens - self.usage.output_tokens)
        if lim.max_total_tokens is not None:
            spare.append(lim.max_total_tokens - self.usage.total_tokens)
        if lim.max_cost_usd is not None:
            info = model_info(model)
            if info is not None and info.output_price > 0:
                dollars = lim.max_cost_usd - self.cost_usd
                spare.append(int(dollars * 1_000_000 / info.output_price))
        for s in spare:
            allowed = min(allowed, s - self.reserved_output)
        allowed = max(allowed, 0)
        self.reserved_output += allowed
        return allowed

    def settle(self, reserved: int, usage: Usage | None, model: str) -> None:
        """Release a reservation and charge what the call really used."""
        if not self._watching:
            return  # nothing to hold usage against: the runs keep their own totals
        self.reserved_output -= reserved
        if usage is None:
            return
        self.usage = self.usage + usage
        cost = cost_of(model, usage)
        if cost is None:
            if usage.total_tokens:
                self.priced = False
        else:
            self.cost_usd += cost

    def take_tool_calls(self, wanted: int) -> int:
        """Grant up to ``wanted`` tool calls from the budget and count them."""
        lim = self.limits.max_tool_calls
        granted = wanted if lim is None else max(0, min(wanted, lim - self.tool_calls))
        self.tool_calls += granted
        return granted

    # -- warnings ------------------------------------------------------------------------

    def warnings(self) -> list[tuple[BudgetKind, float, float]]:
        """Shared limits that just crossed the ``warn_at`` share; each is reported once.

        (Turns are counted per agent run, so the run warns about those itself.)
        """
        if not self._watching:
            return []
        lim = self.limits
        u = self.usage
        candidates: list[tuple[BudgetKind, float, Any]] = [
            ("deadline", self.elapsed, lim.timeout),
            ("input_tokens", u.total_input_tokens, lim.max_input_tokens),
            ("output_tokens", u.output_tokens, lim.max_output_tokens),
            ("total_tokens", u.total_tokens, lim.max_total_tokens),
            ("cost", self.cost_usd, lim.max_cost_usd),
            ("tool_calls", self.tool_calls, lim.max_tool_calls),
        ]
        out: list[tuple[BudgetKind, float, float]] = []
        for kind, used, limit in candidates:
            if limit and used >= limit * lim.warn_at and kind not in self._warned:
                self._warned.add(kind)
                out.append((kind, float(used), float(limit)))
        return out


class StallDetector:
    """Counts the same tool called with the same arguments in a row."""

    __slots__ = ("_count", "_last", "threshold")

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._last: tuple[str, dict[str, Any]] | None = None
        self._count = 0

    def observe(self, call: ToolCallPart) -> int:
        """Record ``call``; return the repeat count if it reached the threshold, else 0."""
        last = self._last
        if last is not None and last[0] == call.name and last[1] == call.arguments:
            self._count += 1
        else:
            self._last, self._count = (call.name, call.arguments), 1
        return self._count if self._count >= self.threshold else 0
