"""What only the PostgreSQL store promises: its schema and migrations, its pool, its bounded
waits, and the way it keeps psycopg out of ``import fanloop``.

Every test runs against the real server (``sessions_helpers.PG_DSN``) in a schema of its own,
or against loopback sockets that refuse, stay silent or stop answering.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from sessions_helpers import PG_DSN, freezing_proxy, pg_address, pg_execute, pg_unreachable

from fanloop.errors import ConfigurationError
from fanloop.messages import Message, ToolCallPart, ToolResultPart
from fanloop.sessions import (
    EffectStatus,
    PostgresStore,
    Session,
    SessionConflict,
    SessionError,
    SessionNotFound,
    _pg_copy,
    _pg_pool,
    _pg_schema,
    _postgres,
)
from heartbeat import heartbeat

pytestmark = pytest.mark.postgres


def with_params(dsn: str, **params: str) -> str:
    """``dsn`` (a URL) with query parameters added."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{dsn}{'&' if '?' in dsn else '?'}{extra}"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def store(pg_schema: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(PG_DSN, schema=pg_schema) as store:
        yield store


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


# -- schema and migrations -------------------------------------------------------------------


async def test_first_use_creates_the_schema_the_tables_and_the_migration_record(
    store: PostgresStore, pg_schema: str
) -> None:
    assert pg_execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_schema,)) == []
    session = await store.open("s")
    await session.append(Message.user("hello\x00world"))  # jsonb would refuse \u0000
    tables = pg_execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (pg_schema,)
    )
    assert tables == [
        ("fanloop_effects",),
        ("fanloop_messages",),
        ("fanloop_schema_migrations",),
        ("fanloop_sessions",),
    ]
    applied = pg_execute(
        f'SELECT version, applied_at FROM "{pg_schema}".fanloop_schema_migrations ORDER BY 1'
    )
    assert [version for version, _ in applied] == [1, 2] == [1, _pg_schema.SCHEMA_VERSION]
    assert all(applied_at is not None for _, applied_at in applied)
    # Stored exactly as SQLite stores it: the text model_dump_json() wrote.
    [(role, text)] = pg_execute(
        f'SELECT role, json::text FROM "{pg_schema}".fanloop_messages WHERE session_id = %s',
        ("s",),
    )
    assert (role, text) == ("user", Message.user("hello\x00world").model_dump_json())
    assert (await store.load("s")).messages == (Message.user("hello\x00world"),)


async def test_stores_racing_to_create_the_schema_all_succeed(pg_schema: str) -> None:
    stores = [PostgresStore(PG_DSN, schema=pg_schema) for _ in range(8)]
    started = anyio.Event()

    async def first_write(n: int) -> None:
        await started.wait()
        session = await stores[n].open(f"s{n}")
        await session.append(Message.user(f"from store {n}"))

    try:
        async with anyio.create_task_group() as tg:
            for n in range(len(stores)):
                tg.start_soon(first_write, n)
            started.set()
    finally:
        for store in stores:
            await store.aclose()
    rows = pg_execute(f'SELECT version FROM "{pg_schema}".fanloop_schema_migrations')
    assert rows == [(1,), (2,)]
    async with PostgresStore(PG_DSN, schema=pg_schema) as store:
        assert sorted(i.id for i in await store.list()) == [f"s{n}" for n in range(8)]


async def test_a_later_migration_is_applied_once(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresStore(PG_DSN, schema=pg_schema) as store:
        await (await store.open("s")).append(Message.user("kept"))
    later = ("ALTER TABLE {s}.fanloop_sessions ADD COLUMN tenant text",)
    monkeypatch.setattr(_pg_schema, "MIGRATIONS", (*_pg_schema.MIGRATIONS, later))
    for _ in range(2):
        async with PostgresStore(PG_DSN, schema=pg_schema) as store:
            assert (await store.load("s")).messages == (Message.user("kept"),)
    versions = pg_execute(
        f'SELECT version FROM "{pg_schema}".fanloop_schema_migrations ORDER BY version'
    )
    assert versions == [(1,), (2,), (3,)]
    assert pg_execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND column_name = %s",
        (pg_schema, "tenant"),
    ) == [(1,)]


async def test_a_newer_schema_is_refused(store: PostgresStore, pg_schema: str) -> None:
    await store.open("s")
    pg_execute(f'INSERT INTO "{pg_schema}".fanloop_schema_migrations (version) VALUES (99)')
    async with PostgresStore(PG_DSN, schema=pg_schema) as newer:
        with pytest.raises(SessionError, match=r"schema version 99.*upgrade fanloop"):
            await newer.open("s")


