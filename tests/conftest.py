"""Shared fixtures for fanloop's own tests.

Every test is checked for processes it leaves behind (see ``leftovers.py``): a process the test
started that is still there after its teardown fails the test, and is killed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import leftovers


def pytest_configure(config: pytest.Config) -> None:
    leftovers.mark_this_run()


@pytest.fixture(autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Fail the test for every process it started that outlives its teardown (and kill it)."""
    before = leftovers.pids()
    yield
    left = leftovers.left_since(before)
    if left:
        leftovers.kill(left)
        listing = "\n".join(f"  {proc}" for proc in left)
        pytest.fail(f"the test left {len(left)} process(es) behind:\n{listing}", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = leftovers.everything_left()
    if not left:
        return
    leftovers.kill(left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "processes left behind by the test run", red=True, bold=True)
        for proc in left:
            reporter.write_line(f"  {proc}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
