"""The part of pacing every backend shares: the gate a model call passes before it is sent.

A call's way through the gate (:class:`Acquisition`), one atomic backend step at a time:

1. the group's cooldown, if a rate limit started one: wait for its end (plus a random share
   of ``cooldown_jitter``, so the waiting calls do not all resume at once), holding nothing;
2. a concurrency slot, when ``max_concurrency`` is set: wait for one to free;
3. a rate slot: the next moment at which the request budget (``requests_per_minute``) and the
   token budget (``tokens_per_minute``, charged with an estimate) allow it, reserved at once
   (GCRA: each call books its own future slot, so waiters never poll for it);
4. once that moment comes, a last check of the cooldown and of the request rate of the calls
   really sent (a call whose task woke late, on a busy event loop, books the next free send
   time rather than going out in a bunch with the punctual ones), and the call is sent.

Cancelled while waiting, a call gives back what it holds: its concurrency slot, and its rate
slot when no later call was booked behind it (else that moment passes unused). After the call,
its token charge is settled with the real usage, and its concurrency slot is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel

from .._log import logger
from .._model_types import ModelRequest, ModelResponse
from ..errors import ConfigurationError, ProviderConnectionError, ProviderError, RateLimited
from ..events import PacingCapped, PacingReason, PacingUnavailable, PacingWait
from ..limits import clean_usage, estimate_input

__all__ = [
    "MAX_NOTICE",
    "MAX_STEP",
    "Acquisition",
    "Backend",
    "Hold",
    "PacedStream",
    "Pacer",
    "PacingUnreachable",
    "Unreachable",
    "Wait",
    "Waiters",
]

MAX_STEP = 30.0
"""The longest single wait: a longer one is reported (and re-checked) in steps of this."""

MAX_NOTICE = 500
"""The longest account of repaired shared state that is reported, in characters."""

CLEANUP_TIMEOUT = 2.0
"""Seconds that giving back a slot may take (shielded from cancellation, then abandoned)."""

Wait = tuple[float, PacingReason]
"""How long to wait, and what for."""


class PacingUnreachable(ProviderConnectionError):
    """The shared pacing backend (Redis) could not be reached and the pacing fails closed.

    Transient, like any connection error: the call is retried per the agent's
    :class:`~fanloop.RetryPolicy`.
    """


class Unreachable(Exception):
    """A backend step could not reach the shared state (internal)."""


@dataclass(slots=True)
class Hold:
    """What one call holds in its group while it waits and while it runs.

    Attributes:
        lease: the id of the concurrency slot it holds, if any.
        slot: whether a rate slot is booked for it.
        slot_at: when that slot comes (on the backend's clock).
        marks: the request and token schedule marks its booking left: a booking that is still
            the last one can be rolled back exactly.
        cost: the tokens charged with the slot.
        reason: what the slot waited for.
        sending: its send time is booked too (it woke late for its slot).
        bypass: the backend was unreachable and the call goes unpaced.
        notice: what the backend's last step found out of bounds in the shared state and
            capped or ignored (reported once, as a ``pacing_capped`` event).
    """

    lease: str | None = None
    slot: bool = False
    slot_at: float = 0.0
    marks: tuple[Any, Any] = (None, None)
    cost: int = 0
    reason: PacingReason = "requests"
    sending: bool = False
    bypass: bool = False
    notice: str = ""

    def clear(self) -> None:
        """Forget everything held (after the backend gave it back)."""
        self.lease = None
        self.slot = False
        self.sending = False
        self.marks = (None, None)


class Backend(ABC):
    """Where a pacing group's state lives: this process, or Redis."""

    @abstractmethod
    async def step(self, hold: Hold, cost: int) -> Wait | None:
        """One atomic step of the gate for a call charged ``cost`` tokens.

        Updates ``hold`` with what the call now holds. Returns ``None`` when the call may go
        now, else how long to wait and why (for ``"concurrency"``: the longest to wait before
        looking again). Raises :class:`Unreachable` when the state cannot be reached.
        """

    @abstractmethod
    async def drop(self, hold: Hold) -> None:
        """Give back what ``hold`` holds; the call was not sent. Never raises."""

    @abstractmethod
    async def finish(self, hold: Hold, used: int | None) -> None:
        """The call is over: release its concurrency slot and correct its token charge to
        ``used`` (``None``: keep the estimate). Never raises."""

    @abstractmethod
    async def cooldown(self, seconds: float) -> bool:
        """Start (or extend) the group's cooldown to ``seconds`` from now; ``False`` when the
        state could not be reached. Never raises."""

    @abstractmethod
    async def released(self, timeout: float) -> None:
        """Wait until a concurrency slot may have freed, at most ``timeout`` seconds."""


class Waiters:
    """Calls waiting for a concurrency slot, woken one at a time (any thread, any loop).

    A wake-up that reaches a call that is then cancelled is handed to the next one; the
    waits also have a timeout, so a lost wake-up costs a delay, never a hang.
    """

    __slots__ = ("_lock", "_queue")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    async def wait(self, timeout: float) -> None:
        """Wait for :meth:`wake_one`, at most ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._queue.append(entry)
        woken = False
        try:
            with anyio.move_on_after(timeout):
                await future
                woken = True
        except BaseException:
            if future.done() and not future.cancelled():
                self.wake_one()  # woken, then cancelled: the slot goes to the next one
            raise
        finally:
            if not woken:
                with self._lock, contextlib.suppress(ValueError):  # woken as it timed out
                    self._queue.remove(entry)

    def wake_one(self) -> None:
        """Wake the longest-waiting call, if any."""
        with self._lock:
            while self._queue:
                loop, future = self._queue.popleft()
                try:
                    loop.call_soon_threadsafe(_resolve, future)
                except RuntimeError:  # its event loop is closed
                    continue
                return


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _positive(name: str, value: float | None, *, whole: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, not {value!r}")
    if whole and not isinstance(value, int):
        raise ConfigurationError(f"{name} must be a whole number, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number, not {value!r}")


class Pacer:
    """The budget a group of model calls shares (base of :class:`~fanloop.pacing.Pacing` and
    :class:`~fanloop.pacing.RedisPacing`).

    Providers take one as ``pacing=``; :func:`~fanloop.pacing.paced` puts any provider
    behind one. Every call through it waits at the gate described in :mod:`fanloop.pacing`.
    """

    key: str
    fail_open: bool = True

    def __init__(
        self,
        *,
        key: str,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        max_concurrency: int | None,
        burst: int,
        max_cooldown: float,
        cooldown_jitter: float,
    ) -> None:
        _positive("requests_per_minute", requests_per_minute)
        _positive("tokens_per_minute", tokens_per_minute)
        _positive("max_concurrency", max_concurrency, whole=True)
        _positive("burst", burst, whole=True)
        if not isinstance(key, str) or not key:
            raise ConfigurationError("a pacing key must be a non-empty string")
        for name, value in (("max_cooldown", max_cooldown), ("cooldown_jitter", cooldown_jitter)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"{name} must be a number >= 0, not {value!r}")
        self.key = key
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.max_concurrency = max_concurrency
        self.burst = burst
        self.max_cooldown = float(max_cooldown)
        self.cooldown_jitter = float(cooldown_jitter)
        # GCRA: seconds per request and per token, and how far ahead a call may go.
        self.request_interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self.request_tolerance = (burst - 1) * self.request_interval
        self.token_interval = 60.0 / tokens_per_minute if tokens_per_minute else 0.0

    # -- what a backend provides --------------------------------------------------------

    def _backend(self) -> Backend:
        raise NotImplementedError

    # -- the gate ------------------------------------------------------------------------

    def cost(self, request: ModelRequest) -> int:
        """The tokens a request is charged before it is sent: its estimated input
        (:func:`fanloop.limits.estimate_input`, which errs high) plus its ``max_tokens``.
        0 when no token budget is set."""
        if not self.token_interval:
            return 0

        return estimate_input(request).tokens + max(int(request.max_tokens or 0), 0)

    def acquisition(self, cost: int) -> Acquisition:
        """A call's way through the gate (see :class:`Acquisition`)."""
        return Acquisition(self, cost)

    async def cooldown(self, seconds: float) -> bool:
        """Put the whole group into a cooldown of ``seconds`` (capped at ``max_cooldown``):
        no call of the group is sent until it ends. A custom provider that sees a rate limit
        can report it here; the built-in ones do it themselves. Returns ``False`` when the
        shared state could not be reached."""
        if not (isinstance(seconds, int | float) and seconds > 0):
            return False
        if seconds > self.max_cooldown:
            logger.info(
                "pacing_cooldown_capped",
                key=self.key,
                seconds=seconds,
                max_cooldown=self.max_cooldown,
            )
            seconds = self.max_cooldown
        seconds = float(seconds)
        if seconds <= 0:
            return False
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT):
            return await self._backend().cooldown(seconds)
        return False

    async def rate_limited(self, error: ProviderError) -> int | None:
        """Account for a call that failed with ``error``; return its token usage to settle.

        A 429 (:class:`~fanloop.errors.RateLimited`) with a ``Retry-After`` starts the
        group's cooldown; its ``retry_after`` then becomes 0, because the wait is the
        cooldown's: the retry queues at the gate and goes when the cooldown ends, instead of
        waiting the cooldown and a backoff on top of it. A call the server answered with an
        HTTP error gives its token charge back (0); any other failure keeps it (``None``).
        """
        retry_after = error.retry_after
        if (
            isinstance(error, RateLimited)
            and isinstance(retry_after, int | float)
            and retry_after > 0
            and await self.cooldown(retry_after)
        ):
            error.retry_after = 0.0
        return 0 if error.status_code is not None else None

    def jitter(self) -> float:
        """A random share of ``cooldown_jitter`` (added to the end of a cooldown wait)."""
        return random.random() * self.cooldown_jitter

    # -- wrapping a provider's calls ----------------------------------------------------

    async def complete(
        self, request: ModelRequest, call: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        """``await call(request)`` once the gate lets it through (waits are not reported:
        a non-streamed call has no event stream; use :meth:`stream` for that)."""
        acquisition = self.acquisition(self.cost(request))
        used: int | None = None
        try:
            while await acquisition.step() is not None:
                pass
            response = await call(request)
            used = usage_of(response)
            return response
        except ProviderError as exc:
            used = await self.rate_limited(exc)
            raise
        finally:
            await acquisition.close(used)

    def stream(
        self,
        request: ModelRequest,
        open_stream: Callable[[ModelRequest], AbstractAsyncContextManager[Any]],
    ) -> PacedStream:
        """``open_stream(request)`` behind the gate, as a stream handle: its iteration yields
        a :class:`~fanloop.events.PacingWait` after each wait, then the call's own items."""
        return PacedStream(self, request, open_stream)

    async def aclose(self) -> None:
        """Release connections (nothing to release in process)."""

    async def __aenter__(self) -> Pacer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def usage_of(response: Any) -> int:
    """The tokens a response really used (input, cached input and output), from its usage."""

    usage = clean_usage(getattr(response, "usage", None))  # type: ignore[arg-type]
    return usage.total_input_tokens + usage.output_tokens


class Acquisition:
    """One call's way through the gate. Step it until :meth:`step` returns ``None``; then send
    the call; then :meth:`close` it with the usage (always: it gives back what is held)."""

    __slots__ = ("_failure", "_notice", "closed", "cost", "granted", "hold", "pacer")

    def __init__(self, pacer: Pacer, cost: int) -> None:
        self.pacer = pacer
        self.cost = cost
        self.hold = Hold(cost=cost)
        self.granted = False
        self.closed = False
        self._failure: ProviderError | None = None
        self._notice: PacingCapped | None = None

    async def step(self) -> PacingWait | PacingUnavailable | PacingCapped | None:
        """Take one step: ``None`` once the call may go (without waiting); else wait, for as
        long as the call waits for one thing (up to :data:`MAX_STEP`), and return the event
        that reports it (or that the backend is unreachable, or that it found the shared state
        out of bounds: then the step returns before waiting, and the next one waits)."""
        if self._failure is not None:
            raise self._failure
        if self._notice is not None:
            notice, self._notice = self._notice, None
            return notice
        if self.granted:
            return None
        pacer = self.pacer
        backend = pacer._backend()
        started = time.monotonic()
        first: PacingReason | None = None
        while True:
            try:
                # Shielded (a backend step is bounded by its own timeout): a step cancelled
                # halfway could book a slot the call never learns of. A cancellation waiting
                # behind it is delivered at the wait below, which gives everything back.
                with anyio.CancelScope(shield=True):
                    wait = await backend.step(self.hold, self.cost)
            except Unreachable as exc:
                return self._unreachable(str(exc))
            if wait is None:
                self.granted = True
            if self.hold.notice:
                notice = PacingCapped(pacer.key, self.hold.notice)
                self.hold.notice = ""
                if first is None:
                    return notice  # reported before any wait, then the next step waits
                self._notice = notice  # reported after the wait already waited
                break
            if wait is None:
                if first is None:
                    return None
                break
            seconds, reason = wait
            spent = time.monotonic() - started
            if first is None:
                first = reason
            elif reason != first or spent >= MAX_STEP:
                break  # report this wait; the next step waits for the next thing
            try:
                await anyio.lowlevel.checkpoint()  # a cancellation that came during the step
                if reason == "concurrency":
                    await backend.released(min(max(seconds, 0.0), MAX_STEP - spent))
                else:
                    if reason == "cooldown":
                        seconds += pacer.jitter()
                    await anyio.sleep(min(max(seconds, 0.0), MAX_STEP - spent))
            except BaseException:
                await self.close(None)
                raise
        return PacingWait(time.monotonic() - started, first, pacer.key)

    def _unreachable(self, error: str) -> PacingUnavailable:
        pacer = self.pacer
        if pacer.fail_open:
            self.hold.bypass = True
            self.granted = True
        else:
            self._failure = PacingUnreachable(
                f"the pacing backend for {pacer.key!r} is unreachable ({error}); the call was "
                "not sent (on_unavailable='closed')",
            )
        return PacingUnavailable(pacer.key, error, pacer.fail_open)

    async def close(self, used: int | None) -> None:
        """Give back what the call holds: before it was sent, everything; after, its
        concurrency slot, with its token charge corrected to ``used`` (``None``: kept).
        Shielded from cancellation, for at most a couple of seconds.

        ``used`` comes from the server: it is taken as at most twice the call's charge (the
        charge is a high estimate plus the whole output allowance), so a server that reports
        absurd usage cannot push the group's token schedule out by more than that.
        """
        if self.closed:
            return
        self.closed = True
        hold = self.hold
        if used is not None:
            used = min(max(used, 0), 2 * hold.cost)
        if hold.bypass or (hold.lease is None and not hold.slot):
            return
        backend = self.pacer._backend()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT):
            if self.granted:
                await backend.finish(hold, used)
            else:
                await backend.drop(hold)


