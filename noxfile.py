"""Developer tasks: ``nox -s tests``, ``lint``, ``typing``, ``docs``, ``bench``, ``bench_peers``,
``mutation``."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typing"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the import layers (lint-imports)."""
    session.install("ruff", "import-linter", "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session
def typing(session: nox.Session) -> None:
    """mypy, strict, on src/."""
    session.install("-e", ".[test]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site strictly."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


# The mutants of `nox -s mutation` by default: whole modules, and the budget and receipt parts
# of limits.py and sessions/_session.py (mutmut names a mutant module.xǁClassǁmethod__mutmut_N).
MUTATED = (
    "fanloop._resume*",
    "fanloop._retry*",
    "fanloop.tools._netguard*",
    "fanloop.tools._secrets*",
    "fanloop.tools._sql_check*",
    "fanloop.limits.xǁBudgetǁ*",
    "fanloop.sessions._session.xǁSessionǁ*effect*",
    "fanloop.sessions._session.xǁSessionǁ_require*",
    "fanloop.sessions._session.xǁSessionǁ_expect_started*",
    "fanloop.sessions._session.xǁSessionǁ_transition*",
)


@nox.session
def mutation(session: nox.Session) -> None:
    """Mutation testing of the security, budget, retry and receipt code (docs/contributing.md).

    mutmut's configuration is ``[tool.mutmut]`` in pyproject.toml; its work goes to
    ``mutants/`` (git-ignored). Arguments select mutants by name, such as
    ``nox -s mutation -- "fanloop._retry*"``; without any, the measured set
    (:data:`MUTATED`) is run. The kill rate per module is printed at the end.
    """
    session.install("-e", ".[test]", "mutmut>=3.3")
    session.run("mutmut", "run", "--max-children", "2", *(session.posargs or MUTATED))
    listing = session.run("mutmut", "results", "--all", "true", silent=True)
    session.log(mutation_report(str(listing)))


def mutation_report(listing: str) -> str:
    """Kill rate per module from ``mutmut results --all true`` (lines ``name: status``)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for line in listing.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name and status != "not checked":
            module = name.rsplit("__mutmut_", 1)[0].rsplit(".x", 1)[0]
            counts[module][status] += 1
    rows = ["module: killed / checked (kill rate); survived, no tests, timeout"]
    for module, c in sorted(counts.items()):
        killed = c["killed"] + c["timeout"] + c["caught by type check"]
        checked = sum(c.values()) - c["skipped"]
        rate = 100 * killed / checked if checked else 0.0
        rows.append(
            f"{module}: {killed} / {checked} ({rate:.1f}%); "
            f"{c['survived']}, {c['no tests']}, {c['timeout']}"
        )
    return "\n".join(rows)


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks and write benchmarks/results/latest.md."""
    session.install("-e", ".[test]")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def bench_peers(session: nox.Session) -> None:
    """Compare with pydantic-ai, openai-agents and Strands; writes benchmarks/results/peers.md.

    The peers get an environment of their own (``.nox/bench_peers-peers``, from
    benchmarks/peers/requirements.txt): strands pins ``anthropic<1``, fanloop needs 2.x.
    This session's environment runs fanloop, the fake server and the driver.
    """
    session.install("-e", ".")
    peers = Path(session.virtualenv.location).parent / "bench_peers-peers"
    python = peers / "bin" / "python"
    if not python.exists():
        session.run(sys.executable, "-m", "venv", str(peers), external=True)
    session.run(
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        "-r",
        "benchmarks/peers/requirements.txt",
        external=True,
    )
    session.run("python", "benchmarks/bench_peers.py", f"--peers-python={python}", *session.posargs)
