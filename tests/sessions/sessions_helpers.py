"""Helpers shared by the session tests and ``_child.py`` (imported as ``sessions_helpers``).

The PostgreSQL store runs against the real server at ``FANLOOP_TEST_PG_DSN`` (by default
``postgresql://postgres@127.0.0.1:5432/test``), each test in a schema of its own; tests that
need it are skipped, with the reason, when the server cannot be reached.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

import anyio
from anyio.abc import SocketStream

from fanloop.sessions import PostgresStore, SQLiteStore

PG_DSN = os.environ.get("FANLOOP_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
"""The test server (override with FANLOOP_TEST_PG_DSN)."""


@cache
def pg_unreachable() -> str | None:
    """Why PostgreSQL cannot be used for the tests, or ``None`` when it can (asked once)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'fanloop[postgres]')"
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL is not reachable at {PG_DSN}: {str(exc).strip()}"
    return None


def pg_address() -> tuple[str, int]:
    """The test server's host and port."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(PG_DSN)
    return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"fanloop_test_{uuid.uuid4().hex[:12]}"


def pg_execute(
    statement: str, params: tuple[object, ...] | None = None
) -> list[tuple[object, ...]]:
    """Run one statement on a plain connection, outside any store; return its rows."""
    import psycopg

    with psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True) as conn:
        cursor = conn.execute(statement, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def drop_schema(schema: str) -> None:
    """Drop a test schema with everything in it."""
    pg_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def empty_schema(schema: str) -> None:
    """Delete every session in a schema a store set up (if one did)."""
    if pg_execute("SELECT to_regclass(%s)", (f'"{schema}".fanloop_sessions',)) != [(None,)]:
        pg_execute(
            f'TRUNCATE "{schema}".fanloop_sessions, "{schema}".fanloop_messages, '
            f'"{schema}".fanloop_effects'
        )


def open_store(target: str) -> SQLiteStore | PostgresStore:
    """The store a target names: a SQLite file, or ``DSN#SCHEMA`` for PostgreSQL."""
    if "#" in target:
        dsn, schema = target.rsplit("#", 1)
        return PostgresStore(dsn, schema=schema)
    return SQLiteStore(target)


class FreezingProxy:
    """A TCP proxy on 127.0.0.1 in front of PostgreSQL that can stop forwarding at will.

    After :meth:`freeze`, bytes sent through existing connections are read and dropped, and
    nothing comes back: to the client, a server that stopped answering without closing.

    Attributes:
        port: the port to connect to.
        connections: how many client connections it accepted.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        self.frozen = anyio.Event()

    def freeze(self) -> None:
        self.frozen.set()

    async def _pump(self, source: SocketStream, sink: SocketStream) -> None:
        try:
            async for data in source:
                if not self.frozen.is_set():
                    await sink.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def _serve(self, client: SocketStream) -> None:
        self.connections += 1
        async with (
            client,
            await anyio.connect_tcp(*pg_address()) as server,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._pump, client, server)
            await self._pump(server, client)
            tg.cancel_scope.cancel()


@asynccontextmanager
async def freezing_proxy() -> AsyncIterator[FreezingProxy]:
    """Run a :class:`FreezingProxy` for the duration of the block."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    proxy = FreezingProxy(port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy._serve)
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()


def huge_text(chars: int) -> str:
    """``chars`` characters of text, some of them non-ASCII (about 1.07 bytes a character as
    UTF-8), the same every time it is asked for."""
    return ("é" * 7 + "a" * 93) * (chars // 100)
