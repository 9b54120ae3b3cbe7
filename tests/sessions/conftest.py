"""Fixtures for the session store tests: every contract test runs against every store."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from fanloop.sessions import MemoryStore, SessionStore, SQLiteStore

HERE = Path(__file__).parent
CHILD = HERE / "_child.py"
"""The helper script the crash and multi-process tests run as a subprocess."""

Reopen = Callable[[], Awaitable[SessionStore]]


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


@pytest.fixture(params=["memory", "sqlite"])
async def store_and_reopen(
    request: pytest.FixtureRequest, db_path: Path
) -> AsyncIterator[tuple[SessionStore, Reopen]]:
    """A store, and a function that opens the same data afresh (a new SQLiteStore on the file;
    the same MemoryStore, since memory does not outlive its store)."""
    opened: list[SessionStore] = []

    async def reopen() -> SessionStore:
        if request.param == "memory":
            return opened[0]
        store = SQLiteStore(db_path)
        opened.append(store)
        return store

    first: SessionStore = MemoryStore() if request.param == "memory" else SQLiteStore(db_path)
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
