"""One run of an agent, from its first event to its result: the run's state, emitter and
budget set up (under a parent's, for a sub-agent), the system prompt made, the observer told,
the loop run under the agent's deadline, and ``run_finished`` delivered however it ends.
:class:`~fanloop.Agent` starts runs here (``run``, ``stream``, ``run_sync``, ``resume``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ._approvals import check_no_pending
from ._dispatch import Emitter
from ._log import bind_run, logger, unbind
from ._loop import run_loop
from ._result import RunResult, TerminationReason
from ._run import CLEANUP_GRACE, RunState, dynamic_system
from ._scope import enter_run, leave_run
from ._session_budget import record_spend, remaining_limits
from ._settings import ModelSettings, as_settings, check_settings
from .errors import ConfigurationError, ProviderError
from .events import Event, RunFinished, RunStarted
from .limits import Budget
from .messages import DocumentPart, ImagePart, Message, TextPart
from .observers import ConversationContext, ConversationSummary, LoopObserver

if TYPE_CHECKING:
    from ._agent import Agent
    from .sessions import Session

__all__ = [
    "FINAL_EVENT_GRACE",
    "Prompt",
    "PromptPart",
    "SystemFn",
    "run_with_deadline",
    "start_run",
    "user_message",
]

PromptPart = str | TextPart | ImagePart | DocumentPart
Prompt = PromptPart | Message | Sequence[PromptPart]
"""What a run starts from: text, or text, images and PDF documents in order (plain strings in a
sequence become text parts), or a whole user :class:`~fanloop.messages.Message`."""

SystemFn = Callable[..., "str | Awaitable[str | None] | None"]
"""``system(ctx) -> str``, sync or async: a system prompt made at each run's start from its
:class:`~fanloop.RunContext` (``ctx.deps``, ``ctx.run_id``...)."""


def start_run(
    agent: Agent[Any, Any],
    prompt: Prompt | None,
    *,
    messages: Sequence[Message] | None = None,
    session: Session | None = None,
    deps: Any = None,
    send: Callable[[Event], Awaitable[None] | None] | None = None,
    parent: RunState | None = None,
    parent_call_id: str | None = None,
    before: Callable[[RunState], Awaitable[RunResult | None]] | None = None,
    model_settings: ModelSettings | None = None,
    label: str | None = None,
    trace_context: dict[str, str] | None = None,
) -> Awaitable[RunResult[Any]]:
    """Run ``agent`` on ``prompt`` (see ``Agent._execute``; an override is resolved there).

    Await it: the arguments are checked and the run's state made here, the run itself is the
    coroutine returned (one frame per run in flight, not two)."""
    settings = agent.model_settings
    if model_settings is not None:  # checked before anything happens
        settings = settings.merge(as_settings(model_settings))
        check_settings(
            settings, agent._provider, [*agent.tools, *(h.kind for h in agent.hosted_tools)]
        )
    if session is not None and messages is not None:
        raise ConfigurationError("pass messages= or session=, not both")
    if session is not None and before is None:
        check_no_pending(session)
    history = list(session.messages if session is not None else messages or ())
    if parent is None:  # a session with a budget of its own tightens the run's limits
        limits = remaining_limits(session, agent.limits)
        budget = Budget(limits)
        path: tuple[str, ...] = (agent.name,)
        parent_emitter = None
    else:
        budget = parent.budget
        path = (*parent.emitter.path, label or agent.name)
        parent_emitter = parent.emitter
    emitter = Emitter(
        agent._table, path=path, parent_call_id=parent_call_id, send=send, parent=parent_emitter
    )
    run = RunState(
        agent,
        emitter,
        budget,
        messages=history,
        session=session,
        deps=deps if deps is not None or parent is None else parent.deps,
        depth=0 if parent is None else parent.depth + 1,
        parent=parent,
    )
    run.trace_context = trace_context
    if settings is not agent.model_settings:
        run.settings = settings
        run.max_tokens = settings.max_tokens or agent.max_tokens
    return run_observed(agent, run, prompt, before, parent is None, session)


async def run_observed(
    agent: Agent[Any, Any],
    run: RunState,
    prompt: Prompt | None,
    before: Callable[[RunState], Awaitable[RunResult | None]] | None,
    root: bool,
    session: Session | None,
) -> RunResult[Any]:
    """The run, with the observer told of its start and end (a root run's observer only) and
    ``run_finished`` delivered however it ends; the current run (``_scope``) and its log
    context are set for it."""
    current = enter_run(run)
    try:
        if callable(agent.system):
            run.system = await dynamic_system(agent.system, run)
        if session is not None:  # a resume goes on with the agent a handoff left in charge
            from ._handoff import enter_active_agent

            await enter_active_agent(run, resumed=before is not None)
        log_tokens = bind_run(run.run_id, run.emitter.path)
        try:
            emitter = run.emitter
            observer = agent.observer if root else None
            result: RunResult | None = None
            error: BaseException | None = None
            with observer.conversation() if observer is not None else _NO_OBSERVER:
                if observer is not None:
                    notify(
                        observer,
                        "on_conversation_start",
                        ConversationContext(
                            run.run_id,
                            agent.name,
                            agent.provider_name,
                            agent.model,
                            agent.limits,
                            session.id if session is not None else None,
                        ),
                    )
                try:
                    if emitter.wants("run_started"):
                        await emitter.emit(
                            RunStarted(
                                run.run_id,
                                agent.name,
                                agent.model,
                                agent.provider_name,
                                trace_context=run.trace_context,
                            )
                        )
                    if before is not None:
                        result = await before(run)
                    if result is None:
                        if prompt is not None:
                            await run.append(user_message(prompt))
                        result = await run_with_deadline(run, deadline=root)
                except ProviderError as exc:
                    error = exc
                    result = run.result(TerminationReason.PROVIDER_ERROR, detail=str(exc))
                    exc.partial = result
                    raise
                except anyio.get_cancelled_exc_class() as exc:
                    error = exc
                    result = run.result(TerminationReason.CANCELLED, detail="the run was cancelled")
                    exc.partial = result  # type: ignore[attr-defined]
                    raise
                except BaseException as exc:
                    error = exc
                    result = run.result(TerminationReason.UNKNOWN, detail=repr(exc))
                    logger.exception("run_failed")
                    raise
                finally:
                    assert result is not None
                    logger.debug(
                        "run_finished",
                        reason=str(result.termination_reason),
                        turns=result.turns,
                        tool_calls=result.tool_calls,
                    )
                    # Shielded so a cancelled run still reports how it ended, but only for a grace
                    # period: a consumer that never returns cannot make the run uncancellable.
                    if (root and session is not None) or emitter.wants("run_finished"):
                        with anyio.move_on_after(FINAL_EVENT_GRACE, shield=True):
                            if root:
                                await record_spend(session, result)
                            await emitter.emit(RunFinished(result, error))
                    if observer is not None:
                        notify(
                            observer,
                            "on_conversation_end",
                            ConversationSummary(
                                run.run_id,
                                result.termination_reason,
                                result.turns,
                                result.usage,
                                result.elapsed,
                                result.tool_calls,
                                error,
                            ),
                        )
            return result

        finally:
            unbind(log_tokens)
    finally:
        leave_run(current)


def run_with_deadline(run: RunState, *, deadline: bool) -> Awaitable[RunResult[Any]]:
    """The loop of ``run``, under its agent's ``timeout`` when ``deadline`` is set (the run
    ends with ``deadline`` when it passes). Await it."""
    agent = run.agent
    timeout = agent.limits.timeout
    loop = run_loop if agent._guard is None else agent._guard.run  # guardrails around it
    if not deadline or timeout is None:
        return loop(run)  # no coroutine of its own around the loop's
    return _under_deadline(run, loop, timeout)


async def _under_deadline(
    run: RunState, loop: Callable[[RunState], Awaitable[RunResult | None]], timeout: float
) -> RunResult[Any]:
    result: RunResult | None = None
    with anyio.CancelScope(deadline=run.set_deadline(timeout)):
        result = await loop(run)
    if result is None:
        return run.result(
            TerminationReason.DEADLINE, detail=f"the run passed its {timeout:g} s deadline"
        )
    return result


class _NoObserver:
    """What a run without an observer enters instead of ``observer.conversation()``: one for
    every run. Its ``__enter__`` and ``__exit__`` are static, so that entering it makes no
    bound method for the run's frame to hold while the run lasts (a ``nullcontext`` would)."""

    __slots__ = ()

    @staticmethod
    def __enter__() -> None:
        return None

    @staticmethod
    def __exit__(*exc_info: object) -> None:
        return None


