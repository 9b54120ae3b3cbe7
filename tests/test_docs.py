"""Every Python example in docs/ runs the way a reader would run it: as a script of its own.

- A block runs **by itself**: the block alone in a file, run as ``python -W error file.py`` in
  an empty directory, so it needs no name from another block and no top-level ``await``.
- A page that says "The examples on this page build on each other" promises the other way: its
  blocks, pasted into one file in order, run as one script.
- A block preceded by ``<!-- no-test -->`` is shown but not run (it needs a real API key or
  server).
- A block preceded by ``<!-- file: SETUP/NAME ... -->`` is a file of a small project, not a
  script: the files of each SETUP are written to a directory of their own, and pytest runs
  there (docs/testing.md shows how async tests run; this proves it). One block may be written to
  several setups.

Each script is a process of its own, without the host's API keys, and must exit 0 with no
unclosed-resource complaint, ignored exception or unretrieved task error on stderr. To keep this
fast, the processes are forked from one that has already imported fanloop and the SDKs (see
``RUNNER``); a script still has only the names it imports itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"(?:<!-- (no-test|file: [^>]*?) -->\s*)?^```(\w*)\n(.*?)^```", re.S | re.M)
IN_ORDER = "The examples on this page build on each other"
UNCLEAN = ("Exception ignored", "Unclosed", "ResourceWarning", "never awaited", "never retrieved")
HIDDEN = (
    "ANTHROPIC_",
    "OPENAI_",
    "OPENROUTER_",
    "VLLM_",
    "OLLAMA_",
    "LLM_",
    "FANLOOP_",
    "PYTEST_",
    "AZURE_",
    "AWS_",
    "CLOUD_ML_",
)


@dataclass(frozen=True)
class Block:
    page: Path
    number: int  # among the page's fenced blocks, from 1
    line: int  # of its first code line in the page
    lang: str
    code: str
    marker: str | None  # "no-test", "file: ...", or None

    @property
    def runs(self) -> bool:
        return self.lang == "python" and self.marker is None

    @property
    def files(self) -> list[str]:
        marker = self.marker or ""
        return marker.removeprefix("file:").split() if marker.startswith("file:") else []


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, n, text.count("\n", 0, m.start(3)) + 1, m.group(2), m.group(3), m.group(1))
        for n, m in enumerate(FENCE.finditer(text), 1)
    ]


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if any(b.runs for b in blocks(p)))


def setup_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if any(b.files for b in blocks(p)))


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(HIDDEN)}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    return env


@dataclass(frozen=True)
class Script:
    """One file to run: its code, and the page lines its script lines came from."""

    name: str
    code: str
    origins: tuple[tuple[int, Block], ...]  # (first script line, block), in order

    @classmethod
    def of(cls, name: str, parts: Sequence[Block]) -> Script:
        lines: list[str] = []
        origins = []
        for block in parts:
            lines.append(f"# --- {block.page.name}, block {block.number} ---")
            origins.append((len(lines) + 1, block))
            lines.extend(block.code.splitlines())
            lines.append("")
        return cls(name, "\n".join(lines), tuple(origins))

    def where(self, stderr: str) -> str:
        """The page line of the script's last frame in a traceback, if there is one."""
        found = re.findall(rf'File ".*/{re.escape(self.name)}\.py", line (\d+)', stderr)
        if not found:
            return "?"
        line = int(found[-1])
        start, block = max((o for o in self.origins if o[0] <= line), key=lambda o: o[0])
        return f"{block.page.name} line {block.line + line - start} (block {block.number})"

    def problem(self, code: int, stderr: str) -> str | None:
        unclean = [word for word in UNCLEAN if word in stderr]
        if code == 0 and not unclean:
            return None
        return f"{self.where(stderr)}: exit {code}, {unclean}\n{stderr[-3000:]}"


# Runs scripts as `python -W error NAME.py` would, NAME.cwd the working directory, NAME.home the
# home, at most one per CPU at a time; prints each one's name, exit code and wall seconds. Each
# is a process of its own, forked from one that has imported what the examples import (the
# anthropic SDK too: its examples would each spend a second importing it), so a block pays only
# for its own work: the block still sees none of those names until it imports them.
RUNNER = """
import gc, os, runpy, sys, time

for module in ("anyio", "pydantic", "httpx2", "fanloop", "fanloop.testing", "fanloop.tools",
               "fanloop.sessions", "fanloop.mcp", "fanloop.providers.anthropic",
               "fanloop.providers.openai", "anthropic"):
    try:
        __import__(module)
    except ImportError:
        pass
gc.freeze()  # the children's collector leaves those alone: no copying them page by page
base, names = sys.argv[1], sys.argv[2:]
running, codes, started, seconds = {}, {}, {}, {}


def reap():
    pid, status = os.wait()
    name = running.pop(pid)
    codes[name] = os.waitstatus_to_exitcode(status)
    seconds[name] = time.monotonic() - started[name]


for name in names:
    while len(running) >= (os.cpu_count() or 2):
        reap()
    stem = os.path.join(base, name)
    pid = os.fork()
    if pid == 0:
        os.chdir(stem + ".cwd")
        os.environ["HOME"] = stem + ".home"
        for fd, suffix in ((1, ".out"), (2, ".err")):
            os.dup2(os.open(stem + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv, sys.path[0] = [stem + ".py"], base
        runpy.run_path(stem + ".py", run_name="__main__")
        raise SystemExit(0)
    running[pid], started[name] = name, time.monotonic()
while running:
    reap()
for name, code in codes.items():
    print(name, code, f"{seconds[name]:.2f}")
"""


