"""SQLiteStore: sessions in one SQLite file, safe for many tasks and processes at once.

Layout (schema version 1, kept in ``PRAGMA user_version``)::

    sessions  id PK, created_at, updated_at, message_count, metadata (JSON)
    messages  (session_id, idx) PK, role, json        one row per message
    effects   (session_id, call_id) PK, turn, tool, arguments_hash, status, result (JSON),
              started_at, finished_at, resolution_note

The file runs in WAL mode with foreign keys on and a busy timeout. Every write is one
``BEGIN IMMEDIATE`` transaction, committed before the coroutine returns; with the default
``synchronous=NORMAL`` a committed write survives the process being killed (only a power
loss or OS crash can drop the last transactions; ``synchronous="FULL"`` closes that too, at
the price of an fsync per write). The blocking calls run in worker threads, one at a time per
store, over a single connection.

The JSON of messages and results is written and read as UTF-8 bytes (``CAST`` to and from
``TEXT`` in SQL, so the columns hold text): no one-shot conversion of a large string holds the
interpreter lock. Encoding and decoding follow ``_codec.py``: on the event loop when small,
in a worker thread (a piece at a time when large) otherwise.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio.to_thread

from .._log import logger
from ..messages import Message
from ._codec import (
    dump_models,
    load_metadata,
    load_record,
    merged_metadata,
    receipt_from_row,
    receipt_row,
    title_in,
)
from ._errors import SessionConflict, SessionError, SessionNotFound
from ._models import (
    Clock,
    EffectReceipt,
    EffectStatus,
    SessionInfo,
    SessionRecord,
    new_session_id,
)
from ._session import Session

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

T = TypeVar("T")

# Migration i takes the schema from version i to version i + 1. Never edit a released one:
# append a new one.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE sessions (
            id            TEXT PRIMARY KEY,
            created_at    REAL NOT NULL,
            updated_at    REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            metadata      TEXT NOT NULL DEFAULT '{}'
        )
        """,
        """
        CREATE TABLE messages (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            idx        INTEGER NOT NULL,
            role       TEXT NOT NULL,
            json       TEXT NOT NULL,
            PRIMARY KEY (session_id, idx)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE effects (
            session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            call_id         TEXT NOT NULL,
            turn            INTEGER NOT NULL,
            tool            TEXT NOT NULL,
            arguments_hash  TEXT NOT NULL,
            status          TEXT NOT NULL CHECK (status IN
                                ('started', 'committed', 'resolved_applied',
                                 'resolved_not_applied')),
            result          TEXT,
            started_at      REAL NOT NULL,
            finished_at     REAL,
            resolution_note TEXT,
            PRIMARY KEY (session_id, call_id)
        )
        """,
        "CREATE INDEX effects_by_status ON effects (session_id, status)",
        "CREATE INDEX sessions_by_update ON sessions (updated_at)",
    ),
    ("ALTER TABLE effects ADD COLUMN attempt TEXT",),
)

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code writes; older files are migrated when first opened."""

_EFFECT_COLUMNS = (
    "session_id, call_id, turn, tool, arguments_hash, status, result, started_at, "
    "finished_at, resolution_note, attempt"
)
_EFFECT_SELECT = _EFFECT_COLUMNS.replace(" result,", " CAST(result AS BLOB),")
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, idx, role, json) VALUES (?, ?, ?, CAST(? AS TEXT))"
)


class SQLiteStore:
    """A :class:`SessionStore` in one SQLite file (the command line's default).

    The file and its parent directories are created on first use. Any number of stores, in
    any number of processes, may use the same file at once.

    Example:
        >>> store = SQLiteStore(".fanloop/sessions.db")  # doctest: +SKIP
        >>> session = await store.open("support-42")      # doctest: +SKIP

    Args:
        path: the database file; ``":memory:"`` for a private in-memory database.
        busy_timeout: seconds to wait for another writer to finish before failing.
        synchronous: ``"NORMAL"`` survives the process dying; ``"FULL"`` also survives
            a power loss, with an fsync per write.

    Attributes:
        path: the database file, as given.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 10.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = os.fspath(path)
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._lock = threading.Lock()
        self._clock = Clock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path!r}>"

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,  # we issue BEGIN / COMMIT ourselves
            check_same_thread=False,  # one thread at a time, under self._lock
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            _use_wal(conn, self._busy_timeout)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            _migrate(conn, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        with self._lock:
            if self._closed:
                raise SessionError("the session store is closed")
            conn = self._conn
            if conn is None:
                conn = self._conn = self._connect()
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, fn, False)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, fn, True)

    # -- what applications call ------------------------------------------------------------

    async def open(self, session_id: str | None = None) -> Session:
        """The session with this id, created empty if it does not exist."""
        return Session(self, await self.open_record(session_id or new_session_id()))

    async def load(self, session_id: str) -> Session:
        """The existing session with this id (:class:`SessionNotFound` if none)."""
        return Session(self, await self.read_record(session_id))

    async def delete(self, session_id: str) -> None:
        """Delete a session with its messages and receipts."""

        def delete(conn: sqlite3.Connection) -> None:
            if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
                raise SessionNotFound(session_id)

        await self._write(delete)

    async def aclose(self) -> None:
        """Close the connection; the store cannot be used afterwards."""

        def close() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close)

    # -- what Session calls ----------------------------------------------------------------

    async def open_record(self, session_id: str) -> SessionRecord:
        """Create the session if needed and return what is stored."""
        if not session_id:
            raise ValueError("a session id cannot be empty")

        def open_(conn: sqlite3.Connection) -> _Stored:
            now = self._clock()
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (session_id, now, now),
            )
            return _fetch_record(conn, session_id)

        return await load_record(session_id, *await self._write(open_))

    async def read_record(self, session_id: str) -> SessionRecord:
        """What is stored for the session."""
        stored = await self._read(lambda conn: _fetch_record(conn, session_id))
        return await load_record(session_id, *stored)

    async def append_messages(
        self, session_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        """Store ``messages`` from index ``start`` (:class:`SessionConflict` if taken)."""
        jsons = await dump_models(messages)
        roles = [m.role for m in messages]

        def append(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE sessions SET message_count = ?, updated_at = ? "
                "WHERE id = ? AND message_count = ?",
                (start + len(jsons), self._clock(), session_id, start),
            )
            if cursor.rowcount != 1:
                count = _message_count(conn, session_id)
                raise SessionConflict(
                    f"session {session_id!r} holds {count} messages, not {start}: "
                    "another writer changed it",
                    session_id=session_id,
                )
            conn.executemany(_INSERT_MESSAGE, _rows(session_id, start, roles, jsons))
            jsons.clear()  # long texts are freed here, off the loop (see load_record)

        await self._write(append)

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole history in one transaction."""
        jsons = await dump_models(messages)
        roles = [m.role for m in messages]

        def replace(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE sessions SET message_count = ?, updated_at = ? WHERE id = ?",
                (len(jsons), self._clock(), session_id),
            )
            if cursor.rowcount != 1:
                raise SessionNotFound(session_id)
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            conn.executemany(_INSERT_MESSAGE, _rows(session_id, 0, roles, jsons))
            jsons.clear()  # long texts are freed here, off the loop (see load_record)

        await self._write(replace)

    async def update_metadata(self, session_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the metadata; ``None`` removes a key."""

        def update(conn: sqlite3.Connection) -> dict[str, Any]:
            row = conn.execute(
                "SELECT metadata FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            metadata, text = merged_metadata(row[0], changes, session_id)
            conn.execute(
                "UPDATE sessions SET metadata = ?, updated_at = ? WHERE id = ?",
                (text, self._clock(), session_id),
            )
            return metadata

        return await self._write(update)

    async def update_metadata_if(
        self, session_id: str, key: str, expected: Any, changes: Mapping[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Merge ``changes`` only if ``metadata[key] == expected``; return whether it was."""

        def update(conn: sqlite3.Connection) -> tuple[bool, dict[str, Any]]:
            row = conn.execute(
                "SELECT metadata FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            stored = load_metadata(row[0], session_id)
            if stored.get(key) != expected:
                return False, stored
            metadata, text = merged_metadata(row[0], changes, session_id)
            conn.execute(
                "UPDATE sessions SET metadata = ?, updated_at = ? WHERE id = ?",
                (text, self._clock(), session_id),
            )
            return True, metadata

        return await self._write(update)

    async def add_receipt(self, receipt: EffectReceipt) -> EffectReceipt:
        """Insert ``receipt`` unless its call id has one; return the stored receipt."""
        held = [await receipt_row(receipt)]  # handed to the worker, freed there

        def add(conn: sqlite3.Connection) -> EffectReceipt:
            _require_session(conn, receipt.session_id)
            conn.execute(
                f"INSERT INTO effects ({_EFFECT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, CAST(? AS TEXT), ?, ?, ?, ?) "
                "ON CONFLICT (session_id, call_id) DO NOTHING",
                held.pop(),
            )
            stored = _get_receipt(conn, receipt.session_id, receipt.call_id)
            assert stored is not None
            return stored

        return await self._write(add)

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        """Overwrite the stored receipt if its status is ``expected``; return the stored one."""
        held = [await receipt_row(receipt)]  # handed to the worker, freed there
        session_id, call_id = receipt.session_id, receipt.call_id

        def update(conn: sqlite3.Connection) -> EffectReceipt | None:
            _require_session(conn, session_id)
            conn.execute(
                "UPDATE effects SET turn = ?, tool = ?, arguments_hash = ?, status = ?, "
                "result = CAST(? AS TEXT), started_at = ?, finished_at = ?, "
                "resolution_note = ?, attempt = ? "
                "WHERE session_id = ? AND call_id = ? AND status = ?",
                (*held.pop()[2:], session_id, call_id, expected.value),
            )
            return _get_receipt(conn, session_id, call_id)

        return await self._write(update)

    async def get_receipt(self, session_id: str, call_id: str) -> EffectReceipt | None:
        """The receipt for this call id, if any."""

        def get(conn: sqlite3.Connection) -> EffectReceipt | None:
            _require_session(conn, session_id)
            return _get_receipt(conn, session_id, call_id)

        return await self._read(get)

    async def list_receipts(
        self, session_id: str, status: EffectStatus | None = None
    ) -> builtins.list[EffectReceipt]:
        """The session's receipts, oldest first."""

        def list_(conn: sqlite3.Connection) -> builtins.list[EffectReceipt]:
            _require_session(conn, session_id)
            sql = f"SELECT {_EFFECT_SELECT} FROM effects WHERE session_id = ?"
            params: tuple[str, ...] = (session_id,)
            if status is not None:
                sql += " AND status = ?"
                params += (status.value,)
            return [receipt_from_row(row) for row in conn.execute(sql + " ORDER BY rowid", params)]

        return await self._read(list_)

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session, the most recently updated first."""

        def list_(conn: sqlite3.Connection) -> builtins.list[SessionInfo]:
            rows = conn.execute(
                "SELECT s.id, s.created_at, s.updated_at, s.message_count, s.metadata, "
                "(SELECT COUNT(*) FROM effects e WHERE e.session_id = s.id "
                "AND e.status = 'started') "
                "FROM sessions s ORDER BY s.updated_at DESC, s.id"
            )
            return [
                SessionInfo(sid, created, updated, count, title_in(meta), open_)
                for sid, created, updated, count, meta, open_ in rows
            ]

        return await self._read(list_)


# -- helpers run in the worker thread, inside a transaction ------------------------------------


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise SessionError(
            f"{path} has session schema version {version}; this fanloop knows up to "
            f"{SCHEMA_VERSION}: upgrade fanloop"
        )
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the write lock.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target - 1]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {target}")
            logger.debug("session_schema_migrated", path=path, version=target)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL (a no-op once any connection has: the mode is persistent).

    The switch needs the file to itself, and SQLite reports "database is locked" at once,
    without its busy handler, when another process holds it (typically: several processes
    opening a new file together). So we wait here, up to the busy timeout.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _require_session(conn: sqlite3.Connection, session_id: str) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFound(session_id)


def _message_count(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT message_count FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    count: int = row[0]
    return count


_Stored = tuple[float, float, str, list[bytes]]
"""A session's row as read: created_at, updated_at, metadata, and its messages' JSON."""


def _rows(
    session_id: str, start: int, roles: Sequence[str], jsons: Sequence[bytes]
) -> Iterator[tuple[str, int, str, bytes]]:
    """The rows of ``messages`` for these messages, numbered from ``start``."""
    for offset, (role, text) in enumerate(zip(roles, jsons, strict=True)):
        yield session_id, start + offset, role, text


def _fetch_record(conn: sqlite3.Connection, session_id: str) -> _Stored:
    row = conn.execute(
        "SELECT created_at, updated_at, metadata FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    heads = conn.execute(
        "SELECT idx, substr(CAST(json AS BLOB), 1, ?), length(CAST(json AS BLOB)) "
        "FROM messages WHERE session_id = ? ORDER BY idx",
        (_PIECE, session_id),
    ).fetchall()
    texts = [
        head if len(head) >= size else _whole_message(conn, session_id, idx, head, size)
        for idx, head, size in heads
    ]
    return row[0], row[1], row[2], texts


_PIECE = 8 << 20
"""A stored message longer than this is read a piece of this size at a time."""


def _whole_message(
    conn: sqlite3.Connection, session_id: str, idx: int, head: bytes, size: int
) -> bytes:
    """A message whose JSON (``size`` bytes) is longer than its first piece ``head``: the
    other pieces read one by one, then joined.

    The ``sqlite3`` module copies a value into a new ``bytes`` in one call that holds the
    interpreter lock, and for tens of MiB most of that call is the system mapping fresh pages
    (26 MiB: 17-50 ms on a quiet machine, over 100 ms on a loaded one, caught in CI by the
    huge-session test's stack dump), while the event loop waits for the lock. A piece's copy
    holds the lock for that piece only, and the join (``bytes.join`` of over a MiB) lets go
    of it while it copies. SQLite reads the whole value for each piece, without the lock:
    three more reads for 26 MiB (a 26 MiB load takes about 400 ms instead of 235 ms).
    """
    pieces = [head]
    where = "FROM messages WHERE session_id = ? AND idx = ?"
    for start in range(len(head) + 1, size + 1, _PIECE):
        (piece,) = conn.execute(
            f"SELECT substr(CAST(json AS BLOB), ?, ?) {where}", (start, _PIECE, session_id, idx)
        ).fetchone()
        pieces.append(piece)
    return b"".join(pieces)


def _get_receipt(conn: sqlite3.Connection, session_id: str, call_id: str) -> EffectReceipt | None:
    row = conn.execute(
        f"SELECT {_EFFECT_SELECT} FROM effects WHERE session_id = ? AND call_id = ?",
        (session_id, call_id),
    ).fetchone()
    return None if row is None else receipt_from_row(row)
