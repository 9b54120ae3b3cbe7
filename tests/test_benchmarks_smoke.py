"""The benchmark suite still runs: ``benchmarks/run.py --quick`` on tiny sizes.

The figures of a quick run mean nothing; this only keeps the scripts from rotting. The quick run
takes about 15 s of CPU, most of it Python processes starting (its children skip their bytecode
warm-up runs, see ``_common.QUICK``), its steps three at a time (``run.py``'s ``run_steps``,
which prints each step's start and end with the wall and CPU time so far), so its time bound is
only a guard against a hang; it runs in a process group of its own, killed
whole however the test ends (its model servers and workers are processes too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_benchmark_run_prints_and_writes_the_table(tmp_path: Path) -> None:
    table = tmp_path / "smoke.md"  # not in the source tree
    with subprocess.Popen(
        [sys.executable, str(RUN), "--quick", "--output", str(table)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            _, err = process.communicate(timeout=840)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the group is gone: all is well
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, err[-3000:]
    written = table.read_text()
    for workload in (
        "tool conversation, openai, streamed",
        "tool conversation, responses, streamed",
        "concurrent 3-turn runs",
        "calls of a tool sleeping 0.2 s",
        "streamed answer of",
        "import fanloop",
        "creating",
        "ScriptedProvider",
        "AG-UI endpoint",
        "concurrent streamed answers",
        "written at once; floor",
    ):
        assert workload in written, workload
    assert "| errors (of 20 runs) | 0  | 0  |" in written
    picture = ElementTree.parse(table.with_suffix(".svg")).getroot()  # the chart, beside it
    bars = picture.findall("{http://www.w3.org/2000/svg}rect")
    assert len(bars) > 10  # the background and one bar per row with a baseline