@pytest.mark.parametrize(
    "schema", ["", "1abc", 'x"; DROP SCHEMA public; --', "pg_catalog", "a" * 64, "sp ace"]
)
def test_schema_names_are_plain_identifiers(schema: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresStore(PG_DSN, schema=schema)


async def test_schema_public_does_not_collide_with_an_application_table(
    pg_schema: str,
) -> None:
    """The tables carry a fanloop_ prefix, so an app's own `sessions` table is left alone."""
    pg_execute(f'CREATE SCHEMA "{pg_schema}"')
    pg_execute(f'CREATE TABLE "{pg_schema}".sessions (id int)')
    async with PostgresStore(PG_DSN, schema=pg_schema) as store:
        await (await store.open("s")).append(Message.user("x"))
    assert pg_execute(f'SELECT count(*) FROM "{pg_schema}".sessions') == [(0,)]


# -- atomicity and concurrency ---------------------------------------------------------------


async def test_two_stores_racing_for_the_same_index_never_interleave(pg_schema: str) -> None:
    """Each round, two processes' worth of stores append at the same index: one wins."""
    async with (
        PostgresStore(PG_DSN, schema=pg_schema) as a,
        PostgresStore(PG_DSN, schema=pg_schema) as b,
    ):
        await a.open("s")
        outcomes: list[str] = []

        async def write(session: Session, name: str) -> None:
            try:
                await session.append(Message.user(f"{name}{len(session.messages)}"))
                outcomes.append(name)
            except SessionConflict:
                outcomes.append("conflict")

        for index in range(15):
            one, two = await a.load("s"), await b.load("s")
            assert len(one.messages) == len(two.messages) == index
            async with anyio.create_task_group() as tg:
                tg.start_soon(write, one, "a")
                tg.start_soon(write, two, "b")
            assert sorted(outcomes[-2:])[1] == "conflict", outcomes  # exactly one winner
        stored = (await a.load("s")).messages
        assert len(stored) == 15
        assert [m.text[1:] for m in stored] == [str(i) for i in range(15)]


async def test_replace_is_atomic(store: PostgresStore, pg_schema: str) -> None:
    """A replace that fails halfway through its inserts leaves the old history whole."""
    old = [Message.user(f"old {i}") for i in range(5)]
    session = await store.open("s")
    await session.extend(old)
    pg_execute(
        f'CREATE FUNCTION "{pg_schema}".boom() RETURNS trigger LANGUAGE plpgsql AS $$ '
        "BEGIN IF NEW.json::text LIKE '%boom%' THEN RAISE EXCEPTION 'boom'; END IF; "
        "RETURN NEW; END $$"
    )
    pg_execute(
        f'CREATE TRIGGER boom BEFORE INSERT ON "{pg_schema}".fanloop_messages '
        f'FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".boom()'
    )
    with pytest.raises(SessionError, match="boom"):
        await session.replace([Message.user("new 0"), Message.user("new 1"), Message.user("boom")])
    assert session.messages == tuple(old)
    with pytest.raises(SessionError, match="boom"):
        await session.extend([Message.user("fine"), Message.user("boom")])
    assert await session.append(Message.user("after")) == 5
    assert (await store.load("s")).messages == (*old, Message.user("after"))
    assert [i.message_count for i in await store.list()] == [6]


async def test_receipts_store_a_hash_not_the_arguments(
    store: PostgresStore, pg_schema: str
) -> None:
    call = ToolCallPart(id="c", name="send_email", arguments={"to": "kim.secret@example.com"})
    await (await store.open("s")).begin_effect(turn=1, call=call)
    rows = pg_execute(f'SELECT row_to_json(e)::text FROM "{pg_schema}".fanloop_effects e')
    assert "send_email" in rows[0][0]
    assert "kim.secret" not in rows[0][0]


async def test_receipts_with_results_of_many_pieces_are_read_back_whole_and_in_order(
    store: PostgresStore, pg_schema: str
) -> None:
    """Receipts are copied out with each result cut into pieces of ``_pg_copy.PIECE`` bytes
    (a piece's end may split a UTF-8 character); every filter puts them back together."""
    session = await store.open("s")
    sizes = {"small": 10, "edge": _pg_copy.PIECE, "big": 3 * _pg_copy.PIECE + 7}
    done = {}
    for turn, (call_id, size) in enumerate(sizes.items(), start=1):
        call = ToolCallPart(id=call_id, name="dump", arguments={"n": size})
        await session.begin_effect(turn=turn, call=call)
        content = ("é" * 3 + "ab") * (size // 8)  # odd offsets for "é" across pieces
        result = ToolResultPart(call_id=call_id, content=content)
        done[call_id] = await session.commit_effect(call_id, result)
    await session.begin_effect(turn=9, call=ToolCallPart(id="open", name="dump", arguments={}))

    async with PostgresStore(PG_DSN, schema=pg_schema) as again:
        assert await again.get_receipt("s", "big") == done["big"]
        assert await again.get_receipt("s", "edge") == done["edge"]
        assert await again.get_receipt("s", "missing") is None
        pending = await again.get_receipt("s", "open")
        assert pending is not None and pending.result is None
        listed = await again.list_receipts("s")
        assert [r.call_id for r in listed] == ["small", "edge", "big", "open"]
        assert listed[:3] == list(done.values())
        assert await again.list_receipts("s", EffectStatus.COMMITTED) == list(done.values())
        assert await again.list_receipts("s", EffectStatus.STARTED) == [pending]
        assert await again.list_receipts("s", EffectStatus.RESOLVED_APPLIED) == []
        await again.open("empty")
        assert await again.list_receipts("empty") == []
        with pytest.raises(SessionNotFound):
            await again.list_receipts("nobody")
        with pytest.raises(SessionNotFound):
            await again.get_receipt("nobody", "big")


async def test_metadata_keeps_what_sqlite_keeps(store: PostgresStore) -> None:
    """NaN and Infinity (a model can put them in tool-call arguments) round-trip as in SQLite."""
    session = await store.open("s")
    await session.set_metadata(pending={"amount": float("nan"), "limit": float("inf")})
    stored = (await store.load("s")).metadata["pending"]
    assert math.isnan(stored["amount"]) and stored["limit"] == math.inf


# -- the pool ------------------------------------------------------------------------------


async def test_the_pool_opens_lazily_and_closes_on_aclose(pg_schema: str) -> None:
    name = f"fanloop-{pg_schema}"
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    store = PostgresStore(with_params(PG_DSN, application_name=name), schema=pg_schema)
    assert pg_execute(query, (name,)) == [(0,)]  # nothing before first use
    async with store:
        await store.open("s")
        [(count,)] = pg_execute(query, (name,))
        assert isinstance(count, int) and 1 <= count <= 10  # the pool's, at most max_connections
        pool = store._db._pool

        async def grab(conn: Any) -> Any:
            return conn

        held = await store._db.run(grab)
        assert pool is not None and not pool.closed and not held.closed
    assert pool.closed and held.closed  # its connections are closed (the server hears it)
    with pytest.raises(SessionError, match="closed"):
        await store.open("s")
    await store.aclose()  # harmless twice


async def test_aclose_before_first_use(pg_schema: str) -> None:
    store = PostgresStore(PG_DSN, schema=pg_schema)
    await store.aclose()
    with pytest.raises(SessionError, match="closed"):
        await store.list()
    assert pg_execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_schema,)) == []


