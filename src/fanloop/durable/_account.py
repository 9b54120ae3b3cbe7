"""The budget account of a durable run tree, kept in PostgreSQL (the DBOS system database).

In one process a run tree spends from one :class:`~fanloop.limits.Budget` in memory. The runs
of a durable tree are workflows on any worker, so their budget is an account in the database
DBOS keeps its own state in, in the schema ``fanloop``:

- ``budget_account``: one row per tree (its id is the root workflow's): the tree's limits,
  what its model calls reported, its tool calls, and what first calls of each kind fell short
  of their estimates by;
- ``budget_reservation``: the reservation of each model call in flight, with a lease;
- ``budget_charge``: the keys of charges already applied (a step run again adds nothing).

Every operation is one short transaction that locks the account's row, so the workers of a
tree decide one after another on the same numbers, with the same rules as in memory
(:meth:`Budget.decide <fanloop.limits.Budget.decide>`). A reservation lives for
:data:`LEASE` seconds unless the call holding it renews it (it does while it runs): one held
by a worker that was killed expires, or is settled when its run is recovered, never leaks.

Values read back from the database are untrusted like any other: counts are cleaned and
capped, and the number of kinds remembered is bounded.
"""

from __future__ import annotations

import asyncio
import json
import math
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from .._model_types import Usage
from ..catalog import cost_of
from ..errors import ConfigurationError
from ..limits import MAX_REPORTED_TOKENS, Budget, Denial, InputEstimate, Limits, Reservation

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["LEASE", "SHARED", "Account", "Grant", "account_database"]

T = TypeVar("T")

LEASE = 30.0
"""Seconds a reservation lives unless renewed (a call in flight renews it every third)."""
MAX_KINDS = 256
"""The most kinds of request whose shortfall an account remembers."""
STATEMENT_TIMEOUT_MS = 15_000
WAIT_FIRST, WAIT_MAX = 0.02, 0.5
"""Seconds between two looks at the account while a reservation waits (doubling)."""
SHARED = (
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
    "max_tool_calls",
)
"""The limits a tree's runs spend together (the rest stay each run's own)."""

