"""One model call: stream the answer, watch it for idleness, retry transient failures (the turn
built on it is :mod:`fanloop._turn`)."""

from __future__ import annotations

import contextvars
import inspect
import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, get_args

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
    StreamDelta,
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


Emit = Callable[[Any], Awaitable[None] | None]
"""Hands one stream item on: returns ``None`` once it took the item, or an awaitable to await
(a coroutine function is one; a :class:`~fanloop._dispatch.StreamSink` returns one only when
the stream's buffer is full)."""


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
_DELTAS = frozenset(get_args(StreamDelta))
"""The stream items that are deltas, told apart by type: ``isinstance`` against a pydantic
model class takes the ABC machinery, 100 ns more for every item that is not one."""


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


class _HandOver:
    """A model call's stream as the run reads it, handing the rest of it over to the run's
    stream consumer (:class:`Handed`) the first time that consumer waits on an empty buffer:
    from then on each item reaches the consumer with one task's wake-up, not two."""

    __slots__ = ("_channel", "_items", "_over", "_progress", "_sink", "_watch")

    def __init__(
        self, items: Any, channel: Any, sink: Any, progress: Progress, watch: IdleWatch | None
    ) -> None:
        self._items = items
        self._channel = channel
        self._sink = sink
        self._progress = progress
        self._watch = watch
        self._over = False

    def __aiter__(self) -> _HandOver:
        return self

    async def __anext__(self) -> Any:
        if self._over:
            raise StopAsyncIteration
        if self._channel.reader_waits():
            # Handed's run side, here rather than in a coroutine of its own: one frame fewer
            # for every stream the consumer reads.
            handed = Handed(self._items, self._sink, self._progress, self._watch)
            done = handed.hand(self._channel)
            try:
                response = await done
            finally:
                released = handed.take_back()
                if released is not None:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(_TAKE_BACK_SECONDS):
                        await released
                if self._watch is not None:
                    self._watch.busy = False
            if response is _BACK:  # the consumer stopped waiting: read on here meanwhile
                return await self._items.__anext__()
            self._over = True  # the response (or its absence) ends the iteration
            if response is None:
                raise StopAsyncIteration
            return response
        return await self._items.__anext__()


_BACK: Any = object()
"""What :meth:`Handed.hand`'s future gives when the consumer stopped waiting in the middle of the
stream (its own timeout): the run reads on, into the buffer, until the consumer waits again."""


class Handed:
    """The rest of a model call's stream, read by the run's stream consumer in its own task
    while the run waits for the response (on asyncio: see ``_Channel.hand``).

    The consumer calls :meth:`next` where it would wait for the run's next event: it gets the
    stream's next item, stamped as the run's, or ``None`` once the stream has ended and the
    run has its response (or its failure) to go on with. The reader is resumable
    (``ProviderStream.resumable``): a consumer that stops waiting (a timeout around one
    ``__anext__``) loses nothing, and the run reads on into the buffer until it waits again
    (:data:`_BACK`). The run's idle watch does not count the time the consumer holds an item:
    that is a slow consumer's time.

    When the run ends the hand-over early (it was cancelled: its deadline, its idle watch, a
    guardrail, a consumer that left the block), it takes the stream back: if the consumer is
    reading at that moment, its read is cancelled (one ``Task.cancel()``, taken back at once,
    as ``asyncio.timeout`` does) and the run waits until it has stopped, so that only one
    task ever reads the stream and the run closes it.
    """

    __slots__ = (
        "_channel",
        "_current_task",
        "_done",
        "_items",
        "_loop",
        "_parent_call_id",
        "_path",
        "_progress",
        "_reader",
        "_released",
        "_revoked",
        "_watch",
    )

    def __init__(self, items: Any, sink: Any, progress: Progress, watch: IdleWatch | None):
        self._items = items
        self._path = sink.path
        self._parent_call_id = sink.parent_call_id
        self._progress = progress
        self._watch = watch
        self._channel: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current_task: Callable[..., asyncio.Task[Any] | None] = _no_task
        self._done: asyncio.Future[Any] | None = None
        self._reader: asyncio.Task[Any] | None = None  # the consumer's task while it reads
        self._released: asyncio.Future[None] | None = None
        self._revoked = False

    def hand(self, channel: Any) -> asyncio.Future[Any]:
        """The run's side: hand the stream over. The future resolves to its response
        (``None`` if the stream ended without one), or to :data:`_BACK`, or fails with what
        the consumer met reading it. However the wait for it ends, :meth:`take_back` next."""
        import asyncio

        loop = self._loop = asyncio.get_running_loop()
        self._current_task = asyncio.current_task
        done = self._done = loop.create_future()
        watch = self._watch
        if watch is not None:
            watch.busy = True  # until the consumer reads
        self._channel = channel
        channel.hand(self)
        return done

    def take_back(self) -> asyncio.Future[None] | None:
        """End the hand-over. If the consumer is reading at that moment (the run ended it
        early), its read is cancelled, and the future returned resolves once it has stopped:
        wait for it (shielded, at most :data:`_TAKE_BACK_SECONDS`) before closing the
        stream, so that only one task ever reads it."""
        self._channel.unhand(self)
        self._revoked = True
        reader = self._reader
        if reader is None:
            return None
        assert self._loop is not None
        released = self._released = self._loop.create_future()
        reader.cancel("fanloop: the run took its model stream back")
        return released

    async def next(self) -> Any:
        """The consumer's side: the stream's next item, or ``None`` once it is over."""
        done = self._done
        assert done is not None  # handed over by hand()
        if self._revoked or done.done():
            self._channel.unhand(self)
            return None
        task = self._current_task(self._loop)
        assert task is not None
        before = task.cancelling()
        watch = self._watch
        if watch is not None and watch.busy:  # back from holding an item (or from the start)
            watch.touch()
            watch.busy = False
        self._reader = task
        # ``done`` may be over already: a run cancelled in the loop turn in which this read
        # completed has its future cancelled before its ``finally`` says it took the stream.
        try:
            item = await self._items.__anext__()
        except StopAsyncIteration:
            if not done.done():
                done.set_result(None)
            return None
        except Exception as exc:  # the model call failed: the run's to handle (a retry)
            if not self._revoked and not done.done():
                done.set_exception(exc)
            return None
        except BaseException as exc:
            if self._revoked and _is_cancelled(exc) and task.uncancel() <= before:
                # The run took the stream back: go on with its events. (An anyio scope of the
                # consumer's cancelled meanwhile delivers its own cancellation again at the
                # next await, with its own message, which a re-raise here would not carry.)
                return None
            # The consumer stopped waiting (its timeout, its task cancelled): the reader lost
            # nothing; the run reads on into the buffer meanwhile (so the idle watch sees a
            # slow consumer, not a quiet model), and hands over again when it waits again.
            if not self._revoked and not done.done():
                done.set_result(_BACK)
            raise
        finally:
            self._reader = None
            if done.done() or self._revoked:  # over: the consumer waits for the run's events
                self._channel.unhand(self)
            released = self._released
            if released is not None and not released.done():
                released.set_result(None)
        if type(item) not in _DELTAS and isinstance(item, ModelResponse):
            if not done.done():
                done.set_result(item)
            self._channel.unhand(self)
            return None
        if item.kind not in _NOT_OUTPUT:
            self._progress.emitted = True
        item.agent_path = self._path
        item.parent_call_id = self._parent_call_id
        if watch is not None:
            watch.touch()
            watch.busy = True  # the consumer holds it: a slow consumer's time, not idleness
        return item


