"""The budget of one durable run: a view of its tree's account, moved by checkpointed steps.

Every run of a durable tree (the root and each sub-agent's workflow) spends from the tree's
:class:`~fanloop.durable._account.Account` in the database, one model call at a time:

1. before a call, the step ``fanloop.budget.reserve`` reserves it in the account (waiting, as
   in memory, while the call must), and brings back what the whole tree has spent;
2. the model call's own step charges what the call reported, as soon as it reports it, and
   keeps the reservation's lease alive while it runs (see ``_steps``);
3. a reservation let go without a report (a failed or cancelled call) is freed by the run's
   next reserve step, or by ``fanloop.budget.close`` at the run's end; tool calls are added
   by the same steps.

Each run so holds at most one call's reservation at a time, and the decisions are step
results: a recovered run replays them instead of deciding again. Between two steps the run
decides from what its last step saw plus what it spent since (its turns, tool calls and
warnings), all of it recorded, so a replay takes the same path.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .._model_types import Usage
from ..catalog import cost_of
from ..limits import Budget, Denial, InputEstimate, Limits, Reservation
from ._account import SHARED, Account, Grant, account_database
from ._dbos import dbos, step, system_database_url

__all__ = ["DurableBudget", "durable_budget", "shared_limits"]


def shared_limits(limits: Limits) -> dict[str, Any] | None:
    """The limits a tree's runs spend together, as JSON; ``None`` when there are none."""
    values = {k: getattr(limits, k) for k in SHARED}
    return values if any(v is not None for v in values.values()) else None


def durable_budget(budget: Any) -> DurableBudget | None:
    """The tree's :class:`DurableBudget` behind ``budget`` (a sub-agent's own allowance
    wraps it), if there is one."""
    from .._delegate import ChildBudget

    while isinstance(budget, ChildBudget):
        budget = budget.outer
    return budget if isinstance(budget, DurableBudget) else None


@dataclass(slots=True, eq=False)
class _Held(Reservation):
    """A reservation held in the account under ``rid``."""

    rid: str = ""


@dataclass(slots=True)
class DurableBudget(Budget):
    """The budget of a durable run: :class:`Budget`'s rules, its tree's account as the truth.

    Args:
        limits: the tree's shared limits.
        account_id: the account's id (the root workflow's).
    """

    account_id: str = ""
    _account: Account | None = None
    _held: str | None = None
    _release: str | None = None
    _tool_calls: int = 0
    _closes: int = 0
    _local: Usage = field(default_factory=Usage)

    def account(self) -> Account:
        """The account (its database pool is opened on first use, on this event loop)."""
        if self._account is None:
            database = account_database(system_database_url())
            self._account = Account(database, self.account_id, self.limits)
        return self._account

    @property
    def held(self) -> str | None:
        """The id of the reservation of the model call in flight, if any."""
        return self._held

    async def open(self) -> None:
        """Create the account (the root run does, as its first step) and see its state."""
        state = await step("fanloop.budget.open", self._open)
        self._seen(state)

    async def _open(self) -> dict[str, Any]:
        return await self.account().open()

    async def reserve(
        self, estimate: InputEstimate, requested: int, model: str
    ) -> Reservation | Denial:
        """Reserve the call in the account (one step; see the module docstring)."""
        if estimate.shape is not None:  # the kind's key must be the same in every process
            digest = hashlib.sha256(repr(estimate.shape).encode()).hexdigest()[:32]
            estimate = InputEstimate(estimate.tokens, estimate.fresh, estimate.measured, digest)
        release, tool_calls = self._release, self._tool_calls
        out = await step(
            "fanloop.budget.reserve", self._reserve, estimate, requested, model, release, tool_calls
        )
        self._release, self._tool_calls = None, 0
        self._seen(out["state"])
        if "denied" in out:
            reason, detail = out["denied"]
            from .._result import TerminationReason

            return TerminationReason(reason), str(detail)
        g = out["granted"]
        held = _Held(
            int(g["input"]), int(g["output"]), float(g["cost"]), int(g["measured"]), rid=g["rid"]
        )
        self._held = held.rid
        return held

    async def _reserve(
        self,
        estimate: InputEstimate,
        requested: int,
        model: str,
        release: str | None,
        tool_calls: int,
    ) -> dict[str, Any]:
        DBOS = dbos()
        rid = f"{DBOS.workflow_id}:{DBOS.step_id}"
        decided, state = await self.account().reserve(
            rid, estimate, requested, model, release=release, tool_calls=tool_calls, charge_key=rid
        )
        if isinstance(decided, Grant):
            r = decided.reservation
            granted = {
                "rid": decided.rid,
                "input": r.input_tokens,
                "output": r.output_tokens,
                "cost": r.cost_usd,
                "measured": r.measured,
            }
            return {"granted": granted, "state": state}
        return {"denied": [decided[0].value, decided[1]], "state": state}

    def settle(self, reserved: Reservation | None, usage: Usage | None, model: str) -> None:
        """Let a reservation go, and count ``usage`` in this run's view of the tree.

        The account itself was charged by the model call's step; a reservation let go
        without a report is freed in the account by the next step.
        """
        if isinstance(reserved, _Held) and reserved.open:
            reserved.open = False
            if self._held == reserved.rid:
                self._held = None
            if usage is None:
                self._release = reserved.rid
        if usage is not None:
            self._local = self._local + usage
            self.usage = self.usage + usage
            self.cost_usd += cost_of(model, usage) or 0.0

    def take_tool_calls(self, wanted: int) -> int:
        granted = Budget.take_tool_calls(self, wanted)
        self._tool_calls += granted
        return granted

    async def close(self) -> None:
        """The run's last step: free its last reservation, add its last tool calls."""
        self._closes += 1
        release, tool_calls = self._release, self._tool_calls
        if self._held is not None:  # the run ended with a call in flight (cancelled)
            release, self._held = self._held, None
        await step("fanloop.budget.close", self._close, release, tool_calls, self._closes)
        self._release, self._tool_calls = None, 0

    async def _close(self, release: str | None, tool_calls: int, n: int) -> None:
        DBOS = dbos()
        await self.account().close(release, tool_calls, f"{DBOS.workflow_id}:close:{n}")

    def _seen(self, state: dict[str, Any]) -> None:
        """Take the tree's spend from a step's result (recorded: a replay sees the same)."""
        self.usage = Usage.model_validate(state["usage"])
        self.cost_usd = float(state["cost_usd"])
        self.tool_calls = int(state["tool_calls"]) + self._tool_calls
