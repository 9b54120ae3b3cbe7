"""Run one statement on a SQLite file, read-only and bounded.

- The file is opened with ``mode=ro`` and ``PRAGMA query_only=ON``; ATTACH is impossible
  (``SQLITE_LIMIT_ATTACHED=0``) and extension loading is off.
- An authorizer, called by SQLite itself while it compiles the statement, allows reading
  only: SELECT, reading tables, recursive CTEs, functions that are not refused (see
  :func:`~fanloop.tools._sql_check.denied_function`) and the reading pragmas.
- The work runs in a worker thread the caller can leave (:func:`run_blocking`); a progress
  handler stops the statement once the caller's deadline, the tool's timeout or a
  cancellation comes.
- Memory: the statement's program is read first (``EXPLAIN``) and every value the statement
  makes or reads is capped (``SQLITE_LIMIT_LENGTH``) so that all the registers it can fill at
  once stay within :data:`VALUE_BUDGET` (8 MiB per value at most, 64 KiB under a full sort);
  rows are read one at a time up to ``max_rows`` rows and ``max_chars`` characters, every cell
  cut.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._sql_check import (
    MAX_STATEMENT_CHARS,
    PRAGMAS_NO_ARG,
    PRAGMAS_WITH_ARG,
    denied_function,
    leading_command,
)
from ._sql_rows import QueryRows, RowReader

__all__ = ["VALUE_BUDGET", "execute_sqlite"]

VALUE_BUDGET = 16 * 1024 * 1024
"""Bytes that all the values a statement can hold at once may take, together."""
_MAX_VALUE = 8 * 1024 * 1024  # the largest single value, whatever the statement
_MIN_VALUE = 2 * 1024  # a statement that would leave less per value is refused
_PLAIN_VALUE = 1024 * 1024  # the cap for EXPLAIN and PRAGMA statements
# A full sort (ORDER BY or GROUP BY without LIMIT) of large values holds merge buffers that
# grow with the data sorted; small values keep them small.
_SORT_VALUE = 64 * 1024
_MAX_CHARS = 1_000_000
_PROGRESS_OPS = 1000  # virtual machine steps between two checks of the clock

# Opcodes that put a value of any size into a register, and which column of EXPLAIN's output
# (addr, opcode, p1, p2, p3, ...) names that register (see https://sqlite.org/opcode.html).
# Literals are left out: their size is bounded by the statement's.
_VALUE_OPS = {
    "Column": 4, "VColumn": 4, "Function": 4, "PureFunc": 4, "Function0": 4, "PureFunc0": 4,
    "Concat": 4, "Copy": 3, "AggStep": 4, "AggStep1": 4, "AggInverse": 4, "AggValue": 4,
    "AggFinal": 2, "MakeRecord": 4, "RowData": 3, "SorterData": 3,
}  # fmt: skip

_ACTIONS = {
    getattr(sqlite3, f"SQLITE_{name}"): name.lower().replace("_", " ")
    for name in (
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE",
        "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "TRANSACTION", "UPDATE",
        "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE",
        "DROP_VTABLE", "SAVEPOINT",
    )
    if hasattr(sqlite3, f"SQLITE_{name}")
}  # fmt: skip
_READING = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


async def execute_sqlite(
    path: str | Path,
    statement: str,
    params: Sequence[Any] = (),
    *,
    max_rows: int = 200,
    timeout: float = 30.0,
    max_chars: int = _MAX_CHARS,
) -> QueryRows:
    """Run ``statement`` on a read-only connection to the SQLite database at ``path``.

    No statement check is made here: the connection and its authorizer refuse anything but
    reading. See the module docstring for the limits.

    Raises:
        ToolError: the database is missing, the time ran out, or SQLite refused or failed the
            statement.
    """
    return await run_blocking(
        _run, Path(path), statement, tuple(params), max_rows, timeout, max_chars
    )


def _run(
    stop: Stop,
    path: Path,
    statement: str,
    params: tuple[Any, ...],
    max_rows: int,
    timeout: float,
    max_chars: int,
) -> QueryRows:
    try:
        limit = stop.remaining(timeout) or timeout
    except TimeoutError:
        raise ToolError("No time is left to run the query.") from None
    deadline = time.monotonic() + limit
    if not path.is_file():
        raise ToolError(f"The SQLite database {path} does not exist.")
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=min(limit, 5.0), isolation_level=None)
    denied: list[str] = []
    value_cap = _PLAIN_VALUE
    try:
        conn.execute("PRAGMA query_only = ON")
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 8 * MAX_STATEMENT_CHARS)
        conn.set_authorizer(_authorizer(denied))
        conn.set_progress_handler(
            lambda: int(stop.stopped or time.monotonic() > deadline), _PROGRESS_OPS
        )
        value_cap = _value_cap(conn, statement, params)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_cap)
        cursor = conn.execute(statement, params)
        columns = [d[0] for d in cursor.description or ()]
        reader = RowReader(max_rows, max_chars)
        while columns:
            row = cursor.fetchone()
            if row is None or not reader.add(row):
                break
        return reader.result(columns)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        raise _error(exc, denied, limit, value_cap) from None
    finally:
        conn.close()


def _value_cap(conn: sqlite3.Connection, statement: str, params: tuple[Any, ...]) -> int:
    """The cap on one value for ``statement``: the budget shared by the registers it can fill.

    The statement is compiled, not run (``EXPLAIN``), and the registers that opcodes fill with
    values of any size are counted (a loop refills the same registers); the authorizer sees
    the statement here first.
    """
    if leading_command(statement, "sqlite") in ("EXPLAIN", "PRAGMA"):
        return _PLAIN_VALUE
    program = conn.execute(f"EXPLAIN {statement}", params)
    registers: set[Any] = set()
    sorts = False
    while batch := program.fetchmany(256):
        registers.update(op[_VALUE_OPS[op[1]]] for op in batch if op[1] in _VALUE_OPS)
        sorts = sorts or any(op[1] == "SorterOpen" for op in batch)
    cap = min(_SORT_VALUE if sorts else _MAX_VALUE, VALUE_BUDGET // max(1, len(registers)))
    if cap < _MIN_VALUE:
        raise ToolError(
            "sql_query refused the statement: it holds too many values at once for the "
            "memory it may use; select fewer columns or expressions, or split it."
        )
    return cap


def _authorizer(denied: list[str]) -> Callable[[int, str | None, str | None, Any, Any], int]:
    """SQLite's authorizer for reading only; what it refuses is added to ``denied``."""

    def authorize(action: int, arg1: str | None, arg2: str | None, db: Any, source: Any) -> int:
        if action in _READING:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if arg2 is not None and not denied_function(arg2):
                return sqlite3.SQLITE_OK
            denied.append(f"it calls {arg2}()")
        elif action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in PRAGMAS_WITH_ARG or (arg2 is None and name in PRAGMAS_NO_ARG):
                return sqlite3.SQLITE_OK
            denied.append(
                f"PRAGMA {name}{'' if arg2 is None else f'({arg2})'} may change a setting"
            )
        elif action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_schema"):
            # Reported when a table-valued function (json_each, pragma_table_info) is first
            # used; the connection is read-only whatever is allowed here.
            return sqlite3.SQLITE_OK
        else:
            denied.append(f"it would {_ACTIONS.get(action, f'do action {action}')}")
        return sqlite3.SQLITE_DENY

    return authorize


def _error(exc: Exception, denied: list[str], limit: float, value_cap: int) -> ToolError:
    message = str(exc)
    if "interrupted" in message:
        return ToolError(f"The query ran longer than {limit:.3g} s and was stopped.")
    if "not authorized" in message or "authorization denied" in message:
        reason = denied[0] if denied else "SQLite's authorizer refused it"
        return ToolError(f"sql_query refused the statement: {reason}; sql_query only reads rows.")
    if "too big" in message:
        return ToolError(
            f"A value in this statement is larger than {value_cap} bytes, the most it may "
            "hold per value: compute smaller values (substr), select fewer columns or "
            "expressions (the memory is shared between them), or add a LIMIT to an ORDER BY "
            "or GROUP BY (a full sort allows less per value)."
        )
    return ToolError(f"SQLite error: {message.rstrip('.')}.")
