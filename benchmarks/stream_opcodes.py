"""Python work per streamed delta, counted rather than timed: one stream, deltas 20 ms apart
(each arrives on its own, as with many concurrent consumers), the client's bytecodes and
Python calls (resumptions included) counted with ``sys.settrace`` per delta the consumer
receives, for fanloop's ``agent.stream`` and the hand-written aiohttp floor of
``bench_streams.py``. The counts do not move with the load on the machine, which wall-clock
figures on a shared machine do; C work (``json``, the socket, the selector) is not in them.

``python benchmarks/stream_opcodes.py [--deltas 150] [--top 25]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from types import FrameType
from typing import Any

import bench_streams
from _server import serve


class Counter:
    def __init__(self) -> None:
        self.ops = 0
        self.calls = 0
        self.where: collections.Counter[str] = collections.Counter()

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            self.calls += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            self.ops += 1
            code = frame.f_code
            name = code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
            self.where[f"{name}:{code.co_name}"] += 1
        return self.trace


async def count(url: str, top: int) -> None:
    sides = {name: make(url, False) for name, make in bench_streams.SIDES.items()}
    for name, (consume, _) in sides.items():
        await consume(bench_streams.Timings().consumer(time.perf_counter()))  # warm-up
        counter = Counter()
        sys.settrace(counter.trace)
        try:
            n = await consume(bench_streams.Timings().consumer(time.perf_counter()))
        finally:
            sys.settrace(None)
        print(f"{name}: {counter.ops / n:,.0f} bytecodes, {counter.calls / n:.1f} calls per delta")
        for where, ops in counter.where.most_common(top):
            print(f"  {ops / n:7.1f}  {where}")
    for _, close in sides.values():
        await close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--deltas", type=int, default=150)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with serve(answer_chars=args.deltas, chars_per_delta=1, delta_delay=0.02) as url:
        asyncio.run(count(url, args.top))
