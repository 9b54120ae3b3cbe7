"""Shared helpers for the benchmarks: medians, tables, result files."""

from __future__ import annotations

import argparse
import collections
import gc
import json
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

# Set by ``run.py --quick`` (a smoke run, whose figures mean nothing): the timed children then
# skip their untimed warm-up runs and keep the interpreter's ordinary bytecode cache. A private
# cache, fresh each run, would have each smoke run compile the SDKs and their dependencies again
# (seconds of CPU per cache) only to throw the bytecode away.
QUICK = False


@dataclass
class Row:
    """One line of the results table."""

    workload: str
    metric: str
    fanloop: float
    baseline: float | None
    unit: str
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.fanloop / self.baseline  # type: ignore[operator]


async def median_time(fn: Callable[[], Awaitable[object]], repeats: int) -> float:
    """Median wall-clock seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB.

    ``VmHWM`` rather than ``ru_maxrss``: the latter keeps the parent's peak across
    fork + exec, so a small child of a large benchmark process would report the parent's size.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(rows: list[Row]) -> str:
    """A Markdown table of ``rows``."""
    lines = [
        "| workload | metric | fanloop | baseline | ratio | target | met |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        base = "" if r.baseline is None else f"{r.baseline:,.4g} {r.unit}"
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}×"
        ours = f"{r.fanloop:,.4g} {r.unit}"
        met = {True: "yes", False: "**no**", None: ""}[r.met]
        lines.append(
            f"| {r.workload} | {r.metric} | {ours} | {base} | {ratio} | {r.target} | {met} |"
        )
    return "\n".join(lines)


def write(name: str, text: str) -> Path:
    """Write a results file under benchmarks/results/ and return its path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    path.write_text(text)
    return path


def object_kind(o: object) -> str:
    """An object's type for the object censuses (``waiting_runs.py``, ``allocations.py``); a
    coroutine's, function's or method's also names its code, a set its size and a list, tuple
    or dict its size up to 3 (``3+`` beyond)."""
    kind = type(o).__qualname__
    if kind == "coroutine":
        return f"coroutine {o.__qualname__}"  # type: ignore[attr-defined]
    if kind in ("method", "function", "builtin_function_or_method"):
        return f"{kind} {getattr(o, '__qualname__', '?')}"
    if kind == "set":
        return f"set of {len(o)}"  # type: ignore[arg-type]
    if kind in ("list", "tuple", "dict"):
        return f"{kind} of {min(len(o), 3)}{'+' if len(o) > 3 else ''}"  # type: ignore[arg-type]
    return kind


def census() -> collections.Counter[str]:
    """The objects the collector tracks, alive now (after a collection), by
    :func:`object_kind`: taken before and after a batch starts, their difference is what the
    batch holds (``waiting_runs.py``, ``streams_held.py``)."""
    gc.collect()
    return collections.Counter(object_kind(o) for o in gc.get_objects())


def per_item(held: collections.Counter[str], n: int, top: int) -> tuple[float, list[Any]]:
    """``held`` (a difference of two :func:`census`) per each of ``n`` items: the tracked
    objects in all, and the ``top`` kinds with their counts."""
    return sum(held.values()) / n, [(t, round(c / n, 2)) for t, c in held.most_common(top)]


def child_parser() -> argparse.ArgumentParser:
    """The arguments of a benchmark's child process (``script.py child SIDE --url URL -n N``,
    as :func:`child_json` runs it); the script adds its own."""
    p = argparse.ArgumentParser()
    p.add_argument("side")
    p.add_argument("--url", required=True)
    p.add_argument("-n", type=int, required=True)
    return p


def child_json(argv: list[str]) -> dict[str, Any]:
    """Run a benchmark's child process; the JSON object its last line of output prints."""
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
