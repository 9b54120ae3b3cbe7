"""SQL tools: ``sql_schema`` (tables and columns) and ``sql_query`` (one read-only statement).

The database is named by a DSN given to the tool (``SqlQueryTool(dsn=...)``) or, at call time,
by the ``FANLOOP_SQL_DSN`` environment variable:

- ``postgresql://user@host:5432/db`` (or ``postgres://``, or a libpq ``key=value`` string
  with ``dbname=``): PostgreSQL, through psycopg (``pip install 'fanloop[postgres]'``).
- ``sqlite:///absolute/path.db`` (two or more slashes: absolute), ``sqlite:relative.db`` or a
  plain file path (relative paths are taken from the workspace root): SQLite.

Read-only is enforced twice. First, :func:`check_read_only` accepts a single statement that
starts with SELECT, WITH, EXPLAIN, PRAGMA (a query pragma), SHOW or DESCRIBE and names no
writing command. Second, and independently, the connection itself cannot write: SQLite is
opened with ``mode=ro`` and ``PRAGMA query_only=ON``; PostgreSQL sessions start with
``default_transaction_read_only=on`` and every statement runs in a ``READ ONLY`` transaction that
is rolled back. A statement that slips past the first check (say, a SELECT of a function that
writes) still fails at the database.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ..errors import ToolError
from ._workspace import StrPath, Workspace, arg_opt_str, arg_str, truncate
from .base import Tool, ToolResult

__all__ = [
    "QueryRows",
    "SqlQueryTool",
    "SqlSchemaTool",
    "check_read_only",
    "execute_postgres",
    "execute_sqlite",
]

DSN_ENV = "FANLOOP_SQL_DSN"

_READ_COMMANDS = ("SELECT", "WITH", "EXPLAIN", "PRAGMA", "SHOW", "DESCRIBE", "DESC")
_WRITE_WORDS = frozenset(
    {
        "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "CREATE", "DROP", "ALTER", "TRUNCATE",
        "GRANT", "REVOKE", "ATTACH", "DETACH", "VACUUM", "REINDEX", "COPY", "CALL",
    }
)  # fmt: skip
_QUERY_PRAGMAS = frozenset(
    {
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
        "function_list", "pragma_list", "collation_list", "database_list", "compile_options",
        "module_list",
    }
)  # fmt: skip

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
    | (?P<string>[eE]'(?:[^'\\]|\\.|'')*(?:'|\Z)|'(?:[^']|'')*(?:'|\Z))
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*|)\$.*?(?:\$(?P=tag)\$|\Z))
    | (?P<ident>"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z))
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<number>\d+(?:\.\d*)?)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokens(sql: str) -> list[tuple[str, str]]:
    """The statement's tokens as ``(kind, text)``, without whitespace and comments."""
    return [
        (m.lastgroup or "other", m.group(0))
        for m in _TOKEN.finditer(sql)
        if m.lastgroup not in ("space", "comment")
    ]


def check_read_only(sql: str) -> str:
    """Check that ``sql`` is one read-only statement; return it without a trailing ``;``.

    Raises:
        ToolError: empty, several statements, or not a read-only command.

    Example:
        >>> check_read_only("SELECT 1;")
        'SELECT 1'
    """
    tokens = _tokens(sql)
    while tokens and tokens[-1] == ("other", ";"):
        tokens.pop()
    if not tokens:
        raise ToolError("The SQL statement is empty.")
    if ("other", ";") in tokens:
        raise ToolError("sql_query runs exactly one statement; send the statements one by one.")
    first = tokens[0][1].upper() if tokens[0][0] == "word" else tokens[0][1]
    if first not in _READ_COMMANDS:
        raise ToolError(
            f"sql_query only runs read-only statements (SELECT, WITH, EXPLAIN, PRAGMA, SHOW, "
            f"DESCRIBE); this one starts with {first!r}."
        )
    words = [text.upper() for kind, text in tokens if kind == "word"]
    writes = sorted(_WRITE_WORDS.intersection(words))
    if writes:
        raise ToolError(
            f"sql_query only runs read-only statements; this one contains {', '.join(writes)}."
        )
    if first == "PRAGMA":
        texts = [text for _, text in tokens]
        if "=" in texts:
            raise ToolError("PRAGMA assignments change settings; sql_query only reads.")
        name = next((t for k, t in tokens[1:] if k == "word" and t != "."), "").lower()
        names = [t.lower() for k, t in tokens[1:] if k == "word"]
        if "(" in texts and not _QUERY_PRAGMAS.intersection(names) and name:
            raise ToolError(f"PRAGMA {name}(...) may change a setting; sql_query only reads.")
    end = sql.rstrip()
    while end.endswith(";"):
        end = end[:-1].rstrip()
    return end


