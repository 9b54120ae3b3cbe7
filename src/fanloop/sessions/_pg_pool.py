"""The connection side of PostgresStore: the pool, the schema migrations, the bounds.

psycopg and psycopg_pool are imported when a :class:`Database` is made, never at import
time. The pool is opened on first use, inside the running event loop, after the schema has
been created or migrated on a connection of its own (so a refused connection is reported at
once, with libpq's reason, instead of after the pool's retries).

Every wait is bounded: connecting, and taking a connection from the pool, by
``connect_timeout``; each statement by ``statement_timeout`` on the server (which also covers
lock waits); each whole operation by the sum of the two plus :data:`GRACE` on the client, so
a server that stops answering without closing the connection is abandoned too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio

from .._log import logger
from ..errors import ConfigurationError
from . import _pg_schema
from ._errors import SessionError
from ._pg_schema import check_schema, connection_options, lock_key, redact

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["GRACE", "Database", "scalar"]

T = TypeVar("T")

GRACE = 2.0
"""Seconds the client waits beyond the server's own timeouts before it gives up."""


def _psycopg() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or a :class:`ConfigurationError` naming the extra."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            f"PostgresStore needs psycopg 3 and psycopg-pool ({exc}); "
            "install them with: pip install 'fanloop[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class Database:
    """One PostgreSQL schema behind a lazily opened pool; runs bounded operations on it.

    Raises:
        ConfigurationError: psycopg is missing, or ``dsn`` cannot be parsed.
        ValueError: a bad schema name, timeout or pool size.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        connect_timeout: float,
        statement_timeout: float,
        max_connections: int,
    ) -> None:
        self.quoted = check_schema(schema)
        for name, value in (
            ("connect_timeout", connect_timeout),
            ("statement_timeout", statement_timeout),
        ):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections!r}")
        self._psycopg, self._psycopg_pool = _psycopg()
        self.schema = schema
        self.location = f"{redact(dsn)} (schema {schema})"
        conninfo = self._psycopg.conninfo
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except self._psycopg.Error as exc:
            # The DSN is not echoed: when it cannot be parsed, nobody knows which part of
            # it is the password.
            raise ConfigurationError(
                "not a PostgreSQL connection string (postgresql://user@host:5432/dbname or "
                f"'host=... dbname=...'): {_without_values(first_line(exc), dsn)}"
            ) from None
        self._conninfo: str = conninfo.make_conninfo(
            dsn,
            connect_timeout=max(2, math.ceil(connect_timeout)),  # libpq's floor
            options=connection_options(statement_timeout, params.get("options")),
            application_name=params.get("application_name") or "fanloop",
        )
        self._connect_timeout = float(connect_timeout)
        self._statement_timeout = float(statement_timeout)
        self._bound = self._connect_timeout + self._statement_timeout + GRACE
        self._max_connections = max_connections
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening: anyio.Lock | None = None
        self.closed = False

    async def run(
        self, fn: Callable[[AsyncConnection[Any]], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        """``fn(conn)`` on a pooled connection (in one transaction if asked), bounded.

        Raises:
            SessionError: the store is closed, unreachable, too slow, or refused a statement
                (the psycopg error is the ``__cause__``).
        """
        psycopg = self._psycopg
        pool = await self._ready_pool()
        try:
            with anyio.fail_after(self._bound):
                async with pool.connection(timeout=self._connect_timeout) as conn:
                    if not transaction:
                        return await fn(conn)
                    async with conn.transaction():
                        return await fn(conn)
        except TimeoutError:
            raise SessionError(
                f"the session store {self.location} did not answer within {self._bound:g} s; "
                "a write may or may not have been applied: reload the session"
            ) from None
        except psycopg.errors.QueryCanceled as exc:
            raise SessionError(
                f"a statement on the session store {self.location} was stopped after "
                f"{self._statement_timeout:g} s ({first_line(exc)}); nothing was written"
            ) from exc
        except psycopg.Error as exc:
            if self.closed:
                raise SessionError("the session store is closed") from exc
            raise SessionError(
                f"the session store {self.location} failed: {first_line(exc)}"
            ) from exc

    async def aclose(self) -> None:
        """Close the pool (if it was opened); nothing can run afterwards."""
        self.closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                await pool.close(timeout=self._connect_timeout)

    async def _ready_pool(self) -> AsyncConnectionPool[Any]:
        """The open pool; on first use, migrate the schema and open it."""
        pool = self._pool
        if pool is not None and not self.closed:
            return pool
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self.closed:
                raise SessionError("the session store is closed")
            if self._pool is None:
                pool = await self._open_pool()
                if self.closed:  # aclose() was called while we were opening
                    with anyio.CancelScope(shield=True):
                        await pool.close()
                    raise SessionError("the session store is closed")
                self._pool = pool
            return self._pool

    async def _open_pool(self) -> AsyncConnectionPool[Any]:
        psycopg = self._psycopg
        try:
            with anyio.fail_after(self._bound):
                with anyio.fail_after(self._connect_timeout):
                    conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                try:
                    await self._migrate(conn)
                finally:
                    with anyio.CancelScope(shield=True):
                        await conn.close()
                pool = self._psycopg_pool.AsyncConnectionPool(
                    self._conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self._max_connections,
                    open=False,
                    timeout=self._connect_timeout,
                    name=f"fanloop-sessions-{self.schema}",
                )
                try:
                    await pool.open(wait=True, timeout=self._connect_timeout)
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await pool.close()
                    raise
                return cast("AsyncConnectionPool[Any]", pool)
        except TimeoutError:
            raise SessionError(
                f"could not connect to the session store {self.location} and set it up "
                f"within {self._connect_timeout:g} s (connecting) + "
                f"{self._statement_timeout:g} s (statements)"
            ) from None
        except psycopg.Error as exc:
            raise SessionError(
                f"could not open the session store {self.location}: {first_line(exc)}"
            ) from exc

    async def _migrate(self, conn: AsyncConnection[Any]) -> None:
        """Bring the schema to the version this code writes (the number of migrations it
        knows), in one transaction, under an advisory lock."""
        target = len(_pg_schema.MIGRATIONS)
        table = "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s"
        migrations = f"{self.quoted}.fanloop_schema_migrations"
        applied = f"SELECT coalesce(max(version), 0) FROM {migrations}"
        if await (await conn.execute(table, (self.schema, "fanloop_schema_migrations"))).fetchone():
            version = await scalar(conn, applied)
            self._check_version(version, target)
            if version == target:
                return
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.schema),))
            found = "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s"
            if not await (await conn.execute(found, (self.schema,))).fetchone():
                await conn.execute(f"CREATE SCHEMA {self.quoted}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {migrations} (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            # Another process may have migrated while we waited for the lock.
            version = await scalar(conn, applied)
            self._check_version(version, target)
            for step in range(version + 1, target + 1):
                for statement in _pg_schema.MIGRATIONS[step - 1]:
                    await conn.execute(statement.format(s=self.quoted))
                await conn.execute(f"INSERT INTO {migrations} (version) VALUES (%s)", (step,))
                logger.debug("session_schema_migrated", schema=self.schema, version=step)

    def _check_version(self, version: int, target: int) -> None:
        if version > target:
            raise SessionError(
                f"the session store {self.location} has schema version {version}; this "
                f"fanloop knows up to {target}: upgrade fanloop"
            )


async def scalar(
    conn: AsyncConnection[Any], statement: str, params: Sequence[Any] | None = None
) -> Any:
    """The first column of the first row of ``statement``, or ``None`` without rows."""
    row = await (await conn.execute(statement, params)).fetchone()
    return None if row is None else row[0]


_QUOTED = re.compile(r'"([^"]*)"')


def _without_values(message: str, dsn: str) -> str:
    """libpq's complaint about a connection string, with the values it quotes hidden.

    libpq quotes the piece it could not parse (``unexpected spaces found in "hun ter2"``),
    which may be a password. Only the option names the DSN sets (``name=``) stay visible.
    """

    def hide(match: re.Match[str]) -> str:
        piece = match[1]
        named = re.search(rf"(?:^|[\s?&]){re.escape(piece)}\s*=", dsn) if piece else None
        return match[0] if piece == "=" or named else '"…"'

    return _QUOTED.sub(hide, message)


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (psycopg adds DETAIL and CONTEXT lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
