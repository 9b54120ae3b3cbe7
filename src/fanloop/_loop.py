"""The turn loop. It shows the order of a round and nothing else (docs/loop.md)::

    loop until a limit ends it:
        round-entry guards            # deadline, turns, tokens, cost, tool calls
        context check                 # compact if usage crossed the threshold
        response = stream the model   # with retries; deltas go out as events
        if no tool calls: finish
        run the tool batch
        append assistant message + tool results; persist; next round

New behaviour arrives as a tool, an observer, a guard or a provider, not as a branch here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio

from ._approvals import park
from ._callids import distinct_call_ids, known_call_ids
from ._context import check_context
from ._fanout import results_or_cancelled, run_batch
from ._model import Ending
from ._model_types import ModelResponse, StopReason
from ._result import RunResult, TerminationReason
from ._run import CLEANUP_GRACE, RunState
from ._turn import refusal_text, take_turn
from .messages import Message, ToolCallPart, ToolResultPart

__all__ = ["run_loop"]


async def run_loop(run: RunState) -> RunResult:
    """Drive ``run`` until something ends it; return how it ended.

    (A step with nothing to wait for is done without a coroutine: ``…_now`` does the work and
    says whether the awaited form is needed. A waiting run's collector pays for every object a
    round makes.)"""
    while True:
        if cancel_overdue():
            await deliver_overdue_cancel()
        if run.agent.handoffs and run.ending is None:
            from ._handoff import take_handoff  # loaded by the agents that have handoffs

            await take_handoff(run)  # the last batch took a handoff: its target takes over
        if (ending := round_entry_guards(run)) is not None:
            return run.result(ending.reason, text=ending.text, detail=ending.detail)
        if run.agent.context_window:
            await check_context(run)
        run.turns += 1
        turn = await take_turn(run)
        if isinstance(turn, Ending):
            return run.result(turn.reason, text=turn.text, detail=turn.detail)
        calls = turn.tool_calls
        if calls:
            seen = run.call_ids if run.call_ids is not None else await known_call_ids(run)
            turn = distinct_call_ids(turn, seen)
            calls = turn.tool_calls
        if turn.content and not run.append_now(message := turn.to_message()):
            await run.append(message)
        if calls and turn.stop_reason is not StopReason.REFUSAL:
            ending = None  # (what final_answer says of a turn with tool calls)
            await run_tools(run, calls)
        else:
            ending = await final_answer(run, turn)
        if run.emitter.wants("turn_completed"):
            await run.turn_completed(len(calls))
        if ending is not None:
            return run.result(ending.reason, text=ending.text, detail=ending.detail)
        del turn, calls  # (the next turn's wait holds neither: the message has what it needs)


def round_entry_guards(run: RunState) -> Ending | None:
    """Limits checked before each round: an ending already decided, the deadline, turns, the
    shared budget. (Before them, an overdue cancel scope has had its turn,
    :func:`cancel_overdue`, and a handoff the last batch took has put its target in charge:
    docs/handoffs.md.)"""
    if run.ending is not None:
        return Ending(run.ending[0], detail=run.ending[1])
    if (late := run.past_deadline()) is not None:
        return Ending(TerminationReason.DEADLINE, detail=late)
    max_turns = run.max_turns
    if max_turns is not None and run.turns >= max_turns:
        return Ending(TerminationReason.MAX_TURNS, detail=f"reached max_turns={max_turns}")
    spent = run.budget.exhausted()
    if spent is not None:
        return Ending(spent[0], detail=spent[1])
    return None


def cancel_overdue() -> bool:
    """Whether an enclosing cancel scope's deadline has passed (the run's, a caller's): then
    :func:`deliver_overdue_cancel` lets it cancel the run now, even when nothing in the run
    waits (a provider that answers at once, a tool that blocks the loop)."""
    deadline = anyio.current_effective_deadline()
    return deadline != math.inf and anyio.current_time() >= deadline  # (no clock read without)


async def deliver_overdue_cancel() -> None:
    """Let an overdue cancel scope (:func:`cancel_overdue`) cancel the run. It takes two
    yields: asyncio runs a timer that came due after the task that yielded, so the first lets
    the scope's timer cancel the task, the second raises."""
    await anyio.lowlevel.checkpoint()
    await anyio.lowlevel.checkpoint()


async def final_answer(run: RunState, response: ModelResponse) -> Ending | None:
    """The ending a response brings; ``None`` when the loop goes on (tools to run, or an
    answer that failed the output type, sent back to be fixed)."""
    if response.stop_reason is StopReason.REFUSAL:
        return Ending(TerminationReason.MODEL_REFUSAL, text=refusal_text(response))
    if response.tool_calls:
        return None
    if response.stop_reason is StopReason.MAX_TOKENS:
        return Ending(
            TerminationReason.MAX_TOKENS,
            text=response.text,
            detail="the answer was cut off at the output token limit",
        )
    return await run.agent.output.finish(run, response, run.agent.native_output)


async def run_tools(
    run: RunState,
    calls: Sequence[ToolCallPart],
    results: list[ToolResultPart | None] | None = None,
) -> None:
    """Run the batch (or what is left of it) and append its results, even when the batch is
    cancelled; a batch parked for a person's approval is persisted instead."""
    if results is None:
        results = [None] * len(calls)
    try:
        await run_batch(run, calls, results)
    except BaseException:
        with anyio.move_on_after(CLEANUP_GRACE, shield=True):
            await run.append(Message.tool_results(results_or_cancelled(results, calls)))
        raise
    if run.parked is not None:
        await park(run, calls, results)
        return
    message = Message.tool_results(results)  # type: ignore[arg-type]
    if not run.append_now(message):
        await run.append(message)
    if warnings := run.warnings_due():
        await run.announce(warnings)
