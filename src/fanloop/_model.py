"""One model call: stream the answer, watch it for idleness, retry transient failures (the turn
built on it is :mod:`fanloop._turn`)."""

from __future__ import annotations

import contextvars
import inspect
import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ._log import logger
from ._model_types import ModelRequest, ModelResponse, StopReason
from ._result import TerminationReason
from .errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    ResponseInvalid,
)
from .events import (
    CitationAdded,
    ModelFailed,
    RequestStarted,
    RetryScheduled,
    TextDelta,
    ThinkingDelta,
    ToolCallStarted,
)
from .messages import TextPart, ThinkingPart, ToolCallPart

if TYPE_CHECKING:
    import asyncio  # imported when a run needs it: `import fanloop` does not

    from ._run import RunState

__all__ = [
    "Ending",
    "Halted",
    "Invoker",
    "call_model",
    "make_invoker",
    "send_guard",
]


class Ending:
    """A turn that ends the run instead of continuing it."""

    __slots__ = ("detail", "reason", "text")

    def __init__(
        self, reason: TerminationReason, text: str | None = None, detail: str | None = None
    ):
        self.reason = reason
        self.text = text
        self.detail = detail


class Halted(Exception):
    """A retry that may not be sent (the deadline passed, or a budget was spent meanwhile)."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.detail)
        self.ending = ending


def send_guard(run: RunState) -> Ending | None:
    """Why no model request may be sent now, or ``None``: checked before every request, the
    first of a round, a continuation and a retry alike, so that once the deadline passes or
    any report in the run tree spends a budget no new call starts anywhere in the tree."""
    if (late := run.past_deadline()) is not None:
        return Ending(TerminationReason.DEADLINE, detail=late)
    spent = run.budget.spent()
    if spent is not None:
        return Ending(spent[0], detail=spent[1])
    return None


Emit = Callable[[Any], Awaitable[None]]


class Progress:
    """What one attempt has done so far: whether any delta went out (set as it happens, so a
    failure mid-stream still knows)."""

    __slots__ = ("emitted",)

    def __init__(self) -> None:
        self.emitted = False


Invoker = Callable[[ModelRequest, Emit | None, Progress], Awaitable[ModelResponse]]


class IdleWatch:
    """Cancels a stream that sends no content for ``idle`` seconds.

    The hot path only records the time of the last item; the timer that checks it is the event
    loop's :class:`_Watchdog`, shared by every stream watched on that loop, so a model call
    costs no timer of its own. Time spent handing an item to a slow consumer (backpressure)
    never counts. Keep-alive comments and pings produce no stream item, so they do not count
    as content.

    It cancels the task that reads the stream with a plain ``Task.cancel()``, as
    ``asyncio.timeout`` does, and :func:`watched` takes that one cancellation back: no
    ``anyio`` cancel scope (an object, two sets and a bound method) per model call.
    """

    __slots__ = ("_dog", "_loop", "busy", "fired", "idle", "last", "task")

    def __init__(
        self, idle: float, task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._loop = loop
        self.idle = idle
        self.task = task
        self.busy = False
        self.fired = False
        self.last = self._loop.time()
        self._dog = _watchdog(self._loop)
        self._dog.add(self, self._loop)

    def touch(self) -> None:
        """Record that content just arrived (or was just handed on)."""
        self.last = self._loop.time()

    def close(self) -> None:
        """Stop watching."""
        self._dog.watches.discard(self)


class _Watchdog:
    """The one timer of an event loop for all the streams watched on it.

    It is armed for the earliest moment a watched stream could be idle too long, and when it
    fires it cancels those that are, then re-arms for the earliest of the rest. Watching a
    stream adds it to a set: no timer of its own to schedule and cancel on every model call
    (a timer is a heap entry, ten thousand of them with ten thousand streams in flight).
    """

    __slots__ = ("__weakref__", "_context", "_handle", "_when", "watches")

    def __init__(self) -> None:
        self.watches: set[IdleWatch] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf
        # Its timer runs in a context of its own, not in a snapshot of the context of the
        # run that armed it (which would keep that run's context variables alive as long).
        self._context = contextvars.Context()

    def add(self, watch: IdleWatch, loop: asyncio.AbstractEventLoop) -> None:
        self.watches.add(watch)
        due = watch.last + watch.idle
        if due < self._when:
            if self._handle is not None:
                self._handle.cancel()
            self._arm(due, loop)

    def _arm(self, when: float, loop: asyncio.AbstractEventLoop) -> None:
        self._when = when
        self._handle = loop.call_at(when, self._check, loop, context=self._context)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = None
        self._when = math.inf
        now = loop.time()
        idle: list[IdleWatch] = []
        earliest = math.inf
        for watch in self.watches:
            due = (now if watch.busy else watch.last) + watch.idle
            if due <= now + 0.001:
                idle.append(watch)
            elif due < earliest:
                earliest = due
        for watch in idle:
            self.watches.discard(watch)
            watch.fired = True
            watch.task.cancel("fanloop: the model's stream went idle")
        if earliest < math.inf:
            self._arm(earliest, loop)


_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = (
    weakref.WeakKeyDictionary()
)


def _watchdog(loop: asyncio.AbstractEventLoop) -> _Watchdog:
    try:
        dog = _WATCHDOGS.get(loop)
        if dog is None:
            dog = _WATCHDOGS[loop] = _Watchdog()
    except TypeError:  # a loop that cannot be weakly referenced: a watchdog per stream
        return _Watchdog()
    return dog


# Stream items that are news about the call, not part of the answer: a retry after them has
# no partial output to discard.
_NOT_OUTPUT = frozenset({"pacing_wait", "pacing_unavailable", "pacing_capped", "provider_fallback"})


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    module = sys.modules.get("asyncio")  # not imported: no asyncio loop runs (trio)
    if module is None:
        return None
    try:
        loop: asyncio.AbstractEventLoop = module.get_running_loop()
        return loop
    except RuntimeError:  # another backend (trio): no idle timer
        return None


_IDLE: Any = object()


def _current_task(loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any] | None:
    import asyncio

    return asyncio.current_task(loop)


def _is_cancelled(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, asyncio.CancelledError)


def make_invoker(provider: Any, idle_timeout: float | None = None) -> Invoker:
    """Build, once per agent, the coroutine that asks ``provider`` for one response.

    It returns the response and records in ``progress`` whether a delta went out. A provider with
    ``stream()`` streams; one with only ``complete()`` is awaited (or run in a worker thread
    when ``complete`` is a plain function) and its answer emitted as one big delta.

    With ``idle_timeout``, a stream that yields nothing for that many seconds (from the request
    to its first item, or between two items) is abandoned with a transient
    :class:`~fanloop.errors.ProviderTimeout`, so a server that only sends keep-alives cannot
    hold a run forever.
    """
    stream = getattr(provider, "stream", None)
    if callable(stream):

        async def consume(
            request: ModelRequest, emit: Emit | None, progress: Progress, watch: IdleWatch | None
        ) -> ModelResponse | None:
            response: ModelResponse | None = None
            async with stream(request) as events:
                async for item in events:
                    if isinstance(item, ModelResponse):
                        response = item
                    else:
                        if item.kind not in _NOT_OUTPUT:
                            progress.emitted = True
                        if emit is not None:
                            if watch is None:
                                await emit(item)
                            else:
                                watch.busy = True
                                await emit(item)
                                watch.busy = False
                    if watch is not None:
                        watch.touch()
            return response

        async def invoke_stream(
            request: ModelRequest, emit: Emit | None, progress: Progress
        ) -> ModelResponse:
            loop = None if idle_timeout is None else _asyncio_loop()
            task = None if loop is None else _current_task(loop)
            if idle_timeout is None or task is None:
                response = await consume(request, emit, progress, None)
            else:
                assert loop is not None
                # The watch cancels ``task`` when the stream goes idle; that one cancellation
                # is taken back here (``Task.uncancel``, as ``asyncio.timeout`` does) when it
                # was the watch's alone: one from elsewhere (the run's deadline, a caller's
                # cancel scope) that landed as well goes on.
                watch = IdleWatch(idle_timeout, task, loop)
                before = task.cancelling()
                taken_back = False
                try:
                    response = await consume(request, emit, progress, watch)
                except BaseException as exc:
                    if watch.fired:
                        taken_back = True
                        if (
                            task.uncancel() <= before
                            and _is_cancelled(exc)
                            # an enclosing scope cancelled meanwhile (its own cancel may
                            # not have reached the task yet): the run is cancelled instead
                            and anyio.current_effective_deadline() != -math.inf
                        ):
                            response = _IDLE
                        else:
                            raise
                    else:
                        raise
                finally:
                    watch.close()
                    if watch.fired and not taken_back:  # the work ended before it was told
                        task.uncancel()
                if response is _IDLE:
                    raise ProviderTimeout(
                        f"the model's stream sent no content for {idle_timeout:g} s",
                        provider=getattr(provider, "name", None),
                    )
            if response is None:
                raise ResponseInvalid(
                    "the provider's stream ended without a final response",
                    provider=getattr(provider, "name", None),
                )
            return response

        return invoke_stream

    complete = provider.complete
    is_async = inspect.iscoroutinefunction(complete)

    async def invoke_complete(
        request: ModelRequest, emit: Emit | None, progress: Progress
    ) -> ModelResponse:
        response: ModelResponse
        if is_async:
            response = await complete(request)
        else:
            from anyio import to_thread

            response = await to_thread.run_sync(complete, request)
            if inspect.isawaitable(response):
                response = await response
        if emit is None:
            return response
        for index, part in enumerate(response.content):
            if isinstance(part, TextPart) and part.text:
                await emit(TextDelta(part.text))
                for citation in part.citations:
                    await emit(CitationAdded(citation, index))
            elif isinstance(part, ThinkingPart) and part.text:
                await emit(ThinkingDelta(part.text, part.signature))
            elif isinstance(part, ToolCallPart):
                await emit(ToolCallStarted(part.id, part.name, index))
            else:
                continue
            progress.emitted = True
        return response

    return invoke_complete


_MAY_BE_EMPTY = frozenset({StopReason.MAX_TOKENS, StopReason.REFUSAL})


def _as_provider_error(exc: Exception, provider: str | None) -> ProviderError:
    """Translate what a (custom) provider raised into the ProviderError tree."""
    if isinstance(exc, ProviderError):
        return exc
    err: ProviderError
    if isinstance(exc, TimeoutError):
        err = ProviderTimeout(f"the model call timed out: {exc}", provider=provider)
    elif isinstance(exc, ConnectionError | OSError):
        err = ProviderConnectionError(f"the model call failed to connect: {exc}", provider=provider)
    else:
        err = ProviderError(f"the provider raised {type(exc).__name__}: {exc}", provider=provider)
    err.__cause__ = exc
    return err


async def call_model(run: RunState, request: ModelRequest) -> ModelResponse:
    """Ask the model, retrying transient failures per the agent's :class:`RetryPolicy`."""
    agent = run.agent
    policy = agent.retry
    emitter = run.emitter
    # (no bound ``emit`` kept in this frame while the call waits: one object less per run)
    deltas: Emit | None = emitter.emit if emitter.wants_deltas else None
    if deltas is not None and not agent.output.is_text and emitter.wants("output_partial"):
        deltas = agent.output.partial_emitter(emitter.emit, agent.native_output)
    attempt = 0
    while True:
        attempt += 1
        run.step += 1
        step = run.step
        if emitter.wants("request_started"):
            await emitter.emit(RequestStarted(request, run.turns, attempt, step))
        progress = Progress()
        try:
            response = await agent.invoke(request, deltas, progress)
            if not response.content and response.stop_reason not in _MAY_BE_EMPTY:
                raise ResponseInvalid(
                    f"the model returned an empty response (stop reason {response.stop_reason})",
                    provider=response.provider or None,
                )
            return response
        except Halted:
            raise  # a provider's own retry or fallback that may not be sent (FallbackProvider)
        except Exception as exc:
            error = _as_provider_error(exc, agent.provider_name)
        if not policy.should_retry(error, attempt):
            error.attempts = attempt
            logger.warning(
                "model_call_failed",
                error=type(error).__name__,
                attempt=attempt,
                step=step,
                message=str(error),
            )
            await emitter.emit(ModelFailed(error, attempt, step))
            raise error
        delay = policy.delay(attempt, error)
        logger.info(
            "model_call_retry", error=type(error).__name__, attempt=attempt, step=step, delay=delay
        )
        await emitter.emit(RetryScheduled(attempt, delay, error, progress.emitted, step))
        await anyio.sleep(delay)
        if (stop := send_guard(run)) is not None:
            raise Halted(stop) from error
