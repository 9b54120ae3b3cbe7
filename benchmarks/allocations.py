"""What a run allocates for the collector: tracked objects by type, fanloop against the floor.

``python benchmarks/allocations.py -n 200 --side fanloop,floor`` starts a FakeLLMServer and,
in a fresh child process per side, runs ``n`` 3-turn runs of ``bench_concurrency.py`` at once
with the collector's young threshold at 1: a young collection starts at almost every new
tracked object, and a ``gc.callbacks`` hook counts, by type, what the young generation holds
when it starts (``gc.get_objects(generation=0)``). That is every tracked object a run makes
except one freed before the next one is made, which is what moves the collector's counter and
so what sets how often it runs. Printed per run: the total, then the types by how many more
fanloop makes than the floor (``--top`` rows). ``--latency`` is the server's delay a call.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import sys
from typing import Any

from _common import child_json, child_parser, object_kind


async def child_main(side: str, url: str, n: int) -> dict[str, Any]:
    import bench_concurrency

    if side == "fanloop":
        runner: Any = lambda count: bench_concurrency.fanloop_side(url, count, None)  # noqa: E731
    else:
        runner = lambda count: bench_concurrency.floor_side(url, count)  # noqa: E731
    await runner(5)  # imports and lazy set-up done
    kinds: collections.Counter[str] = collections.Counter()
    counting = True

    def count(phase: str, info: dict[str, int]) -> None:
        # (a loop: a generator expression here would be two objects more a pass, counted)
        if counting and phase == "start" and info["generation"] == 0:
            for o in gc.get_objects(generation=0):
                kinds[object_kind(o)] += 1

    gc.collect()
    gc.freeze()  # what exists now never takes part
    gc.callbacks.append(count)
    gc.set_threshold(1, 10**9, 10**9)  # a young pass at (almost) every new object, no other
    try:
        await runner(n)
    finally:
        counting = False
        gc.set_threshold(700, 10, 10)
        gc.callbacks.remove(count)
    return {"per_run": {kind: c / n for kind, c in kinds.items()}}


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        p = child_parser()
        a = p.parse_args(sys.argv[2:])
        print(json.dumps(asyncio.run(child_main(a.side, a.url, a.n))))
        return
    from _server import serve
    from bench_concurrency import TOOL_TURNS

    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--side", default="fanloop,floor")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--latency", type=float, default=0.01)
    a = p.parse_args()
    counts: dict[str, dict[str, float]] = {}
    with serve(tool_turns=TOOL_TURNS, latency=a.latency) as url:
        for side in a.side.split(","):
            argv = [sys.executable, __file__, "child", side, f"--url={url}", f"-n={a.n}"]
            counts[side] = child_json(argv)["per_run"]
            print(f"== {side}: {sum(counts[side].values()):.0f} tracked objects made a run")
    sides = list(counts)
    first, last = counts[sides[0]], counts[sides[-1]]
    if len(sides) > 1:
        print(f"   {sides[0]:>9} {sides[-1]:>9}   more  type")
    kinds = set(first) | set(last)
    # by how many more the first side makes (with one side: by how many it makes)
    order = sorted(
        kinds,
        key=lambda k: first.get(k, 0.0) - (last.get(k, 0.0) if last is not first else 0.0),
        reverse=True,
    )
    for kind in order[: a.top]:
        mine, theirs = first.get(kind, 0.0), last.get(kind, 0.0)
        if last is first:
            print(f"   {mine:9.2f}  {kind}")
        else:
            print(f"   {mine:9.2f} {theirs:9.2f} {mine - theirs:+7.2f}  {kind}")


if __name__ == "__main__":
    main()
