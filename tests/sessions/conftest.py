"""Fixtures for the session store tests: every contract test runs against every store.

PostgreSQL tests use the real server (see ``sessions_helpers``) and are skipped, with the
reason, when it cannot be reached.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from sessions_helpers import PG_DSN, drop_schema, empty_schema, new_schema, pg_unreachable

from fanloop.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore

HERE = Path(__file__).parent
CHILD = HERE / "_child.py"
"""The helper script the crash and multi-process tests run as a subprocess."""

Reopen = Callable[[], Awaitable[SessionStore]]
POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture(scope="session")
def pg_shared_schema() -> Iterator[str]:
    """One schema for this test process's contract tests, emptied before each of them (the
    first store creates its tables; migrations are tested on fresh schemas elsewhere)."""
    if (reason := pg_unreachable()) is not None:
        pytest.skip(reason)
    schema = new_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema name on the test server (not created yet), dropped after the test."""
    if (reason := pg_unreachable()) is not None:
        pytest.skip(reason)
    schema = new_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
def child_command() -> Callable[..., list[str]]:
    """Build the command line that runs the helper script ``_child.py`` with some arguments."""

    def command(*args: str) -> list[str]:
        return [sys.executable, str(CHILD), *args]

    return command


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A database file that does not exist yet, in a directory that does not either."""
    return tmp_path / ".fanloop" / "sessions.db"


@pytest.fixture(params=["sqlite", POSTGRES])
def durable_target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """Where a durable store keeps its data, as ``sessions_helpers.open_store`` takes it: a
    SQLite file, or ``DSN#SCHEMA`` (a fresh schema, dropped after the test)."""
    if request.param == "sqlite":
        return str(db_path)
    return f"{PG_DSN}#{request.getfixturevalue('pg_schema')}"


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
async def store_and_reopen(
    request: pytest.FixtureRequest, db_path: Path
) -> AsyncIterator[tuple[SessionStore, Reopen]]:
    """A store, and a function that opens the same data afresh (a new SQLiteStore or
    PostgresStore on the same data; the same MemoryStore, since memory does not outlive its
    store). PostgreSQL stores start on an empty schema."""
    schema = ""
    if request.param == "postgres":
        schema = request.getfixturevalue("pg_shared_schema")
        empty_schema(schema)
    opened: list[SessionStore] = []

    def make() -> SessionStore:
        if request.param == "sqlite":
            return SQLiteStore(db_path)
        return PostgresStore(PG_DSN, schema=schema)

    async def reopen() -> SessionStore:
        if request.param == "memory":
            return opened[0]
        opened.append(make())
        return opened[-1]

    first = MemoryStore() if request.param == "memory" else make()
    opened.append(first)
    yield first, reopen
    for store in opened:
        await store.aclose()


@pytest.fixture
def store(store_and_reopen: tuple[SessionStore, Reopen]) -> SessionStore:
    """Each store implementation in turn."""
    return store_and_reopen[0]


@pytest.fixture
def reopen(store_and_reopen: tuple[SessionStore, Reopen]) -> Reopen:
    """Open the store's data afresh, as another process would."""
    return store_and_reopen[1]