async def test_connections_are_set_up_for_bounded_durable_writes(pg_schema: str) -> None:
    async with PostgresStore(PG_DSN, schema=pg_schema, statement_timeout=1.5) as store:
        await store.open("s")

        async def settings(conn: object) -> list[str]:
            names = ("statement_timeout", "idle_in_transaction_session_timeout")
            names += ("synchronous_commit", "application_name")
            return [(await (await conn.execute(f"SHOW {n}")).fetchone())[0] for n in names]  # type: ignore[attr-defined]

        assert await store._db.run(settings) == ["1500ms", "1500ms", "on", "fanloop"]
    # The DSN may trade durability for speed; it cannot loosen the bounds.
    dsn = with_params(PG_DSN, options="-csynchronous_commit%3Doff%20-cstatement_timeout%3D0")
    async with PostgresStore(dsn, schema=pg_schema, statement_timeout=1.5) as store:
        assert await store._db.run(settings) == ["1500ms", "1500ms", "off", "fanloop"]


# -- bounded waits ---------------------------------------------------------------------------


async def test_a_closed_port_fails_at_once_with_the_reason() -> None:
    port = closed_port()
    dsn = f"postgresql://kim:hunter2@127.0.0.1:{port}/test"
    store = PostgresStore(dsn, connect_timeout=30)
    start = time.monotonic()
    async with store:
        with pytest.raises(SessionError, match="could not open the session store") as caught:
            await store.open("s")
    assert time.monotonic() - start < 5
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "refused" in message.lower()
    assert "hunter2" not in message and "hunter2" not in repr(store)


