"""Deferred approvals: a dangerous call parked until a person answers, from any process.

A ``confirm`` that returns :data:`DEFER` parks the batch at that call. The calls before it have
finished (a dangerous call is a barrier); the parked call and every call after it wait. The run
ends with ``awaiting_approval``, and the parked state — the turn's call ids, the results so far
and the pending call with its preview — is persisted in the session's metadata, so
``agent.resume(session, approvals={call_id: True | False | "reason"})`` in any process that can
open the session runs the batch on from that exact point: no new model call for the turn, no
finished call run again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .errors import ApprovalError
from .messages import ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from ._result import RunResult
    from ._run import RunState
    from .sessions import Session

__all__ = [
    "DEFER",
    "Answer",
    "PendingApproval",
    "continue_parked",
    "check_no_pending",
    "park",
    "pending_approvals",
]

PENDING_KEY: Final = "fanloop.pending_approvals"
"""The session metadata key that holds a parked batch."""


class _Defer:
    __slots__ = ()

    def __repr__(self) -> str:
        return "fanloop.DEFER"

    def __reduce__(self) -> str:
        return "DEFER"


DEFER: Final = _Defer()
"""Returned by ``confirm``: park this call until ``agent.resume(session, approvals=...)``."""

Answer = bool | str
"""An approval: ``True`` runs the call, ``False`` declines it, a string declines with that
reason for the model."""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A dangerous call waiting for a person.

    Attributes:
        call_id: the tool call's id: the key to answer it with.
        name: the tool's name.
        arguments: the call's arguments.
        preview: what the confirmation gate showed (a diff, ``$ command``...).
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    preview: str

    def to_json(self) -> dict[str, Any]:
        """The approval as plain JSON values."""
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "preview": self.preview,
        }


@dataclass(slots=True)
class Parked:
    """Where a batch stopped: the index of the deferred call and its preview."""

    index: int
    preview: str


async def park(
    run: RunState, calls: Sequence[ToolCallPart], results: Sequence[ToolResultPart | None]
) -> None:
    """Persist the parked batch in the session and end the run with ``awaiting_approval``."""
    from ._result import TerminationReason

    parked = run.parked
    assert parked is not None
    call = calls[parked.index]
    pending = PendingApproval(call.id, call.name, dict(call.arguments), parked.preview)
    run.pending = (pending,)
    if run.session is not None:
        state = {
            "call_ids": [c.id for c in calls],
            "results": [None if r is None else r.model_dump(mode="json") for r in results],
            "pending": [pending.to_json()],
        }
        await run.session.set_metadata(**{PENDING_KEY: state})
    run.end(
        TerminationReason.AWAITING_APPROVAL,
        f"{call.name} ({call.id}) waits for approval; resume with "
        f"approvals={{{call.id!r}: True | False | 'reason'}}",
    )


def pending_approvals(session: Session) -> tuple[PendingApproval, ...]:
    """The calls of ``session`` that wait for a person (empty when none do)."""
    state = _state(session)
    if state is None:
        return ()
    return tuple(
        PendingApproval(p["call_id"], p["name"], dict(p["arguments"]), p["preview"])
        for p in state["pending"]
    )


def check_no_pending(session: Session) -> None:
    """Refuse to start a new turn in a session whose batch waits for approval.

    Raises:
        ApprovalError: the session has pending approvals.
    """
    pending = pending_approvals(session)
    if pending:
        ids = ", ".join(p.call_id for p in pending)
        raise ApprovalError(
            f"session {session.id!r} has calls waiting for approval ({ids}); answer them with "
            "agent.resume(session, approvals={call_id: True | False | 'reason'})"
        )


def check_answers(session: Session, approvals: Mapping[str, Answer] | None) -> None:
    """Check ``approvals`` against what ``session`` waits for; change nothing.

    Raises:
        ApprovalError: approvals for a session with none pending, an unknown call id, a
            pending call left unanswered, or an answer that is not ``True``, ``False`` or a
            string.
    """
    pending = pending_approvals(session)
    if not pending:
        if approvals:
            raise ApprovalError(f"session {session.id!r} has no calls waiting for approval")
        return
    if approvals is None:
        check_no_pending(session)
        return
    waiting = {p.call_id for p in pending}
    unknown = sorted(set(approvals) - waiting)
    if unknown:
        raise ApprovalError(
            f"no pending approval has the call id {', '.join(map(repr, unknown))}; "
            f"waiting: {', '.join(sorted(waiting))}"
        )
    missing = sorted(waiting - set(approvals))
    if missing:
        raise ApprovalError(f"every pending call needs an answer; missing: {', '.join(missing)}")
    for call_id, answer in approvals.items():
        if not isinstance(answer, bool | str):
            raise ApprovalError(
                f"the answer for {call_id!r} must be True, False or a reason string, got {answer!r}"
            )


def continue_parked(approvals: Mapping[str, Answer]) -> Any:
    """The ``before`` step of a resumed run: run the parked batch on with ``approvals``."""

    async def before(run: RunState) -> RunResult | None:
        from ._loop import run_tools

        session = run.session
        assert session is not None
        state = _state(session)
        assert state is not None
        last = run.messages[-1]
        calls = last.tool_calls
        results = [
            None if r is None else ToolResultPart.model_validate(r) for r in state["results"]
        ]
        run.decisions = dict(approvals)
        # The parked state stays until the batch's results are in the transcript: a process
        # that dies on the way leaves it for the next resume (receipts keep effects single).
        await run_tools(run, calls, results)
        if run.parked is None:
            await session.set_metadata(**{PENDING_KEY: None})
        if run.ending is not None:
            return run.result(run.ending[0], detail=run.ending[1])
        return None

    return before


def _state(session: Session) -> dict[str, Any] | None:
    """The parked batch of ``session``, if it is still the session's open turn."""
    state = session.metadata.get(PENDING_KEY)
    if not isinstance(state, dict) or not state.get("pending"):
        return None
    messages = session.messages
    if not messages or messages[-1].role != "assistant":
        return None  # stale: the turn was closed since
    if [c.id for c in messages[-1].tool_calls] != state.get("call_ids"):
        return None
    return state
