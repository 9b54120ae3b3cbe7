"""Pacing shared through Redis: one budget for every process that uses the same key.

The state lives in two keys, updated only by Lua scripts (atomic on the server, timed by the
server's own clock, so the processes' clocks do not matter):

- ``fanloop:pacing:{KEY}:state``, a hash: ``cool`` (when the cooldown ends), ``rtat`` and
  ``ttat`` (when the request and token schedules are next free: calls book their slots
  there), ``sent`` (the same for the requests really sent: a call that wakes late for its
  slot books the next send time, so late calls never go out in a bunch). It expires a minute
  after everything in it has passed.
- ``fanloop:pacing:{KEY}:leases``, a sorted set of concurrency leases scored by when they
  expire. A live call renews its lease every ``lease_ttl / 3`` seconds; a lease whose process
  died (even by SIGKILL) is dropped once it expires, so a slot is never leaked for longer
  than ``lease_ttl``.

What the keys hold is not trusted: anyone who can write them could put anything there. Each
script checks what it reads before using it: a key of the wrong type is deleted, a moment that
is not a finite number is dropped, a cooldown further ahead than ``max_cooldown`` or a schedule
further ahead than ``max_wait`` is pulled in to that cap, and a lease further ahead than
``lease_ttl`` (which no renewal writes) is deleted; each repair is written back, so one bad
writer cannot hold the other processes, and reported (a ``pacing_capped`` event). The replies
are checked again in Python against the same caps.

Every call to Redis is bounded (connect and socket timeouts, and an overall timeout). When
Redis cannot be reached, the call fails open (goes unpaced) or closed (fails with a transient
:class:`~fanloop.pacing.PacingUnreachable`) as configured, with a ``pacing_unavailable`` event;
for ``retry_interval`` seconds after a failure Redis is not asked again, so an outage costs
no waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
import weakref
from typing import Any, Literal

import anyio

from .._log import logger
from ..errors import ConfigurationError
from ._gate import MAX_NOTICE, Backend, Hold, Pacer, Unreachable, Wait, Waiters

__all__ = ["RedisPacing"]

RELEASE_POLL = 0.25
"""The longest a call waits for a concurrency slot before asking Redis again (a slot freed in
this process wakes a waiting call at once; one freed elsewhere is seen at the next look)."""

_GUARD = """
local notes = {}
local function note(text) notes[#notes + 1] = text end
local function f(x) return string.format('%.6f', x) end
-- A key of ours holding another type is corrupt: it goes, and the state starts afresh.
local function own(key, kind)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= kind then
    redis.call('DEL', key)
    note(string.match(key, '[^:]*$') .. ' held a ' .. t .. ' (deleted)')
  end
end
-- A moment read from the state hash: a finite number at most `cap` seconds after `now`.
-- Anything else is repaired where it lies (so one bad writer cannot hold the other
-- processes) and reported: a non-number is dropped, a far-off moment is pulled in to the cap.
local function moment(field, raw, now, cap, option)
  if not raw then return nil end
  local x = tonumber(raw)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then
    redis.call('HDEL', KEYS[1], field)
    note(field .. ' held ' .. string.gsub(string.sub(raw, 1, 24), '[^%w%.%+%-]', '?')
      .. ', not a finite number (dropped)')
    return nil
  end
  if x > now + cap then
    note(field .. ' was ' .. string.format('%.4g', x - now) .. ' s ahead (capped at '
      .. option .. ' = ' .. string.format('%g', cap) .. ' s)')
    x = now + cap
    redis.call('HSET', KEYS[1], field, f(x))
  end
  return x
end
"""

_STEP = (
    _GUARD
    + """
local state, leases = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cost, tr, taur = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tt, maxc = tonumber(ARGV[4]), tonumber(ARGV[5])
local lease, ttl = ARGV[6], tonumber(ARGV[7])
local has_lease, has_slot = ARGV[8] == '1', ARGV[9] == '1'
local maxcool, maxwait = tonumber(ARGV[15]), tonumber(ARGV[16])
own(state, 'hash')
own(leases, 'zset')
local v = redis.call('HMGET', state, 'cool', 'rtat', 'ttat')
local cool = moment('cool', v[1], now, maxcool, 'max_cooldown') or 0
local said = function() return table.concat(notes, '; ') end
if cool > now then
  if has_slot then
    if tr > 0 and v[2] == ARGV[11] then
      redis.call('HSET', state, 'rtat', f(tonumber(ARGV[11]) - tr))
    end
    if tt > 0 and ARGV[12] ~= '' and v[3] == ARGV[12] then
      redis.call('HSET', state, 'ttat', f(tonumber(ARGV[12]) - tonumber(ARGV[13]) * tt))
    end
  end
  if has_lease then redis.call('ZREM', leases, lease) end
  return {'cooldown', f(cool - now), '0', '0', '', '', said()}
end
if maxc > 0 and not has_lease then
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  -- No renewal puts a lease further ahead than ttl: one that is was forged, or is corrupt.
  local forged = redis.call('ZREMRANGEBYSCORE', leases, '(' .. f(now + ttl), '+inf')
  if forged > 0 then
    note(forged .. ' leases expiring more than lease_ttl ahead (deleted)')
  end
  if redis.call('ZCARD', leases) >= maxc then
    local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    return {'concurrency', f(tonumber(first[2]) - now), '0', '0', '', '', said()}
  end
  redis.call('ZADD', leases, now + ttl, lease)
  redis.call('PEXPIRE', leases, math.ceil((ttl + 60) * 1000))
  has_lease = true
end
local held = has_lease and '1' or '0'
-- The last check, as the call goes: however late its caller woke, the sends themselves keep
-- the request rate. A late call books the next free send time (no polling, no herd).
local function late()
  if tr <= 0 or ARGV[14] == '1' then return nil end
  local sent = moment('sent', redis.call('HGET', state, 'sent'), now, maxwait, 'max_wait') or 0
  local go = math.max(now, sent - taur)
  redis.call('HSET', state, 'sent', f(math.max(sent, go) + tr))
  if go > now then return f(go - now) end
  return nil
end
if not has_slot then
  local rtat = moment('rtat', v[2], now, maxwait, 'max_wait') or 0
  local ttat = moment('ttat', v[3], now, maxwait, 'max_wait') or 0
  local at, why = now, 'requests'
  if tr > 0 and rtat - taur > at then at = rtat - taur end
  if tt > 0 and cost > 0 and ttat > at then at, why = ttat, 'tokens' end
  local rmark, tmark, horizon = '', '', cool
  if tr > 0 then
    rmark = f(math.max(rtat, at) + tr)
    redis.call('HSET', state, 'rtat', rmark)
    horizon = math.max(horizon, tonumber(rmark))
  end
  if tt > 0 and cost > 0 then
    tmark = f(math.max(ttat, at) + cost * tt)
    redis.call('HSET', state, 'ttat', tmark)
    horizon = math.max(horizon, tonumber(tmark))
  end
  if horizon > 0 then
    redis.call('PEXPIRE', state, math.ceil((math.max(horizon - now, 0) + 60) * 1000))
  end
  if at > now then return {why, f(at - now), held, f(at), rmark, tmark, said()} end
  local wait = late()
  if wait then return {'late', wait, held, f(at), rmark, tmark, said()} end
  return {'ok', '0', held, f(at), rmark, tmark, said()}
end
local at = tonumber(ARGV[10])
if at > now then return {'wait', f(at - now), held, ARGV[10], ARGV[11], ARGV[12], said()} end
local wait = late()
if wait then return {'late', wait, held, ARGV[10], ARGV[11], ARGV[12], said()} end
return {'ok', '0', held, ARGV[10], ARGV[11], ARGV[12], said()}
"""
)

_DROP = (
    _GUARD
    + """
local state, leases = KEYS[1], KEYS[2]
local tr, tt = tonumber(ARGV[1]), tonumber(ARGV[2])
own(state, 'hash')
own(leases, 'zset')
if ARGV[3] ~= '' then redis.call('ZREM', leases, ARGV[3]) end
if ARGV[4] ~= '' or ARGV[5] ~= '' then
  local v = redis.call('HMGET', state, 'rtat', 'ttat')
  if tr > 0 and ARGV[4] ~= '' and v[1] == ARGV[4] then
    redis.call('HSET', state, 'rtat', f(tonumber(ARGV[4]) - tr))
  end
  if tt > 0 and ARGV[5] ~= '' and v[2] == ARGV[5] then
    redis.call('HSET', state, 'ttat', f(tonumber(ARGV[5]) - tonumber(ARGV[6]) * tt))
  end
end
return 1
"""
)

_FINISH = (
    _GUARD
    + """
own(KEYS[1], 'hash')
own(KEYS[2], 'zset')
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local tt, delta = tonumber(ARGV[2]), tonumber(ARGV[3])
if tt > 0 and delta ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  local raw = redis.call('HGET', KEYS[1], 'ttat')
  local ttat = moment('ttat', raw, now, tonumber(ARGV[4]), 'max_wait')
  if ttat then redis.call('HSET', KEYS[1], 'ttat', f(ttat + delta * tt)) end
end
return 1
"""
)

_COOL = (
    _GUARD
    + """
local state = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local maxcool, maxwait = tonumber(ARGV[2]), tonumber(ARGV[3])
own(state, 'hash')
local v = redis.call('HMGET', state, 'cool', 'rtat', 'ttat')
local cool = moment('cool', v[1], now, maxcool, 'max_cooldown') or 0
local want = now + math.min(tonumber(ARGV[1]), maxcool)
if want > cool then
  cool = want
  redis.call('HSET', state, 'cool', f(cool))
end
local rtat = moment('rtat', v[2], now, maxwait, 'max_wait') or 0
local ttat = moment('ttat', v[3], now, maxwait, 'max_wait') or 0
local horizon = math.max(cool, rtat, ttat)
redis.call('PEXPIRE', state, math.ceil((math.max(horizon - now, 0) + 60) * 1000))
return table.concat(notes, '; ')
"""
)

_RENEW = (
    _GUARD
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = tonumber(ARGV[1])
local leases = KEYS[2]
own(leases, 'zset')
for i = 2, #ARGV do redis.call('ZADD', leases, 'XX', now + ttl, ARGV[i]) end
redis.call('PEXPIRE', leases, math.ceil((ttl + 60) * 1000))
return 1
"""
)


