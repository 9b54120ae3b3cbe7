"""What a streamed answer holds while it streams: the objects the collector tracks, per stream.

``python benchmarks/streams_held.py -n 500 [--side fanloop,floor] [--top 30]`` starts the
FakeLLMServer (its own process) answering every request with ``--deltas`` one-character text
deltas 20 ms apart, then, in a fresh child process per side of ``bench_streams.py``
(``agent.stream`` on ``OpenAIProvider``; the floor reading the SSE by hand over ``aiohttp``),
starts ``n`` consumers at once, waits until every one has received ``--at`` deltas, and counts
``gc.get_objects()`` against a count taken before they started: per stream, by type.

With thousands of streams in flight, every one of these is walked by each full pass of the
collector, and the start of a batch, where every stream makes them at once, is where the young
and middle passes run (``bench_streams.py`` prints how many, and their time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import bench_streams
from _common import census, child_json, child_parser, per_item


async def child_main(side: str, url: str, n: int, at: int, deltas: int, top: int) -> dict[str, Any]:
    consume, close = bench_streams.SIDES[side](url, True)
    await consume(lambda: None)  # warm-up: imports, one pooled connection
    before = census()
    counts = [0] * n
    reached = asyncio.Event()
    waiting = n

    def consumer(i: int) -> Any:
        def tick() -> None:
            nonlocal waiting
            counts[i] += 1
            if counts[i] == at:
                waiting -= 1
                if not waiting:
                    reached.set()

        return tick

    tasks = [asyncio.ensure_future(consume(consumer(i))) for i in range(n)]
    await reached.wait()
    tracked, kinds = per_item(census() - before, n, top)
    del before
    received = await asyncio.gather(*tasks)
    await close()
    return {
        "side": side,
        "n": n,
        "tracked_per_stream": tracked,
        "types": kinds,
        "errors": sum(1 for got in received if got != deltas),
    }


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        p = child_parser()
        p.add_argument("--at", type=int, required=True)
        p.add_argument("--deltas", type=int, required=True)
        p.add_argument("--top", type=int, default=30)
        a = p.parse_args(sys.argv[2:])
        result = child_main(a.side, a.url, a.n, a.at, a.deltas, a.top)
        print(json.dumps(asyncio.run(result)))
        return
    from _server import serve

    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=500)
    p.add_argument("--side", default="fanloop,floor")
    p.add_argument("--deltas", type=int, default=100)
    p.add_argument("--at", type=int, default=30, help="count once every consumer has this many")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    if not 0 < a.at < a.deltas:
        p.error("--at must be between 0 and --deltas")
    with serve(answer_chars=a.deltas, chars_per_delta=1, delta_delay=0.02) as url:
        for side in a.side.split(","):
            argv = [sys.executable, __file__, "child", side, f"--url={url}", f"-n={a.n}"]
            res = child_json([*argv, f"--at={a.at}", f"--deltas={a.deltas}", f"--top={a.top}"])
            print(
                f"== {side}: {res['tracked_per_stream']:.1f} tracked objects per stream in "
                f"flight ({a.n} streams, each {a.at} deltas in; {res['errors']} errors)"
            )
            for t, c in res["types"]:
                print(f"   {c:7.2f}  {t}")


if __name__ == "__main__":
    main()
