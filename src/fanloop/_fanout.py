"""The tool-batch scheduler: how one turn's tool calls fan out (docs/fanout.md).

1. Unknown tools, malformed JSON and arguments that fail validation become error results at
   once, detailed enough for the model to correct itself.
2. Calls that are not dangerous start concurrently; calls to the same tool run one after
   another in the model's order unless the tool is ``concurrent_safe``.
3. A dangerous call is a barrier: the calls before it finish, its preview goes to the confirm
   gate, it runs alone, then the calls after it continue.
4. ``confirm`` answers ``True`` (run), ``False`` (declined) or a string (declined, with that
   reason for the model). No ``confirm`` declines, unless ``auto_approve``. Only ``True`` runs.
5. A tool that raises or passes its timeout gives an error result; its siblings keep theirs.
6. Results come back in the order of the calls.
7. Cancelling cancels every call in flight (one task group per batch) and still leaves a result
   for every call.
8. Concurrency is capped per agent, per tool, and by named keys shared across tools, runs,
   sub-agents and separately built agents of the process.
9. No call starts before the agent's input guardrails have passed (docs/guardrails.md).
"""

from __future__ import annotations

import functools
import gc
import inspect
import math
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio

from ._approvals import DEFER, Parked
from ._log import logger
from ._result import TerminationReason
from ._resume import receipt_matches, receipt_result
from ._run import CLEANUP_GRACE
from ._unicode import WINDOW, scrub
from .errors import ConfigurationError, ModelRetry, ToolError
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    StallDetected,
    ToolFinished,
    ToolStarted,
)
from .limits import StallDetector
from .messages import INVALID_ARGUMENTS_KEY, ToolCallPart, ToolResultPart, _build
from .tools.base import FunctionTool, Tool, ToolResult, _current, to_result

if TYPE_CHECKING:
    import asyncio

    from ._run import RunState

__all__ = ["DECLINED", "LimiterPool", "run_batch"]

DECLINED = "User declined to run this tool."
NO_CONFIRM = (
    "Declined: this tool is marked dangerous and needs the user's confirmation, but no "
    "confirmation handler is configured, so it was not run."
)
CANCELLED = "The tool call was cancelled before it finished; its outcome is unknown."
NOT_RUN = "Not run: the run's time was up before this call could start"
DEFER_IN_SUBAGENT = (
    "Declined: this call needs a person's approval, which cannot be deferred inside a "
    "sub-agent. Report what you would do instead."
)

