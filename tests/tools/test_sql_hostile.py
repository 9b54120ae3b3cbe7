"""sql_query and sql_schema against a hostile model (issue #10): the read-only tool changes
nothing, on PostgreSQL and on SQLite.

Side-effecting functions are refused however they are spelled, and the server still refuses
what the check might miss (a second statement, a write); the time is bounded by the tool's
timeout and the caller's deadline, a cancelled call stops its query on the server, the event
loop keeps ticking, and memory stays within the caps whatever the statement makes.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tools_helpers import PG_DSN, pg_count

from fanloop import Agent, Limits, TerminationReason
from fanloop.errors import ToolError
from fanloop.messages import ToolResultPart
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.tools import SqlQueryTool, SqlSchemaTool
from fanloop.tools._blocking import Stop
from fanloop.tools._sql_check import (
    MAX_STATEMENT_CHARS,
    Dialect,
    Token,
    check_statement,
    leading_command,
    tokenize,
)
from fanloop.tools.sql import check_read_only, execute_postgres, execute_sqlite
from heartbeat import Stopwatch, heartbeat

SLOW_CTE = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT max(n) FROM c"
REFUSED = "refused the statement"


def results(messages: tuple[object, ...]) -> list[ToolResultPart]:
    return [
        part
        for message in messages
        for part in getattr(message, "content", ())
        if isinstance(part, ToolResultPart)
    ]


# -- the statement check ---------------------------------------------------------------------

HIDDEN_CALLS = [
    "SELECT pg_terminate_backend(123)",
    'SELECT "pg_terminate_backend"(123)',
    "SELECT pg_catalog.pg_read_file('/etc/passwd')",
    'SELECT "pg_catalog"."pg_read_file"(\'/etc/passwd\')',
    "SELECT PG_RELOAD_CONF()",
    "SELECT pg_cancel_backend /* why not */ (1)",
    "SELECT pg_stat_reset -- a comment\n ()",
    "SELECT pg_stat_reset_shared('bgwriter')",
    "SELECT 1 /* a /* nested */ comment */, pg_rotate_logfile()",
    "SELECT 1 -- ends at a carriage return\r, pg_advisory_lock(1)",
    "SELECT pg_try_advisory_xact_lock(1)",
    "SELECT pg_advisory_unlock_all()",
    "SELECT $$ a string $$, pg_ls_dir('.')",
    "SELECT $tag$ $$ $tag$, pg_stat_file('.')",
    "SELECT E'\\\\', pg_read_binary_file('/etc/hostname')",  # E'\\' is one backslash
    "SELECT 'a\\', pg_sleep(10) --'",  # the backslash is plain text: the call is outside
    "SELECT * FROM pg_ls_waldir()",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_export(1, '/tmp/x')",
    "SELECT lowrite(0, 'x')",
    "SELECT dblink_exec('host=x', 'DELETE FROM t')",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT pg_notify('channel', 'x')",
    "SELECT pg_sleep_for('1 hour')",
    "SELECT pg_switch_wal()",
    "SELECT pg_create_restore_point('x')",
    "SELECT pg_promote()",
    "SELECT pg_logical_emit_message(true, 'x', 'y')",
    "SELECT pg_create_logical_replication_slot('s', 'test_decoding')",
    "SELECT pg_drop_replication_slot('s')",
    "SELECT query_to_xml('DELETE FROM t RETURNING 1', true, false, '')",
    "SELECT ts_stat('SELECT pg_terminate_backend(1)')",
    "SELECT nextval('s')",
    "WITH x AS (SELECT pg_terminate_backend(1)) SELECT * FROM x",
    "EXPLAIN SELECT pg_reload_conf()",
    "VALUES (pg_reload_conf())",
]


@pytest.mark.parametrize("sql", HIDDEN_CALLS)
def test_side_effecting_functions_are_refused_however_written(sql: str) -> None:
    with pytest.raises(ToolError, match=f"{REFUSED}: it calls "):
        check_read_only(sql, "postgres")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ('SELECT U&"pg_sl\\0065ep"(1)', "U&"),
        ("SELECT U&'\\0041'", "U&"),
        ("SELECT 1 FOR UPDATE", "contains UPDATE"),
        ("SELECT 1 FROM t FOR SHARE", "row locks"),
        ("SELECT 1 FROM t FOR KEY SHARE", "row locks"),
        ("SELECT * INTO t2 FROM t", "contains INTO"),
        ("EXPLAIN ANALYZE SELECT 1", "contains ANALYZE"),
        ("EXPLAIN (ANALYSE, BUFFERS) SELECT 1", "contains ANALYSE"),
        ("SET default_transaction_read_only = off", "starts with 'SET'"),
        ("BEGIN", "starts with 'BEGIN'"),
        ("COMMIT", "starts with 'COMMIT'"),
        ("DO $$ BEGIN PERFORM 1; END $$", "starts with 'DO'"),
        ("LOCK TABLE t", "starts with 'LOCK'"),
        ("LISTEN ch", "starts with 'LISTEN'"),
        ("COPY t TO '/tmp/x'", "starts with 'COPY'"),
        ("TABLE pg_authid", "secrets"),
        ("SELECT * FROM pg_catalog.pg_file_settings", "server files"),
        ("SELECT 'a\\'; COMMIT; DELETE FROM t; --'", "exactly one statement"),
        ("SELECT 'never closed", "not closed"),
        ("SELECT E'never \\' closed", "not closed"),
        ('SELECT "never closed', "not closed"),
        ("SELECT $x$ never closed", "not closed"),
        ("SELECT 1 /* never /* closed */", "not closed"),
        ("SELECT (1", "parentheses"),
        ("SELECT 1) AS a, (SELECT 2", "parentheses"),
        ("SELECT (1) AS a, 2) AS b, (3", "parentheses"),  # out of order after a closed pair
        ("VALUES (1), )2(", "parentheses"),
        ("SELECT ((1) AS a", "parentheses"),
        ("SELECT (1)) AS a", "parentheses"),
        ("SELECT 1\0", "NUL"),
        ("SELECT " + "1, " * 40_000 + "1", "longer than 100000"),
    ],
)
def test_other_refusals(sql: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        check_read_only(sql, "postgres")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'pg_sleep(1)', $$pg_read_file('x')$$, /* pg_reload_conf() */ 1",
        'SELECT "pg_sleep" FROM t',  # a column, not a call
        "SELECT lo_value, reset_at FROM t",
        "SELECT E'it''s \\n', 'a\\', B'01', X'ff', N'x'",
        "SELECT E'\\' , pg_read_file('/etc/hostname') --'",  # all one string
        "SELECT txid_current(), pg_current_xact_id(), now()",
        "SELECT substring('abc' FOR 2), generate_series(1, 3)",
        "SELECT a$b$c FROM t",
        "TABLE t",
        "VALUES (1), (2)",
        "SHOW statement_timeout",
        "SELECT * FROM pg_stat_activity",
        "EXPLAIN (FORMAT JSON) SELECT 1",
    ],
)
def test_reading_statements_pass(sql: str) -> None:
    assert check_read_only(sql, "postgres")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT [load_extension]('/tmp/evil')", "calls load_extension"),
        ("SELECT `LOAD_EXTENSION`('/tmp/evil')", "calls LOAD_EXTENSION"),
        ("SELECT 1 /* /* */, load_extension('x') -- */", "calls load_extension"),
        ("SELECT fts3_tokenizer('x', X'00')", "calls fts3_tokenizer"),
        ("ATTACH '/tmp/other.db' AS other", "starts with 'ATTACH'"),
        ("VACUUM INTO '/tmp/copy.db'", "starts with 'VACUUM'"),
        ("PRAGMA writable_schema = ON", "PRAGMA assignments"),
        ("PRAGMA journal_mode(WAL)", r"journal_mode\(\.\.\.\) may change"),
        ("PRAGMA optimize", "PRAGMA optimize may change"),
        ("SHOW x", "starts with 'SHOW'"),
    ],
)
def test_sqlite_refusals(sql: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        check_read_only(sql, "sqlite")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("", "The SQL statement is empty."),
        (" ; ;", "The SQL statement is empty."),
        (
            "SELECT 1; SELECT 2",
            "sql_query runs exactly one statement; send the statements one by one.",
        ),
        (
            "SET x = 1",
            "sql_query only runs read-only statements (EXPLAIN, SELECT, SHOW, TABLE, VALUES, "
            "WITH); this one starts with 'SET'.",
        ),
        ("SELECT (1", "sql_query refused the statement: its parentheses are not balanced."),
        ("SELECT 1 /* open", "sql_query refused the statement: a /* comment is not closed."),
        ("SELECT 1\0", "sql_query refused the statement: it contains a NUL character."),
        (
            "SELECT U&'\\0041'",
            "sql_query refused the statement: U&'...' and U&\"...\" escapes are not accepted; "
            "write the text plainly.",
        ),
        (
            "SELECT $$a$$, pg_sleep(1), $$b$$",
            "sql_query refused the statement: it calls pg_sleep()",
        ),  # each $$ closes the next
    ],
)
def test_refusals_word_for_word(sql: str, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        check_statement(sql, "postgres")
    assert str(caught.value).startswith(message)


PRAGMA_LIST = (
    "sql_query only runs reading pragmas (foreign_key_check, foreign_key_list, index_info, "
    "index_list, index_xinfo, integrity_check, quick_check, table_info, table_list, "
    "table_xinfo with an argument, or a setting's name)."
)


@pytest.mark.parametrize(
    ("sql", "dialect", "message"),
    [
        (
            "WITH x AS (DELETE FROM t RETURNING *) SELECT * INTO y FROM x",
            "postgres",
            "sql_query only runs read-only statements; this one contains DELETE, INTO (a column "
            'of such a name must be quoted: "name").',
        ),
        (
            "SELECT pg_sleep(1)",
            "postgres",
            "sql_query refused the statement: it calls pg_sleep(), which changes server or "
            "session state, reads server files or runs other SQL; sql_query only reads rows.",
        ),
        (
            "SELECT 1 FROM t FOR SHARE",
            "postgres",
            "sql_query refused the statement: FOR UPDATE / FOR SHARE take row locks; sql_query "
            "only reads.",
        ),
        (
            '"SELECT" 1',  # a quoted identifier is not a command
            "postgres",
            "sql_query only runs read-only statements (EXPLAIN, SELECT, SHOW, TABLE, VALUES, "
            "WITH); this one starts with '\"SELECT\"'.",
        ),
        (
            "'SELECT' 1",
            "postgres",
            "sql_query only runs read-only statements (EXPLAIN, SELECT, SHOW, TABLE, VALUES, "
            "WITH); this one starts with \"'SELECT'\".",
        ),
        ("PRAGMA a = 1", "sqlite", "PRAGMA assignments change settings; sql_query only reads."),
        ("PRAGMA optimize", "sqlite", f"PRAGMA optimize may change a setting; {PRAGMA_LIST}"),
        ("PRAGMA", "sqlite", f"PRAGMA  may change a setting; {PRAGMA_LIST}"),
        ("PRAGMA main.optimize", "sqlite", f"PRAGMA optimize may change a setting; {PRAGMA_LIST}"),
    ],
)
def test_whole_refusals(sql: str, dialect: Dialect, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        check_statement(sql, dialect)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "sql",
    [
        "PRAGMA main.user_version",  # a schema-qualified setting
        "PRAGMA main.table_info(users)",
        'PRAGMA "table_info"(users)',  # the pragma's name quoted
        "PRAGMA table_info('users')",
    ],
)
def test_reading_pragmas_pass_however_written(sql: str) -> None:
    assert check_statement(sql, "sqlite").command == "PRAGMA"


def test_a_statement_of_exactly_the_longest_length_is_checked() -> None:
    longest = "SELECT 1".ljust(MAX_STATEMENT_CHARS)
    assert check_statement(longest, "postgres").text == "SELECT 1"
    with pytest.raises(ToolError, match="longer than"):
        check_statement(longest + " ", "postgres")


def test_the_checked_statement_keeps_its_text_and_names_its_command() -> None:
    checked = check_statement("  SELECT * FROM t WHERE id = $1 ;  ; ", "postgres")
    assert (checked.text, checked.command) == ("  SELECT * FROM t WHERE id = $1", "SELECT")
    assert check_statement("VALUES (1)").command == "VALUES"


def test_tokenize_reads_postgres_by_default() -> None:
    assert tokenize("SELECT $$a;b$$, $1") == [
        Token("word", "SELECT", "select"),
        Token("string", "$$a;b$$"),
        Token("other", ","),
        Token("param", "$1"),
    ]
    assert tokenize("SELECT `a``b`, [c]", "sqlite")[1:] == [
        Token("ident", "`a``b`", "a`b"),
        Token("other", ","),
        Token("ident", "[c]", "c"),
    ]


@pytest.mark.parametrize(
    ("sql", "postgres", "sqlite"),
    [
        ("  select 1", "SELECT", "SELECT"),
        ("-- note\rSELECT 1", "SELECT", ""),  # a lone CR ends a comment in PostgreSQL only
        ("-- note\n\tWITH x AS (SELECT 1) TABLE x", "WITH", "WITH"),
        ("/* a /* nested */ b */ SELECT 1", "SELECT", "B"),  # SQLite does not nest comments
        ("/* never closed", "", ""),
        ("(SELECT 1)", "", ""),
        ("  -- only a comment", "", ""),
        ("", "", ""),
    ],
)
def test_the_leading_command_is_read_as_each_server_reads_it(
    sql: str, postgres: str, sqlite: str
) -> None:
    assert leading_command(sql) == postgres
    assert leading_command(sql, "postgres") == postgres
    assert leading_command(sql, "sqlite") == sqlite


# -- SQLite --------------------------------------------------------------------------------


@pytest.fixture
def db(ws: Path) -> Path:
    import sqlite3

    path = ws / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.executemany("INSERT INTO users (name) VALUES (?)", [("ann",), ("bob",)])
        conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO docs (body) VALUES (?)", [("y" * 2_000_000,)] * 8)
    conn.close()
    return path


async def test_sqlite_slow_query_ends_with_the_tool_timeout(db: Path) -> None:
    tool = SqlQueryTool(str(db))  # its own statement timeout stays at 30 s
    tool.timeout = 1.0
    model = ScriptedProvider([reply(tool_calls=[call("sql_query", query=SLOW_CTE)]), "Done."])
    async with heartbeat() as beat:
        watch = Stopwatch()
        result = await Agent(model, tools=[tool], limits=Limits(timeout=20)).run("go")
    assert beat.max_stall < 0.1, beat
    assert watch.own < 3.0, watch  # not the 30 s of the statement's own timeout
    (answer,) = results(result.messages)
    assert answer.is_error
    # Whichever comes first: the tool's timeout, or the query's own limit taken from it.
    assert "timed out" in answer.content or "ran longer than" in answer.content


async def test_sqlite_slow_query_ends_with_the_run_deadline(db: Path) -> None:
    model = ScriptedProvider([reply(tool_calls=[call("sql_query", query=SLOW_CTE)]), "Done."])
    async with heartbeat() as beat:
        watch = Stopwatch()
        result = await Agent(model, tools=[SqlQueryTool(str(db))], limits=Limits(timeout=1.0)).run(
            "go"
        )
    assert beat.max_stall < 0.1, beat
    assert watch.own < 3.0, watch
    if result.termination_reason != TerminationReason.DEADLINE:  # the query's own limit won
        assert "ran longer than" in results(result.messages)[0].content


async def test_sqlite_caller_deadline_becomes_the_query_limit(db: Path) -> None:
    watch = Stopwatch()
    with anyio.move_on_after(0.5), contextlib.suppress(ToolError):  # either may come first
        await execute_sqlite(db, SLOW_CTE, timeout=60)
    assert watch.own < 1.5, watch


def test_a_stopped_sqlite_query_ends_its_thread_soon(db: Path) -> None:
    from fanloop.tools._sql_sqlite import _run

    stop = Stop()
    done = threading.Event()

    def work() -> None:
        try:
            _run(stop, db, SLOW_CTE, (), 10, 60.0, 10_000)
        except ToolError:
            pass
        finally:
            done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    assert not done.wait(0.3)  # it is running
    stop.set()
    assert done.wait(2.0)


async def test_sqlite_refuses_attach_extensions_and_writing_pragmas(db: Path, ws: Path) -> None:
    # Straight to the executor: SQLite's authorizer and limits refuse, not the check.
    for statement, message in [
        (f"ATTACH '{ws / 'other.db'}' AS other", "it would attach"),
        ("SELECT load_extension('/tmp/evil')", "it calls load_extension"),
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
        ("PRAGMA query_only = OFF", "PRAGMA query_only"),
        ("PRAGMA journal_mode = WAL", "PRAGMA journal_mode"),
        ("PRAGMA optimize", "PRAGMA optimize"),
        (f"VACUUM INTO '{ws / 'copy.db'}'", REFUSED),
        ("INSERT INTO users (name) VALUES ('mallory')", "it would insert"),
        ("UPDATE users SET name = 'm'", "it would update"),
        ("DELETE FROM users", "it would delete"),
        ("DROP TABLE users", REFUSED),
    ]:
        with pytest.raises(ToolError, match=message):
            await execute_sqlite(db, statement)
    assert not (ws / "other.db").exists()
    assert not (ws / "copy.db").exists()
    rows = await execute_sqlite(db, "SELECT count(*) FROM users")
    assert rows.rows == ((2,),)
    # Reading stays possible, pragmas and table-valued functions included.
    assert (await execute_sqlite(db, "PRAGMA table_info(users)")).rows[0][1] == "id"
    assert (await execute_sqlite(db, "SELECT name FROM pragma_table_info('users')")).rows
    assert (await SqlSchemaTool(str(db)).run(table="users")).content.startswith("name | type")


async def test_sqlite_file_stays_read_only_without_the_authorizer(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mode=ro and query_only hold on their own, were the authorizer to allow everything."""
    import fanloop.tools._sql_sqlite as sqlite_tools

    monkeypatch.setattr(sqlite_tools, "_authorizer", lambda denied: lambda *args: 0)
    for statement in ("DELETE FROM users", "PRAGMA query_only = OFF; DELETE FROM users"):
        with pytest.raises(ToolError, match=r"readonly database|one statement at a time"):
            await execute_sqlite(db, statement)
    with pytest.raises(ToolError, match="too many attached databases"):
        await execute_sqlite(db, "ATTACH ':memory:' AS other")
    assert (await execute_sqlite(db, "SELECT count(*) FROM users")).rows == ((2,),)


