"""Many streaming consumers, and one long stream: what a consumer of ``agent.stream`` sees.

- **N concurrent streamed answers**: the FakeLLMServer (its own process, pinned to core 0)
  answers every request with ``--deltas`` one-character text deltas, ``--interval`` seconds
  apart. N consumers start at once in a client process pinned to core 1 (``taskset`` style,
  :func:`_server.pin`) and each times what it receives: the wall time of the batch, the gap
  between two deltas as the consumer sees them (p50, p99, pooled over every consumer), the time
  to first delta (p99 over consumers), the client's peak RSS and CPU time, the collector's
  share of that time and its passes by generation (in all, and before every consumer had its
  first delta: the start burst), and the errors (a consumer that raises or does not get every
  delta). Each side streams one answer before the
  batch (imports done, one pooled connection), as a service in its steady state. Sides:
  ``fanloop`` (an ``Agent`` on ``OpenAIProvider``, ``async with agent.stream(...)``, its
  default ``RetryPolicy``) and ``floor`` (the same stream read by hand: one ``aiohttp``
  session, ``json.loads`` of each SSE ``data:`` line, retried under the same rules).
- **one long stream**: one answer of ``--long`` deltas written at once; both sides in one
  process, interleaved; time to first delta and deltas per second to the consumer.

``python benchmarks/bench_streams.py -n 500,2000 --repeats 3 --long 5000``
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import gc
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import _common
from _common import Row, peak_rss_mib
from _server import pin, pinned_client, serve

SERVER_CPU, CLIENT_CPU = 0, 1
KINDS: collections.Counter[str] = collections.Counter()
HEADERS = {"Authorization": "Bearer bench", "Content-Type": "application/json"}


class Timings:
    """What the consumers saw: every gap between two deltas and every time to first delta."""

    def __init__(self) -> None:
        self.gaps = array.array("d")
        self.ttfd = array.array("d")

    def consumer(self, started: float) -> Callable[[], None]:
        """A consumer's clock: call the returned function on every delta it receives."""
        last = 0.0
        gaps, ttfd, clock = self.gaps, self.ttfd, time.perf_counter

        def tick() -> None:
            nonlocal last
            now = clock()
            if last:
                gaps.append(now - last)
            else:
                ttfd.append(now - started)
            last = now

        return tick


# -- the sides ---------------------------------------------------------------------------------


def fanloop_consumer(url: str, retry: bool) -> tuple[Callable[..., Awaitable[int]], Any]:
    from fanloop import Agent, RetryPolicy
    from fanloop.providers.openai import OpenAIProvider

    provider = OpenAIProvider("gpt-4.1", api_key="bench", base_url=f"{url}/v1")
    agent = Agent(provider, retry=RetryPolicy() if retry else RetryPolicy(max_retries=0))

    async def consume(tick: Callable[[], None]) -> int:
        n = 0
        async with agent.stream("go") as run:
            async for event in run:
                if event.kind == "text_delta":
                    tick()
                    n += 1
        return n

    return consume, provider.aclose


