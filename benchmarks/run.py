"""The benchmark suite: one table, every figure a median and a ratio to a same-run baseline.

Run: ``nox -s bench`` or ``python benchmarks/run.py [--quick]``. Writes the table to
``benchmarks/results/latest.md`` and, as a bar chart of the ratios, ``latest.svg`` (a full run
also writes ``docs/images/benchmarks.svg``, committed). The baseline is a hand-written minimal
loop on the official SDK client (SDK-direct, ``_baseline.py``) against the same FakeLLMServer,
which runs in its own process. ``--quick`` shrinks every size for a smoke run (figures then
mean little).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio

import _common
import bench_concurrency
import bench_core
import bench_durable
import bench_http
import bench_startup
import bench_streams
import bench_ui
from _chart import chart
from _common import Row, table, write
from _server import serve
from fanloop import Agent, tool
from fanloop.testing import ScriptedProvider, call, reply

CHART = Path(__file__).resolve().parents[1] / "docs" / "images" / "benchmarks.svg"


async def fan_out(sync: bool, calls: int, repeats: int) -> Row:
    """One turn fanning out ``calls`` calls of a tool sleeping 0.2 s; baseline: the calls
    run by hand, ``asyncio.gather`` (async) or the loop's default executor (sync)."""

    def blocking(n: int) -> str:
        time.sleep(0.2)
        return str(n)

    async def sleeping(n: int) -> str:
        await asyncio.sleep(0.2)
        return str(n)

    fn = blocking if sync else sleeping
    sleeper = tool(name="sleeper", concurrent_safe=True)(fn)
    turn = reply(tool_calls=[call("sleeper", n=i) for i in range(calls)])
    agent = Agent(
        ScriptedProvider(lambda r: turn if len(r.messages) == 1 else "done"), tools=[sleeper]
    )

    async def handwritten() -> None:
        if sync:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(None, blocking, i) for i in range(calls)))
        else:
            await asyncio.gather(*(sleeping(i) for i in range(calls)))

    ours = await _median(lambda: agent.run("go"), repeats)
    base = await _median(handwritten, repeats)
    variant = "sync (blocking), worker threads" if sync else "async"
    base_note = "default executor" if sync else "asyncio.gather"
    return Row(
        f"one turn, {calls} calls of a tool sleeping 0.2 s, {variant}; baseline {base_note}",
        "wall time",
        ours,
        base,
        "s",
        "≤ 0.3 s",
        ours <= 0.3,
    )


