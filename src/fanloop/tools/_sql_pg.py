"""Run one statement on PostgreSQL, read-only and bounded.

- The session is set up before the statement: ``standard_conforming_strings=on`` (so the
  statement check and the server read quotes alike), ``default_transaction_read_only=on``,
  ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` from the
  time left, ``client_connection_check_interval`` (the server stops the query soon after the
  connection goes away).
- The statement runs in ``BEGIN TRANSACTION READ ONLY`` and is always rolled back; the
  connection is closed after every call.
- The statement is sent over the extended query protocol only (psycopg's ``stream()``, and
  ``execute(..., binary=True)`` for the column description): the server itself refuses a text
  holding two statements.
- Rows are streamed one at a time and reading stops at ``max_rows`` rows or ``max_chars``
  characters. A SELECT, WITH, VALUES or TABLE statement is read through a subquery that cuts
  every cell on the server (``left(cell::text, 201)``, bytes as their length), so no single
  huge value reaches the client.
- When the caller is cancelled or runs out of time the running query is cancelled on the
  server and the connection closed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from ..errors import ToolError
from ._sql_check import WRAPPABLE, leading_command
from ._sql_rows import CELL_CHARS, QueryRows, RowReader

if TYPE_CHECKING:
    import psycopg

__all__ = ["execute_postgres"]

_GRACE = 2.0  # seconds the client waits past the server's statement_timeout
_CANCEL_WAIT = 2.0  # seconds spent at most sending a cancel request
_MAX_CHARS = 1_000_000

# Types passed through as psycopg reads them: small and of bounded size. Every other type is
# read as text cut on the server; bytea as its length.
_PASS_THROUGH = frozenset(
    {16, 20, 21, 23, 26, 700, 701, 1082, 1083, 1114, 1184, 1186, 1266, 2950}
)  # bool, int8, int2, int4, oid, float4, float8, date, time, timestamp, timestamptz, interval,
#  timetz, uuid
_BYTEA = 17


def time_left(timeout: float) -> float:
    """Seconds the statement may take: ``timeout``, or less if the caller's deadline is nearer.

    Raises:
        ToolError: no time is left.
    """
    deadline = anyio.current_effective_deadline()
    left = min(timeout, deadline - anyio.current_time()) if not math.isinf(deadline) else timeout
    if left <= 0:
        raise ToolError("No time is left to run the query.")
    return left


async def execute_postgres(
    dsn: str,
    statement: str,
    params: Sequence[Any] | None = None,
    *,
    max_rows: int = 200,
    timeout: float = 30.0,
    max_chars: int = _MAX_CHARS,
) -> QueryRows:
    """Run ``statement`` in a READ ONLY transaction (rolled back) on PostgreSQL.

    No statement check is made here: the session and the transaction refuse to write, and the
    protocol refuses a second statement. See the module docstring for the limits.

    Raises:
        ToolError: psycopg is missing, the connection failed, the time ran out, or the server
            refused or failed the statement.
    """
    try:
        import psycopg  # an optional dependency, imported when first used
    except ImportError:
        raise ToolError(
            "PostgreSQL support needs psycopg: pip install 'fanloop[postgres]'."
        ) from None
    limit = time_left(timeout)
    try:
        with anyio.fail_after(limit + _GRACE):
            return await _run(psycopg, dsn, statement, params, max_rows, max_chars, limit)
    except TimeoutError:
        raise ToolError(f"The query ran longer than {limit:.3g} s and was stopped.") from None
    except psycopg.errors.QueryCanceled:
        raise ToolError(f"The query ran longer than {limit:.3g} s and was stopped.") from None
    except psycopg.errors.LockNotAvailable:
        raise ToolError(
            f"The query waited longer than {limit:.3g} s for a lock and was stopped."
        ) from None
    except psycopg.Error as exc:
        detail = exc.diag.message_primary if exc.diag and exc.diag.message_primary else str(exc)
        raise ToolError(f"PostgreSQL error: {detail.rstrip('.')}.") from None


async def _run(
    psycopg: Any,
    dsn: str,
    statement: str,
    params: Sequence[Any] | None,
    max_rows: int,
    max_chars: int,
    limit: float,
) -> QueryRows:
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=max(2, math.ceil(limit)), client_encoding="utf8"
    )
    cancel = conn.pgconn.get_cancel()
    try:
        await _set_up_session(conn, limit)
        await conn.execute("BEGIN TRANSACTION READ ONLY")
        result = await _read(conn, statement, params, max_rows, max_chars)
        await conn.execute("ROLLBACK")
        return result
    except anyio.get_cancelled_exc_class():
        # The caller gave up (or the time ran out): stop the query on the server too.
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_CANCEL_WAIT),
            contextlib.suppress(Exception),
        ):
            await anyio.to_thread.run_sync(cancel.cancel, abandon_on_cancel=True)
        raise
    finally:
        await conn.close()


async def _set_up_session(conn: psycopg.AsyncConnection[Any], limit: float) -> None:
    ms = str(max(1, math.ceil(limit * 1000)))
    settings = {
        "standard_conforming_strings": "on",
        "default_transaction_read_only": "on",
        "statement_timeout": ms,
        "lock_timeout": ms,
        "idle_in_transaction_session_timeout": str(int(ms) + 5000),
        "DateStyle": "ISO",
        "IntervalStyle": "postgres",
    }
    if conn.info.server_version >= 140000:
        settings["client_connection_check_interval"] = "1000"
    calls = ", ".join("pg_catalog.set_config(%s, %s, false)" for _ in settings)
    await conn.execute(f"SELECT {calls}", [v for kv in settings.items() for v in kv])


async def _read(
    conn: psycopg.AsyncConnection[Any],
    statement: str,
    params: Sequence[Any] | None,
    max_rows: int,
    max_chars: int,
) -> QueryRows:
    columns: list[str] = []
    bytea: set[int] = set()
    sql = statement
    command = leading_command(statement)
    if command in WRAPPABLE or not command:
        described = await conn.execute(
            f"SELECT * FROM (\n{statement}\n) AS _fanloop_q LIMIT 0", params, binary=True
        )
        description = described.description or []
        columns = [d.name for d in description]
        sql = _wrapped(statement, [d.type_code for d in description], max_rows)
        bytea = {i for i, d in enumerate(description) if d.type_code == _BYTEA}
    reader = RowReader(max_rows, max_chars)
    cursor = conn.cursor()
    stream = cast("AsyncGenerator[Any, None]", cursor.stream(sql, params))  # extended protocol
    async with contextlib.aclosing(stream) as rows:
        async for row in rows:
            if bytea:
                row = tuple(
                    f"<{v} bytes>" if i in bytea and v is not None else v for i, v in enumerate(row)
                )
            if not columns and cursor.description:
                columns = [d.name for d in cursor.description]
            if not reader.add(row):
                break
    return reader.result(columns)


def _wrapped(statement: str, types: Sequence[int], max_rows: int) -> str:
    """``statement`` as a subquery whose cells are cut on the server."""
    cells = []
    for i, oid in enumerate(types, 1):
        ref = f"_fanloop_q.c{i}"
        if oid in _PASS_THROUGH:
            cells.append(ref)
        elif oid == _BYTEA:
            cells.append(f"pg_catalog.octet_length({ref})")
        else:
            cells.append(f"pg_catalog.left({ref}::pg_catalog.text, {CELL_CHARS + 1})")
    aliases = f"({', '.join(f'c{i}' for i in range(1, len(types) + 1))})" if types else ""
    return (
        f"SELECT {', '.join(cells)} FROM (\n{statement}\n) AS _fanloop_q{aliases} "
        f"LIMIT {max_rows + 1}"
    )
