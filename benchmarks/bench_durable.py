"""Durable runs: the per-turn time of a run as a DBOS workflow vs the same run in memory.

A 20-turn tool conversation (one no-op tool call per turn) on a ScriptedProvider, so what is
measured is fanloop's and DBOS's own work: per turn, a model step and a tool step (each a
check and a checkpoint in PostgreSQL) and the event stream's writes. Both sides run in the
same process, the same run; the figure is the ratio. A third row gives the model 50 ms to
answer, to show the overhead next to a (fast) real model call.

Needs PostgreSQL (``FANLOOP_BENCH_PG_DSN``, default ``postgresql://postgres@127.0.0.1:5432/test``)
and DBOS (``pip install 'fanloop[durable]'``); without them the section is skipped. DBOS gets a
system database of its own, ``fanloop_bench_<random>``, dropped at the end.

Run: ``python benchmarks/bench_durable.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio

from _common import Row, median_time, table, write
from fanloop import Agent, Limits, tool
from fanloop.providers import ModelRequest, ModelResponse
from fanloop.testing import ScriptedProvider, call, reply

PG_DSN = os.environ.get("FANLOOP_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TURNS = 20
LATENCY = 0.05


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


def conversation(turns: int, latency: float = 0.0) -> ScriptedProvider:
    """A model that calls noop once per turn for ``turns`` turns, then answers; each answer
    starts after ``latency`` seconds."""
    tool_turn = reply("step", tool_calls=[call("noop", _id="c")])

    def answer(request: ModelRequest) -> ModelResponse | str:
        return tool_turn if len(request.messages) < 2 * turns else "done"

    return ScriptedProvider(answer, chunk_size=1000, first_delay=latency, record=False)


def unavailable() -> str | None:
    """Why the section cannot run here, or ``None``."""
    try:
        import dbos  # noqa: F401
        import psycopg
    except ImportError:
        return "DBOS is not installed (pip install 'fanloop[durable]')"
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL is not reachable at {PG_DSN}: {str(exc).strip()}"
    return None


def _database() -> tuple[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(PG_DSN)
    name = f"fanloop_bench_{uuid.uuid4().hex[:10]}"
    user = params.get("user") or "postgres"
    auth = f"{user}:{params['password']}" if params.get("password") else str(user)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or 5432
    return name, f"postgresql://{auth}@{host}:{port}/{name}"


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def per_turn(turns: int = TURNS, repeats: int = 5) -> list[Row]:
    """Per-turn time as a workflow vs in memory: events streamed or not, and with a model
    that takes 50 ms to answer. ``[]`` when the section is skipped."""
    reason = unavailable()
    if reason is not None:
        print(f"  durable runs skipped: {reason}", flush=True)
        return []
    from dbos import DBOS

    from fanloop.durable import DurableAgent

    limits = Limits(max_turns=None)
    agent = Agent(conversation(turns), tools=[noop], limits=limits)
    slow = Agent(conversation(turns, LATENCY), tools=[noop], limits=limits)
    durables = {
        "events": DurableAgent(agent, name="bench"),
        "quiet": DurableAgent(agent, name="bench-quiet", events=False),
        "slow": DurableAgent(slow, name="bench-slow"),
    }
    name, url = _database()
    DBOS(config={"name": "fanloop-bench", "system_database_url": url})
    seconds: dict[str, float] = {}
    try:
        DBOS.launch()  # in the event loop: the workflows run on it
        sides = {
            "memory": agent.run,
            "memory-slow": slow.run,
            **{key: durable.run for key, durable in durables.items()},
        }
        for key, run in sides.items():

            async def once(run=run) -> None:  # type: ignore[no-untyped-def]
                assert (await run("go")).turns == turns + 1

            await once()  # warm up
            reps = max(1, repeats // 2) if "slow" in key else repeats
            seconds[key] = await median_time(once, reps) / (turns + 1)
    finally:
        DBOS.destroy()
        _drop(name)
    workload = f"{turns}-turn tool conversation (ScriptedProvider) as a DBOS workflow"
    ms = {key: value * 1e3 for key, value in seconds.items()}
    return [
        Row(f"{workload}, events streamed", "per turn", ms["events"], ms["memory"], "ms"),
        Row(f"{workload}, no event stream", "per turn", ms["quiet"], ms["memory"], "ms"),
        Row(
            f"{workload}, model answering in {LATENCY * 1e3:.0f} ms, events streamed",
            "per turn",
            ms["slow"],
            ms["memory-slow"],
            "ms",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args()
    turns, repeats = (3, 1) if args.quick else (TURNS, 5)
    rows = anyio.run(per_turn, turns, repeats)
    if not rows:
        return
    text = table(rows)
    print(text)
    print(f"\nwritten to {write('durable.md', text + chr(10))}")


if __name__ == "__main__":
    main()