async def _median(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


SIDES = ("fanloop", "sdk", "floor")


def concurrency(sizes: list[int], baseline_sizes: set[int], repeats: int) -> list[Row]:
    """N concurrent 3-turn runs: fanloop vs SDK-direct (runs/s) and vs the plain-aiohttp floor,
    which streams every turn as fanloop does (runs/s, peak RSS). At 1,000 fanloop keeps its
    default ``RetryPolicy`` (the floor retries under the same rules); at 10,000 and more both
    ways are measured; elsewhere retries are off on every side, so every failure is an error."""
    rows = []
    with serve(tool_turns=bench_concurrency.TOOL_TURNS, latency=0.1) as url:
        if min(sizes) >= 100:
            bench_concurrency.measure("fanloop", url, min(sizes))  # warm the server

        for n in sizes:
            for retry in (False, True) if n >= 10_000 else (n == 1000,):
                rows += _concurrency_rows(url, n, retry, n in baseline_sizes, repeats)
    return rows


def _concurrency_rows(url: str, n: int, retry: bool, baseline: bool, repeats: int) -> list[Row]:
    def side(name: str) -> dict:  # type: ignore[type-arg]
        return bench_concurrency.measure(name, url, n, default_retry=retry)

    if n < 100:  # a smoke run: all sides at once, RSS stays per process
        with concurrent.futures.ThreadPoolExecutor() as pool:
            jobs = [pool.submit(side, s) for s in SIDES]
            ours, base, floor = ([job.result()] for job in jobs)
    else:
        reps = 1 if n >= 10_000 else repeats
        ours, base, floor = [], [], []
        for _ in range(reps):  # sides alternating
            ours.append(side("fanloop"))
            floor.append(side("floor"))
        if baseline and not retry:
            base = [side("sdk") for _ in range(reps)]

    def med(samples: list[dict], key: str) -> float | None:  # type: ignore[type-arg]
        return statistics.median(s[key] for s in samples) if samples else None

    name = f"{n:,} concurrent 3-turn runs, 100 ms model latency"
    if n >= 10_000:
        name += ", default RetryPolicy (the floor retries alike)" if retry else ", retries off"
    rps, rps_b, rps_f = (med(x, "runs_per_s") for x in (ours, base, floor))
    rss, rss_f = med(ours, "rss_mib"), med(floor, "rss_mib")
    errors = sum(s["errors"] for s in ours)
    errors_b = sum(s["errors"] for s in base) if base else None
    big, huge = n >= 1000, n >= 10_000
    rows = [
        Row(name, "runs/s vs the aiohttp floor (streamed)", rps or 0, rps_f, "/s")
        if not huge
        else Row(
            name,
            "runs/s vs the aiohttp floor (streamed)",
            rps or 0,
            rps_f,
            "/s",
            "≥ 0.8× floor",
            bool(rps_f) and (rps or 0) >= 0.8 * rps_f,  # type: ignore[operator]
        ),
        Row(
            name,
            "peak RSS (child process) vs the aiohttp floor",
            rss or 0,
            rss_f,
            "MiB",
            "≤ 1.3×" if huge else "",
            (rss or 0) <= 1.3 * rss_f if huge and rss_f else None,
        ),
        Row(
            name,
            f"errors (of {n * len(ours):,} runs)",
            errors,
            errors_b,
            "",
            "0" if big else "",
            errors == 0 if big else None,
        ),
    ]
    if base:
        rows.insert(
            0,
            Row(
                name,
                "runs/s vs SDK-direct",
                rps or 0,
                rps_b,
                "/s",
                "≥ 8×" if big else "",
                (rps or 0) >= 8 * rps_b if big and rps_b else None,
            ),
        )
    kinds = {k for s in ours + base + floor for k in s.get("kinds", {})}
    for kind in sorted(kinds):
        print(f"  {name}: error kind {kind}", flush=True)
    return rows


def streams_long(deltas: int, repeats: int) -> list[Row]:
    rows, spread = bench_streams.long_rows(deltas, repeats)
    for line in spread:
        print(f"  {line}", flush=True)
    return rows


def streams_many(sizes: list[int], deltas: int, repeats: int) -> list[Row]:
    """N concurrent streamed answers, deltas 20 ms apart (bench_streams.py)."""
    rows, spread = bench_streams.concurrent_rows(sizes, deltas, 0.02, repeats)
    for line in spread:
        print(f"  {line}", flush=True)
    return rows


_PYCACHE = tempfile.mkdtemp(prefix="fanloop-bench-pycache-")
atexit.register(shutil.rmtree, _PYCACHE, ignore_errors=True)  # a run leaves nothing in /tmp


def _child_env() -> dict[str, str]:
    """The environment of a timed child: its bytecode cache on (in a private directory, warmed
    by an untimed run), as for an installed package. ``PYTHONDONTWRITEBYTECODE=1`` in a
    development shell would otherwise have every start compile fanloop's sources (about
    40 ms) while the SDK baseline, installed with its bytecode, never does."""
    if _common.QUICK:  # a smoke run: the ordinary cache, nothing to warm
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def _warm(argv: list[str], **kwargs: Any) -> None:
    """An untimed run of ``argv`` that fills the private bytecode cache (not in a smoke run)."""
    if not _common.QUICK:
        subprocess.run(argv, check=True, **kwargs)


def _subprocess_seconds(code: str, repeats: int) -> tuple[float, float]:
    """Median wall time and peak RSS (MiB) of ``python -c code`` (bytecode cache warm)."""
    probe = (
        "import sys, time; t = time.perf_counter(); exec(sys.argv[1]); "
        "t = time.perf_counter() - t; from _common import peak_rss_mib; "
        "print(t, peak_rss_mib())"
    )
    samples = []
    env = _child_env()
    cwd = Path(__file__).resolve().parent
    _warm([sys.executable, "-c", code], cwd=cwd, env=env)
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", probe, code],
            capture_output=True,
            text=True,
            check=True,
            cwd=cwd,
            env=env,
        )
        seconds, rss = out.stdout.split()
        samples.append((float(seconds), float(rss)))
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
    )