MAX_ERROR_CHARS = 4_000
"""The longest error message built by the scheduler (it may quote the model's own input)."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit:,} more characters cut]"


class LimiterPool:
    """Capacity limiters created on first use, one set per event loop.

    An agent owns one pool (its per-agent and per-tool caps hold across all of its runs);
    sub-agents share their parent's pool. Keyed limits (``concurrency_limits``) live in a
    process-wide registry instead: every agent of the process that names a key shares one
    limiter for it per event loop (see :meth:`declare`).
    """

    __slots__ = ("__weakref__", "_by_loop", "keys", "threads")

    def __init__(self, keys: Mapping[str, int] | None = None, threads: int = 64) -> None:
        self.keys: dict[str, int] = {}
        self.threads = threads
        self._by_loop: dict[int, dict[str, anyio.CapacityLimiter]] = {}
        if keys:
            self.declare(keys)

    def declare(self, keys: Mapping[str, int]) -> None:
        """Declare keyed limits for this pool, in the process-wide registry.

        A key is shared by every pool (agent) of the process that declares it, with one
        limiter per event loop. Declaring a key that a live agent declared with a different
        limit raises :class:`~fanloop.errors.ConfigurationError`; a key is free again once
        every agent that declared it is gone.
        """
        for key, limit in keys.items():
            _KEYED.declare(self, key, limit)
            self.keys[key] = limit

    def get(self, name: str, total: int) -> anyio.CapacityLimiter:
        if name.startswith("key:"):
            return _KEYED.limiter(name[4:], total)
        import asyncio  # not at import: `import fanloop` stays light (docs/performance.md)

        loop = id(asyncio.get_running_loop())
        limiters = self._by_loop.get(loop)
        if limiters is None:
            if len(self._by_loop) > 8:  # forget limiters of event loops long gone
                self._by_loop.clear()
            limiters = self._by_loop[loop] = {}
        limiter = limiters.get(name)
        if limiter is None:
            limiter = limiters[name] = anyio.CapacityLimiter(total)
        return limiter


class _Key:
    """One keyed limit: its value, the pools that declared it, its limiter per event loop."""

    __slots__ = ("by_loop", "limit", "owners")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.owners: weakref.WeakSet[LimiterPool] = weakref.WeakSet()
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter]
        self.by_loop = weakref.WeakKeyDictionary()


class _KeyRegistry:
    """The process-wide keyed limits (docs/fanout.md)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, _Key] = {}

    def declare(self, pool: LimiterPool, key: str, limit: int) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"a concurrency key must be a non-empty string: {key!r}")
        if isinstance(limit, bool) or not (
            (isinstance(limit, int) and limit >= 1) or limit == math.inf
        ):
            raise ConfigurationError(
                f"concurrency limit for {key!r} must be a whole number >= 1, not {limit!r}"
            )
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None and entry.limit != limit and len(entry.owners):
                gc.collect()  # agents that are gone but not yet collected do not hold a key
            if entry is not None and entry.limit != limit:
                if len(entry.owners):
                    raise ConfigurationError(
                        f"concurrency key {key!r} already has limit {entry.limit} in this "
                        f"process (declared by another agent); this agent asks for {limit}. "
                        "Keyed limits are shared by every agent of the process: give each "
                        f"the same limit for {key!r}, or use another key."
                    )
                entry = None
            if entry is None:
                entry = self._keys[key] = _Key(limit)
            entry.owners.add(pool)

    def limiter(self, key: str, total: int) -> anyio.CapacityLimiter:
        import asyncio

        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._keys.get(key)
            if entry is None:  # declared by a pool that is gone: declare it again
                entry = self._keys[key] = _Key(total)
            limiter = entry.by_loop.get(loop)
            if limiter is None:
                limiter = entry.by_loop[loop] = anyio.CapacityLimiter(entry.limit)
            return limiter


_KEYED = _KeyRegistry()


class _Call:
    __slots__ = ("call", "index", "kwargs", "tool")

    def __init__(self, index: int, call: ToolCallPart, tool: Tool, kwargs: dict[str, Any]):
        self.index = index
        self.call = call
        self.tool = tool
        self.kwargs = kwargs


