"""Starting pacing worker processes (tests/pacing/pacing_worker.py) and collecting their reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "pacing_worker.py"
REDIS_URL = "redis://127.0.0.1:6379/0"


def start(config: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect(proc: subprocess.Popen[str], line: str) -> None:
    """Wait for ``line`` on the worker's stdout (it fails loudly if the worker died)."""
    assert proc.stdout is not None
    got = proc.stdout.readline().strip()
    if got != line:
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"worker said {got!r}, not {line!r}: {err[-3000:]}")


def run_workers(configs: list[dict[str, Any]], timeout: float = 90) -> list[dict[str, Any]]:
    """Start one worker per config, release them together, return their reports."""
    procs = [start(c) for c in configs]
    try:
        for proc in procs:
            expect(proc, "ready")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-3000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for proc in procs:
            stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    """Kill the worker if it still runs, and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)
