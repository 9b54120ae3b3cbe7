"""N concurrent 3-turn runs in one process against a model with 100 ms latency.

Each side runs in its own child process (``python bench_concurrency.py child ...``) so that
peak RSS (``ru_maxrss``) is comparable; the FakeLLMServer runs in a third process. A run is
one conversation: two turns that call the no-op tool, then the answer. Retries are off on
every side, so every failure counts as an error (``--default-retry``: fanloop keeps its
default ``RetryPolicy`` and the floor retries each turn under the same rules; a retried
failure then costs time, not a run). Sides: ``fanloop``,
``sdk`` (a hand-written loop on ``AsyncOpenAI``, the baseline) and ``floor`` (the same loop as
plain JSON over ``aiohttp``). Each side reports its wall time, its CPU seconds (``cpu_s``,
imports included) and the collector's part of them by generation (``gc_s``, with the
``gc_passes`` behind them). ``--instructions`` counts instead what one run costs each side in
instructions, under valgrind's callgrind (``-n 300`` is plenty: a count is repeatable to a
few hundredths of a percent on a busy machine, where wall clock moves by a tenth).
``--profile PATH`` writes each side's ``cProfile`` (with the collector off, so that its passes
do not land on whichever function allocated last) to ``PATH.<side>``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import peak_rss_mib

TOOL_TURNS = 2  # + the answer: 3 model calls per run
KINDS: collections.Counter[str] = collections.Counter()  # error kinds seen in a child


async def fanloop_side(
    url: str, n: int, transport: str | None, default_retry: bool = False
) -> tuple[int, float]:
    from fanloop import Agent, RetryPolicy, tool
    from fanloop.providers.openai import OpenAIProvider

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    options: dict[str, Any] = {}
    if transport == "sdk-aiohttp":
        import openai

        options["http_client"] = openai.DefaultAioHttpClient()
    elif transport is not None:
        from fanloop.providers._http import create_pool

        options["http_client"] = create_pool(transport=transport)  # type: ignore[arg-type]
    provider = OpenAIProvider("gpt-4.1", api_key="bench", base_url=f"{url}/v1", **options)
    agent = Agent(
        provider, tools=[noop], retry=RetryPolicy() if default_retry else RetryPolicy(max_retries=0)
    )

    async def one() -> tuple[int, str]:
        result = await agent.run("go")
        return result.turns, result.text

    errors, wall = await _concurrently(n, one)
    await provider.aclose()
    if "http_client" in options:
        await options["http_client"].aclose()
    return errors, wall


async def sdk_side(url: str, n: int) -> tuple[int, float]:
    import openai

    from _baseline import openai_loop

    client = openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0)
    errors, wall = await _concurrently(n, lambda: openai_loop(client, "go", streaming=True))
    await client.close()
    return errors, wall


async def floor_side(url: str, n: int, default_retry: bool = False) -> tuple[int, float]:
    """The physical floor: the same streamed loop written by hand as plain JSON over aiohttp
    (it streams every turn, as fanloop does); with ``default_retry`` each turn is retried as
    fanloop's default ``RetryPolicy`` retries it."""
    import _floor

    session = _floor.session(limit=1000)
    errors, wall = await _concurrently(
        n,
        lambda: _floor.openai_loop(
            session, url, "go", streaming=True, retries=3 if default_retry else 0
        ),
    )
    await session.close()
    return errors, wall


async def _concurrently(n: int, run: Callable[[], Awaitable[tuple[int, str]]]) -> tuple[int, float]:
    """Run ``n`` copies of a 3-turn run at once; the failed ones (an exception, or not the
    expected turns and a text answer) and the wall time."""
    errors = 0

    async def one() -> None:
        nonlocal errors
        try:
            turns, text = await run()
            if turns != TOOL_TURNS + 1 or not text:
                errors += 1
        except Exception as exc:
            errors += 1
            KINDS[_kind(exc)] += 1

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return errors, time.perf_counter() - started


def _kind(exc: BaseException) -> str:
    """An error, its cause and the cause's cause, for the report."""
    cause = exc.__cause__
    return f"{type(exc).__name__}: {exc} <- {cause!r} <- {getattr(cause, '__cause__', None)!r}"


def child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("side", choices=["fanloop", "sdk", "floor"])
    parser.add_argument("--url", required=True)
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("--transport", default=None)
    parser.add_argument("--default-retry", action="store_true")
    parser.add_argument("--gc-threshold", type=int, default=None)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    if args.profile is not None:  # where the CPU goes, the collector's passes left out
        import cProfile
        import gc

        gc.disable()
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            _run_side(args)
        finally:
            profiler.disable()
            profiler.dump_stats(f"{args.profile}.{args.side}")
        return
    _run_side(args)