_NO_OBSERVER = _NoObserver()

FINAL_EVENT_GRACE = CLEANUP_GRACE
"""Seconds the final ``run_finished`` event may take to deliver once the run is cancelled."""


def user_message(prompt: Prompt) -> Message:
    """The user message a run starts from (see :data:`Prompt`)."""
    if isinstance(prompt, Message):
        return prompt
    if isinstance(prompt, str):
        return Message.user(prompt)
    if isinstance(prompt, TextPart | ImagePart | DocumentPart):
        return Message(role="user", content=(prompt,))
    if isinstance(prompt, bytes | bytearray):
        raise ConfigurationError("a prompt cannot be bytes: wrap an image in ImagePart(data=...)")
    content: list[TextPart | ImagePart | DocumentPart] = []
    for item in prompt:
        if isinstance(item, str):
            content.append(TextPart(text=item))
        elif isinstance(item, TextPart | ImagePart | DocumentPart):
            content.append(item)
        else:
            raise ConfigurationError(
                "a prompt is a string or a sequence of strings, TextPart, ImagePart and "
                f"DocumentPart, not one holding {type(item).__name__}"
            )
    return Message(role="user", content=tuple(content))


def notify(observer: LoopObserver, name: str, arg: Any) -> None:
    fn = getattr(observer, name, None)
    if fn is None:
        return
    try:
        fn(arg)
    except Exception:
        logger.exception("callback_failed", owner=type(observer).__name__, callback=name)
