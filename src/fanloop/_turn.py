"""One model turn: the request, pause continuations, truncation retries, compaction on
overflow, and the stop-reason rules (built on :func:`~fanloop._model.call_model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._context import compact
from ._model import Ending, Halted, call_model, send_guard
from ._model_types import ModelRequest, ModelResponse, StopReason
from ._result import TerminationReason
from .errors import ContextWindowExceeded, ResponseInvalid
from .events import RetryScheduled
from .messages import Origin, Part, TextPart

if TYPE_CHECKING:
    from ._run import RunState
    from .limits import Reservation

__all__ = ["join_origins", "refusal_text", "reserve_call", "take_turn"]


async def take_turn(run: RunState) -> ModelResponse | Ending:
    """One model round: the request, pause continuations and truncation retries included.

    Returns the finished response (its content joined across pauses), or an :class:`Ending`
    when the turn ends the run (refusal, output cut off, budget spent, context exhausted).
    """
    agent = run.agent
    budget = run.budget
    # What paused turns gave so far (tuples: most turns never pause, and a tuple left empty
    # is no object for the collector to walk while the turn waits).
    pending: tuple[Part, ...] = ()
    origins: tuple[Origin | None, ...] = ()
    truncations = 0
    compacted = False
    while True:
        if (halt := send_guard(run)) is not None:
            return halt
        origin = join_origins(origins)
        request = run.request(pending, run.max_tokens, origin)
        held: Reservation | None = None
        if budget.metering:  # no token or cost limit: nothing to reserve, nothing to estimate
            granted = await reserve_call(run, request)
            if isinstance(granted, Ending):
                return granted
            held = granted
            if granted.output_tokens < request.max_tokens:
                request = run.request(pending, granted.output_tokens, origin)
        try:
            response = await call_model(run, request)
        except ContextWindowExceeded as exc:
            budget.settle(held, None, agent.model)
            if not compacted and not pending:
                compacted = True
                if await compact(run):
                    continue
            return Ending(TerminationReason.CONTEXT_EXHAUSTED, detail=str(exc))
        except Halted as halted:
            budget.settle(held, None, agent.model)
            return halted.ending
        except BaseException:
            budget.settle(held, None, agent.model)
            raise
        if (announce := run.account_now(response, held)) is not None:
            await announce
        stop = response.stop_reason

        if stop is StopReason.PAUSED:
            pending += tuple(response.content)  # (a provider's unvalidated list, too)
            origins += (response.origin,)
            continue

        if stop is StopReason.MAX_TOKENS and (response.tool_calls or not response.content):
            # A truncated tool call is never executed: discard the turn, retry with more room.
            if request.max_tokens < run.max_tokens:
                return Ending(
                    TerminationReason.TOKEN_BUDGET,
                    detail="the output budget left was too small to finish the turn",
                )
            # A run's own settings may give another ceiling; the agent's is resolved already.
            ceiling = run.settings.max_tokens_ceiling or agent.max_tokens_ceiling
            if run.max_tokens >= ceiling:
                return Ending(
                    TerminationReason.MAX_TOKENS,
                    text=_joined_text(pending, response),
                    detail=f"the turn did not fit in {run.max_tokens} output tokens",
                )
            run.max_tokens = min(run.max_tokens * 2, ceiling)
            truncations += 1
            await run.emitter.emit(
                RetryScheduled(
                    truncations,
                    0.0,
                    ResponseInvalid(
                        f"output cut off at max_tokens; retrying with {run.max_tokens}"
                    ),
                    True,
                )
            )
            continue

        if pending:
            origin = join_origins([*origins, response.origin])
            content = (*pending, *response.content)
            response = response.model_copy(update={"content": content, "origin": origin})
        return response


async def reserve_call(run: RunState, request: ModelRequest) -> Reservation | Ending:
    """Reserve the shared budget for ``request`` before it is sent (docs/limits.md).

    The reservation holds the request's estimated input tokens, its ``max_tokens`` clamped to
    what is left (the reservation's ``output_tokens``; send no more) and their price. While
    calls in flight elsewhere in the run tree hold what this one needs, it waits for them to
    settle; a call that cannot fit even then is not sent: the :class:`Ending` says which
    budget it would break. Settle the reservation with ``budget.settle`` or ``run.account``.
    """
    budget = run.budget
    estimate = budget.estimate(request, run.context_tokens, run.context_base)
    granted = await budget.reserve(estimate, request.max_tokens, run.agent.model)
    if isinstance(granted, tuple):
        return Ending(granted[0], detail=granted[1])
    return granted


def join_origins(origins: Sequence[Origin | None]) -> Origin | None:
    """One origin for a turn joined across pauses: the raw block lists end to end, when every
    segment came from the same provider and API with list-shaped raw blocks (else ``None``,
    and the provider translates the joined parts instead)."""
    if not origins or any(o is None for o in origins):
        return None
    first = origins[0]
    assert first is not None
    raw: list[Any] = []
    for o in origins:
        assert o is not None
        if o.provider != first.provider or o.api != first.api or not isinstance(o.raw, list):
            return None
        raw.extend(o.raw)
    return Origin(provider=first.provider, api=first.api, model=first.model, raw=raw)


def _joined_text(pending: Sequence[Part], response: ModelResponse) -> str:
    return "".join(p.text for p in (*pending, *response.content) if isinstance(p, TextPart))


def refusal_text(response: ModelResponse) -> str:
    """An honest sentence for a refusal, naming its category."""
    details = response.stop_details or {}
    category = details.get("category") or "not given"
    text = f"The model declined to respond (refusal; category: {category})."
    explanation = details.get("explanation")
    if explanation:
        text += f" Explanation: {explanation}"
    said = response.text.strip()
    if said:
        text += f" The model said: {said}"
    return text
