"""A batch parked for a person's approval, claimed and run on by ``agent.resume(session,
approvals=...)`` (the claim and the parked state: :mod:`fanloop._approvals`), and
:func:`resumed`, which turns a run into the resumed run ``agent.resume()`` and
``agent.stream(resume=True)`` start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ._approvals import TRACE_KEY, Answer, Claim, check_answer_types, check_answers
from ._loop import run_tools
from ._result import RunResult
from ._resume import repair
from .messages import ToolResultPart

if TYPE_CHECKING:
    from ._run import RunState
    from .sessions import Session

__all__ = ["resume_parked", "resumed"]


def resumed(
    session: Session,
    approvals: Mapping[str, bool | str] | None,
    execute: Callable[..., Awaitable[RunResult[Any]]],
) -> Callable[..., Awaitable[RunResult[Any]]]:
    """``execute`` as a resumed run: a parked batch claimed and run on with ``approvals``, or
    the turn a dead process left open repaired first. Answers of the wrong type are refused at
    once; whether they match what the session waits for is checked on the stored state."""
    if approvals:
        check_answer_types(approvals)
        return partial(resume_parked, session, approvals, execute)
    check_answers(session, approvals)  # raises before anything is changed
    return partial(execute, before=repair)


async def resume_parked(
    session: Session,
    approvals: Mapping[str, Answer],
    execute: Callable[..., Awaitable[RunResult]],
    **kwargs: Any,
) -> RunResult:
    """Claim the parked batch of ``session``, then ``execute`` the run that goes on with it.

    Exactly one of any number of concurrent resumes of one batch (in any processes) runs it;
    the others raise :class:`~fanloop.errors.ApprovalConflict` having changed nothing.
    """
    claim = await Claim.take(session, approvals)
    try:
        # The trace context the parking run stored (only when it was traced): the resumed
        # run's span goes on in the same trace. Read back from the session: untrusted, and
        # validated by the observer that uses it (fanloop.otel).
        trace = claim.state.get(TRACE_KEY)
        if isinstance(trace, dict):
            kwargs["trace_context"] = trace
        return await execute(before=_run_parked(claim), **kwargs)
    finally:
        await claim.release()


def _run_parked(claim: Claim) -> Callable[[RunState], Awaitable[RunResult | None]]:
    """The ``before`` step of the resumed run: run the parked batch on."""

    async def before(run: RunState) -> RunResult | None:
        last = run.messages[-1]
        calls = last.tool_calls
        results = [
            None if r is None else ToolResultPart.model_validate(r) for r in claim.state["results"]
        ]
        run.decisions = dict(claim.answers)
        run.claim = claim
        # The parked state stays until the batch's results are in the transcript: a process
        # that dies on the way leaves it for the next resume once its lease has run out
        # (receipts keep effects single).
        async with anyio.create_task_group() as tg:
            tg.start_soon(claim.renew)
            try:
                await run_tools(run, calls, results)
            finally:
                tg.cancel_scope.cancel()
        if run.parked is None:
            await claim.finish()
        if run.ending is not None:
            return run.result(run.ending[0], detail=run.ending[1])
        return None

    return before
