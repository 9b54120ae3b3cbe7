"""What a run holds while it waits for the model: objects the collector tracks and heap bytes.

``python benchmarks/waiting_runs.py -n 1000 --side fanloop,floor`` starts a FakeLLMServer (in
its own process) that holds each conversation's ``--turn``-th model call (the first by
default) for ten minutes, then, in a fresh child process per side, starts ``n`` 3-turn runs of
``bench_concurrency.py`` at once, waits until they all sit on the server, and counts what
they hold: ``gc.get_objects()`` against a count taken before they started (per run, by type)
and ``tracemalloc``'s heap (per run, by where it was allocated). ``--top`` sets how many types
and allocation sites are listed; ``--cpu-n`` also times the CPU cost of starting that many
runs until they all wait (no tracemalloc then).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from typing import Any

from _common import census, child_json, child_parser, per_item


async def _settle(previous: int) -> int:
    """Wait until the number of tracked objects stops moving (every run is waiting)."""
    while True:
        await asyncio.sleep(0.5)
        now = len(gc.get_objects())
        if now == previous:
            return now
        previous = now


def _make_runner(side: str, url: str, pool: int) -> tuple[Any, Any]:
    if side == "fanloop":
        import httpx2

        from fanloop import Agent, RetryPolicy, tool
        from fanloop.providers._http import create_pool
        from fanloop.providers.openai import OpenAIProvider

        @tool
        async def noop() -> str:
            """Do nothing."""
            return "ok"

        http = create_pool(limits=httpx2.Limits(max_connections=pool))
        provider = OpenAIProvider(
            "gpt-4.1", api_key="bench", base_url=f"{url}/v1", http_client=http
        )
        agent = Agent(provider, tools=[noop], retry=RetryPolicy(max_retries=0))

        async def one() -> Any:
            return await agent.run("go")

        async def close() -> None:
            await provider.aclose()
            await http.aclose()

        return one, close

    import _floor

    session = _floor.session(limit=pool)

    async def one_floor() -> Any:
        return await _floor.openai_loop(session, url, "go", streaming=True)

    return one_floor, session.close


async def _warm(one: Any) -> None:
    """One run to a first wait, then cancelled: imports and lazy set-up done."""
    task = asyncio.ensure_future(one())
    await asyncio.sleep(1.0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def child_main(side: str, url: str, n: int, top: int, cpu: bool, pool: int) -> dict[str, Any]:
    one, close = _make_runner(side, url, pool)
    await _warm(one)
    gc.collect()
    out: dict[str, Any] = {"side": side, "n": n}
    if cpu:
        started_cpu = time.process_time()
        tasks = [asyncio.ensure_future(one()) for _ in range(n)]
        await _settle(len(gc.get_objects()))
        out["cpu_ms_per_run_to_wait"] = (time.process_time() - started_cpu) * 1000 / n
    else:
        before = census()
        tracemalloc.start(8)
        snap0 = tracemalloc.take_snapshot()
        tasks = [asyncio.ensure_future(one()) for _ in range(n)]
        await _settle(len(gc.get_objects()))
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snap1.compare_to(snap0, "lineno")
        # The snapshots hold a tuple per trace: gone before the count, or it counts them.
        del snap0, snap1
        out["tracked_per_run"], out["types"] = per_item(census() - before, n, top)
        out["heap_bytes_per_run"] = sum(s.size_diff for s in stats) / n
        out["sites"] = [
            (
                str(s.traceback[0]).replace(sys.prefix, "<venv>"),
                round(s.size_diff / n),
                round(s.count_diff / n, 2),
            )
            for s in stats[:top]
        ]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await close()
    return out


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        p = child_parser()
        p.add_argument("--top", type=int, default=25)
        p.add_argument("--cpu", action="store_true")
        p.add_argument("--pool", type=int, default=100_000)
        a = p.parse_args(sys.argv[2:])
        print(json.dumps(asyncio.run(child_main(a.side, a.url, a.n, a.top, a.cpu, a.pool))))
        return
    from _server import serve

    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=1000)
    p.add_argument("--side", default="fanloop,floor")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--cpu-n", type=int, default=0)
    p.add_argument("--turn", type=int, default=1, help="the model call the runs wait in (1-3)")
    p.add_argument(
        "--pool",
        type=int,
        default=100_000,
        help="connections at most (fewer than -n: the rest wait for one, as at 10,000 runs)",
    )
    a = p.parse_args()
    with serve(tool_turns=2, hold_turn=a.turn) as url:
        for side in a.side.split(","):
            argv = [sys.executable, __file__, "child", side, f"--url={url}", f"--pool={a.pool}"]
            res = child_json([*argv, f"-n={a.n}", f"--top={a.top}"])
            print(
                f"== {side}: {res['tracked_per_run']:.1f} tracked objects, "
                f"{res['heap_bytes_per_run']:.0f} heap bytes per waiting run"
            )
            for t, c in res["types"]:
                print(f"   {c:7.2f}  {t}")
            print("   -- heap by site (bytes/run, blocks/run)")
            for site, size, count in res["sites"]:
                print(f"   {size:7d} {count:6.2f}  {site}")
            if a.cpu_n:
                res = child_json([*argv, f"-n={a.cpu_n}", "--cpu"])
                cpu = res["cpu_ms_per_run_to_wait"]
                print(f"   CPU to start a run and reach its wait: {cpu:.3f} ms")


if __name__ == "__main__":
    main()