_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS fanloop;
CREATE TABLE IF NOT EXISTS fanloop.budget_account (
    id text PRIMARY KEY,
    limits jsonb NOT NULL,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cache_read_tokens bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_usd double precision NOT NULL DEFAULT 0,
    tool_calls bigint NOT NULL DEFAULT 0,
    shortfall jsonb NOT NULL DEFAULT '{}',
    created timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS fanloop.budget_reservation (
    account text NOT NULL REFERENCES fanloop.budget_account (id) ON DELETE CASCADE,
    id text NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_usd double precision NOT NULL,
    measured bigint NOT NULL,
    kind text,
    probe boolean NOT NULL,
    expires timestamptz NOT NULL,
    PRIMARY KEY (account, id)
);
CREATE TABLE IF NOT EXISTS fanloop.budget_charge (
    account text NOT NULL REFERENCES fanloop.budget_account (id) ON DELETE CASCADE,
    key text NOT NULL,
    PRIMARY KEY (account, key)
);
"""
_LOCK_KEY = 0x66616E6C6F6F70  # "fanloop": one migration at a time


@dataclass(frozen=True, slots=True)
class Grant:
    """A reservation granted by the account: what :class:`Reservation` holds, plus its id."""

    rid: str
    reservation: Reservation


def _count(value: Any) -> int:
    """A whole, non-negative count read back from the database, capped."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_REPORTED_TOKENS if value > 0 else 0
    return min(max(int(value), 0), MAX_REPORTED_TOKENS)


def _dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    value = float(value)
    return min(max(value, 0.0), 1e12) if math.isfinite(value) else 0.0


def _kind_text(kind: Any) -> str | None:
    return None if kind is None else json.dumps(list(kind), separators=(",", ":"))


def _kind_of(text: Any) -> tuple[str, str] | None:
    """A kind key read back from the database: ``(model, shape digest)``, else ``None``."""
    if not isinstance(text, str) or len(text) > 1_000:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


class Account:
    """The budget account of one durable run tree (see the module docstring).

    Args:
        database: the pool of the DBOS system database (:func:`account_database`).
        account_id: the tree's id (its root workflow's).
        limits: the tree's shared limits.
    """

    def __init__(self, database: AccountDatabase, account_id: str, limits: Limits) -> None:
        self._db = database
        self.id = account_id
        self.limits = limits

    async def open(self) -> dict[str, Any]:
        """Create the account if it does not exist yet; return what it has spent."""
        values = {k: getattr(self.limits, k) for k in SHARED}

        async def body(conn: AsyncConnection[Any]) -> dict[str, Any]:
            await conn.execute(
                "INSERT INTO fanloop.budget_account (id, limits) VALUES (%s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (self.id, json.dumps(values)),
            )
            budget = await self._load(conn)
            return _state(budget)

        return await self._db.run(body)

    async def reserve(
        self,
        rid: str,
        estimate: InputEstimate,
        requested: int,
        model: str,
        *,
        release: str | None,
        tool_calls: int,
        charge_key: str,
    ) -> tuple[Grant | Denial, dict[str, Any]]:
        """Reserve a model call (``rid``) as :meth:`Budget.reserve` does, in the database.

        First (once, whatever happens next) it frees ``release`` (a reservation its run let
        go without a report) and adds ``tool_calls`` under ``charge_key``. It waits while
        the call must (the first of its kind is out, or others hold the room it needs).

        Returns:
            The grant or the denial, and what the tree has spent (its usage, cost, tool calls).
        """

        await self._db.run(partial(self._settle_previous, release, tool_calls, charge_key))
        wait = WAIT_FIRST
        while True:
            decided = await self._db.run(
                lambda conn: self._try(conn, rid, estimate, requested, model)
            )
            if decided is not None:
                return decided
            await anyio.sleep(wait)
            wait = min(wait * 2, WAIT_MAX)

    async def charge(self, rid: str | None, usage: Usage, model: str) -> None:
        """Settle reservation ``rid`` (if it is still there) and charge ``usage``: what one
        model call reported. Each real call is charged, a call made again too."""

        async def body(conn: AsyncConnection[Any]) -> None:
            await self._lock(conn)
            held = await self._delete(conn, rid) if rid is not None else None
            cost = cost_of(model, usage) or 0.0
            await conn.execute(
                "UPDATE fanloop.budget_account SET input_tokens = input_tokens + %s, "
                "output_tokens = output_tokens + %s, cache_read_tokens = cache_read_tokens + %s, "
                "cache_write_tokens = cache_write_tokens + %s, cost_usd = cost_usd + %s "
                "WHERE id = %s",
                (
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                    cost,
                    self.id,
                ),
            )
            if held is not None and held[0] is not None:
                short = max(usage.total_input_tokens - held[1], 0)
                await conn.execute(
                    "UPDATE fanloop.budget_account SET shortfall = jsonb_set(shortfall, "
                    "ARRAY[%s::text], to_jsonb(GREATEST(COALESCE((shortfall->>%s::text)::bigint, "
                    "0), %s::bigint))) "
                    "WHERE id = %s AND (shortfall ? %s OR "
                    "(SELECT count(*) FROM jsonb_object_keys(shortfall)) < %s)",
                    (held[0], held[0], short, self.id, held[0], MAX_KINDS),
                )

        await self._db.run(body)

    async def renew(self, rid: str) -> None:
        """Extend reservation ``rid``'s lease (a call still running)."""
        await self._db.run(
            lambda conn: conn.execute(
                "UPDATE fanloop.budget_reservation SET expires = now() + make_interval(secs => %s) "
                "WHERE account = %s AND id = %s",
                (LEASE, self.id, rid),
            )
        )

    async def close(self, release: str | None, tool_calls: int, charge_key: str) -> None:
        """At a run's end: free its last reservation and add its last tool calls."""

        await self._db.run(partial(self._settle_previous, release, tool_calls, charge_key))

    async def _settle_previous(
        self,
        release: str | None,
        tool_calls: int,
        charge_key: str,
        conn: AsyncConnection[Any],
    ) -> None:
        """Under the account's lock: free the run's previous reservation and add its tool
        calls (once per ``charge_key``)."""
        await self._lock(conn)
        if release is not None:
            await self._delete(conn, release)
        if tool_calls > 0 and await self._first_charge(conn, charge_key):
            await conn.execute(
                "UPDATE fanloop.budget_account SET tool_calls = tool_calls + %s WHERE id = %s",
                (tool_calls, self.id),
            )

    async def spent(self) -> dict[str, Any]:
        """What the tree has spent and holds reserved now (for tests and tools)."""

        async def body(conn: AsyncConnection[Any]) -> dict[str, Any]:
            budget = await self._load(conn, expire=False)
            state = _state(budget)
            state["outstanding"] = budget.outstanding
            state["reserved_input"] = budget.reserved_input
            return state

        return await self._db.run(body)

    # -- inside a transaction --------------------------------------------------------------

    async def _lock(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT 1 FROM fanloop.budget_account WHERE id = %s FOR UPDATE", (self.id,)
        )

    async def _first_charge(self, conn: AsyncConnection[Any], key: str) -> bool:
        cur = await conn.execute(
            "INSERT INTO fanloop.budget_charge (account, key) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            (self.id, key),
        )
        return await cur.fetchone() is not None

    async def _delete(self, conn: AsyncConnection[Any], rid: str) -> tuple[str | None, int] | None:
        cur = await conn.execute(
            "DELETE FROM fanloop.budget_reservation WHERE account = %s AND id = %s "
            "RETURNING kind, measured",
            (self.id, rid),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        return (row[0] if isinstance(row[0], str) else None), _count(row[1])

    async def _try(
        self,
        conn: AsyncConnection[Any],
        rid: str,
        estimate: InputEstimate,
        requested: int,
        model: str,
    ) -> tuple[Grant | Denial, dict[str, Any]] | None:
        await self._lock(conn)
        cur = await conn.execute(
            "SELECT input_tokens, output_tokens, cost_usd, measured, kind, probe "
            "FROM fanloop.budget_reservation WHERE account = %s AND id = %s",
            (self.id, rid),
        )
        mine = await cur.fetchone()
        budget = await self._load(conn, skip=rid)
        if mine is not None:  # this step ran before (its worker died): the same grant
            kind = _kind_of(mine[4])
            held = Reservation(_count(mine[0]), _count(mine[1]), _dollars(mine[2]), _count(mine[3]))
            held.kind, held.probe = kind, bool(mine[5]) and kind is not None
            await self._extend(conn, rid)
            return Grant(rid, held), _state(budget)
        decided = budget.decide(estimate, requested, model)
        if decided is None:
            return None
        if isinstance(decided, Reservation):
            await conn.execute(
                "INSERT INTO fanloop.budget_reservation (account, id, input_tokens, "
                "output_tokens, cost_usd, measured, kind, probe, expires) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                (
                    self.id,
                    rid,
                    decided.input_tokens,
                    decided.output_tokens,
                    decided.cost_usd,
                    decided.measured,
                    _kind_text(decided.kind),
                    decided.probe,
                    LEASE,
                ),
            )
            return Grant(rid, decided), _state(budget)
        return decided, _state(budget)

    async def _extend(self, conn: AsyncConnection[Any], rid: str) -> None:
        await conn.execute(
            "UPDATE fanloop.budget_reservation SET expires = now() + make_interval(secs => %s) "
            "WHERE account = %s AND id = %s",
            (LEASE, self.id, rid),
        )

    async def _load(
        self, conn: AsyncConnection[Any], *, skip: str | None = None, expire: bool = True
    ) -> Budget:
        """The account as a :class:`Budget` (spent, reserved, what it learned), to decide
        with. Reservations past their lease are dropped first."""
        if expire:
            await conn.execute(
                "DELETE FROM fanloop.budget_reservation WHERE account = %s AND expires < now()",
                (self.id,),
            )
        cur = await conn.execute(
            "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
            "cost_usd, tool_calls, shortfall FROM fanloop.budget_account WHERE id = %s",
            (self.id,),
        )
        row = await cur.fetchone()
        if row is None:
            raise ConfigurationError(f"the budget account {self.id!r} does not exist")
        budget = Budget(self.limits)
        budget.usage = Usage(
            input_tokens=_count(row[0]),
            output_tokens=_count(row[1]),
            cache_read_tokens=_count(row[2]),
            cache_write_tokens=_count(row[3]),
        )
        budget.cost_usd = _dollars(row[4])
        budget.tool_calls = _count(row[5])
        shortfall = row[6] if isinstance(row[6], dict) else {}
        for text, value in list(shortfall.items())[:MAX_KINDS]:
            kind = _kind_of(text)
            if kind is not None:
                budget._shortfall[kind] = _count(value)
        cur = await conn.execute(
            "SELECT count(*), COALESCE(sum(input_tokens), 0)::bigint, "
            "COALESCE(sum(output_tokens), 0)::bigint, "
            "COALESCE(sum(cost_usd), 0)::double precision FROM fanloop.budget_reservation "
            "WHERE account = %s AND id IS DISTINCT FROM %s",
            (self.id, skip),
        )
        held = await cur.fetchone()
        assert held is not None
        budget.outstanding = _count(held[0])
        budget.reserved_input = _count(held[1])
        budget.reserved_output = _count(held[2])
        budget.reserved_cost = _dollars(held[3])
        cur = await conn.execute(
            "SELECT DISTINCT kind FROM fanloop.budget_reservation "
            "WHERE account = %s AND probe AND id IS DISTINCT FROM %s LIMIT %s",
            (self.id, skip, MAX_KINDS),
        )
        for (text,) in await cur.fetchall():
            kind = _kind_of(text)
            if kind is not None:
                budget.probing(kind)
        return budget


def _state(budget: Budget) -> dict[str, Any]:
    """What a tree has spent, as JSON (recorded in a step, so a replay sees the same)."""
    return {
        "usage": budget.usage.model_dump(mode="json"),
        "cost_usd": budget.cost_usd,
        "tool_calls": budget.tool_calls,
    }


class AccountDatabase:
    """A small connection pool on the DBOS system database, opened on first use, with the
    account tables created (once, under an advisory lock) before it is used."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = anyio.Lock()

    async def run(self, fn: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``await fn(conn)`` in one transaction on a pooled connection."""
        pool = await self._ready()
        async with pool.connection() as conn, conn.transaction():
            return await fn(conn)

    async def _ready(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                import psycopg
                import psycopg_pool

                conninfo = psycopg.conninfo.make_conninfo(
                    self._url,
                    connect_timeout=10,
                    options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                    application_name="fanloop-budget",
                )
                async with (
                    await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
                    conn.transaction(),
                ):
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                    await conn.execute(_SCHEMA)
                pool = psycopg_pool.AsyncConnectionPool(
                    conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=4,
                    open=False,
                    timeout=10,
                    name="fanloop-budget",
                )
                await pool.open(wait=True, timeout=10)
                self._pool = pool
            return self._pool


_DATABASES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AccountDatabase]]
_DATABASES = weakref.WeakKeyDictionary()


def account_database(url: str) -> AccountDatabase:
    """The account pool for ``url`` on the running event loop (one per loop and URL)."""
    if url.startswith("postgresql+"):  # SQLAlchemy's form: postgresql+psycopg://...
        url = "postgresql" + url[url.index(":") :]
    if not url.startswith(("postgresql:", "postgres:")):
        raise ConfigurationError(
            "a durable run with a token, cost or tool-call limit keeps its budget in the DBOS "
            "system database, which must be PostgreSQL (not SQLite)"
        )
    pools = _DATABASES.setdefault(asyncio.get_running_loop(), {})
    database = pools.get(url)
    if database is None:
        database = pools[url] = AccountDatabase(url)
    return database
