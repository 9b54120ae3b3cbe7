"""The guard of ``tests/conftest.py``: a test that leaves a process behind fails, and the
process is killed (``tests/leftovers.py``).

Checked on a small pytest run of its own, in a subprocess, with this directory's conftest.
Every process the leaky tests leave is there for good (a ``sleep 60``, a zombie that has
already exited), so the guard's grace period for processes still exiting is cut to 0.5 s
there: each of the four reports waited out the whole of it (1 s before, 10 s by default).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leftovers import stat

HERE = Path(__file__).parent

LEAKY = """
import os
import subprocess

import pytest


def note(pid: int) -> None:
    with open(os.environ["LEAK_PIDS"], "a") as fh:
        fh.write(f"{pid}\\n")


def test_clean() -> None:
    subprocess.run(["true"], check=True)


def test_a_child_left_running() -> None:
    note(subprocess.Popen(["sleep", "60"]).pid)


def test_a_child_never_reaped() -> None:
    proc = subprocess.Popen(["true"])
    note(proc.pid)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, still unreaped
    proc.returncode = 0  # as good as forgotten: nobody waits for it


def test_an_orphan_handed_to_init() -> None:
    out = subprocess.run(
        ["bash", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )
    note(int(out.stdout))


@pytest.fixture(scope="session")
def server():
    proc = subprocess.Popen(["sleep", "60"])
    note(proc.pid)
    yield proc  # never stopped


def test_uses_a_session_server(server) -> None:
    assert server.poll() is None
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_test_that_leaves_a_process_behind_fails(tmp_path: Path) -> None:
    for name in ("conftest.py", "leftovers.py"):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    (tmp_path / "pytest.ini").write_text(ini)
    pids = tmp_path / "pids"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", "."],
        cwd=tmp_path,
        env={**os.environ, "LEAK_PIDS": str(pids), "FANLOOP_TEST_SETTLE": "0.5"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = out.stdout
    assert out.returncode == 1, report + out.stderr
    errors = [line for line in report.splitlines() if line.startswith("ERROR ")]
    assert sorted(line.split("::")[1].split()[0] for line in errors) == [
        "test_a_child_left_running",
        "test_a_child_never_reaped",
        "test_an_orphan_handed_to_init",
    ], report
    assert "a zombie nobody reaped" in report
    assert "sleep 60" in report
    assert "processes left behind by the test run" in report  # the session's server
    assert "5 passed" in report and "3 errors" in report, report
    for pid in (int(x) for x in pids.read_text().split()):
        proc = stat(pid)
        assert proc is None or proc.zombie or "sleep" not in proc.command, proc  # all killed