async def run_batch(
    run: RunState, calls: Sequence[ToolCallPart], results: list[ToolResultPart | None]
) -> None:
    """Run one turn's tool calls by the rules above, filling ``results`` in call order.

    If the batch is cancelled, ``results`` holds what finished; :func:`results_or_cancelled`
    fills in the rest so the transcript gets a result for every call.
    """
    if run.gate is not None:  # input guardrails still check the prompt: no call starts
        await run.gate.wait()  # before they all pass (a trip cancels this wait)
    emit = run.emitter.emit
    granted = run.budget.take_tool_calls(len(calls))
    owner: RunState | None = run
    while owner is not None:  # like usage, a sub-agent's tool calls count for its ancestors
        owner.tool_calls += granted
        owner = owner.parent
    prepared: list[_Call] = []
    stall = run.stall
    if stall is None:  # built on a run's first batch (a run that never calls a tool: never)
        stall = run.stall = StallDetector(run.agent.limits.stall_threshold)
    for index, call in enumerate(calls):
        if results[index] is not None:
            continue  # finished before the batch was parked (a resumed batch)
        count = stall.observe(call)
        if count:
            await emit(StallDetected(call.name, count))
            if run.agent.limits.stop_on_stall:
                run.end(
                    TerminationReason.STALLED,
                    f"{call.name} was called with the same arguments {count} times in a row",
                )
        if index >= granted:
            await _immediate(run, results, index, call, "Tool call budget exhausted; not run.")
            continue
        tool = run.agent.tools.get(call.name)
        if tool is None:
            available = ", ".join(run.agent.tools) or "none"
            await _immediate(
                run,
                results,
                index,
                call,
                f"Unknown tool {clip(call.name, 100)!r}. Available tools: {available}.",
            )
            continue
        raw = call.arguments.get(INVALID_ARGUMENTS_KEY)
        if raw is not None:
            await _immediate(
                run,
                results,
                index,
                call,
                f"The arguments for tool {call.name!r} were not a valid JSON object: "
                f"{clip(str(raw), 500)!r}. Send the arguments again as one JSON object.",
            )
            continue
        try:
            kwargs = tool.validate(call.arguments)
        except ToolError as exc:
            await _immediate(run, results, index, call, clip(str(exc), MAX_ERROR_CHARS))
            continue
        except Exception as exc:
            await _immediate(
                run,
                results,
                index,
                call,
                clip(
                    f"Invalid arguments for tool {call.name!r}: {type(exc).__name__}: {exc}",
                    MAX_ERROR_CHARS,
                ),
            )
            continue
        prepared.append(_Call(index, call, tool, kwargs))

    segment: list[_Call] = []
    for item in prepared:
        if item.tool.dangerous:
            await _run_concurrently(run, segment, results)
            segment = []
            await _run_dangerous(run, item, results)
            if run.parked is not None:
                return  # this call and the ones after it wait for a person (see _approvals)
        else:
            segment.append(item)
    await _run_concurrently(run, segment, results)


def results_or_cancelled(
    results: list[ToolResultPart | None], calls: Sequence[ToolCallPart]
) -> list[ToolResultPart]:
    """Fill the results a cancelled batch never produced."""
    return [r if r is not None else _cancelled(c) for r, c in zip(results, calls, strict=True)]


def _cancelled(call: ToolCallPart) -> ToolResultPart:
    return ToolResultPart(call_id=call.id, content=CANCELLED, is_error=True)


async def _immediate(
    run: RunState,
    results: list[ToolResultPart | None],
    index: int,
    call: ToolCallPart,
    message: str,
) -> None:
    emit = run.emitter.emit
    await emit(ToolStarted(call))
    part = ToolResultPart(call_id=call.id, content=message, is_error=True)
    results[index] = part
    await emit(ToolFinished(call, part, 0.0))


async def _run_concurrently(
    run: RunState, calls: list[_Call], results: list[ToolResultPart | None]
) -> None:
    if not calls:
        return
    if len(calls) == 1:
        await _run_one(run, calls[0], results)
        return
    lanes: dict[str, list[_Call]] = {}
    async with anyio.create_task_group() as tg:
        for item in calls:
            if item.tool.concurrent_safe:
                tg.start_soon(_run_one, run, item, results)
            else:
                lanes.setdefault(item.tool.name, []).append(item)
        for lane in lanes.values():
            tg.start_soon(_run_lane, run, lane, results)


async def _run_lane(run: RunState, lane: list[_Call], results: list[ToolResultPart | None]) -> None:
    for item in lane:
        await _run_one(run, item, results)


