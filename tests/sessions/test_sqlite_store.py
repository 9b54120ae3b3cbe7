"""What only the SQLite store promises: the file, its schema, and atomic writes on disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fanloop.messages import Message, ToolCallPart
from fanloop.sessions import SessionError, SQLiteStore
from fanloop.sessions._sqlite import SCHEMA_VERSION


def connect(path: Path) -> sqlite3.Connection:
    """A plain connection to inspect or tamper with the file behind the store's back."""
    return sqlite3.connect(path, isolation_level=None)


async def test_file_is_created_with_wal_and_the_current_schema(db_path: Path) -> None:
    assert not db_path.parent.exists()
    async with SQLiteStore(db_path) as store:
        session = await store.open("s")
        await session.append(Message.user("hello"))
        await session.append(Message.assistant("hi"))
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (10_000,)
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    db = connect(db_path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        sql = "SELECT session_id, idx, role, json FROM messages ORDER BY idx"
        rows = db.execute(sql).fetchall()
    finally:
        db.close()
    assert [r[:3] for r in rows] == [("s", 0, "user"), ("s", 1, "assistant")]
    assert Message.model_validate_json(rows[0][3]) == Message.user("hello")


async def test_message_index_is_unique_per_session(db_path: Path) -> None:
    async with SQLiteStore(db_path) as store:
        await (await store.open("s")).append(Message.user("x"))
    db = connect(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO messages VALUES ('s', 0, 'user', '{}')")
    finally:
        db.close()


async def test_receipts_store_a_hash_not_the_arguments(db_path: Path) -> None:
    call = ToolCallPart(id="c", name="send_email", arguments={"to": "kim.secret@example.com"})
    async with SQLiteStore(db_path) as store:
        session = await store.open("s")
        await session.begin_effect(turn=1, call=call)
    db = connect(db_path)
    try:
        dump = "\n".join(db.iterdump())
    finally:
        db.close()
    assert "send_email" in dump
    assert "kim.secret" not in dump


async def test_replace_is_atomic_on_disk(db_path: Path) -> None:
    """A replace that fails halfway through its inserts leaves the old history whole."""
    old = [Message.user(f"old {i}") for i in range(5)]
    async with SQLiteStore(db_path) as store:
        session = await store.open("s")
        await session.extend(old)
        db = connect(db_path)
        try:
            db.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.json LIKE '%boom%' "
                "BEGIN SELECT RAISE(ABORT, 'boom'); END"
            )
        finally:
            db.close()
        new = [Message.user("new 0"), Message.user("new 1"), Message.user("boom")]
        with pytest.raises(sqlite3.IntegrityError, match="boom"):
            await session.replace(new)
        assert session.messages == tuple(old)
        with pytest.raises(sqlite3.IntegrityError, match="boom"):
            await session.extend([Message.user("fine"), Message.user("boom")])
        assert session.messages == tuple(old)
        assert await session.append(Message.user("after")) == 5
    async with SQLiteStore(db_path) as store:
        assert (await store.load("s")).messages == (*old, Message.user("after"))
        assert (await store.list())[0].message_count == 6


async def test_older_schema_is_migrated_and_newer_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir()
    db = connect(db_path)
    db.close()  # an empty file: version 0
    async with SQLiteStore(db_path) as store:
        await store.open("s")
    db = connect(db_path)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    finally:
        db.close()
    async with SQLiteStore(db_path) as store:
        with pytest.raises(SessionError, match="upgrade fanloop"):
            await store.open("s")


async def test_in_memory_database(tmp_path: Path) -> None:
    async with SQLiteStore(":memory:") as store:
        session = await store.open("s")
        await session.append(Message.user("x"))
        assert (await store.load("s")).messages == (Message.user("x"),)
    assert list(tmp_path.iterdir()) == []


def test_synchronous_must_be_known() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore("x.db", synchronous="OFF")  # type: ignore[arg-type]


async def test_full_synchronous(db_path: Path) -> None:
    async with SQLiteStore(db_path, synchronous="FULL") as store:
        await (await store.open("s")).append(Message.user("x"))
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (2,)


async def test_long_messages_are_read_back_whole_in_pieces(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A message longer than one piece is read a piece at a time (no one copy into Python
    # holds the interpreter lock for all of it); with the piece shrunk, every edge is met:
    # a message that is exactly one piece, one byte over, ending on a piece's last byte or
    # short of it, beside messages that fit.
    from fanloop.sessions import _sqlite

    monkeypatch.setattr(_sqlite, "_PIECE", 128)
    sizes = [128, 129, 256, 257, 258, 384, 900]
    async with SQLiteStore(db_path) as store:
        session = await store.open("s")
        await session.append(Message.user("x"))
        overhead = _stored_sizes(db_path)[0] - 1
        texts = ["x", "é" * 40, *("y" * (size - overhead) for size in sizes)]
        for text in texts[1:]:
            await session.append(Message.user(text))
        await session.append(Message.assistant("é" * 700))
        assert _stored_sizes(db_path)[2:-1] == sizes
        async with SQLiteStore(db_path) as other:
            again = await other.load("s")
    assert again.messages == session.messages
    assert [m.text for m in again.messages[:-1]] == texts


def _stored_sizes(path: Path) -> list[int]:
    db = connect(path)
    try:
        sql = "SELECT length(CAST(json AS BLOB)) FROM messages ORDER BY idx"
        return [size for (size,) in db.execute(sql)]
    finally:
        db.close()
