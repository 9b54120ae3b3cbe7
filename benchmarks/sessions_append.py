"""Per-append cost of the session stores.

Run: ``python benchmarks/sessions_append.py [N]``. Prints microseconds per ``Session.append``
for MemoryStore, SQLiteStore (WAL, synchronous NORMAL and FULL) and, when PostgreSQL answers
on ``$FANLOOP_BENCH_PG_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
PostgresStore, each append a small user message committed in its own transaction, plus a
20-task concurrent run on 20 sessions; then each store's ratio to SQLiteStore NORMAL.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio

from fanloop.messages import Message
from fanloop.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore

PG_DSN = os.environ.get("FANLOOP_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        return False
    return True


async def sequential(store: SessionStore, n: int) -> float:
    session = await store.open("bench")
    messages = [Message.user(f"message number {i} " + "x" * 200) for i in range(n)]
    await session.append(messages[0])  # connect, migrate
    start = time.perf_counter()
    for m in messages[1:]:
        await session.append(m)
    return (time.perf_counter() - start) / (n - 1) * 1e6


async def concurrent(store: SessionStore, n: int, tasks: int = 20) -> float:
    async def run(k: int) -> None:
        session = await store.open(f"c{k}")
        for i in range(n // tasks):
            await session.append(Message.user(f"{k}:{i}"))

    await store.open("warm")
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for k in range(tasks):
            tg.start_soon(run, k)
    return (time.perf_counter() - start) / (n // tasks * tasks) * 1e6


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, SessionStore, SessionStore]] = [
            ("MemoryStore", MemoryStore(), MemoryStore()),
            (
                "SQLiteStore NORMAL",
                SQLiteStore(Path(tmp, "a.db")),
                SQLiteStore(Path(tmp, "b.db")),
            ),
            (
                "SQLiteStore FULL",
                SQLiteStore(Path(tmp, "c.db"), synchronous="FULL"),
                SQLiteStore(Path(tmp, "d.db"), synchronous="FULL"),
            ),
        ]
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        if postgres_up():
            cases.append(
                (
                    "PostgresStore",
                    PostgresStore(PG_DSN, schema=schema),
                    PostgresStore(PG_DSN, schema=schema + "_c"),
                )
            )
        else:
            print("PostgresStore: skipped (nothing answers on 127.0.0.1:5432)")
        figures: dict[str, tuple[float, float]] = {}
        for name, one, many in cases:
            seq = await sequential(one, n)
            conc = await concurrent(many, n)
            await one.aclose()
            await many.aclose()
            figures[name] = (seq, conc)
            print(f"{name:20} {seq:8.1f} µs/append sequential   {conc:8.1f} µs/append x20 tasks")
        base_seq, base_conc = figures["SQLiteStore NORMAL"]
        for name, (seq, conc) in figures.items():
            ratios = f"{seq / base_seq:6.2f}x sequential   {conc / base_conc:6.2f}x x20 tasks"
            print(f"{name:20} {ratios}")
        if "PostgresStore" in figures:
            await drop_schemas(schema, schema + "_c")


async def drop_schemas(*names: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        for name in names:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
