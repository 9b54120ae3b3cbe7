"""sql_schema and sql_query on a real SQLite database and a real PostgreSQL server.

Read-only is proven at the database: statements that get past (or skip) the parser check must
still fail with the database's own read-only error.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tools_helpers import pg_count

from fanloop.errors import ToolError
from fanloop.tools import SqlQueryTool, SqlSchemaTool
from fanloop.tools.sql import check_read_only, execute_postgres, execute_sqlite


@pytest.fixture
def db(ws: Path) -> Path:
    path = ws / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, bio TEXT)")
        conn.executemany(
            "INSERT INTO users (name, bio) VALUES (?, ?)",
            [("ann", "line one\nline two"), ("bob", None), ("cy", "x" * 300)],
        )
        conn.execute("CREATE VIEW names AS SELECT name FROM users")
    conn.close()
    return path


def users(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        count = int(conn.execute("SELECT count(*) FROM users").fetchone()[0])
    conn.close()
    return count


# -- the parser check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "select * from t;",
        "  -- comment\n WITH x AS (SELECT 1) SELECT * FROM x",
        "EXPLAIN SELECT 1",
        "PRAGMA table_info(users)",
        "PRAGMA user_version",
        "SHOW search_path",
        "SELECT 'a; DROP TABLE t' AS s",
        'SELECT "delete" FROM t',
        "SELECT $$ ; insert $$",
        "SELECT created_at, updated_by FROM t /* ; */",
    ],
)
def test_parser_accepts_read_only(sql: str) -> None:
    assert check_read_only(sql)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("", "empty"),
        ("  ; ", "empty"),
        ("-- just a comment", "empty"),
        ("INSERT INTO t VALUES (1)", "starts with 'INSERT'"),
        ("update t set a = 1", "starts with 'UPDATE'"),
        ("DROP TABLE t", "starts with 'DROP'"),
        ("SELECT 1; DELETE FROM t", "exactly one statement"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "contains DELETE"),
        ("EXPLAIN ANALYZE INSERT INTO t VALUES (1)", "contains INSERT"),
        ("SELECT * FROM t FOR UPDATE", "contains UPDATE"),
        ("PRAGMA query_only = OFF", "PRAGMA assignments"),
        ("PRAGMA journal_mode(WAL)", r"PRAGMA journal_mode\(\.\.\.\) may change"),
        ("(SELECT 1)", "starts with '\\('"),
        ("DESCRIBE t", "starts with 'DESCRIBE'"),  # neither PostgreSQL nor SQLite has it
    ],
)
def test_parser_rejects(sql: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        check_read_only(sql)


# -- SQLite --------------------------------------------------------------------------------


async def test_sqlite_query(db: Path) -> None:
    tool = SqlQueryTool(str(db))
    result = await tool.run(query="SELECT id, name, bio FROM users ORDER BY id")
    lines = result.content.splitlines()
    assert lines[:3] == ["id | name | bio", "1 | ann | line one\\nline two", "2 | bob | NULL"]
    assert lines[3] == "3 | cy | " + "x" * 200 + "…"
    assert lines[4] == "(3 rows)"
    assert (await tool.run(query="SELECT 1 AS one;")).content == "one\n1\n(1 row)"


async def test_sqlite_dsn_forms(db: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    query = {"query": "SELECT count(*) AS n FROM users"}
    expected = "n\n3\n(1 row)"
    assert (await SqlQueryTool(f"sqlite:///{db}").run(**query)).content == expected
    assert (await SqlQueryTool(f"sqlite://{db}").run(**query)).content == expected
    assert (await SqlQueryTool("sqlite:app.db", root=ws).run(**query)).content == expected
    assert (await SqlQueryTool("app.db", root=ws).run(**query)).content == expected
    monkeypatch.setenv("FANLOOP_SQL_DSN", str(db))
    assert (await SqlQueryTool().run(**query)).content == expected


async def test_sqlite_rows_are_bounded(db: Path) -> None:
    result = await SqlQueryTool(str(db), max_rows=2).run(query="SELECT name FROM users")
    assert result.content == (
        "name\nann\nbob\n(first 2 rows shown; there are more: add LIMIT or narrow the query)"
    )


async def test_sqlite_connection_is_read_only(db: Path) -> None:
    # Straight to the executor: no parser check in the way. SQLite itself refuses (its
    # authorizer, while compiling; test_sql_hostile.py shows mode=ro holds without it).
    for statement in (
        "INSERT INTO users (name) VALUES ('mallory')",
        "DELETE FROM users",
        "CREATE TABLE evil (x)",
        "PRAGMA user_version = 7",
    ):
        with pytest.raises(ToolError, match=r"refused the statement: (it would|PRAGMA)"):
            await execute_sqlite(db, statement)
    assert users(db) == 3


async def test_sqlite_query_only_holds_even_if_switched_off(db: Path) -> None:
    with pytest.raises(ToolError, match="refused the statement: it would insert"):
        await execute_sqlite(db, "WITH x AS (SELECT 1) INSERT INTO users (name) SELECT 'm' FROM x")
    result = await execute_sqlite(db, "PRAGMA query_only")
    assert result.rows == ((1,),)


async def test_sqlite_timeout(db: Path) -> None:
    forever = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT max(n) FROM c"
    with pytest.raises(ToolError, match=r"ran longer than 0\.2 s"):
        await SqlQueryTool(str(db), timeout=0.2).run(query=forever)


async def test_sqlite_schema(db: Path) -> None:
    tool = SqlSchemaTool(str(db))
    assert (await tool.run()).content == "type | name\nview | names\ntable | users\n(2 rows)"
    assert (await tool.run(table="users")).content.splitlines() == [
        "name | type | nullable | default | primary_key",
        "id | INTEGER | NULL | NULL | 1",
        "name | TEXT | NOT NULL | NULL | 0",
        "bio | TEXT | NULL | NULL | 0",
        "(3 rows)",
    ]
    with pytest.raises(ToolError, match=r"No table named 'nope'\. Tables: names, users\."):
        await tool.run(table="nope")


async def test_sqlite_errors(db: Path, ws: Path) -> None:
    with pytest.raises(ToolError, match="No database is configured: set the FANLOOP_SQL_DSN"):
        await SqlQueryTool().run(query="SELECT 1")
    with pytest.raises(ToolError, match="does not exist"):
        await SqlQueryTool(str(ws / "missing.db")).run(query="SELECT 1")
    with pytest.raises(ToolError, match="no such table: nope"):
        await SqlQueryTool(str(db)).run(query="SELECT * FROM nope")
    with pytest.raises(ToolError, match="starts with 'INSERT'"):
        await SqlQueryTool(str(db)).run(query="INSERT INTO users (name) VALUES ('m')")
    assert not (ws / "missing.db").exists()


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.mark.postgres
async def test_postgres_query(pg: tuple[str, str]) -> None:
    dsn, schema = pg
    result = await SqlQueryTool(dsn).run(query=f"SELECT id, name FROM {schema}.items ORDER BY id")
    assert result.content == "id | name\n1 | apple\n2 | pear\n(2 rows)"
    bounded = await SqlQueryTool(dsn, max_rows=1).run(query=f"SELECT name FROM {schema}.items")
    assert bounded.content.endswith(
        "(first 1 rows shown; there are more: add LIMIT or narrow the query)"
    )
    shown = await SqlQueryTool(dsn).run(query="SHOW default_transaction_read_only")
    assert shown.content == "default_transaction_read_only\non\n(1 row)"


@pytest.mark.postgres
async def test_postgres_writes_fail_at_the_database(pg: tuple[str, str]) -> None:
    dsn, schema = pg
    # The parser accepts a SELECT; the function it calls writes; the server refuses.
    check_read_only(f"SELECT {schema}.sneaky_write()")
    with pytest.raises(ToolError, match="cannot execute INSERT in a read-only transaction"):
        await SqlQueryTool(dsn).run(query=f"SELECT {schema}.sneaky_write()")
    # Straight to the executor, no parser at all.
    for statement in (
        f"INSERT INTO {schema}.items (name) VALUES ('mallory')",
        f"CREATE TABLE {schema}.evil (x int)",
    ):
        with pytest.raises(ToolError, match="in a read-only transaction"):
            await execute_postgres(dsn, statement)
    # A WITH is read through a subquery (to cut its cells), where PostgreSQL refuses to write.
    with pytest.raises(ToolError, match="data-modifying statement must be at the top level"):
        await execute_postgres(
            dsn, f"WITH x AS (DELETE FROM {schema}.items RETURNING *) SELECT count(*) FROM x"
        )
    # Turning read-only off from inside the statement is refused too.
    with pytest.raises(ToolError, match="read-write mode must be set before any query"):
        await execute_postgres(
            dsn,
            f"SELECT set_config('transaction_read_only', 'off', true), {schema}.sneaky_write()",
        )
    assert pg_count(schema) == 2


@pytest.mark.postgres
async def test_postgres_schema(pg: tuple[str, str]) -> None:
    dsn, schema = pg
    tool = SqlSchemaTool(dsn)
    assert f"{schema} | items | BASE TABLE" in (await tool.run()).content
    columns = (await tool.run(table=f"{schema}.items")).content.splitlines()
    assert columns[0] == "column_name | data_type | is_nullable | column_default"
    assert columns[1].startswith("id | integer | NO | nextval(")
    assert columns[2] == "name | text | NO | NULL"
    with pytest.raises(ToolError, match=f"No table named '{schema}.nope'"):
        await tool.run(table=f"{schema}.nope")


@pytest.mark.postgres
async def test_postgres_errors(pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    dsn, _ = pg
    with pytest.raises(ToolError, match='PostgreSQL error: relation "nope" does not exist'):
        await SqlQueryTool(dsn).run(query="SELECT * FROM nope")
    with pytest.raises(ToolError, match=r"ran longer than 0\.3 s"):
        await SqlQueryTool(dsn, timeout=0.3).run(
            query="SELECT count(*) FROM generate_series(1, 100000000000)"
        )
    monkeypatch.setenv("FANLOOP_SQL_DSN", dsn)
    assert (await SqlQueryTool().run(query="SELECT 1 AS x")).content == "x\n1\n(1 row)"
