"""The benchmark suite still runs: ``benchmarks/run.py --quick`` on tiny sizes (a few seconds).

The figures of a quick run mean nothing; this only keeps the scripts from rotting.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


def test_quick_benchmark_run_prints_and_writes_the_table() -> None:
    out = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--output", "smoke.md"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    written = (RUN.parent / "results" / "smoke.md").read_text()
    for workload in (
        "tool conversation, openai, streamed",
        "concurrent 3-turn runs",
        "calls of a tool sleeping 0.2 s",
        "streamed answer of",
        "import fanloop",
        "creating",
        "ScriptedProvider",
    ):
        assert workload in written, workload
    assert "| errors (of 20 runs) | 0  | 0  |" in written
