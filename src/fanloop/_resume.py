"""Closing the turn a dead process left open, before a resumed run goes on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._result import RunResult, TerminationReason
from .messages import Message, ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["INTERRUPTED", "receipt_matches", "receipt_result", "repair"]

INTERRUPTED = (
    "The tool call was interrupted before it finished and its result was lost. "
    "Call it again if you still need it."
)


async def receipt_matches(call: ToolCallPart, receipt: Any) -> bool:
    """Whether ``receipt`` was written for this very call: same id, tool and arguments."""
    from ._unicode import scrub
    from .sessions._codec import hash_arguments

    if receipt.call_id != call.id or receipt.tool != scrub(call.name):
        return False
    try:
        return bool(receipt.arguments_hash == await hash_arguments(call.arguments))
    except (TypeError, ValueError):
        return False


def receipt_result(call: ToolCallPart, receipt: Any) -> ToolResultPart | None:
    """The result a receipt stands for, or ``None`` when its outcome is uncertain."""
    status = receipt.status
    if status == "committed" and receipt.result is not None:
        return receipt.result  # type: ignore[no-any-return]
    if status == "resolved_applied":
        return ToolResultPart(
            call_id=call.id,
            content="The operator confirmed this call took effect; its output was lost.",
        )
    if status == "resolved_not_applied":
        return ToolResultPart(
            call_id=call.id,
            content="The operator confirmed this call did not take effect. Call it again "
            "if it is still needed.",
            is_error=True,
        )
    return None


async def repair(run: RunState) -> RunResult | None:
    """Give every unanswered tool call of the last assistant turn a result.

    A committed effect receipt replays its recorded result; a receipt left ``started`` ends
    the run with ``effect_outcome_uncertain`` (returned as the result); any other unanswered
    call is told it was interrupted. Returns ``None`` when the run may continue.
    """
    messages = run.messages
    if not messages:
        return None
    last = messages[-1]
    if last.role != "assistant":
        return None
    calls = last.tool_calls
    if not calls:
        return run.result(TerminationReason.COMPLETED, text=last.text)
    session = run.session
    results: list[ToolResultPart] = []
    for call in calls:
        receipt = await session.effect(call.id) if session is not None else None
        if receipt is None or not await receipt_matches(call, receipt):
            results.append(ToolResultPart(call_id=call.id, content=INTERRUPTED, is_error=True))
            continue
        part = receipt_result(call, receipt)
        if part is None:
            return run.result(
                TerminationReason.EFFECT_OUTCOME_UNCERTAIN,
                detail=(
                    f"tool call {call.id} ({call.name}) was started but never committed; "
                    "check its effect and resolve it with `fanloop sessions resolve-effect`"
                ),
            )
        results.append(part)
    await run.append(Message.tool_results(results))
    return None