# A guard against a hang, not a speed bound: all the pages' scripts take about 20 s of CPU, and
# a loaded 2-core machine can stretch that several times over.
HANG = 600


def run_scripts(scripts: Sequence[Script], base: Path) -> dict[str, str | None]:
    """Run each script as by itself; return what went wrong with each (None: nothing).

    Prints the slowest scripts' wall times (shown with ``pytest -s``, or on a failure)."""
    for script in scripts:
        (base / f"{script.name}.py").write_text(script.code)
        (base / f"{script.name}.cwd").mkdir()
        (base / f"{script.name}.home").mkdir()
    runner = subprocess.Popen(
        [sys.executable, "-W", "error", "-c", RUNNER, str(base), *(s.name for s in scripts)],
        cwd=base,
        env=clean_env(base),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group: the runner and every script it forked
    )
    try:
        stdout, stderr = runner.communicate(timeout=HANG)
    finally:  # whatever ends the wait: a script that started a process of its own leaves none
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.communicate()
    assert runner.returncode == 0, stderr
    lines = [line.split() for line in stdout.splitlines()]
    codes = {name: int(code) for name, code, _ in lines}
    slowest = sorted(lines, key=lambda line: -float(line[2]))[:5]
    print("slowest scripts:", ", ".join(f"{name} {seconds} s" for name, _, seconds in slowest))
    return {s.name: s.problem(codes[s.name], (base / f"{s.name}.err").read_text()) for s in scripts}


def page_scripts(page: Path) -> list[Script]:
    runnable = [b for b in blocks(page) if b.runs]
    stem = "docs_" + page.stem.replace("-", "_")  # never a module's name (mcp.py would shadow mcp)
    if IN_ORDER in " ".join(page.read_text().split()):  # the sentence may wrap
        return [Script.of(stem, runnable)]
    return [Script.of(f"{stem}_{b.number}", [b]) for b in runnable]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """Every page's scripts, run together (one start-up for all: the suite stays fast). The
    longest first (a page whose blocks build on each other is one long script: mcp.md's starts
    seven MCP servers), so that the others fill the other CPUs meanwhile, not after it."""
    scripts = [script for page in pages() for script in page_scripts(page)]
    scripts.sort(key=lambda script: -len(script.code))
    return run_scripts(scripts, tmp_path_factory.mktemp("docs"))


@pytest.mark.timeout(HANG + 120)  # the first one waits for the fixture
@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_examples_run(page: Path, outcomes: dict[str, str | None]) -> None:
    problems = [outcomes[s.name] for s in page_scripts(page) if outcomes[s.name]]
    assert not problems, "\n\n".join(p for p in problems if p)


def test_a_block_runs_as_it_stands(tmp_path: Path) -> None:
    """The checks above fail for what the old harness let through."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport anyio\n\nasync def f() -> None:\n    pass\n```\n\n"
        "```python\nawait f()\n```\n\n"
        "```python\nanyio.run(f)\n```\n"
    )
    problems = run_scripts([Script.of(f"b{b.number}", [b]) for b in blocks(page)], tmp_path)
    assert problems["b1"] is None
    assert "SyntaxError: 'await' outside function" in (problems["b2"] or "")
    assert "NameError: name 'anyio' is not defined" in (problems["b3"] or "")
    assert (problems["b3"] or "").startswith("page.md line 13 (block 3)")


@pytest.mark.timeout(HANG + 120)
@pytest.mark.parametrize("page", setup_pages(), ids=lambda p: p.name)
def test_pytest_setups_run(page: Path, tmp_path: Path) -> None:
    setups: dict[str, dict[str, str]] = defaultdict(dict)
    for block in blocks(page):
        for target in block.files:
            setup, _, name = target.partition("/")
            setups[setup][name] = block.code
    assert setups

    def run(setup: str) -> str | None:
        project = tmp_path / setup
        project.mkdir()
        for name, code in setups[setup].items():
            (project / name).write_text(code)
        if not {"pytest.ini", "pyproject.toml"} & setups[setup].keys():
            (project / "pytest.ini").write_text("[pytest]\n")  # stay out of fanloop's own config
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", "."],
            cwd=project,
            env=clean_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        if out.returncode == 0 and " passed" in out.stdout and "not natively" not in out.stdout:
            return None
        return f"setup {setup!r} of {page.name}: exit {out.returncode}\n{out.stdout[-3000:]}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        problems = [p for p in pool.map(run, sorted(setups)) if p]
    assert not problems, "\n\n".join(problems)