def _importtime_ms(code: str, module: str, repeats: int) -> float:
    """Median cumulative ``python -X importtime`` figure of ``module`` (bytecode cache warm)."""
    env = _child_env()
    _warm([sys.executable, "-c", code], env=env)
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        rows = [line.split("|") for line in out.stderr.splitlines()]
        samples.append(next(int(r[1]) for r in rows if len(r) == 3 and r[2].strip() == module))
    return statistics.median(samples) / 1e3


def startup(repeats: int, agents: int) -> list[Row]:
    bare_t, bare_rss = _subprocess_seconds("pass", repeats)
    ours_t, ours_rss = _subprocess_seconds("import fanloop", repeats)
    sdk_t, sdk_rss = _subprocess_seconds("import openai", repeats)
    ours_it = _importtime_ms("import fanloop", "fanloop", repeats)
    sdk_it = _importtime_ms("import openai", "openai", repeats)
    creation = (
        "import time, statistics, openai, httpx2\n"
        "from fanloop import Agent, tool\n"
        "from fanloop.providers.openai import OpenAIProvider\n"
        "@tool\n"
        "async def noop() -> str:\n"
        "    'Do nothing.'\n"
        "    return 'ok'\n"
        "pool = httpx2.AsyncClient()\n"
        "p = OpenAIProvider('gpt-4.1', api_key='k', http_client=pool)\n"
        f"N = {agents}\n"
        "def ours():\n"
        "    for _ in range(N): Agent(p, tools=[noop])\n"
        "def base():\n"
        "    for _ in range(N): openai.AsyncOpenAI(api_key='k', http_client=pool)\n"
        "from fanloop.testing import ScriptedProvider\n"
        "scripted = ScriptedProvider([])\n"
        "def bare():\n"
        "    for _ in range(N): Agent(scripted)\n"
        "r = {}\n"
        "for name, fn in (('ours', ours), ('base', base), ('bare', bare)):\n"
        "    ts = []\n"
        "    for _ in range(5):\n"
        "        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)\n"
        "    r[name] = statistics.median(ts) / N * 1e6\n"
        "print(r['ours'], r['base'], r['bare'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", creation], capture_output=True, text=True, check=True
    )
    per_agent, per_client, per_bare_agent = (float(x) for x in out.stdout.split())
    return [
        Row(
            "`import fanloop` (baseline: `import openai`), minus bare python, bytecode cached",
            "import time",
            (ours_t - bare_t) * 1e3 + 0,
            (sdk_t - bare_t) * 1e3,
            "ms",
            "< 120 ms",
            (ours_t - bare_t) < 0.12,
        ),
        Row(
            "`import fanloop` (baseline: `import openai`), bytecode cached",
            "`python -X importtime`, cumulative",
            ours_it,
            sdk_it,
            "ms",
            "< 120 ms",
            ours_it < 120,
        ),
        Row(
            "`import fanloop` (baseline: `import openai`), minus bare python",
            "memory (peak RSS)",
            ours_rss - bare_rss,
            sdk_rss - bare_rss,
            "MiB",
        ),
        Row(
            f"creating {agents:,} Agents with one tool (baseline: an AsyncOpenAI client each)",
            "per Agent",
            per_agent,
            per_client,
            "µs",
            "< 15 µs",
            per_agent < 15,
        ),
        Row(
            f"creating {agents:,} Agents: `Agent(ScriptedProvider([]))`",
            "per Agent",
            per_bare_agent,
            None,
            "µs",
            "< 15 µs",
            per_bare_agent < 15,
        ),
    ]


async def core(repeats: int) -> list[Row]:
    row = await bench_core.per_turn(repeats)
    row.met = row.ratio is not None and row.ratio <= 1.2
    return [row]


async def core_metrics(repeats: int) -> list[Row]:
    """The per-turn loop with OpenTelemetry: metrics on the no-op meter and on the SDK, spans
    without and with content capture."""
    rows = await bench_core.per_turn_metrics(repeats)
    for row, bound in zip(rows[1:3], (1.1, 2.5), strict=True):
        row.met = row.ratio is not None and row.ratio <= bound
    return rows


