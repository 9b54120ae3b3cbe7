"""Python work per model turn, counted rather than timed: a tool conversation (20 tool turns
by default, one no-op tool call each, as in ``bench_http.py``), the client's bytecodes and
Python calls counted with ``sys.settrace`` per turn, for fanloop's ``agent.run`` and the
hand-written aiohttp floor of ``_floor.py``, streamed or not. The counts do not move with the
load on the machine; C work (``json``, the socket, the selector) is not in them.

``python benchmarks/turn_opcodes.py [--api openai] [--no-stream] [--turns 20] [--top 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import _floor
from _server import serve
from bench_http import CompleteOnly, _providers, noop
from fanloop import Agent, Limits, RetryPolicy
from stream_opcodes import Counter


async def count(url: str, api: str, streaming: bool, top: int, turns: int) -> None:
    openai_provider, anthropic_provider = _providers(url)
    provider = openai_provider if api == "openai" else anthropic_provider
    agent = Agent(
        provider if streaming else CompleteOnly(provider),
        tools=[noop],
        limits=Limits(max_turns=None),
        retry=RetryPolicy(max_retries=0),
    )
    http = _floor.session()
    floor_loop = _floor.openai_loop if api == "openai" else _floor.anthropic_loop

    async def ours() -> None:
        await agent.run("go")

    async def floor() -> None:
        await floor_loop(http, url, "go", streaming=streaming)

    for name, side in (("fanloop", ours), ("floor", floor)):
        await side()  # warm-up
        await side()
        counter = Counter()
        sys.settrace(counter.trace)
        try:
            await side()
        finally:
            sys.settrace(None)
        n = turns + 1
        print(f"{name}: {counter.ops / n:,.0f} bytecodes, {counter.calls / n:.1f} calls per turn")
        for where, ops in counter.where.most_common(top):
            print(f"  {ops / n:7.1f}  {where}")
    await http.close()
    await openai_provider.aclose()
    await anthropic_provider.aclose()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    p.add_argument("--no-stream", action="store_true")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--turns", type=int, default=20, help="tool turns before the answer")
    a = p.parse_args()
    with serve(tool_turns=a.turns) as url:
        asyncio.run(count(url, a.api, not a.no_stream, a.top, a.turns))