async def test_sqlite_values_and_rows_are_bounded(db: Path) -> None:
    with pytest.raises(ToolError, match="larger than 8388608 bytes"):
        await execute_sqlite(db, "SELECT randomblob(300000000)")
    many = ", ".join(f"hex(zeroblob({1_000_000 + i}))" for i in range(300))
    with pytest.raises(ToolError, match="select fewer columns"):
        await execute_sqlite(db, f"SELECT {many}")
    with pytest.raises(ToolError, match="add a LIMIT"):
        await execute_sqlite(db, "SELECT body FROM docs ORDER BY random()")
    # Large stored values are read (and cut); the size cap stops reading early.
    rows = await execute_sqlite(db, "SELECT body FROM docs", max_rows=100, max_chars=1000)
    assert rows.more
    assert len(rows.rows) == 4
    assert all(len(r[0]) == 201 for r in rows.rows)
    ordered = await execute_sqlite(db, "SELECT id, body FROM docs ORDER BY random() LIMIT 3")
    assert len(ordered.rows) == 3


def _peak_growth_mib(script: str) -> float:
    """Run ``script`` in a fresh interpreter; it prints its peak-RSS growth in KiB."""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, check=True
    )
    return int(out.stdout.split()[-1]) / 1024


MEMORY_SCRIPT = """
import asyncio, resource, sys
from fanloop.errors import ToolError
from fanloop.tools import SqlQueryTool

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

async def main():
    tool = SqlQueryTool(sys.argv[1], max_rows=5)
    await tool.run(query="SELECT 1")  # warm up: imports, connection code
    base = peak()
    for query in sys.argv[2:]:
        try:
            await tool.run(query=query)
        except ToolError:
            pass
    print(peak() - base)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS in KiB is Linux's")
def test_sqlite_memory_stays_bounded(db: Path) -> None:
    many = ", ".join(f"hex(zeroblob({1_000_000 + i}))" for i in range(300))
    growth = _peak_growth_mib(
        MEMORY_SCRIPT.replace("sys.argv[1]", repr(str(db))).replace(
            "sys.argv[2:]",
            repr(
                [
                    "SELECT randomblob(300000000)",
                    f"SELECT {many}",
                    "SELECT * FROM docs",
                    "SELECT a.body FROM docs a, docs b ORDER BY random()",
                ]
            ),
        )
    )
    assert growth < 64, growth


async def test_a_huge_statement_is_checked_off_the_loop(db: Path) -> None:
    huge = "SELECT " + ", ".join(["(1)"] * 24_000)
    async with heartbeat() as beat:
        with pytest.raises(ToolError):  # too many columns for SQLite, after the check
            await SqlQueryTool(str(db)).run(query=huge)
    assert beat.max_stall < 0.1, beat


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def reader(pg: tuple[str, str]) -> Iterator[str]:
    """A DSN for a new role that may only read ``schema.items``."""
    import psycopg

    _, schema = pg
    role = f"fanloop_ro_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT SELECT ON {schema}.items TO {role}")
    try:
        yield PG_DSN.replace("postgres@", f"{role}@", 1)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.fixture(params=["reader", "superuser"])
def dsn(request: pytest.FixtureRequest, pg: tuple[str, str]) -> str:
    return str(request.getfixturevalue("reader")) if request.param == "reader" else pg[0]


@pytest.fixture
def victim() -> Iterator[Any]:
    """Another backend session the hostile statements aim at."""
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


def _stats_reset() -> Any:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT stats_reset, xact_commit FROM pg_stat_database WHERE datname = "
            "current_database()"
        ).fetchone()
        assert row is not None
        return row


@pytest.mark.postgres
async def test_pg_hostile_functions_change_nothing(
    dsn: str, pg: tuple[str, str], victim: Any
) -> None:
    _, schema = pg
    pid = victim.info.backend_pid
    before = _stats_reset()
    tool = SqlQueryTool(dsn, timeout=10)
    for query in [
        f"SELECT pg_terminate_backend({pid})",
        f'SELECT "pg_terminate_backend"({pid})',
        f"SELECT pg_catalog.pg_cancel_backend({pid})",
        "SELECT pg_reload_conf()",
        "SELECT pg_stat_reset()",
        "SELECT pg_advisory_lock(42)",
        "SELECT pg_catalog.pg_read_file('/etc/hostname')",
        "SELECT * FROM pg_ls_dir('.')",
        "SELECT lo_import('/etc/hostname')",
        "SELECT set_config('default_transaction_read_only', 'off', false)",
        "SELECT pg_sleep(30)",
        f"WITH t AS (SELECT pg_terminate_backend(pid) FROM pg_stat_activity) SELECT 1 -- {schema}",
    ]:
        with pytest.raises(ToolError, match=REFUSED):
            await tool.run(query=query)
    assert victim.execute("SELECT 1").fetchone() == (1,)
    assert _stats_reset()[0] == before[0]
    assert pg_count(schema) == 2


@pytest.mark.postgres
async def test_pg_server_refuses_a_second_statement(dsn: str, pg: tuple[str, str]) -> None:
    # Straight to the executor, past no check: the extended query protocol refuses.
    _, schema = pg
    for statement in (
        f"SHOW search_path; DELETE FROM {schema}.items",
        f"EXPLAIN SELECT 1; DELETE FROM {schema}.items",
        f"SELECT 1; DELETE FROM {schema}.items",
    ):
        with pytest.raises(ToolError, match="PostgreSQL error"):
            await execute_postgres(dsn, statement)
    for statement in (
        f"SHOW search_path; DELETE FROM {schema}.items",
        # Closes the executor's own subquery and opens another: still one protocol message.
        f"SELECT 1) AS q; DELETE FROM {schema}.items; SELECT * FROM (SELECT 1",
    ):
        with pytest.raises(ToolError, match="cannot insert multiple commands"):
            await execute_postgres(dsn, statement)
    assert pg_count(schema) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["role", "dsn"])
async def test_pg_backslash_smuggling_with_standard_strings_off(
    reader: str, pg: tuple[str, str], how: str
) -> None:
    import psycopg

    _, schema = pg
    role = reader.split("//", 1)[1].split("@", 1)[0]
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"GRANT DELETE ON {schema}.items TO {role}")  # only read-only stops it
        if how == "role":
            admin.execute(f"ALTER ROLE {role} SET standard_conforming_strings = off")
    dsn = reader if how == "role" else f"{reader}?options=-c%20standard_conforming_strings%3Doff"
    smuggled = (
        "SELECT 'a\\''; COMMIT; SET default_transaction_read_only = off; "
        f"DELETE FROM {schema}.items; --'"
    )
    # The session reads quotes as the check does: all of it after SELECT is one string.
    result = await SqlQueryTool(dsn).run(query=smuggled)
    assert result.content.splitlines()[1].startswith("a\\'; COMMIT; SET")
    assert (await execute_postgres(dsn, smuggled)).rows[0][0].startswith("a\\'; COMMIT")
    with pytest.raises(ToolError, match="cannot insert multiple commands"):  # past no check
        await execute_postgres(dsn, f"SHOW search_path; COMMIT; DELETE FROM {schema}.items")
    assert pg_count(schema) == 2
    shown = await SqlQueryTool(dsn).run(query="SHOW standard_conforming_strings")
    assert shown.content == "standard_conforming_strings\non\n(1 row)"


@pytest.mark.postgres
async def test_pg_session_limits_follow_the_callers_deadline(reader: str) -> None:
    tool = SqlQueryTool(reader, timeout=30)
    with anyio.fail_after(4):
        shown = {}
        for name in (
            "statement_timeout",
            "lock_timeout",
            "idle_in_transaction_session_timeout",
            "transaction_read_only",
            "default_transaction_read_only",
        ):
            shown[name] = (await tool.run(query=f"SHOW {name}")).content.splitlines()[1]

    def ms(value: str) -> float:
        return float(value[:-2]) if value.endswith("ms") else float(value[:-1]) * 1000

    assert 0 < ms(shown["statement_timeout"]) <= 4000
    assert 0 < ms(shown["lock_timeout"]) <= 4000
    assert ms(shown["idle_in_transaction_session_timeout"]) <= 10_000
    assert shown["transaction_read_only"] == "on"
    assert shown["default_transaction_read_only"] == "on"


@pytest.mark.postgres
async def test_pg_cancelled_call_stops_its_query_on_the_server(reader: str) -> None:
    import psycopg

    marker = uuid.uuid4().hex
    query = f"SELECT count(*) FROM generate_series(1, 100000000000) /* {marker} */"
    started = time.monotonic()
    with anyio.move_on_after(1.0):
        await SqlQueryTool(reader, timeout=60).run(query=query)
    # The server is another process: a wall clock, with a margin a loaded machine meets (a
    # call that waited for its query would take the 60 s of its timeout).
    assert time.monotonic() - started < 10
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for _ in range(50):  # the server notices within moments; wait for it, at most 5 s
            running = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
                "AND pid <> pg_backend_pid()",
                (f"%{marker}%",),
            ).fetchone()
            if running == (0,):
                break
            await anyio.sleep(0.1)
        assert running == (0,)


@pytest.mark.postgres
async def test_pg_huge_cells_are_cut_on_the_server(reader: str) -> None:
    result = await SqlQueryTool(reader, max_rows=3).run(
        query="SELECT repeat('x', 10000000) AS big, decode(repeat('ab', 500000), 'hex') AS raw, "
        "n FROM generate_series(1, 50) AS n"
    )
    lines = result.content.splitlines()
    assert lines[0] == "big | raw | n"
    assert lines[1] == "x" * 200 + "… | <500000 bytes> | 1"
    assert lines[-1].startswith("(first 3 rows shown; there are more")


@pytest.mark.postgres
@pytest.mark.skipif(sys.platform != "linux", reason="peak RSS in KiB is Linux's")
def test_pg_memory_stays_bounded(pg: tuple[str, str]) -> None:
    dsn, _ = pg
    growth = _peak_growth_mib(
        MEMORY_SCRIPT.replace("sys.argv[1]", repr(dsn)).replace(
            "sys.argv[2:]",
            repr(
                [
                    "SELECT repeat('x', 100000000)",
                    "SELECT repeat('x', 10000000) FROM generate_series(1, 200)",
                    "SELECT decode(repeat('ab', 20000000), 'hex')",
                ]
            ),
        )
    )
    assert growth < 32, growth
