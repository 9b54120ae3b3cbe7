"""Deferred approvals: a dangerous call parked until a person answers, from any process.

A ``confirm`` that returns :data:`DEFER` parks the batch at that call. The calls before it have
finished (a dangerous call is a barrier); the parked call and every call after it wait. The run
ends with ``awaiting_approval``, and the parked state — the turn's call ids, the results so far
and the pending call with its preview — is persisted in the session's metadata, so
``agent.resume(session, approvals={call_id: True | False | "reason"})`` in any process that can
open the session runs the batch on from that exact point: no new model call for the turn, no
finished call run again.

Exactly one resume runs a parked batch, however many answer it at once (a double-clicked
"Approve", two queue workers): each takes a :class:`Claim` on the parked state with one
compare-and-set in the session store, and only the winner runs the batch; every other one
raises :class:`~fanloop.errors.ApprovalConflict` having changed nothing. The claim is a lease
the winner renews while it runs, so a resume that dies mid-batch holds it only until the lease
runs out; whoever takes it over then finds the dangerous call's receipt (claimed atomically
too) and replays its result, or ends ``effect_outcome_uncertain`` if it never committed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from ._log import logger
from ._record import record
from ._result import PendingApproval, TerminationReason
from ._run import CLEANUP_GRACE
from .errors import ApprovalConflict, ApprovalError
from .messages import ToolCallPart, ToolResultPart
from .observers import trace_context_of

if TYPE_CHECKING:
    from ._run import RunState
    from .sessions import Session

__all__ = [
    "ANSWERED_KEY",
    "CLAIM_LEASE",
    "DEFER",
    "PENDING_KEY",
    "Answer",
    "Claim",
    "TRACE_KEY",
    "PendingApproval",
    "check_answer_types",
    "check_answers",
    "check_no_pending",
    "check_not_answered",
    "park",
    "pending_approvals",
]

PENDING_KEY: Final = "fanloop.pending_approvals"
"""The session metadata key that holds a parked batch (and the claim of the resume running it)."""

TRACE_KEY: Final = "trace"
"""The key of a parked state that holds the W3C trace context of the run that parked it
(written only when an observer traces the run: see :func:`fanloop.observers.trace_context_of`)."""

ANSWERED_KEY: Final = "fanloop.answered_approvals"
"""The session metadata key that records the last batch's answers, once it has run."""

CLAIM_LEASE = 30.0
"""Seconds a resume's claim on a parked batch holds without being renewed. The resume that
holds it renews it while the batch runs; one that died stops renewing, and once the lease has
run out another resume may take the batch over (receipts keep its dangerous calls single)."""


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


@record()
class Parked:
    """Where a batch stopped: the index of the deferred call and its preview."""

    index: int
    preview: str


async def park(
    run: RunState, calls: Sequence[ToolCallPart], results: Sequence[ToolResultPart | None]
) -> None:
    """Persist the parked batch in the session and end the run with ``awaiting_approval``."""
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
        trace = trace_context_of(run.agent.observer, run.run_id)
        if trace:
            state[TRACE_KEY] = trace
        if run.claim is None:
            await run.session.set_metadata(**{PENDING_KEY: state})
        else:  # parked again while resuming: the answers so far are decided
            await run.claim.swap(state, **{ANSWERED_KEY: run.claim.answered()})
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
    check_answer_types(approvals)


def check_answer_types(approvals: Mapping[str, Answer]) -> None:
    """Refuse an answer that is not ``True``, ``False`` or a reason string."""
    for call_id, answer in approvals.items():
        if not isinstance(answer, bool | str):
            raise ApprovalError(
                f"the answer for {call_id!r} must be True, False or a reason string, got {answer!r}"
            )


