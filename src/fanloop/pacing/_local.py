"""In-process pacing: one budget shared by every run and sub-agent of this process."""

from __future__ import annotations

import threading
import time

from ._gate import Backend, Hold, Pacer, Wait, Waiters

__all__ = ["Pacing"]

RELEASE_POLL = 1.0
"""The longest a call waits for a concurrency slot before looking again (a safety net: a
released slot wakes the next waiting call at once)."""


class Pacing(Pacer):
    """A budget of requests, tokens and concurrent calls shared in this process.

    Give it to a provider (``AnthropicProvider(model, pacing=pacing)``, ``OpenAIProvider``, or
    any provider through :func:`~fanloop.pacing.paced`): every run and sub-agent on that
    provider (or on any provider given the same object) then shares it. Calls wait for
    capacity instead of failing; the wait counts against each run's deadline.

    Args:
        requests_per_minute: requests the group may send per minute, spread evenly (one every
            ``60 / requests_per_minute`` seconds, with ``burst`` at once after a quiet spell).
        tokens_per_minute: tokens per minute; each call is charged its estimated input plus
            its ``max_tokens`` before it is sent, and the charge is corrected to the real usage
            after it.
        max_concurrency: calls in flight at once.
        key: the group's name in events.
        burst: requests that may go at once after a quiet spell (1: always evenly spaced).
        max_cooldown: the longest cooldown a ``Retry-After`` can start, in seconds.
        cooldown_jitter: after a cooldown, each waiting call resumes at a random moment
            within this many seconds of its end.

    Example:
        >>> pacing = Pacing(requests_per_minute=500, tokens_per_minute=400_000)
        >>> pacing.request_interval
        0.12
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        max_concurrency: int | None = None,
        *,
        key: str = "local",
        burst: int = 1,
        max_cooldown: float = 60.0,
        cooldown_jitter: float = 0.5,
    ) -> None:
        super().__init__(
            key=key,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            max_concurrency=max_concurrency,
            burst=burst,
            max_cooldown=max_cooldown,
            cooldown_jitter=cooldown_jitter,
        )
        self._state = _LocalState(self)

    def _backend(self) -> Backend:
        return self._state

    def __repr__(self) -> str:
        return (
            f"Pacing(requests_per_minute={self.requests_per_minute!r}, "
            f"tokens_per_minute={self.tokens_per_minute!r}, "
            f"max_concurrency={self.max_concurrency!r}, key={self.key!r})"
        )


class _LocalState(Backend):
    """The group's state in this process, behind a lock (any thread, any event loop)."""

    def __init__(self, pacer: Pacer) -> None:
        self._p = pacer
        self._lock = threading.Lock()
        self._request_tat = 0.0  # when the request schedule is next free
        self._token_tat = 0.0  # when the token schedule is next free
        self._sent_tat = 0.0  # the request schedule of the calls really sent
        self._cool = 0.0  # when the cooldown ends
        self._in_flight = 0
        self._waiters = Waiters()

    async def step(self, hold: Hold, cost: int) -> Wait | None:
        with self._lock:
            return self._step(hold, cost, time.monotonic())

    def _step(self, hold: Hold, cost: int, now: float) -> Wait | None:
        p = self._p
        if self._cool > now:
            self._give_back(hold)
            return self._cool - now, "cooldown"
        if p.max_concurrency and hold.lease is None:
            if self._in_flight >= p.max_concurrency:
                return RELEASE_POLL, "concurrency"
            self._in_flight += 1
            hold.lease = "local"
        if not hold.slot:
            tr, tt = p.request_interval, p.token_interval
            at = now
            hold.reason = "requests"
            if tr and self._request_tat - p.request_tolerance > at:
                at = self._request_tat - p.request_tolerance
            if tt and cost and self._token_tat > at:
                at, hold.reason = self._token_tat, "tokens"
            request_mark = token_mark = None
            if tr:
                self._request_tat = request_mark = max(self._request_tat, at) + tr
            if tt and cost:
                self._token_tat = token_mark = max(self._token_tat, at) + cost * tt
            hold.slot, hold.slot_at, hold.marks = True, at, (request_mark, token_mark)
        if hold.slot_at > now:
            return hold.slot_at - now, hold.reason
        if p.request_interval and not hold.sending:
            # However late the call woke, the sends keep the rate: a late one books the next
            # free send time (and then only the cooldown is checked again).
            go = max(now, self._sent_tat - p.request_tolerance)
            self._sent_tat = max(self._sent_tat, go) + p.request_interval
            if go > now:
                hold.sending = True
                return go - now, "requests"
        return None

    def _give_back(self, hold: Hold) -> None:
        """Release the call's concurrency slot; roll its rate slot back if still the last."""
        if hold.lease is not None:
            self._in_flight -= 1
            self._waiters.wake_one()
        if hold.slot:
            request_mark, token_mark = hold.marks
            if request_mark is not None and self._request_tat == request_mark:
                self._request_tat = request_mark - self._p.request_interval
            if token_mark is not None and self._token_tat == token_mark:
                self._token_tat = token_mark - hold.cost * self._p.token_interval
        hold.clear()

    async def drop(self, hold: Hold) -> None:
        with self._lock:
            self._give_back(hold)

    async def finish(self, hold: Hold, used: int | None) -> None:
        with self._lock:
            if hold.lease is not None:
                self._in_flight -= 1
                self._waiters.wake_one()
            if used is not None and hold.slot and hold.marks[1] is not None:
                self._token_tat += (used - hold.cost) * self._p.token_interval
            hold.clear()

    async def cooldown(self, seconds: float) -> bool:
        with self._lock:
            self._cool = max(self._cool, time.monotonic() + seconds)
        return True

    async def released(self, timeout: float) -> None:
        await self._waiters.wait(timeout)
