"""Per-append cost of the session stores.

Run: ``python benchmarks/sessions_append.py [N]``. Prints microseconds per ``Session.append``
for MemoryStore and SQLiteStore (WAL, synchronous NORMAL and FULL), each append a small
user message committed in its own transaction, plus a 20-task concurrent run on 20 sessions.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio

from fanloop.messages import Message
from fanloop.sessions import MemoryStore, SessionStore, SQLiteStore


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
        for name, one, many in cases:
            seq = await sequential(one, n)
            conc = await concurrent(many, n)
            await one.aclose()
            await many.aclose()
            print(f"{name:20} {seq:8.1f} µs/append sequential   {conc:8.1f} µs/append x20 tasks")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