def _no_task(loop: Any = None) -> None:
    return None


def _resumable(events: Any) -> Any:
    """``events.resumable()``, or ``None`` for a stream without it. (A function: the bound
    method looked up in the caller's frame would stay there for the whole stream.)"""
    resumable = getattr(events, "resumable", None)
    return resumable() if resumable is not None else None


_TAKE_BACK_SECONDS = 5.0
"""How long a run that ends early waits for its consumer to stop reading the model's stream
(it stops at once: its read is cancelled) before it closes the stream anyway."""


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

        async def invoke_stream(
            request: ModelRequest, emit: Emit | None, progress: Progress
        ) -> ModelResponse:
            # (One frame reads the stream and keeps the idle watch: a run waiting on the
            # model holds no other of this call's.)
            watch: IdleWatch | None = None
            if idle_timeout is not None:
                loop = _asyncio_loop()
                task = None if loop is None else _current_task(loop)
                if task is not None:
                    assert loop is not None
                    # The watch cancels ``task`` when the stream goes idle; that one
                    # cancellation is taken back here (``Task.uncancel``, as
                    # ``asyncio.timeout`` does) when it was the watch's alone: one from
                    # elsewhere (the run's deadline, a caller's cancel scope) that landed as
                    # well goes on.
                    watch = IdleWatch(idle_timeout, task, loop)
                    before = task.cancelling()
            taken_back = False
            response: ModelResponse | None = None
            try:
                async with stream(request) as events:
                    items: Any = events
                    channel = getattr(emit, "channel", None)  # a StreamSink's
                    if channel is not None:
                        reader = _resumable(events)
                        if reader is not None:
                            items = _HandOver(reader, channel, emit, progress, watch)
                    async for item in items:
                        if type(item) not in _DELTAS and isinstance(item, ModelResponse):
                            response = item
                        else:
                            if item.kind not in _NOT_OUTPUT:
                                progress.emitted = True
                            if emit is not None and (out := emit(item)) is not None:
                                if watch is None:
                                    await out
                                else:
                                    watch.busy = True
                                    await out
                                    watch.busy = False
                        if watch is not None:
                            watch.touch()
            except BaseException as exc:
                if watch is None or not watch.fired:
                    raise
                taken_back = True
                if (
                    watch.task.uncancel() <= before
                    and _is_cancelled(exc)
                    # an enclosing scope cancelled meanwhile (its own cancel may not have
                    # reached the task yet): the run is cancelled instead
                    and anyio.current_effective_deadline() != -math.inf
                ):
                    response = _IDLE
                else:
                    raise
            finally:
                if watch is not None:
                    watch.close()
                    if watch.fired and not taken_back:  # the work ended before it was told
                        watch.task.uncancel()
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
        items: list[Any] = []
        for index, part in enumerate(response.content):
            if isinstance(part, TextPart) and part.text:
                items.append(TextDelta(part.text))
                items.extend(CitationAdded(citation, index) for citation in part.citations)
            elif isinstance(part, ThinkingPart) and part.text:
                items.append(ThinkingDelta(part.text, part.signature))
            elif isinstance(part, ToolCallPart):
                items.append(ToolCallStarted(part.id, part.name, index))
        for item in items:
            progress.emitted = True
            if (out := emit(item)) is not None:
                await out
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
    deltas: Emit | None = emitter.deltas_sink() if emitter.wants_deltas else None
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