def run_steps(
    steps: list[tuple[str, Callable[[], list[Row]]]],
    *,
    concurrently: bool,
    first: tuple[str, ...] = (),
) -> list[Row]:
    """Every step's rows, in the steps' order. One after another for figures; in a smoke run
    (``--quick``: figures that mean nothing) side by side, three at a time, since most of a
    quick step's time is Python processes starting and waits on model latency; the steps
    labelled in ``first`` (the longest) start first, so that none of them is left running
    alone at the end. Each step is announced with the wall and CPU time (this process and its
    children) so far."""
    started = time.perf_counter()
    lock = threading.Lock()

    def say(label: str) -> None:
        t = os.times()
        cpu = t.user + t.system + t.children_user + t.children_system
        with lock:
            print(f"[{time.perf_counter() - started:6.1f} s, CPU {cpu:6.1f} s] {label}", flush=True)

    def run(label: str, fn: Callable[[], list[Row]]) -> list[Row]:
        say(label)
        got = fn()
        if concurrently:
            say(f"{label}: done")
        return got

    if concurrently:
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            order = sorted(steps, key=lambda step: step[0] not in first)
            jobs = {label: pool.submit(run, label, fn) for label, fn in order}
            results = [jobs[label].result() for label, _ in steps]
    else:
        results = [run(label, fn) for label, fn in steps]
    say("done")
    return [row for result in results for row in result]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--output", default="latest.md", help="file under benchmarks/results")
    parser.add_argument(
        "--sizes",
        default="100,1000,10000",
        help="concurrent runs per batch (SDK-direct at 10,000 takes minutes a batch)",
    )
    args = parser.parse_args()
    quick = _common.QUICK = args.quick
    turns, repeats = (3, 1) if quick else (50, 5)
    sizes = [20] if quick else [int(n) for n in args.sizes.split(",")]
    baseline_sizes = set(sizes)
    calls = 4 if quick else 32
    cold_start = "cold start: `import fanloop` and `fanloop run` to its first request"
    creation = "import and agent creation"
    steps: list[tuple[str, Callable[[], list[Row]]]] = [
        ("per-turn time over HTTP", lambda: anyio.run(bench_http.per_turn, turns, repeats)),
        ("concurrent runs", lambda: concurrency(sizes, baseline_sizes, 1 if quick else 3)),
        (
            "fan-out",
            lambda: [
                anyio.run(fan_out, False, calls, 1 if quick else 3),
                anyio.run(fan_out, True, calls, 1 if quick else 3),
            ],
        ),
        (
            "streamed deltas",
            lambda: anyio.run(bench_http.deltas, 200 if quick else 5000, 1 if quick else 5),
        ),
        (
            "one long stream vs the aiohttp floor",
            lambda: streams_long(200 if quick else 5000, 1 if quick else 7),
        ),
        (
            "many streaming consumers vs the aiohttp floor",
            lambda: streams_many(
                [20] if quick else [500, 2000], 10 if quick else 100, 1 if quick else 3
            ),
        ),
        (
            creation,
            lambda: startup(1 if quick else 7, 100 if quick else 10_000),
        ),
        (
            cold_start,
            lambda: (
                bench_startup.import_ratio(1 if quick else 15)
                + bench_startup.cold_start(1 if quick else 7)
            ),
        ),
        ("core loop overhead (ScriptedProvider)", lambda: anyio.run(core, 1 if quick else 15)),
        (
            "core loop with OpenTelemetry metrics (ScriptedProvider)",
            lambda: anyio.run(core_metrics, 1 if quick else 15),
        ),
        (
            "durable runs (PostgreSQL)",
            lambda: anyio.run(bench_durable.per_turn, 3 if quick else 20, 1 if quick else 5),
        ),
        ("AG-UI endpoint: concurrent SSE clients", lambda: bench_ui.rows(20 if quick else 500)),
    ]
    rows = run_steps(steps, concurrently=quick, first=(cold_start, creation, "concurrent runs"))
    text = table(rows)
    header = (
        "# fanloop benchmarks\n\n"
        f"`python benchmarks/run.py{' --quick' if quick else ''}"
        f"{'' if quick or args.sizes == '100,1000,10000' else ' --sizes ' + args.sizes}`, Python "
        f"{sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M')}. Ratio = fanloop / "
        "baseline (SDK-direct unless the row says otherwise), measured in the same run.\n\n"
    )
    path = write(args.output, header + text + "\n")
    picture = chart(rows, f"fanloop benchmarks, {time.strftime('%Y-%m-%d')}")
    path.with_suffix(".svg").write_text(picture)
    if not quick:  # the committed picture (docs/performance.md shows it)
        CHART.write_text(picture)
    print()
    print(text)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