async def test_a_silent_server_times_out_on_connect(silent_server: int) -> None:
    store = PostgresStore(f"postgresql://127.0.0.1:{silent_server}/test", connect_timeout=0.5)
    start = time.monotonic()
    async with heartbeat() as beat, store:
        with pytest.raises(SessionError, match="could not connect"):
            await store.open("s")
    assert 0.4 < time.monotonic() - start < 5
    assert beat.max_stall < 0.1


async def test_a_statement_stuck_on_a_lock_is_stopped_by_the_statement_timeout(
    pg_schema: str,
) -> None:
    import psycopg

    async with PostgresStore(PG_DSN, schema=pg_schema, statement_timeout=0.5) as store:
        session = await store.open("s")
        async with await psycopg.AsyncConnection.connect(PG_DSN) as blocker:
            await blocker.execute(
                f'SELECT 1 FROM "{pg_schema}".fanloop_sessions WHERE id = %s FOR UPDATE', ("s",)
            )
            start = time.monotonic()
            with pytest.raises(SessionError, match=r"stopped after 0\.5 s"):
                await session.append(Message.user("blocked"))
            assert time.monotonic() - start < 5
            await blocker.rollback()
        assert session.messages == ()
        assert await session.append(Message.user("after")) == 0
        assert (await store.load("s")).messages == (Message.user("after"),)


async def test_a_server_that_stops_answering_is_abandoned(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No statement timeout can fire on a server that never sees the statement: the client
    gives up after connect_timeout + statement_timeout + grace, and the loop keeps ticking."""
    monkeypatch.setattr(_pg_pool, "GRACE", 0.5)
    host, port = pg_address()
    async with freezing_proxy() as proxy:
        dsn = PG_DSN.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        assert str(proxy.port) in dsn
        store = PostgresStore(dsn, schema=pg_schema, connect_timeout=0.5, statement_timeout=0.5)
        async with store:
            await store.list()  # connected, schema checked
            proxy.freeze()
            start = time.monotonic()
            async with heartbeat() as beat:
                with pytest.raises(SessionError, match=r"did not answer within 1\.5 s"):
                    await store.list()
            assert 1.4 < time.monotonic() - start < 6
            assert beat.max_stall < 0.1


# -- psycopg stays optional ------------------------------------------------------------------


def test_importing_fanloop_does_not_import_psycopg() -> None:
    code = (
        "import sys, fanloop, fanloop.sessions\n"
        "from fanloop.sessions import PostgresStore\n"
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.replace("'", '"')) == []


def test_without_psycopg_a_store_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails
    with pytest.raises(ConfigurationError, match=r"pip install 'fanloop\[postgres\]'"):
        PostgresStore(PG_DSN)


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://kim:hun ter2@127.0.0.1:5432/test", "hun ter2"),
        ("host=127.0.0.1 hunter2", "hunter2"),
        ("host=127.0.0.1 password='hunter2", "hunter2"),
        ("postgresql://kim:hunter2@127.0.0.1/test?bogus=1", "hunter2"),
    ],
)
def test_a_bad_dsn_is_a_configuration_error_without_the_password(dsn: str, secret: str) -> None:
    with pytest.raises(ConfigurationError, match="connection string") as caught:
        PostgresStore(dsn)
    assert secret not in str(caught.value)


@pytest.mark.parametrize(
    ("option", "value"),
    [("connect_timeout", 0), ("statement_timeout", -1), ("statement_timeout", float("inf"))],
)
def test_timeouts_must_be_positive(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        PostgresStore(PG_DSN, **{option: value})  # type: ignore[arg-type]


def test_the_module_is_reachable_without_a_server() -> None:
    """Making a store never connects: a missing server is only noticed on first use."""
    assert _postgres.PostgresStore is PostgresStore
    PostgresStore(f"postgresql://127.0.0.1:{closed_port()}/test")


@pytest.fixture(autouse=True)
def _needs_server(request: pytest.FixtureRequest) -> None:
    """Skip the tests that talk to PostgreSQL when it is unreachable (the others still run)."""
    offline_ok = {
        "test_schema_names_are_plain_identifiers",
        "test_importing_fanloop_does_not_import_psycopg",
        "test_without_psycopg_a_store_names_the_extra",
        "test_a_bad_dsn_is_a_configuration_error_without_the_password",
        "test_timeouts_must_be_positive",
        "test_the_module_is_reachable_without_a_server",
        "test_a_closed_port_fails_at_once_with_the_reason",
        "test_a_silent_server_times_out_on_connect",
    }
    if request.node.originalname in offline_ok:
        pytest.importorskip("psycopg", reason="psycopg is not installed")
    elif reason := pg_unreachable():
        pytest.skip(reason)
