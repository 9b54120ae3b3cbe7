"""A budget that spans every run of one session (see docs/limits.md).

``await set_session_budget(session, Limits(max_total_tokens=200_000, max_cost_usd=2.0))`` puts
limits on the whole conversation: each run on the session starts with what the session has
left (the tighter of that and the agent's own limits) and, when it ends, adds what it spent to
the session's account. Both live in the session's metadata, so they move with the session:
any process that resumes it keeps to them.

Session-wide: tokens (input, output, total), cost and tool calls. ``max_turns``, ``timeout``
and the stall settings stay per run (``Limits()`` defaults ``max_turns`` to 25, which is no
budget for a whole conversation).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Final

from ._model_types import Usage
from ._record import record
from .limits import Limits

if TYPE_CHECKING:
    from ._result import RunResult
    from .sessions import Session

__all__ = ["SessionSpend", "remaining_limits", "record_spend", "session_budget", "session_spend"]

BUDGET_KEY: Final = "fanloop.budget"
SPENT_KEY: Final = "fanloop.spent"

_SHARED = (
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
    "max_tool_calls",
)


@record(frozen=True)
class SessionSpend:
    """What the runs of a session have spent so far.

    Attributes:
        usage: tokens, summed over every run (sub-agents included).
        cost_usd: dollars, priced from the model table (runs on unknown models add nothing).
        tool_calls: tool calls handled.
        turns: model rounds taken.
        runs: runs recorded.
    """

    usage: Usage = dataclasses.field(default_factory=Usage)
    cost_usd: float = 0.0
    tool_calls: int = 0
    turns: int = 0
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        """The spend as plain JSON values."""
        return {
            "usage": self.usage.model_dump(mode="json"),
            "cost_usd": self.cost_usd,
            "tool_calls": self.tool_calls,
            "turns": self.turns,
            "runs": self.runs,
        }


def session_budget(session: Session) -> Limits | None:
    """The limits set on ``session`` with :func:`set_session_budget`, if any."""
    data = session.metadata.get(BUDGET_KEY)
    if not isinstance(data, dict):
        return None
    fields: dict[str, Any] = {k: data.get(k) for k in _SHARED}
    try:
        return Limits(max_turns=None, **fields)
    except (TypeError, ValueError):
        return None  # not a budget fanloop wrote: ignore it rather than fail every run


async def set_session_budget(session: Session, limits: Limits | None) -> None:
    """Put ``limits`` on every run of ``session`` together (``None`` removes them).

    Only the shared fields count: input, output and total tokens, cost and tool calls.
    """
    value = None if limits is None else {k: getattr(limits, k) for k in _SHARED}
    await session.set_metadata(**{BUDGET_KEY: value})


def session_spend(session: Session) -> SessionSpend:
    """What the runs of ``session`` have spent so far."""
    data = session.metadata.get(SPENT_KEY)
    if not isinstance(data, dict):
        return SessionSpend()
    try:
        return SessionSpend(
            usage=Usage.model_validate(data.get("usage") or {}),
            cost_usd=float(data.get("cost_usd") or 0.0),
            tool_calls=int(data.get("tool_calls") or 0),
            turns=int(data.get("turns") or 0),
            runs=int(data.get("runs") or 0),
        )
    except (TypeError, ValueError):
        return SessionSpend()


def remaining_limits(session: Session | None, limits: Limits) -> Limits:
    """The limits a run on ``session`` starts with: its agent's, tightened to what the
    session's budget has left (unchanged when the session has none)."""
    if session is None:
        return limits
    budget = session_budget(session)
    if budget is None:
        return limits
    spent = session_spend(session)
    used = {
        "max_input_tokens": spent.usage.total_input_tokens,
        "max_output_tokens": spent.usage.output_tokens,
        "max_total_tokens": spent.usage.total_tokens,
        "max_cost_usd": spent.cost_usd,
        "max_tool_calls": spent.tool_calls,
    }
    changes: dict[str, Any] = {}
    for name in _SHARED:
        cap = getattr(budget, name)
        if cap is None:
            continue
        left = max(cap - used[name], 0)
        if isinstance(cap, int):
            left = int(left)
        own = getattr(limits, name)
        changes[name] = left if own is None else min(own, left)
    return dataclasses.replace(limits, **changes)


async def record_spend(session: Session | None, result: RunResult[Any]) -> None:
    """Add what a finished run spent to its session's account (when the session has a
    budget: sessions without one keep no account)."""
    if session is None or session_budget(session) is None:
        return
    spent = session_spend(session)
    total = SessionSpend(
        usage=spent.usage + result.usage,
        cost_usd=spent.cost_usd + (result.cost_usd or 0.0),
        tool_calls=spent.tool_calls + result.tool_calls,
        turns=spent.turns + result.turns,
        runs=spent.runs + 1,
    )
    await session.set_metadata(**{SPENT_KEY: total.to_json()})