def _import_redis() -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "RedisPacing needs the redis package: pip install 'fanloop[redis]'"
        ) from None
    return aioredis


class RedisPacing(Pacer):
    """A budget of requests, tokens and concurrent calls shared through Redis by every
    process (and every run and sub-agent in it) that uses the same ``key``.

    The same semantics as :class:`~fanloop.pacing.Pacing`, with the state in Redis, updated
    atomically by server-side Lua scripts. Give every process the same limits for a key.

    Args:
        url: the Redis URL, e.g. ``"redis://127.0.0.1:6379/0"``.
        key: the group's name: processes using the same key share one budget.
        requests_per_minute: requests per minute, spread evenly.
        tokens_per_minute: tokens per minute (estimated before a call, settled after it).
        max_concurrency: calls in flight at once across all processes.
        on_unavailable: ``"open"`` (the default): when Redis cannot be reached, calls go out
            unpaced; ``"closed"``: they fail with a transient
            :class:`~fanloop.pacing.PacingUnreachable`. Either way a ``pacing_unavailable``
            event says so.
        burst: requests that may go at once after a quiet spell.
        max_cooldown: the longest cooldown a ``Retry-After`` can start, in seconds; also the
            longest any call waits for a cooldown read back from Redis.
        cooldown_jitter: after a cooldown, each waiting call resumes at a random moment within
            this many seconds of its end.
        max_wait: the furthest ahead, in seconds, that the request or token schedule read back
            from Redis is honoured: a call never waits longer than this for its rate slot.
            A schedule further ahead (a backlog that long, or a corrupted key) is pulled in to
            it, with a ``pacing_capped`` event.
        lease_ttl: seconds a concurrency slot outlives a process that stopped renewing it.
        timeout: seconds any one Redis operation may take (connecting included).
        connect_timeout: seconds to open a connection.
        retry_interval: after Redis failed, seconds during which it is not asked again.
        max_connections: connections per event loop.

    ``redis`` is imported when the first call is paced; a missing package is a
    :class:`~fanloop.errors.ConfigurationError` naming the ``fanloop[redis]`` extra. Close
    with ``await pacing.aclose()`` (or ``async with``) in each event loop that used it.
    """

    def __init__(
        self,
        url: str,
        *,
        key: str,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        max_concurrency: int | None = None,
        on_unavailable: Literal["open", "closed"] = "open",
        burst: int = 1,
        max_cooldown: float = 60.0,
        cooldown_jitter: float = 0.5,
        max_wait: float = 300.0,
        lease_ttl: float = 30.0,
        timeout: float = 2.0,
        connect_timeout: float = 1.0,
        retry_interval: float = 2.0,
        max_connections: int = 32,
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
        if on_unavailable not in ("open", "closed"):
            raise ConfigurationError("on_unavailable must be 'open' or 'closed'")
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError("RedisPacing needs a redis://, rediss:// or unix:// URL")
        for name, value in (
            ("max_wait", max_wait),
            ("lease_ttl", lease_ttl),
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("retry_interval", retry_interval),
        ):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number, not {value!r}")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigurationError("max_connections must be a positive whole number")
        self.url = url
        self.fail_open = on_unavailable == "open"
        self.on_unavailable = on_unavailable
        self.max_wait = float(max_wait)
        self.lease_ttl = float(lease_ttl)
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.retry_interval = float(retry_interval)
        self.max_connections = max_connections
        tag = f"fanloop:pacing:{{{key}}}"
        self.keys = (f"{tag}:state", f"{tag}:leases")
        self._state = _RedisState(self)

    def _backend(self) -> Backend:
        return self._state

    async def aclose(self) -> None:
        """Close this event loop's connections (and stop renewing its leases)."""
        await self._state.close()

    def __repr__(self) -> str:
        return (
            f"RedisPacing(key={self.key!r}, requests_per_minute={self.requests_per_minute!r}, "
            f"tokens_per_minute={self.tokens_per_minute!r}, "
            f"max_concurrency={self.max_concurrency!r}, on_unavailable={self.on_unavailable!r})"
        )


class _Link:
    """One event loop's client, scripts, held leases and lease renewer."""

    __slots__ = ("client", "gate", "leases", "renewer", "scripts", "wake")

    def __init__(self, client: Any, connections: int) -> None:
        self.client = client
        # At most one command per connection: a call waits here for its turn (which is not a
        # fault of Redis) rather than in the pool, where the wait would count as a timeout.
        self.gate = anyio.CapacityLimiter(connections)
        self.scripts = {
            name: client.register_script(source)
            for name, source in (
                ("step", _STEP),
                ("drop", _DROP),
                ("finish", _FINISH),
                ("cool", _COOL),
                ("renew", _RENEW),
            )
        }
        self.leases: set[str] = set()
        self.renewer: asyncio.Task[None] | None = None
        self.wake: asyncio.Event | None = None


class _RedisState(Backend):
    """The group's state in Redis, reached through one client per event loop."""

    def __init__(self, pacer: RedisPacing) -> None:
        self._p = pacer
        self._links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Link] = (
            weakref.WeakKeyDictionary()
        )
        self._waiters = Waiters()
        self._down_until = 0.0
        self._down_reason = ""
        self._warned = False

    # -- the connection -------------------------------------------------------------------

    def _link(self) -> _Link:
        loop = asyncio.get_running_loop()
        link = self._links.get(loop)
        if link is None:
            aioredis = _import_redis()
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            p = self._p
            pool = aioredis.BlockingConnectionPool.from_url(
                p.url,
                max_connections=p.max_connections,
                timeout=p.timeout,
                socket_connect_timeout=p.connect_timeout,
                socket_timeout=p.timeout,
                retry=Retry(NoBackoff(), 0),
            )
            client = aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))
            link = self._links[loop] = _Link(client, p.max_connections)
        return link

    async def _run(self, link: _Link, script: str, args: list[Any]) -> Any:
        """Run one script, bounded in time; an unreachable Redis raises :class:`Unreachable`
        (at once while it is known to be down)."""
        p = self._p
        if self._down_until > time.monotonic():
            raise Unreachable(self._down_reason)
        from redis.exceptions import RedisError

        try:
            async with link.gate:
                with anyio.fail_after(p.timeout + p.connect_timeout):
                    result = await link.scripts[script](keys=list(p.keys), args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            self._down_until = time.monotonic() + p.retry_interval
            self._down_reason = reason
            if not self._warned:
                self._warned = True
                logger.warning(
                    "pacing_unavailable",
                    key=p.key,
                    error=reason,
                    on_unavailable=p.on_unavailable,
                )
            raise Unreachable(reason) from None
        if self._warned:
            self._warned = False
            logger.info("pacing_available", key=p.key)
        return result

    async def close(self) -> None:
        """Close the current event loop's client."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        link = self._links.pop(loop, None)
        if link is None:
            return
        renewer = link.renewer
        if renewer is not None:
            renewer.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(renewer, return_exceptions=True)
        await link.client.aclose()
        await link.client.connection_pool.aclose()

    # -- the gate -------------------------------------------------------------------------

    async def step(self, hold: Hold, cost: int) -> Wait | None:
        p = self._p
        link = self._link()
        lease = hold.lease or uuid.uuid4().hex
        marks = hold.marks
        out = await self._run(
            link,
            "step",
            [
                cost,
                repr(p.request_interval),
                repr(p.request_tolerance),
                repr(p.token_interval),
                p.max_concurrency or 0,
                lease,
                repr(p.lease_ttl),
                "1" if hold.lease else "0",
                "1" if hold.slot else "0",
                repr(hold.slot_at),
                marks[0] or "",
                marks[1] or "",
                hold.cost,
                "1" if hold.sending else "0",
                repr(p.max_cooldown),
                repr(p.max_wait),
            ],
        )
        try:
            status, wait, held, at, request_mark, token_mark, notes = (_text(x) for x in out)
            seconds, when = float(wait), float(at)
            if not (math.isfinite(seconds) and math.isfinite(when) and seconds >= 0):
                raise ValueError(wait)
        except (TypeError, ValueError):
            raise Unreachable(f"malformed reply from Redis: {str(out)[:100]}") from None
        # The script repairs what it reads; what it reports is still checked against the caps.
        cap = p.max_cooldown if status == "cooldown" else p.max_wait
        if seconds > cap and status != "concurrency":
            capped = f"a wait of {seconds:.4g} s (capped at {cap:g} s)"
            notes = f"{notes}; {capped}" if notes else capped
            when -= seconds - cap
            seconds = cap
        if notes:
            hold.notice = notes[:MAX_NOTICE]
            logger.warning("pacing_capped", key=p.key, detail=hold.notice)
        if status == "cooldown":
            self._forget(link, hold)
            return seconds, "cooldown"
        if status == "concurrency":
            return min(seconds, RELEASE_POLL), "concurrency"
        if held == "1" and hold.lease is None:
            hold.lease = lease
            self._hold_lease(link, lease)
        if not hold.slot:
            hold.slot, hold.slot_at = True, when
            hold.marks = (request_mark or None, token_mark or None)
            if status in ("requests", "tokens"):
                hold.reason = status  # type: ignore[assignment]
        if status == "ok":
            return None
        if status == "late":
            hold.sending = True  # its send time is booked: next, only the cooldown is checked
            return seconds, "requests"
        return seconds, hold.reason

    async def drop(self, hold: Hold) -> None:
        if hold.lease is None and not hold.slot:
            return
        p = self._p
        link = self._link()
        args = [
            repr(p.request_interval),
            repr(p.token_interval),
            hold.lease or "",
            hold.marks[0] or "",
            hold.marks[1] or "",
            hold.cost,
        ]
        self._forget(link, hold)
        with contextlib.suppress(Unreachable):  # a lease expires by itself; a slot passes
            await self._run(link, "drop", args)

    async def finish(self, hold: Hold, used: int | None) -> None:
        p = self._p
        delta = 0
        if used is not None and hold.slot and hold.marks[1] is not None:
            delta = used - hold.cost
        lease = hold.lease
        link = self._link()
        self._forget(link, hold)
        if lease is None and not delta:
            return
        with contextlib.suppress(Unreachable):
            await self._run(
                link, "finish", [lease or "", repr(p.token_interval), delta, repr(p.max_wait)]
            )

    async def cooldown(self, seconds: float) -> bool:
        p = self._p
        try:
            notes = await self._run(
                self._link(), "cool", [repr(seconds), repr(p.max_cooldown), repr(p.max_wait)]
            )
        except Unreachable:
            return False
        if notes:
            logger.warning("pacing_capped", key=p.key, detail=_text(notes)[:MAX_NOTICE])
        return True

    async def released(self, timeout: float) -> None:
        await self._waiters.wait(timeout)

    # -- leases ---------------------------------------------------------------------------

    def _hold_lease(self, link: _Link, lease: str) -> None:
        link.leases.add(lease)
        if link.renewer is None:
            link.renewer = asyncio.get_running_loop().create_task(
                self._renew(link), name=f"fanloop-pacing-renew-{self._p.key}"
            )

    def _forget(self, link: _Link, hold: Hold) -> None:
        lease = hold.lease
        hold.clear()
        if lease is None:
            return
        link.leases.discard(lease)
        self._waiters.wake_one()
        if not link.leases and link.wake is not None:
            link.wake.set()  # the renewer has nothing left to renew: let it end now

    async def _renew(self, link: _Link) -> None:
        """Renew this loop's leases every ``lease_ttl / 3`` seconds while it holds any."""
        p = self._p
        try:
            while link.leases:
                wake = link.wake = asyncio.Event()
                with anyio.move_on_after(p.lease_ttl / 3):
                    await wake.wait()
                if not link.leases:
                    break
                with contextlib.suppress(Unreachable):
                    await self._run(link, "renew", [repr(p.lease_ttl), *sorted(link.leases)])
        finally:
            link.renewer = None
            link.wake = None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
