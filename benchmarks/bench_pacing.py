"""Pacing: what the gate costs per request, and what it buys under a rate limit.

1. Overhead per request, in process (``Pacing``) and on Redis (``RedisPacing``), with limits
   so high that no call ever waits: what is measured is the gate itself (one locked step in
   process; one Lua script call to book and one to settle on Redis). Each is shown beside the
   same call unpaced, in the same run: a ScriptedProvider (nothing but the gate), and a real
   HTTP call to FakeLLMServer through OpenAIProvider (the gate next to a fast model call).
2. A rate-limited load: 4 worker processes x 250 concurrent runs against a FakeLLMServer that
   allows 250 requests in any second (sliding window) and answers 429 with ``Retry-After: 1``
   past it; once with one ``RedisPacing`` key shared by the workers (at 80 % of the limit), once
   without pacing (each run retries on its own: ``RetryPolicy(max_retries=3)``). Reported:
   the requests the server saw, its 429s, the most requests in any one-second window, the
   failed runs and the time the load took.

Needs Redis on 127.0.0.1:6379 (``FANLOOP_BENCH_REDIS``) for the Redis rows and the load;
without it those are skipped.

Run: ``python benchmarks/bench_pacing.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, table, write
from fanloop.messages import Message
from fanloop.pacing import Pacing, RedisPacing, paced
from fanloop.providers import ModelRequest
from fanloop.testing import FakeLLMServer, ScriptedProvider

REDIS_URL = os.environ.get("FANLOOP_BENCH_REDIS", "redis://127.0.0.1:6379/0")
UNLIMITED = {"requests_per_minute": 1e12, "tokens_per_minute": 1e15, "max_concurrency": 10**9}
LIMIT = 250  # requests per second at the server
SHARE = 0.8  # the pacing's share of it


def redis_unavailable() -> str | None:
    try:
        import redis
    except ImportError:
        return "the redis package is not installed (pip install 'fanloop[redis]')"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        client.close()
    except Exception as exc:
        return f"no Redis at {REDIS_URL}: {exc}"
    return None


# -- 1. overhead -------------------------------------------------------------------------------


async def per_call(provider: Any, request: ModelRequest, n: int) -> float:
    """Median-of-three microseconds per sequential ``complete()`` over ``n`` calls."""
    await provider.complete(request)  # warm up (connections, scripts)
    samples = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            await provider.complete(request)
        samples.append((time.perf_counter() - started) / n * 1e6)
    return sorted(samples)[1]


async def overhead(n: int) -> list[Row]:
    request = ModelRequest(messages=(Message.user("hi"),), max_tokens=64)
    redis_reason = redis_unavailable()
    if redis_reason is not None:
        print(f"  Redis rows skipped: {redis_reason}", flush=True)
    rows = []
    scripted = ScriptedProvider(lambda r: "ok", record=False)
    sides: dict[str, Any] = {"in process": Pacing(**UNLIMITED)}
    if redis_reason is None:
        sides["Redis"] = RedisPacing(REDIS_URL, key=f"bench-{uuid.uuid4().hex[:8]}", **UNLIMITED)
    try:
        base = await per_call(scripted, request, n)
        for name, pacing in sides.items():
            ours = await per_call(paced(scripted, pacing), request, n)
            rows.append(Row(f"paced ScriptedProvider call, {name}", "per call", ours, base, "µs"))
        from fanloop.providers.openai import OpenAIProvider

        with FakeLLMServer(responder=lambda body: "ok", record=False) as server:
            url = server.openai_base_url
            async with OpenAIProvider("gpt-4.1", api_key="k", base_url=url) as plain:
                base = await per_call(plain, request, n // 4 or 1)
            for name, pacing in sides.items():
                async with OpenAIProvider(
                    "gpt-4.1", api_key="k", base_url=url, pacing=pacing
                ) as provider:
                    ours = await per_call(provider, request, n // 4 or 1)
                rows.append(
                    Row(f"paced HTTP call (OpenAIProvider), {name}", "per call", ours, base, "µs")
                )
    finally:
        for pacing in sides.values():
            await pacing.aclose()
    return rows


# -- 2. the rate-limited load --------------------------------------------------------------


async def worker(config: dict[str, Any]) -> None:
    """One worker process: ``config["runs"]`` concurrent runs; prints a JSON report."""
    from fanloop import Agent, RetryPolicy
    from fanloop.providers.openai import OpenAIProvider

    pacing = None
    if config.get("key"):
        pacing = RedisPacing(REDIS_URL, key=config["key"], requests_per_minute=config["rpm"])
    provider = OpenAIProvider("gpt-4.1", api_key="k", base_url=config["url"], pacing=pacing)
    agent = Agent(provider, retry=RetryPolicy(max_retries=3))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    errors: Counter[str] = Counter()

    async def one(i: int) -> bool:
        try:
            return (await agent.run(f"task {i}")).termination_reason == "completed"
        except Exception as exc:
            errors[type(exc).__name__] += 1
            return False

    done = await asyncio.gather(*(one(i) for i in range(config["runs"])))
    await provider.aclose()
    if pacing is not None:
        await pacing.aclose()
    print(json.dumps({"completed": sum(done), "failed": len(done) - sum(done)}), flush=True)


def load(workers: int, runs: int, pacing: bool) -> Row | None:
    """The rate-limited load, paced or not: a row of what the server saw."""
    from fanloop.testing import RateLimit

    limit = RateLimit(LIMIT, per=1.0, retry_after=1.0)
    key = f"bench-{uuid.uuid4().hex[:8]}" if pacing else None
    with FakeLLMServer(responder=lambda body: "done", rate_limit=limit, record=False) as server:
        config = {"url": server.openai_base_url, "runs": runs, "key": key}
        config["rpm"] = LIMIT * 60 * SHARE
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(workers)
        ]
        reports = []
        try:
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
            started = time.perf_counter()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            for proc in procs:
                out, _ = proc.communicate(timeout=300)
                reports.append(json.loads(out.strip().splitlines()[-1]))
            elapsed = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    log = server.rate_log
    assert log is not None
    seen = len(log.accepted) + len(log.rejected)
    failed = sum(r["failed"] for r in reports)
    side = f"one RedisPacing key at {SHARE:.0%} of it" if pacing else "no pacing"
    workload = f"{workers} processes x {runs} runs vs {LIMIT} requests/s (sliding window), {side}"
    print(
        f"  {side}: {seen} requests, {len(log.rejected)} answered 429 "
        f"({len(log.rejected) / max(seen, 1):.1%}), at most {log.max_in_window()} in one "
        f"second, {failed} of {workers * runs} runs failed, {elapsed:.1f} s",
        flush=True,
    )
    return Row(
        workload,
        f"429s ({len(log.rejected) / max(seen, 1):.1%} of {seen} requests); "
        f"max {log.max_in_window()}/s; failed runs {failed}; {elapsed:.1f} s",
        float(len(log.rejected)),
        None,
        "429s",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(json.loads(args.worker)))
        return
    n, workers, runs = (200, 2, 20) if args.quick else (5000, 4, 250)
    rows = asyncio.run(overhead(n))
    if redis_unavailable() is None:
        for pacing in (True, False):
            row = load(workers, runs, pacing)
            if row is not None:
                rows.append(row)
    text = table(rows)
    print(text)
    print(f"\nwritten to {write('pacing.md', text + chr(10))}")


if __name__ == "__main__":
    main()