class Claim:
    """One resume's hold on a parked batch: taken atomically, renewed while the batch runs,
    dropped when the batch has run (or given back if the resume fails before that)."""

    __slots__ = ("answers", "session", "state")

    def __init__(
        self, session: Session, state: dict[str, Any], answers: Mapping[str, Answer]
    ) -> None:
        self.session = session
        self.state = state  # the parked state as stored, with our claim in it
        self.answers = dict(answers)

    @classmethod
    async def take(cls, session: Session, approvals: Mapping[str, Answer]) -> Claim:
        """Claim the batch ``approvals`` answer, or raise without changing anything.

        Raises:
            ApprovalConflict: another resume holds the batch, or has already run it.
            ApprovalError: the answers do not match what the session waits for.
        """
        for _ in range(3):  # each failed attempt means another writer moved: read again
            await session.reload()
            state = _state(session)
            waiting = {p.get("call_id") for p in state["pending"]} if state is not None else set()
            if not set(approvals) <= waiting:
                check_not_answered(session, approvals)
            check_answers(session, approvals)
            assert state is not None
            now = time.time()
            held = state.get("claim")
            if isinstance(held, dict) and _number(held.get("until")) > now:
                raise ApprovalConflict(
                    f"the calls waiting in session {session.id!r} are being answered by another "
                    "resume; nothing was changed",
                    session_id=session.id,
                    call_ids=tuple(approvals),
                )
            claim = {"token": _token(), "until": now + CLAIM_LEASE, "answers": dict(approvals)}
            claimed = {**state, "claim": claim}
            if await session.set_metadata_if(PENDING_KEY, state, **{PENDING_KEY: claimed}):
                logger.info("approval_claimed", session_id=session.id, call_ids=sorted(approvals))
                return cls(session, claimed, approvals)
        raise ApprovalConflict(
            f"the calls waiting in session {session.id!r} keep changing under this resume; "
            "nothing was changed",
            session_id=session.id,
            call_ids=tuple(approvals),
        )

    async def swap(self, new: dict[str, Any] | None, **extra: Any) -> bool:
        """Replace the parked state we hold by ``new``, only if we still hold it."""
        with anyio.move_on_after(CLEANUP_GRACE, shield=True):
            done = await self.session.set_metadata_if(
                PENDING_KEY, self.state, **{PENDING_KEY: new}, **extra
            )
            if done and new is not None:
                self.state = new
            if not done:
                logger.warning("approval_claim_lost", session_id=self.session.id)
            return done
        return False

    def answered(self) -> dict[str, Any]:
        """The record of this batch's answers, as kept under :data:`ANSWERED_KEY`."""
        return {"call_ids": list(self.answers), "answers": self.answers}

    async def renew(self) -> None:
        """Keep the claim alive while the batch runs (a task of its own)."""
        while True:
            await anyio.sleep(CLAIM_LEASE / 3)
            claim = {**self.state["claim"], "until": time.time() + CLAIM_LEASE}
            if not await self.swap({**self.state, "claim": claim}):
                return

    async def finish(self) -> None:
        """The batch has run and its results are in the transcript: drop the parked state
        and record the answers, so a late duplicate resume learns what was decided."""
        await self.swap(None, **{ANSWERED_KEY: self.answered()})
        self.state = {}

    async def release(self) -> None:
        """Give the batch back (the resume failed before running it to its end)."""
        if self.state.get("claim") is None:
            return  # finished, or parked again (which dropped the claim)
        free = {k: v for k, v in self.state.items() if k != "claim"}
        await self.swap(free)
        self.state = {}


def check_not_answered(session: Session, call_ids: Iterable[str]) -> None:
    """Raise :class:`ApprovalConflict` when ``call_ids`` were answered and their batch has run.

    Raises:
        ApprovalConflict: with ``answered=True`` and the answers that were given.
    """
    ids = set(call_ids)
    if not ids:
        return
    metadata = session.metadata
    record = metadata.get(ANSWERED_KEY)
    answered = record.get("answers") if isinstance(record, dict) else None
    stale = metadata.get(PENDING_KEY)
    closed = stale.get("pending") if isinstance(stale, dict) else None
    if isinstance(answered, dict) and ids <= set(answered):
        pass
    elif isinstance(closed, list) and ids <= {p.get("call_id") for p in closed if _is_dict(p)}:
        # Its results are in the transcript, but the resume that ran it has not dropped the
        # parked state yet (or died before it could): its claim holds the answers.
        claim = stale.get("claim") if isinstance(stale, dict) else None
        answered = claim.get("answers") if isinstance(claim, dict) else None
    else:
        return
    answers = {
        k: v
        for k, v in (answered if isinstance(answered, dict) else {}).items()
        if k in ids and isinstance(v, bool | str)
    }
    raise ApprovalConflict(
        f"the calls {', '.join(sorted(ids))} of session {session.id!r} were already answered "
        "and have run; their results are in the session",
        session_id=session.id,
        call_ids=tuple(sorted(ids)),
        answered=True,
        answers=answers,
    )


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _token() -> str:
    return secrets.token_hex(16)


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
