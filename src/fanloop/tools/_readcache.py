"""The read cache: a repeated read of an unchanged file is answered with a short notice.

Every read, write, edit and delete made through the file tools is logged to a ``file_access``
table in SQLite (by default ``~/.fanloop/fanloop.db``; ``$FANLOOP_HOME/fanloop.db`` when that
variable is set), keyed by a *scope*: the conversation the call belongs to. When ``read_file``
is asked for the same path, offset and limit again in the same scope, and the file's content
hash matches the one logged at the last read, and no write, edit or delete of that path was
logged since (in any scope), the tool answers "unchanged since you last read it" instead of
repeating the content. ``force=true`` bypasses the cache.

The scope is the run's ``session_id``; a run without a session is scoped to its ``run_id`` (a
new conversation has seen nothing yet), a sub-agent always to its own ``run_id``, and a call
made outside any run to ``"global"``.

The cache is an optimisation: if its database cannot be opened or written, reads carry on
without it and a warning is logged.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Literal

import anyio.to_thread

from .._log import logger
from .base import current_context

__all__ = ["ReadCache", "cache_scope", "default_db_path", "default_read_cache"]

Op = Literal["read", "write", "edit", "delete"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS file_access (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    op           TEXT    NOT NULL CHECK (op IN ('read', 'write', 'edit', 'delete')),
    "offset"     INTEGER,
    "limit"      INTEGER,
    content_hash TEXT,
    accessed_at  REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS file_access_path ON file_access (path, id);
CREATE INDEX IF NOT EXISTS file_access_scope ON file_access (session_key, path, id);
"""

_LOOKUP = """
SELECT r.id FROM file_access AS r
WHERE r.session_key = ? AND r.path = ? AND r.op = 'read'
  AND r."offset" IS ? AND r."limit" IS ? AND r.content_hash = ?
  AND r.id = (SELECT max(id) FROM file_access
              WHERE session_key = r.session_key AND path = r.path AND op = 'read'
                AND "offset" IS r."offset" AND "limit" IS r."limit")
  AND NOT EXISTS (SELECT 1 FROM file_access AS w
                  WHERE w.path = r.path AND w.op != 'read' AND w.id > r.id)
"""

_RETENTION_SECONDS = 30 * 24 * 3600


def default_db_path() -> Path:
    """``$FANLOOP_HOME/fanloop.db``, or ``~/.fanloop/fanloop.db`` when the variable is unset."""
    home = os.environ.get("FANLOOP_HOME")
    base = Path(home) if home else Path.home() / ".fanloop"
    return base / "fanloop.db"


def cache_scope() -> str:
    """The scope of the current tool call (see the module docstring)."""
    try:
        ctx = current_context()
    except LookupError:
        return "global"
    if ctx.depth == 0 and ctx.session_id:
        return f"session:{ctx.session_id}"
    return f"run:{ctx.run_id}"


class ReadCache:
    """The ``file_access`` log in one SQLite database.

    Args:
        path: the database file; created (with its directory) on first use. ``None`` means
            :func:`default_db_path` at the time of first use.

    Example:
        >>> cache = ReadCache(":memory:")
        >>> cache.record_sync("s", "/w/a.txt", "read", offset=1, limit=None, digest="abc")
        >>> cache.seen_sync("s", "/w/a.txt", offset=1, limit=None, digest="abc")
        True
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._path = None if path is None else str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._broken = False

    @property
    def path(self) -> str:
        """The database file (``:memory:`` for an in-memory database)."""
        return self._path if self._path is not None else str(default_db_path())

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            path = self.path
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
            conn.executescript(_SCHEMA)
            conn.execute(
                "DELETE FROM file_access WHERE accessed_at < ?",
                (time.time() - _RETENTION_SECONDS,),
            )
            conn.commit()
            self._conn = conn
        return self._conn

    def record_sync(
        self,
        scope: str,
        path: str,
        op: Op,
        *,
        offset: int | None = None,
        limit: int | None = None,
        digest: str | None = None,
    ) -> None:
        """Log one access (blocking)."""
        with self._lock:
            if self._broken:
                return
            try:
                conn = self._connection()
                conn.execute(
                    'INSERT INTO file_access (session_key, path, op, "offset", "limit",'
                    " content_hash, accessed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (scope, path, op, offset, limit, digest, time.time()),
                )
                conn.commit()
            except (sqlite3.Error, OSError) as exc:
                self._give_up(exc)

    def seen_sync(
        self, scope: str, path: str, *, offset: int | None, limit: int | None, digest: str
    ) -> bool:
        """Whether ``scope`` already read this exact range of this exact content (blocking)."""
        with self._lock:
            if self._broken:
                return False
            try:
                row = (
                    self._connection()
                    .execute(_LOOKUP, (scope, path, offset, limit, digest))
                    .fetchone()
                )
            except (sqlite3.Error, OSError) as exc:
                self._give_up(exc)
                return False
            return row is not None

    async def record(
        self,
        scope: str,
        path: str,
        op: Op,
        *,
        offset: int | None = None,
        limit: int | None = None,
        digest: str | None = None,
    ) -> None:
        """Log one access."""
        await anyio.to_thread.run_sync(
            lambda: self.record_sync(scope, path, op, offset=offset, limit=limit, digest=digest)
        )

    async def seen(
        self, scope: str, path: str, *, offset: int | None, limit: int | None, digest: str
    ) -> bool:
        """Whether ``scope`` already read this exact range of this exact content."""
        return await anyio.to_thread.run_sync(
            lambda: self.seen_sync(scope, path, offset=offset, limit=limit, digest=digest)
        )

    def accesses(self, path: str | None = None) -> list[tuple[str, str, str]]:
        """``(scope, path, op)`` of every logged access, oldest first (for inspection)."""
        with self._lock:
            sql = "SELECT session_key, path, op FROM file_access"
            params: tuple[str, ...] = ()
            if path is not None:
                sql += " WHERE path = ?"
                params = (path,)
            rows = self._connection().execute(sql + " ORDER BY id", params).fetchall()
            return [(str(a), str(b), str(c)) for a, b, c in rows]

    def close(self) -> None:
        """Close the database connection (it reopens on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _give_up(self, exc: Exception) -> None:
        self._broken = True
        logger.warning("read_cache_unavailable", path=self.path, error=str(exc))

    def __repr__(self) -> str:
        return f"ReadCache({self.path!r})"


_defaults: dict[str, ReadCache] = {}
_defaults_lock = threading.Lock()


def default_read_cache() -> ReadCache:
    """The shared cache at :func:`default_db_path` (resolved now, one instance per path)."""
    path = str(default_db_path())
    with _defaults_lock:
        cache = _defaults.get(path)
        if cache is None:
            cache = _defaults[path] = ReadCache(path)
        return cache