async def _run_dangerous(run: RunState, item: _Call, results: list[ToolResultPart | None]) -> None:
    emit = run.emitter.emit
    call = item.call
    preview = await _preview(item)
    decided = run.decisions.get(call.id)
    if decided is None:
        await emit(ApprovalRequested(call, preview))
        answer = await _ask(run, call, preview)
        if answer is DEFER:
            if run.parent is None:
                run.parked = Parked(item.index, preview)
                return
            answer = DEFER_IN_SUBAGENT
    else:
        answer = decided  # given to agent.resume(approvals=...) by a person
    approved, reason = _verdict(answer)
    await emit(ApprovalResolved(call, approved, reason))
    if not approved:  # a declined call never starts; it still gets its (error) result
        part = ToolResultPart(call_id=call.id, content=reason or DECLINED, is_error=True)
        results[item.index] = part
        await emit(ToolFinished(call, part, 0.0))
        return
    await emit(ToolStarted(call))
    session = run.session
    if session is not None:  # a durable receipt before the effect, committed after it
        earlier = await session.effect(call.id)
        if earlier is None:  # claimed atomically: of two workers racing here, one runs it
            won, earlier = await session.claim_effect(turn=run.turns, call=call)
            if won:
                earlier = None
        if earlier is not None:
            await _replay(run, item, results, earlier)
            return
    await _run_one(run, item, results, announced=True)
    if session is not None:
        done = results[item.index]
        assert done is not None
        # Bounded: a commit cut short leaves the receipt "started", which a resumed run
        # reports as uncertain instead of guessing.
        with anyio.move_on_after(CLEANUP_GRACE, shield=True):
            await session.commit_effect(call.id, done)


async def _preview(item: _Call) -> str:
    """The call's preview for the gate, made in a worker thread the run can leave (a preview
    may read and diff files the model named)."""
    from anyio import to_thread

    tool = item.tool
    try:
        return await to_thread.run_sync(lambda: tool.preview(**item.kwargs), abandon_on_cancel=True)
    except Exception as exc:
        logger.warning("tool_preview_failed", tool=item.call.name, error=repr(exc))
        return clip(Tool.preview(tool, **item.kwargs), MAX_ERROR_CHARS)


async def _replay(
    run: RunState, item: _Call, results: list[ToolResultPart | None], receipt: Any
) -> None:
    """A call whose id already has a receipt is never run twice: replay or refuse.

    Only a receipt written for this very call (same tool, same arguments) is replayed; one
    left by a different call under the same id is never passed off as this call's result.
    """

    call = item.call
    if not await receipt_matches(call, receipt):
        refused = ToolResultPart(
            call_id=call.id,
            content="Not run: this call's id was already used by a different call. Call the "
            "tool again.",
            is_error=True,
        )
        run.end(
            TerminationReason.EFFECT_OUTCOME_UNCERTAIN,
            f"tool call {call.id} ({call.name}) reuses the id of a different earlier call",
        )
        results[item.index] = refused
        await run.emitter.emit(ToolFinished(call, refused, 0.0))
        return
    part = receipt_result(call, receipt)
    if part is None:
        part = ToolResultPart(
            call_id=call.id,
            content="Not run: an earlier attempt of this exact call may already have taken "
            "effect, and its outcome is unknown.",
            is_error=True,
        )
        run.end(
            TerminationReason.EFFECT_OUTCOME_UNCERTAIN,
            f"tool call {call.id} ({call.name}) was started earlier but never committed",
        )
    results[item.index] = part
    await run.emitter.emit(ToolFinished(call, part, 0.0))


async def _ask(run: RunState, call: ToolCallPart, preview: str) -> Any:
    """The confirm gate's answer for ``call``: whatever ``confirm`` returned (or a decline)."""
    agent = run.agent
    if agent.auto_approve:
        return True
    confirm = agent.confirm
    if confirm is None:
        return NO_CONFIRM
    try:
        if _takes_call(confirm):
            answer = confirm(call.name, preview, call)
        else:
            answer = confirm(call.name, preview)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        logger.exception("confirm_failed", tool=call.name)
        return f"Declined: the confirmation prompt failed ({type(exc).__name__})."
    return answer


def _verdict(answer: Any) -> tuple[bool, str | None]:
    """Only ``True`` runs; a string declines with that reason; anything else declines."""
    if answer is True:
        return True, None
    if isinstance(answer, str):
        return False, answer or DECLINED
    return False, DECLINED