class PacedStream:
    """The stream handle of a paced call: nothing is sent on entering; iterating first passes
    the gate (yielding a :class:`~fanloop.events.PacingWait` after each wait), then opens the
    real stream and yields its items. Leaving gives back what the call holds."""

    __slots__ = ("_acquisition", "_items", "_open", "_request", "_stack", "_used", "pacer")

    def __init__(
        self,
        pacer: Pacer,
        request: ModelRequest,
        open_stream: Callable[[ModelRequest], AbstractAsyncContextManager[Any]],
    ) -> None:
        self.pacer = pacer
        self._request = request
        self._open = open_stream
        self._acquisition: Acquisition | None = None
        self._stack: AsyncExitStack | None = None
        self._items: AsyncIterator[Any] | None = None
        self._used: int | None = None

    async def __aenter__(self) -> PacedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._stack is not None:
                stack, self._stack = self._stack, None
                await stack.__aexit__(exc_type, exc, tb)
        finally:
            if self._acquisition is not None:
                await self._acquisition.close(self._used)

    def __aiter__(self) -> PacedStream:
        return self

    async def __anext__(self) -> Any:
        if self._items is None:
            acquisition = self._acquisition
            if acquisition is None:
                acquisition = self._acquisition = self.pacer.acquisition(
                    self.pacer.cost(self._request)
                )
            event = await acquisition.step()
            if event is not None:
                return event
            await self._start()
        assert self._items is not None
        try:
            item = await self._items.__anext__()
        except ProviderError as exc:
            self._used = await self.pacer.rate_limited(exc)
            raise
        if isinstance(item, ModelResponse):
            self._used = usage_of(item)
        return item

    async def _start(self) -> None:
        stack = self._stack = AsyncExitStack()
        try:
            events = await stack.enter_async_context(self._open(self._request))
        except ProviderError as exc:
            self._used = await self.pacer.rate_limited(exc)
            raise
        self._items = events.__aiter__()