def floor_consumer(url: str, retry: bool) -> tuple[Callable[..., Awaitable[int]], Any]:
    """The same stream read by hand over aiohttp: one session (as many connections as fanloop's
    default pool), a line at a time, ``json.loads`` of each ``data:`` line. A transient failure
    (a connection error or timeout, HTTP 408/409/429/5xx) before the first delta is retried as
    fanloop's default ``RetryPolicy`` does (3 retries, 0.5 s doubling, equal jitter)."""
    import aiohttp

    http: aiohttp.ClientSession | None = None
    body = json.dumps(
        {
            "model": "gpt-4.1",
            "messages": [{"role": "user", "content": "go"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    target = f"{url}/v1/chat/completions"
    retries = 3 if retry else 0

    async def once(tick: Callable[[], None]) -> int:
        nonlocal http
        if http is None:
            http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000))
        n = 0
        async with http.post(target, data=body, headers=HEADERS) as r:
            if r.status in (408, 409, 429) or r.status >= 500:
                raise ConnectionError(f"HTTP {r.status}")
            r.raise_for_status()
            async for line in r.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                choices = chunk.get("choices")
                if choices and choices[0]["delta"].get("content"):
                    tick()
                    n += 1
        return n

    async def consume(tick: Callable[[], None]) -> int:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await once(tick)
            except (TimeoutError, aiohttp.ClientError, ConnectionError):
                if attempt > retries:
                    raise
                backoff = 0.5 * 2.0 ** (attempt - 1)
                await asyncio.sleep(backoff / 2 + random.random() * backoff / 2)

    async def close() -> None:
        if http is not None:
            await http.close()

    return consume, close


SIDES = {"fanloop": fanloop_consumer, "floor": floor_consumer}


# -- N concurrent consumers, one child process per batch --------------------------------------


async def batch(side: str, url: str, n: int, deltas: int, retry: bool) -> dict[str, Any]:
    consume, close = SIDES[side](url, retry)
    timings = Timings()
    errors = 0

    async def one() -> None:
        nonlocal errors
        try:
            got = await consume(timings.consumer(time.perf_counter()))
            if got != deltas:
                errors += 1
                KINDS[f"{got} of {deltas} deltas"] += 1
        except Exception as exc:
            errors += 1
            KINDS[f"{type(exc).__name__}: {exc}"[:200]] += 1

    await consume(Timings().consumer(time.perf_counter()))  # warm-up: imports, one connection
    gc_time = [0.0, 0.0, 0.0]  # seconds in collections of each generation during the batch
    gc_started = 0.0
    # The collections (by generation) and their seconds up to the moment the last consumer
    # got its first delta: the start burst, where every run's state is made at once.
    gc_at_start: list[int] | None = None
    gc_s_at_start = 0.0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal gc_started, gc_at_start, gc_s_at_start
        if phase == "start":
            gc_started = time.perf_counter()
            if gc_at_start is None and len(timings.ttfd) >= n:
                gc_at_start = _collections_since(collections_before)
                gc_s_at_start = sum(gc_time)
        else:
            gc_time[info["generation"]] += time.perf_counter() - gc_started

    collections_before = _collections_since()
    gc.callbacks.append(on_gc)
    cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    gc.callbacks.remove(on_gc)
    gc_count = _collections_since(collections_before)
    if gc_at_start is None:  # no collection after the last first delta
        gc_at_start, gc_s_at_start = gc_count, sum(gc_time)
    await close()
    gaps = sorted(timings.gaps)
    ttfd = sorted(timings.ttfd)

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1e3 if values else 0.0

    return {
        "wall": wall,
        "cpu_s": cpu,
        "gc_s": gc_time,
        "gc_collections": gc_count,
        "gc_total_s": sum(gc_time),
        "gc_start_collections": gc_at_start,
        "gc_start_s": gc_s_at_start,
        "gap_p50_ms": pct(gaps, 0.5),
        "gap_p99_ms": pct(gaps, 0.99),
        "ttfd_p50_ms": pct(ttfd, 0.5),
        "ttfd_p99_ms": pct(ttfd, 0.99),
        "errors": errors,
        "kinds": dict(KINDS.most_common(3)),
    }


def _collections_since(before: list[int] | None = None) -> list[int]:
    """The collector's passes by generation (young, middle, full), since ``before``."""
    now = [g["collections"] for g in gc.get_stats()]
    return now if before is None else [a - b for a, b in zip(now, before, strict=True)]


def child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("side", choices=sorted(SIDES))
    parser.add_argument("--url", required=True)
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("--deltas", type=int, required=True)
    parser.add_argument("--no-retry", action="store_true")
    parser.add_argument("--cpu", type=int, default=None)
    parser.add_argument("--profile", default=None, help="write a cProfile dump here")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        pin(args.cpu)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    coro = batch(args.side, args.url, args.n, args.deltas, not args.no_retry)
    if args.profile:
        import cProfile

        with cProfile.Profile() as prof:
            result = asyncio.run(coro)
        prof.dump_stats(args.profile)
    else:
        result = asyncio.run(coro)
    result["rss_mib"] = peak_rss_mib()
    result["n"] = args.n
    print(json.dumps(result))


def measure(
    side: str, url: str, n: int, deltas: int, *, retry: bool = True, cpu: int | None = CLIENT_CPU
) -> dict[str, Any]:
    """One batch of ``n`` consumers in a fresh child process (pinned to core ``cpu``)."""
    argv = [sys.executable, __file__, "child", side, f"--url={url}", f"-n={n}"]
    argv += [f"--deltas={deltas}"]
    if not retry:
        argv.append("--no-retry")
    if cpu is not None:
        argv.append(f"--cpu={cpu}")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


METRICS = (  # key, label, unit, target ratio (fanloop / floor at most)
    ("wall", "wall time", "s", 1.05),
    ("gap_p99_ms", "p99 gap between deltas", "ms", 1.5),
    ("gap_p50_ms", "median gap between deltas", "ms", None),
    ("ttfd_p99_ms", "p99 time to first delta", "ms", 1.2),
    ("rss_mib", "peak RSS (client process)", "MiB", 1.3),
    ("cpu_s", "CPU time of the batch (client process)", "s", None),
    ("gc_total_s", "of which the collector (client process)", "s", None),
    ("gc_start_s", "of which the collector before every consumer had a delta", "s", None),
)


def concurrent_rows(
    sizes: list[int], deltas: int, interval: float, repeats: int
) -> tuple[list[Row], list[str]]:
    """Rows for N concurrent streamed answers, sides alternating, ``repeats`` batches each;
    and a line per figure with its spread."""
    rows: list[Row] = []
    spread: list[str] = []
    with serve(answer_chars=deltas, chars_per_delta=1, delta_delay=interval, cpu=SERVER_CPU) as url:
        measure("floor", url, min(sizes), deltas)  # warm the server
        for n in sizes:
            samples: dict[str, list[dict[str, Any]]] = {"fanloop": [], "floor": []}
            for _ in range(repeats):
                for side in ("fanloop", "floor"):
                    samples[side].append(measure(side, url, n, deltas))
            name = (
                f"{n:,} concurrent streamed answers, {deltas} deltas {interval * 1e3:g} ms apart "
                f"(ideal {deltas * interval:g} s); floor: SSE read by hand over aiohttp"
            )
            for key, label, unit, target in METRICS:
                ours = [s[key] for s in samples["fanloop"]]
                base = [s[key] for s in samples["floor"]]
                ratios = [a / b for a, b in zip(ours, base, strict=True) if b]
                mo, mb = statistics.median(ours), statistics.median(base)
                rows.append(
                    Row(
                        name,
                        label,
                        mo,
                        mb,
                        unit,
                        f"≤ {target}× floor" if target else "",
                        (mo <= target * mb) if target else None,
                    )
                )
                spread.append(
                    f"N={n} {label}: fanloop {min(ours):.4g}–{max(ours):.4g} {unit}, floor "
                    f"{min(base):.4g}–{max(base):.4g} {unit}, ratio per pair "
                    f"{min(ratios, default=0):.2f}–{max(ratios, default=0):.2f}×"
                )
            for side, runs in samples.items():
                passes = "; ".join(
                    "/".join(map(str, r["gc_collections"]))
                    + f" ({'/'.join(map(str, r['gc_start_collections']))} before every consumer"
                    " had a delta)"
                    for r in runs
                )
                spread.append(f"N={n} collector passes young/middle/full, {side}: {passes}")
            errors = sum(s["errors"] for s in samples["fanloop"])
            errors_f = sum(s["errors"] for s in samples["floor"])
            rows.append(
                Row(name, f"errors (of {n * repeats:,})", errors, errors_f, "", "0", errors == 0)
            )
            for s in samples["fanloop"] + samples["floor"]:
                for kind in s.get("kinds", {}):
                    spread.append(f"N={n} error kind: {kind}")
    return rows, spread


# -- one long stream, both sides in one process ------------------------------------------------


async def _long(url: str, deltas: int, repeats: int) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {"fanloop": [], "floor": []}
    sides = {name: make(url, False) for name, make in SIDES.items()}
    for i in range(repeats + 1):  # the first round warms both up
        for name, (consume, _) in sides.items():
            timings = Timings()
            started = time.perf_counter()
            got = await consume(timings.consumer(started))
            wall = time.perf_counter() - started
            if got != deltas:
                raise RuntimeError(f"{name}: {got} of {deltas} deltas")
            if i:
                out[name].append((timings.ttfd[0], wall))
    for _, close in sides.values():
        await close()
    return out


def long_rows(deltas: int, repeats: int) -> tuple[list[Row], list[str]]:
    with (
        pinned_client(CLIENT_CPU, SERVER_CPU, enabled=not _common.QUICK) as server_cpu,
        serve(answer_chars=deltas, chars_per_delta=1, cpu=server_cpu) as url,
    ):
        samples = asyncio.run(_long(url, deltas, repeats))
    ttfd = {k: statistics.median(t for t, _ in v) * 1e3 for k, v in samples.items()}
    rate = {k: deltas / statistics.median(w for _, w in v) for k, v in samples.items()}
    name = f"one streamed answer of {deltas:,} deltas, written at once; floor: aiohttp by hand"
    spread = [
        f"long stream {k}: ttfd {min(t for t, _ in v) * 1e3:.3g}–{max(t for t, _ in v) * 1e3:.3g}"
        f" ms, deltas/s {deltas / max(w for _, w in v):,.0f}–{deltas / min(w for _, w in v):,.0f}"
        for k, v in samples.items()
    ]
    return [
        Row(
            name,
            "time to first delta",
            ttfd["fanloop"],
            ttfd["floor"],
            "ms",
            "≤ 1.2× floor",
            ttfd["fanloop"] <= 1.2 * ttfd["floor"],
        ),
        Row(
            name,
            "deltas/s to the consumer",
            rate["fanloop"],
            rate["floor"],
            "/s",
            "≥ 0.9× floor",
            rate["fanloop"] >= 0.9 * rate["floor"],
        ),
    ], spread


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2:])
    else:
        from _common import table

        parser = argparse.ArgumentParser()
        parser.add_argument("-n", default="500,2000", help="consumers per batch, comma-separated")
        parser.add_argument("--deltas", type=int, default=100)
        parser.add_argument("--interval", type=float, default=0.02)
        parser.add_argument("--repeats", type=int, default=3)
        parser.add_argument("--long", type=int, default=5000, help="deltas of the long stream")
        args = parser.parse_args()
        rows: list[Row] = []
        notes: list[str] = []
        if args.long:
            r, s = long_rows(args.long, max(5, args.repeats))
            rows += r
            notes += s
        sizes = [int(n) for n in args.n.split(",") if n]
        if sizes:
            r, s = concurrent_rows(sizes, args.deltas, args.interval, args.repeats)
            rows += r
            notes += s
        print(table(rows))
        print("\n".join(notes))
