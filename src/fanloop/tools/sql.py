"""SQL tools: ``sql_schema`` (tables and columns) and ``sql_query`` (one read-only statement).

The database is named by a DSN given to the tool (``SqlQueryTool(dsn=...)``) or, at call time,
by the ``FANLOOP_SQL_DSN`` environment variable:

- ``postgresql://user@host:5432/db`` (or ``postgres://``, or a libpq ``key=value`` string
  with ``dbname=``): PostgreSQL, through psycopg (``pip install 'fanloop[postgres]'``).
- ``sqlite:///absolute/path.db`` (two or more slashes: absolute), ``sqlite:relative.db`` or a
  plain file path (relative paths are taken from the workspace root): SQLite.

The tool changes nothing, in two independent layers:

1. :func:`check_read_only` (in a worker thread, linear, capped at 100 000 characters) accepts
   one SELECT, WITH, VALUES, TABLE, EXPLAIN (without ANALYZE) or SHOW statement (SQLite: a
   reading PRAGMA instead of SHOW and TABLE) that names no writing command, takes no row lock
   and calls no function with effects (see :mod:`._sql_check`).
2. The connection cannot write or reach further: PostgreSQL runs the statement over the
   extended query protocol (one statement only) in a ``READ ONLY`` transaction that is
   rolled back, with timeouts set on the server (:mod:`._sql_pg`); SQLite opens the file
   ``mode=ro`` with ``query_only``, no ATTACH, and an authorizer that allows reading only
   (:mod:`._sql_sqlite`).

Both honour the tool's ``timeout``, the run's deadline and cancellation, and read at most
``max_rows`` rows and a bounded number of characters, every cell cut.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy
from ..errors import ToolError
from ._blocking import Stop, run_blocking
from ._workspace import StrPath, Workspace, arg_opt_str, arg_str, truncate
from .base import Tool, ToolResult

if TYPE_CHECKING:
    from ._sql_check import Dialect, Statement
    from ._sql_pg import execute_postgres
    from ._sql_rows import QueryRows
    from ._sql_sqlite import execute_sqlite

__all__ = [
    "QueryRows",
    "SqlQueryTool",
    "SqlSchemaTool",
    "check_read_only",
    "execute_postgres",
    "execute_sqlite",
]

DSN_ENV = "FANLOOP_SQL_DSN"
_MAX_NAME = 1000

# The checker and the engines load when a statement is first checked or run: building the
# tools (as every agent with the default tools does) does not compile the checker's patterns.
_LAZY = {
    "QueryRows": "._sql_rows",
    "execute_postgres": "._sql_pg",
    "execute_sqlite": "._sql_sqlite",
}


__getattr__, __dir__ = lazy(__name__, _LAZY)


def check_read_only(sql: str, dialect: Dialect | None = None) -> str:
    """Check that ``sql`` is one read-only statement; return it without a trailing ``;``.

    Args:
        sql: the statement.
        dialect: ``"postgres"`` or ``"sqlite"``; ``None`` accepts what either accepts.

    Raises:
        ToolError: empty, several statements, not a read-only command, or a refused
            function, keyword or relation.

    Example:
        >>> check_read_only("SELECT 1;")
        'SELECT 1'
    """
    from ._sql_check import check_statement

    return check_statement(sql, dialect).text


def _check_in_thread(stop: Stop, sql: str, dialect: Dialect) -> Statement:
    from ._sql_check import check_statement

    return check_statement(sql, dialect)


def _cell(value: Any, limit: int) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "…"


def render_rows(result: QueryRows, max_chars: int, max_rows: int) -> str:
    """The rows as a ``|``-separated table with a header, bounded."""
    from ._sql_rows import CELL_CHARS

    if not result.columns:
        return "(the statement returned no rows)"
    lines = [" | ".join(result.columns)]
    lines += [" | ".join(_cell(v, CELL_CHARS) for v in row) for row in result.rows]
    n = len(result.rows)
    footer = f"({n} row{'s' if n != 1 else ''})"
    if result.more and n >= max_rows:
        footer = f"(first {max_rows} rows shown; there are more: add LIMIT or narrow the query)"
    elif result.more:
        footer = (
            f"(first {n} row{'s' if n != 1 else ''} shown; the result is larger than sql_query "
            "reads at once: select fewer or shorter columns, or add LIMIT)"
        )
    return truncate("\n".join(lines), max_chars, what="result") + "\n" + footer


class _SqlTool(Tool):
    concurrent_safe = True

    def __init__(
        self,
        dsn: str | None = None,
        *,
        root: StrPath | None = None,
        max_rows: int = 200,
        max_chars: int = 30_000,
        timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self.workspace = Workspace(root)
        self.max_rows = max_rows
        self.max_chars = max_chars
        self.query_timeout = timeout

    def _target(self) -> tuple[Dialect, str]:
        """``("postgres", dsn)`` or ``("sqlite", path)``."""
        dsn = self.dsn or os.environ.get(DSN_ENV)
        if not dsn:
            raise ToolError(
                f"No database is configured: set the {DSN_ENV} environment variable or give "
                "the tool a dsn."
            )
        if dsn.startswith(("postgresql://", "postgres://")) or (
            "dbname=" in dsn and "=" in dsn.split()[0]
        ):
            return "postgres", dsn
        path = dsn
        if path.startswith("sqlite:"):
            path = re.sub(r"^/{2,}", "/", path[len("sqlite:") :])  # sqlite:///x, sqlite:////x
        resolved = Path(path) if os.path.isabs(path) else self.workspace.root / path
        return "sqlite", str(resolved)

    async def _execute(self, statement: str, params: Sequence[Any] = ()) -> QueryRows:
        kind, target = self._target()
        # Reading more than the tool can show is wasted: a few times max_chars at most.
        max_chars = max(4 * self.max_chars, 65_536)
        if kind == "postgres":
            from ._sql_pg import execute_postgres

            return await execute_postgres(
                target,
                statement,
                params or None,
                max_rows=self.max_rows,
                timeout=self.query_timeout,
                max_chars=max_chars,
            )
        from ._sql_sqlite import execute_sqlite

        return await execute_sqlite(
            target,
            statement,
            params,
            max_rows=self.max_rows,
            timeout=self.query_timeout,
            max_chars=max_chars,
        )


class SqlQueryTool(_SqlTool):
    """``sql_query``: run one read-only SQL statement and return its rows.

    Args:
        dsn: the database (see the module docstring); default: ``$FANLOOP_SQL_DSN`` at call time.
        root: where relative SQLite paths start (default: the current directory at call time).
        max_rows: rows returned at most.
        max_chars: characters returned at most.
        timeout: seconds a statement may run.
    """

    name = "sql_query"
    description = (
        "Run a single read-only SQL statement (SELECT, WITH, VALUES, TABLE, EXPLAIN without "
        "ANALYZE; SHOW on PostgreSQL, a reading PRAGMA on SQLite) on the configured database "
        "and return the rows. Statements that write, lock rows or call functions with effects "
        "are refused, and the connection itself is read-only. Long cells are cut: select "
        "substrings if you need more. Use sql_schema to see the tables first."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "One read-only SQL statement."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    async def run(self, **kwargs: Any) -> ToolResult:
        """Check and run the statement; see the class docstring."""
        query = arg_str(kwargs, "query")
        kind, _ = self._target()
        statement = await run_blocking(_check_in_thread, query, kind)
        result = await self._execute(statement.text)
        return ToolResult(render_rows(result, self.max_chars, self.max_rows))


class SqlSchemaTool(_SqlTool):
    """``sql_schema``: list the database's tables, or one table's columns.

    Args:
        dsn: the database (see the module docstring); default: ``$FANLOOP_SQL_DSN`` at call time.
        root: where relative SQLite paths start (default: the current directory at call time).
        max_rows: tables or columns listed at most.
        max_chars: characters returned at most.
        timeout: seconds a catalogue query may run.
    """

    name = "sql_schema"
    description = (
        "Describe the configured database: without a table, list its tables and views; with "
        "one, list that table's columns (name, type, nullability, default)."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "table": {
                "type": "string",
                "description": "A table name (PostgreSQL: optionally schema.table).",
            },
        },
        "additionalProperties": False,
    }

    async def run(self, **kwargs: Any) -> ToolResult:
        """Describe the database or a table; see the class docstring."""
        table = arg_opt_str(kwargs, "table")
        if table is not None and len(table) > _MAX_NAME:
            raise ToolError(f"A table name has at most {_MAX_NAME} characters.")
        kind, _ = self._target()
        if kind == "postgres":
            result = await self._postgres(table)
        else:
            result = await self._sqlite(table)
        if table is not None and not result.rows:
            listed = await (self._postgres(None) if kind == "postgres" else self._sqlite(None))
            names = [f"{r[0]}.{r[1]}" if kind == "postgres" else str(r[1]) for r in listed.rows]
            raise ToolError(f"No table named {table!r}. Tables: {', '.join(names) or 'none'}.")
        if table is None and not result.rows:
            return ToolResult("(the database has no tables)")
        return ToolResult(render_rows(result, self.max_chars, self.max_rows))

    async def _sqlite(self, table: str | None) -> QueryRows:
        if table is None:
            return await self._execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        return await self._execute(
            "SELECT name, type, CASE \"notnull\" WHEN 1 THEN 'NOT NULL' ELSE 'NULL' END "
            'AS nullable, dflt_value AS "default", pk AS primary_key '
            "FROM pragma_table_info(?) ORDER BY cid",
            (table,),
        )

    async def _postgres(self, table: str | None) -> QueryRows:
        if table is None:
            return await self._execute(
                "SELECT table_schema, table_name, table_type FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                "ORDER BY table_schema, table_name"
            )
        schema, _, name = table.rpartition(".")
        return await self._execute(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns "
            "WHERE table_name = %s AND (%s = '' OR table_schema = %s) "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema') "
            "ORDER BY table_schema, ordinal_position",
            (name, schema, schema),
        )