@dataclass(frozen=True, slots=True)
class QueryRows:
    """What a statement returned.

    Attributes:
        columns: the column names (empty when the statement returns no rows).
        rows: at most ``max_rows`` rows.
        more: there were more rows than ``max_rows``.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    more: bool


def _sqlite_uri(path: Path) -> str:
    return f"file:{urllib.parse.quote(str(path))}?mode=ro"


def _sqlite_run(
    path: Path, statement: str, params: Sequence[Any], max_rows: int, timeout: float
) -> QueryRows:
    if not path.is_file():
        raise ToolError(f"The SQLite database {path} does not exist.")
    conn = sqlite3.connect(_sqlite_uri(path), uri=True, timeout=5.0)
    try:
        conn.execute("PRAGMA query_only = ON")
        deadline = time.monotonic() + timeout
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(statement, tuple(params))
        columns = tuple(d[0] for d in cursor.description or ())
        rows = cursor.fetchmany(max_rows + 1) if columns else []
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise ToolError(f"The query ran longer than {timeout:g} s and was stopped.") from None
        raise ToolError(f"SQLite error: {str(exc).rstrip('.')}.") from None
    except (sqlite3.Error, sqlite3.Warning) as exc:
        raise ToolError(f"SQLite error: {str(exc).rstrip('.')}.") from None
    finally:
        conn.rollback()
        conn.close()
    return QueryRows(columns, tuple(tuple(r) for r in rows[:max_rows]), len(rows) > max_rows)


async def execute_sqlite(
    path: StrPath,
    statement: str,
    params: Sequence[Any] = (),
    *,
    max_rows: int = 200,
    timeout: float = 30.0,
) -> QueryRows:
    """Run ``statement`` on a read-only connection to the SQLite database at ``path``.

    No statement check is made here: the connection itself refuses to write.

    Raises:
        ToolError: the database is missing, or SQLite refused or failed the statement.
    """
    return await anyio.to_thread.run_sync(
        _sqlite_run, Path(path), statement, params, max_rows, timeout
    )


async def execute_postgres(
    dsn: str,
    statement: str,
    params: Sequence[Any] | None = None,
    *,
    max_rows: int = 200,
    timeout: float = 30.0,
) -> QueryRows:
    """Run ``statement`` in a READ ONLY transaction (rolled back) on PostgreSQL.

    No statement check is made here: the session and the transaction refuse to write.

    Raises:
        ToolError: psycopg is missing, the connection failed, or the server refused or failed
            the statement.
    """
    try:
        import psycopg  # an optional dependency, imported when first used
    except ImportError:
        raise ToolError(
            "PostgreSQL support needs psycopg: pip install 'fanloop[postgres]'."
        ) from None
    ms = max(int(timeout * 1000), 1)
    try:
        with anyio.fail_after(timeout + 10):
            conn = await psycopg.AsyncConnection.connect(
                dsn,
                connect_timeout=max(int(timeout), 2),
                options=f"-c default_transaction_read_only=on -c statement_timeout={ms}",
            )
            async with conn:
                await conn.set_read_only(True)
                async with conn.cursor() as cursor:
                    await cursor.execute(statement, params)
                    columns = tuple(d.name for d in cursor.description or ())
                    rows = await cursor.fetchmany(max_rows + 1) if columns else []
                await conn.rollback()
    except TimeoutError:
        raise ToolError(f"The query ran longer than {timeout:g} s and was stopped.") from None
    except psycopg.errors.QueryCanceled:
        raise ToolError(f"The query ran longer than {timeout:g} s and was stopped.") from None
    except psycopg.Error as exc:
        detail = exc.diag.message_primary if exc.diag and exc.diag.message_primary else str(exc)
        raise ToolError(f"PostgreSQL error: {detail}.") from None
    return QueryRows(columns, tuple(tuple(r) for r in rows[:max_rows]), len(rows) > max_rows)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= 200 else text[:200] + "…"


def render_rows(result: QueryRows, max_chars: int, max_rows: int) -> str:
    """The rows as a ``|``-separated table with a header, bounded."""
    if not result.columns:
        return "(the statement returned no rows)"
    lines = [" | ".join(result.columns)]
    lines += [" | ".join(_cell(v) for v in row) for row in result.rows]
    n = len(result.rows)
    footer = f"({n} row{'s' if n != 1 else ''})"
    if result.more:
        footer = f"(first {max_rows} rows shown; there are more: add LIMIT or narrow the query)"
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

    def _target(self) -> tuple[str, str]:
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
        if kind == "postgres":
            return await execute_postgres(
                target,
                statement,
                params or None,
                max_rows=self.max_rows,
                timeout=self.query_timeout,
            )
        return await execute_sqlite(
            target, statement, params, max_rows=self.max_rows, timeout=self.query_timeout
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
        "Run a single read-only SQL statement (SELECT, WITH, EXPLAIN, PRAGMA, SHOW or DESCRIBE) "
        "on the configured database and return the rows. Statements that write are refused, "
        "and the connection itself is read-only. Use sql_schema to see the tables first."
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
        statement = check_read_only(arg_str(kwargs, "query"))
        result = await self._execute(statement)
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
