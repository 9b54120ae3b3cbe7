"""PostgresStore: sessions in PostgreSQL, shared by any number of processes and machines.

Each method is one transaction, committed (with ``synchronous_commit=on`` unless the DSN turns
it off) before the coroutine returns. An append is a single statement: the optimistic check on
``message_count`` and the new rows together, so two writers racing for the same index are
serialised by the row lock and the loser sees the winner's count (``SessionConflict``).
``_pg_pool.py`` holds the connection side (pool, migrations, timeouts), ``_pg_schema.py`` the
tables and the SQL text.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._unicode import INLINE, off_loop
from ..messages import Message
from ._codec import (
    dump_models,
    load_metadata,
    load_record,
    merge_metadata,
    receipts_from_rows,
    release,
    stored_receipt_row,
    title_in,
)
from ._errors import SessionConflict, SessionNotFound
from ._models import (
    EffectReceipt,
    EffectStatus,
    SessionInfo,
    SessionRecord,
    new_session_id,
)
from ._pg_copy import STAGE_BYTES, read_receipts, read_record, stage
from ._pg_pool import Database, scalar
from ._pg_schema import Statements
from ._session import Session

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresStore"]


class PostgresStore:
    """A :class:`SessionStore` in a PostgreSQL database (extra: ``fanloop[postgres]``).

    Any number of stores, in any number of processes, may use the same database and schema
    at once: any of them can open, append to and resume any session, and receipts work as
    with :class:`SQLiteStore`. The schema and its tables are created (or migrated) on first
    use, under an advisory lock, so processes starting together do not race.

    Use one store from one event loop; close it with :meth:`aclose` or ``async with``.

    Example:
        >>> store = PostgresStore("postgresql://127.0.0.1:5432/test")  # doctest: +SKIP
        >>> session = await store.open("support-42")                   # doctest: +SKIP

    Args:
        dsn: a libpq connection string: ``postgresql://user@host:5432/db`` or
            ``"host=... dbname=..."``. Passwords are never shown in messages.
        schema: the PostgreSQL schema holding the tables (created if missing).
        connect_timeout: seconds to connect, and to wait for a free pooled connection.
        statement_timeout: seconds any statement may run (or wait for a lock) on the server.
        max_connections: the most connections the store's pool opens.

    Raises:
        ConfigurationError: psycopg is not installed, or ``dsn`` cannot be parsed.
        ValueError: a bad schema name, timeout or pool size.

    Attributes:
        schema: the PostgreSQL schema.
        location: where the sessions live, printable: the DSN without its password, and
            the schema.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "fanloop",
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        max_connections: int = 10,
    ) -> None:
        self._db = Database(
            dsn,
            schema=schema,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            max_connections=max_connections,
        )
        self.schema = schema
        self.location = self._db.location
        self._sql = Statements.build(self._db.quoted)
        self._run = self._db.run

    def __repr__(self) -> str:
        return f"<PostgresStore {self.location}>"

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- what applications call ------------------------------------------------------------

    async def open(self, session_id: str | None = None) -> Session:
        """The session with this id, created empty if it does not exist."""
        return Session(self, await self.open_record(session_id or new_session_id()))

    async def load(self, session_id: str) -> Session:
        """The existing session with this id (:class:`SessionNotFound` if none)."""
        return Session(self, await self.read_record(session_id))

    async def delete(self, session_id: str) -> None:
        """Delete a session with its messages and receipts."""

        async def delete(conn: AsyncConnection[Any]) -> None:
            if (await conn.execute(self._sql.delete, (session_id,))).rowcount == 0:
                raise SessionNotFound(session_id)

        await self._run(delete)

    async def aclose(self) -> None:
        """Close the pool; the store cannot be used afterwards."""
        await self._db.aclose()

    # -- what Session calls ----------------------------------------------------------------

    async def open_record(self, session_id: str) -> SessionRecord:
        """Create the session if needed and return what is stored."""
        if not session_id:
            raise ValueError("a session id cannot be empty")

        async def open_(conn: AsyncConnection[Any]) -> tuple[Any, ...]:
            await conn.execute(self._sql.open, (session_id,))
            return await self._fetch_record(conn, session_id)

        return await load_record(session_id, *await self._run(open_, transaction=True))

    async def read_record(self, session_id: str) -> SessionRecord:
        """What is stored for the session."""
        row = await self._run(lambda conn: self._fetch_record(conn, session_id))
        return await load_record(session_id, *row)

    async def append_messages(
        self, session_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        """Store ``messages`` from index ``start`` (:class:`SessionConflict` if taken)."""
        params = await _message_params(session_id, start, messages)
        jsons = params["jsons"]
        staged = sum(map(len, jsons)) > STAGE_BYTES
        if staged:
            statement = self._sql.append_staged
            del params["jsons"]
        else:
            statement = self._sql.append if messages else self._sql.touch

        async def append(conn: AsyncConnection[Any]) -> None:
            if staged:
                await stage(conn, jsons)
            cursor = await conn.execute(statement, params)
            if cursor.rowcount == max(1, len(messages)):
                return
            count = await scalar(conn, self._sql.count, (session_id,))
            if count is None:
                raise SessionNotFound(session_id)
            raise SessionConflict(
                f"session {session_id!r} holds {count} messages, not {start}: "
                "another writer changed it",
                session_id=session_id,
            )

        await self._run(append, transaction=staged)
        if staged:
            await release(jsons)

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole history in one transaction."""
        params = await _message_params(session_id, 0, messages)
        jsons = params["jsons"]
        staged = sum(map(len, jsons)) > STAGE_BYTES
        if staged:
            del params["jsons"]

        async def replace(conn: AsyncConnection[Any]) -> None:
            if (await conn.execute(self._sql.replace_head, params)).rowcount != 1:
                raise SessionNotFound(session_id)
            await conn.execute(self._sql.replace_clear, params)
            if staged:
                await stage(conn, jsons)
                await conn.execute(self._sql.insert_staged, params)
            else:
                await conn.execute(self._sql.insert_messages, params)

        await self._run(replace, transaction=True)
        if staged:
            await release(jsons)

    async def update_metadata(self, session_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the metadata; ``None`` removes a key."""

        async def update(conn: AsyncConnection[Any]) -> dict[str, Any]:
            stored = await scalar(conn, self._sql.metadata_for_update, (session_id,))
            if stored is None:
                raise SessionNotFound(session_id)
            metadata, text = await merge_metadata(stored, changes, session_id)
            await conn.execute(self._sql.metadata_set, (text, session_id))
            return metadata

        return await self._run(update, transaction=True)

    async def update_metadata_if(
        self, session_id: str, key: str, expected: Any, changes: Mapping[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Merge ``changes`` only if ``metadata[key] == expected``; return whether it was.

        The row is locked (``FOR UPDATE``) between the comparison and the write, so two
        processes expecting the same value cannot both succeed."""

        async def update(conn: AsyncConnection[Any]) -> tuple[bool, dict[str, Any]]:
            stored = await scalar(conn, self._sql.metadata_for_update, (session_id,))
            if stored is None:
                raise SessionNotFound(session_id)
            current = load_metadata(stored, session_id)
            if current.get(key) != expected:
                return False, current
            metadata, text = await merge_metadata(stored, changes, session_id)
            await conn.execute(self._sql.metadata_set, (text, session_id))
            return True, metadata

        return await self._run(update, transaction=True)

    async def add_receipt(self, receipt: EffectReceipt) -> EffectReceipt:
        """Insert ``receipt`` unless its call id has one; return the stored receipt."""
        mine, row = await stored_receipt_row(receipt)
        statement, row, result = self._receipt_statement(self._sql.add_receipt, row)
        staged = [] if result is None else [result]  # freed off the loop once written
        del result

        async def add(conn: AsyncConnection[Any]) -> tuple[bool, builtins.list[Any] | None]:
            await self._require(conn, receipt.session_id)
            if staged:
                await stage(conn, staged)
            if await (await conn.execute(statement, row)).fetchone() is not None:
                return True, None  # written as given: no need to read a long result back
            return False, await self._get_receipt(conn, receipt.session_id, receipt.call_id)

        written, stored = await self._run(add, transaction=True)
        if staged:
            await release(staged)
        if written:
            return mine
        assert stored is not None  # a conflict means a stored receipt
        (kept,) = await receipts_from_rows([stored])
        return kept

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        """Overwrite the stored receipt if its status is ``expected``; return the stored one."""
        mine, (session_id, call_id, *values) = await stored_receipt_row(receipt)
        statement, params, result = self._receipt_statement(
            self._sql.update_receipt, (*values, session_id, call_id, expected.value), 4
        )
        staged = [] if result is None else [result]  # freed off the loop once written
        del result

        async def update(conn: AsyncConnection[Any]) -> tuple[bool, builtins.list[Any] | None]:
            await self._require(conn, session_id)
            if staged:
                await stage(conn, staged)
            if await (await conn.execute(statement, params)).fetchone() is not None:
                return True, None  # updated as given: no need to read a long result back
            return False, await self._get_receipt(conn, session_id, call_id)

        written, stored = await self._run(update, transaction=True)
        if staged:
            await release(staged)
        if written:
            return mine
        return await _one_receipt(stored)

    async def get_receipt(self, session_id: str, call_id: str) -> EffectReceipt | None:
        """The receipt for this call id, if any."""
        row = await self._run(lambda conn: self._get_receipt(conn, session_id, call_id))
        return await _one_receipt(row)

    async def list_receipts(
        self, session_id: str, status: EffectStatus | None = None
    ) -> builtins.list[EffectReceipt]:
        """The session's receipts, oldest first."""
        params = {"id": session_id}
        if status is None:
            statement = self._sql.list_receipts
        else:
            statement, params["status"] = self._sql.list_receipts_with_status, status.value

        async def list_(conn: AsyncConnection[Any]) -> builtins.list[builtins.list[Any]]:
            return await self._receipts(conn, statement, params)

        return await receipts_from_rows(await self._run(list_))

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session, the most recently updated first."""

        async def list_(conn: AsyncConnection[Any]) -> builtins.list[Any]:
            return await (await conn.execute(self._sql.list)).fetchall()

        rows = await self._run(list_)

        def infos() -> builtins.list[SessionInfo]:
            return [
                SessionInfo(sid, created, updated, count, title_in(meta), open_)
                for sid, created, updated, count, meta, open_ in rows
            ]

        return await off_loop(sum(len(row[4]) for row in rows) > INLINE, infos)  # type: ignore[no-any-return]

    def _receipt_statement(
        self, statement: str, params: tuple[Any, ...], at: int = 6
    ) -> tuple[str, tuple[Any, ...], bytes | None]:
        """``statement`` and ``params`` as given, or, when the result (``params[at]``) is
        heavy, the staged form of the statement, the parameters without it, and the result
        to stage."""
        result = params[at]
        if result is None or len(result) <= STAGE_BYTES:
            return statement, params, None
        staged = (
            self._sql.add_receipt_staged
            if statement == self._sql.add_receipt
            else self._sql.update_receipt_staged
        )
        return staged, params[:at] + params[at + 1 :], result

    # -- helpers, on a connection the caller holds ------------------------------------------

    async def _fetch_record(self, conn: AsyncConnection[Any], session_id: str) -> tuple[Any, ...]:
        row = await read_record(conn, self._sql.read, session_id)
        if row is None:
            raise SessionNotFound(session_id)
        return row

    async def _require(self, conn: AsyncConnection[Any], session_id: str) -> None:
        if await (await conn.execute(self._sql.exists, (session_id,))).fetchone() is None:
            raise SessionNotFound(session_id)

    async def _get_receipt(
        self, conn: AsyncConnection[Any], session_id: str, call_id: str
    ) -> builtins.list[Any] | None:
        """The receipt's stored row, decoded by the caller once the connection is back."""
        params = {"id": session_id, "call": call_id}
        rows = await self._receipts(conn, self._sql.get_receipt, params)
        return rows[0] if rows else None

    async def _receipts(
        self, conn: AsyncConnection[Any], statement: str, params: dict[str, str]
    ) -> builtins.list[builtins.list[Any]]:
        rows = await read_receipts(conn, statement, params)
        if rows is None:
            raise SessionNotFound(params["id"])
        return rows


async def _one_receipt(row: Sequence[Any] | None) -> EffectReceipt | None:
    if row is None:
        return None
    rows = [row]
    del row  # handed over: a long result is freed where it is decoded
    return (await receipts_from_rows(rows))[0]


async def _message_params(
    session_id: str, start: int, messages: Sequence[Message]
) -> dict[str, Any]:
    return {
        "id": session_id,
        "start": start,
        "end": start + len(messages),
        "roles": [m.role for m in messages],
        "jsons": await dump_models(messages),
    }