def _takes_call(confirm: Any) -> bool:
    """Whether ``confirm`` takes a third positional parameter (the :class:`ToolCallPart`)."""
    try:
        return _takes_call_cached(confirm)
    except TypeError:  # an unhashable callable
        return _arity_takes_call(confirm)


@functools.lru_cache(maxsize=256)
def _takes_call_cached(confirm: Any) -> bool:
    return _arity_takes_call(confirm)


def _arity_takes_call(confirm: Any) -> bool:
    try:
        params = list(inspect.signature(confirm).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3  # ``*args`` keeps the two-argument form


async def _run_one(
    run: RunState,
    item: _Call,
    results: list[ToolResultPart | None],
    *,
    announced: bool = False,
) -> None:
    limiters = run.agent.limiters_for(item.tool)
    if not limiters:
        await _execute(run, item, results, announced)
        return
    async with AsyncExitStack() as stack:
        for limiter in limiters:
            await stack.enter_async_context(limiter)
        await _execute(run, item, results, announced)


async def _execute(
    run: RunState, item: _Call, results: list[ToolResultPart | None], announced: bool
) -> None:
    tool = item.tool
    call = item.call
    emitter = run.emitter
    if not announced and emitter.wants("tool_started"):
        await emitter.emit(ToolStarted(call))
    if (late := run.past_deadline()) is not None:  # a call before it blocked the event loop
        part = ToolResultPart(call_id=call.id, content=f"{NOT_RUN} ({late}).", is_error=True)
        results[item.index] = part
        await emitter.emit(ToolFinished(call, part, 0.0))
        return
    started = time.perf_counter()
    # A function tool that takes no RunContext cannot read it: skip making one.
    needs_context = not isinstance(tool, FunctionTool) or tool.takes_context
    token = _current.set(run.context(call)) if needs_context else None
    try:
        if tool.timeout is not None:
            with anyio.fail_after(tool.timeout):
                value = await _invoke(run, tool, item.kwargs)
        else:
            value = await _invoke(run, tool, item.kwargs)
        result = to_result(value)
    except (ToolError, ModelRetry) as exc:
        result = ToolResult(str(exc), is_error=True)
    except TimeoutError:
        result = ToolResult(
            f"Tool {call.name!r} timed out after {tool.timeout} seconds.", is_error=True
        )
    except Exception as exc:
        logger.info("tool_failed", tool=call.name, error=repr(exc), exc_info=True)
        result = ToolResult(
            clip(f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}", MAX_ERROR_CHARS),
            is_error=True,
        )
    finally:
        if token is not None:
            _current.reset(token)
    content = result.content
    cap = run.agent.max_tool_result_chars
    if cap is not None and len(content) > cap:
        content = (
            f"{content[:cap]}\n[... output truncated: {len(content) - cap} more characters "
            f"not shown (limit {cap})]"
        )
    # What a tool returns enters the conversation as valid Unicode (docs/sessions.md).
    if len(content) <= WINDOW:
        content = scrub(content)
    else:
        from anyio import to_thread

        content = await to_thread.run_sync(scrub, content)
    part = _build(
        ToolResultPart,
        {
            "kind": "tool_result",
            "call_id": call.id,
            "content": content,
            "is_error": result.is_error,
            "parts": result.parts,  # checked by ToolResult (types, count, bytes)
        },
    )
    results[item.index] = part
    if emitter.wants("tool_finished"):
        await emitter.emit(ToolFinished(call, part, time.perf_counter() - started))


async def _invoke(run: RunState, tool: Tool, kwargs: dict[str, Any]) -> Any:
    if run.agent.tool_is_async(tool):
        return await tool.run(**kwargs)
    from anyio import to_thread

    limiter = run.agent.limiters.get("__threads__", run.agent.limiters.threads)
    value = await to_thread.run_sync(
        lambda: tool.run(**kwargs), limiter=limiter, abandon_on_cancel=True
    )
    if inspect.isawaitable(value):
        value = await value
    return value