class _Collections:
    """Seconds spent in the collector's passes, by generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.passes = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.perf_counter() - self._started
            self.passes[generation] += 1


def _run_side(args: argparse.Namespace) -> None:
    import gc

    collections_ = _Collections()
    gc.callbacks.append(collections_)
    if args.gc_threshold is not None:  # the tuning docs/performance.md describes
        gc.freeze()
        gc.set_threshold(args.gc_threshold, 10, 10)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.side == "fanloop":
        errors, wall = asyncio.run(
            fanloop_side(args.url, args.n, args.transport, args.default_retry)
        )
    elif args.side == "floor":
        errors, wall = asyncio.run(floor_side(args.url, args.n, args.default_retry))
    else:
        errors, wall = asyncio.run(sdk_side(args.url, args.n))
    rss_mib = peak_rss_mib()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = usage.ru_utime + usage.ru_stime
    kinds = dict(KINDS.most_common(3))
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu_s": cpu_s,
                "sys_s": usage.ru_stime,
                "gc_s": [round(seconds, 3) for seconds in collections_.seconds],
                "gc_passes": collections_.passes,
                "errors": errors,
                "rss_mib": rss_mib,
                "n": args.n,
                "kinds": kinds,
            }
        )
    )


def measure(
    side: str,
    url: str,
    n: int,
    transport: str | None = None,
    *,
    default_retry: bool = False,
    gc_threshold: int | None = None,
    profile: str | None = None,
    instructions: bool = False,
) -> dict[str, Any]:
    """Run one side in a fresh child process; returns wall, runs_per_s, errors, rss_mib
    (and, with ``instructions``, the child's instruction count under callgrind)."""
    argv = [sys.executable, __file__, "child", side, f"--url={url}", f"-n={n}"]
    if instructions:
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    if profile is not None:
        argv.append(f"--profile={profile}")
    if gc_threshold is not None:
        argv.append(f"--gc-threshold={gc_threshold}")
    if transport is not None:
        argv.append(f"--transport={transport}")
    if default_retry:
        argv.append("--default-retry")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["runs_per_s"] = n / result["wall"]
    if instructions:
        result["instructions"] = int(re.findall(r"Collected : (\d+)", out.stderr)[-1])
    return result


def instructions_per_run(side: str, url: str, n: int, **options: Any) -> float:
    """Instructions one run costs on ``side``: the child's count under callgrind for ``n``
    runs less its count for one (imports and set-up), over ``n - 1``. Repeatable to a few
    hundredths of a percent whatever else the machine does, so a change of 1% shows (the
    run's wall clock here moves by 10%); it counts work, not memory stalls."""
    many = measure(side, url, n, instructions=True, **options)
    one = measure(side, url, 1, instructions=True, **options)
    errors = many["errors"] + one["errors"]
    if errors:
        raise RuntimeError(f"{side}: {errors} runs failed under callgrind")
    return (many["instructions"] - one["instructions"]) / (n - 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2:])
    else:
        from _server import serve

        parser = argparse.ArgumentParser()
        parser.add_argument("-n", type=int, default=1000)
        parser.add_argument("--side", default="fanloop")
        parser.add_argument("--transport", default=None)
        parser.add_argument("--default-retry", action="store_true")
        parser.add_argument("--gc-threshold", type=int, default=None)
        parser.add_argument(
            "--profile",
            default=None,
            help="write each side's cProfile (collector off) to PROFILE.<side>",
        )
        parser.add_argument(
            "--instructions",
            action="store_true",
            help="count each side's instructions per run under valgrind's callgrind instead",
        )
        args = parser.parse_args()
        with serve(tool_turns=TOOL_TURNS, latency=0.1) as url:
            if args.instructions:
                counts = {
                    side: instructions_per_run(
                        side,
                        url,
                        args.n,
                        transport=args.transport,
                        default_retry=args.default_retry,
                    )
                    for side in args.side.split(",")
                }
                first = next(iter(counts.values()))
                for side, count in counts.items():
                    print(f"{side}: {count / 1e6:.3f} M instructions a run ({count / first:.3f}x)")
                sys.exit(0)
            for side in args.side.split(","):
                figures = measure(
                    side,
                    url,
                    args.n,
                    args.transport,
                    default_retry=args.default_retry,
                    gc_threshold=args.gc_threshold,
                    profile=args.profile,
                )
                print(side, figures, flush=True)
