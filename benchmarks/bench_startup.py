"""Start-up: the cost of ``import fanloop``, and ``fanloop run`` to its first request.

``python benchmarks/bench_startup.py [--repeats N] [--env NAME=VALUE]`` measures:

- ``import fanloop`` against ``import pydantic, anyio``, both timed in the same fresh process
  (pydantic and anyio first, then fanloop on top of them), median over N processes: wall time
  and the process's CPU time (steadier on a loaded machine). Target: fanloop at most twice the two.
  For context, a third process kind times what the first pydantic model class of any library
  costs on top of the same two (pydantic's model machinery, which fanloop's models load too).
- ``fanloop run "hi"`` as a subprocess against a FakeLLMServer (in this process, on loopback):
  per run, the time from just before the subprocess is spawned to the moment the server has
  the request in hand, and to the moment the process has exited. The baseline is the same
  request made by a minimal script on the vendor's SDK (``AsyncAnthropic().messages.create``
  / ``AsyncOpenAI().chat.completions.create``), started the same way; the floor, a ``python
  -c`` that imports ``httpx2`` (fanloop's HTTP client) and posts the request. Target: < 300 ms.

The children keep their bytecode in a private cache, warmed by an untimed run, as an installed
package does. For where the time goes: ``python -X importtime -c "import fanloop"`` and
``python -X importtime -m fanloop run hi 2> imports.txt``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
from _common import Row, table
from fanloop.testing import FakeLLMServer

_SDK_DIRECT = {
    "anthropic": (
        "import asyncio, os, anthropic\n"
        "async def main():\n"
        "    c = anthropic.AsyncAnthropic(base_url=os.environ['ANTHROPIC_BASE_URL'])\n"
        "    await c.messages.create(model='claude-sonnet-4-5', max_tokens=64,\n"
        "        messages=[{'role': 'user', 'content': 'hi'}])\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    ),
    "openai": (
        "import asyncio, os, openai\n"
        "async def main():\n"
        "    c = openai.AsyncOpenAI(base_url=os.environ['OPENAI_BASE_URL'])\n"
        "    await c.chat.completions.create(model='gpt-4.1',\n"
        "        messages=[{'role': 'user', 'content': 'hi'}])\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    ),
}

# The floor: the request and nothing else, on the HTTP client fanloop's providers use.
_FLOOR = {
    "anthropic": (
        "import os, httpx2\n"
        "httpx2.post(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages',\n"
        "    headers={'x-api-key': os.environ['ANTHROPIC_API_KEY'],\n"
        "             'anthropic-version': '2023-06-01'},\n"
        "    json={'model': 'claude-sonnet-4-5', 'max_tokens': 64,\n"
        "          'messages': [{'role': 'user', 'content': 'hi'}]})\n"
    ),
    "openai": (
        "import os, httpx2\n"
        "httpx2.post(os.environ['OPENAI_BASE_URL'] + '/chat/completions',\n"
        "    headers={'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']},\n"
        "    json={'model': 'gpt-4.1', 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
    ),
}

_IMPORTS = (
    "import time\n"
    "w, c = time.perf_counter(), time.process_time()\n"
    "import pydantic, anyio\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "import fanloop\n"
    "w2, c2 = time.perf_counter(), time.process_time()\n"
    "print(w1 - w, w2 - w1, c1 - c, c2 - c1)\n"
)

# What any library of pydantic models pays on top of the same baseline: pydantic's model
# machinery, loaded by the first model class (its validator deferred, as fanloop's are).
_FIRST_MODEL = (
    "import time\n"
    "w, c = time.perf_counter(), time.process_time()\n"
    "import pydantic, anyio\n"
    "w1, c1 = time.perf_counter(), time.process_time()\n"
    "from pydantic import BaseModel, ConfigDict, Field\n"
    "class First(BaseModel):\n"
    "    model_config = ConfigDict(frozen=True, defer_build=True)\n"
    "    text: str = Field(default='')\n"
    "w2, c2 = time.perf_counter(), time.process_time()\n"
    "print(w1 - w, w2 - w1, c1 - c, c2 - c1)\n"
)

_EXTRA: list[str] = []


class _TimedServer(FakeLLMServer):
    """A FakeLLMServer that notes when each request arrived (``time.perf_counter()``)."""

    def __init__(self) -> None:
        super().__init__(responder=lambda body: "Hello!", record=False)
        self.arrivals: list[float] = []
        self.arrived = threading.Event()

    async def _respond(self, *args: Any) -> bool:
        self.arrivals.append(time.perf_counter())
        self.arrived.set()
        return await super()._respond(*args)


_PYCACHE = tempfile.mkdtemp(prefix="fanloop-bench-pycache-")
atexit.register(shutil.rmtree, _PYCACHE, ignore_errors=True)  # a run leaves nothing in /tmp


def _environment(server: _TimedServer, vendor: str, **extra: str) -> dict[str, str]:
    """The children's environment: the server's URLs, and bytecode cached (in a private
    directory, warmed by an untimed run) as for an installed package, whatever
    ``PYTHONDONTWRITEBYTECODE`` says in a development shell."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLM_", "ANTHROPIC_", "OPENAI_", "FANLOOP_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
        and (k != "PYTHONDONTWRITEBYTECODE" or _common.QUICK)
    }
    if not _common.QUICK:  # a smoke run keeps the ordinary cache (see _common.QUICK)
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    env.update(
        LLM_PROVIDER=vendor,
        ANTHROPIC_API_KEY="sk-ant-bench",
        ANTHROPIC_BASE_URL=server.anthropic_base_url,
        OPENAI_API_KEY="sk-bench",
        OPENAI_BASE_URL=server.openai_base_url,
        NO_COLOR="1",
    )
    env.update(extra)
    return env


def _once(server: _TimedServer, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the first request, seconds to exit) of one process."""
    server.arrivals.clear()
    server.arrived.clear()
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True)
        ended = time.perf_counter()
    if proc.returncode != 0 or not server.arrivals:
        raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return server.arrivals[0] - started, ended - started


def _import_env() -> dict[str, str]:
    if _common.QUICK:  # a smoke run keeps the ordinary cache (see _common.QUICK)
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def import_ratio(repeats: int) -> list[Row]:
    """``import fanloop`` on top of ``import pydantic, anyio``, in the same fresh process."""
    env = _import_env()
    argv = [sys.executable, "-c", _IMPORTS]
    model_argv = [sys.executable, "-c", _FIRST_MODEL]
    if not _common.QUICK:  # untimed: fills the bytecode cache
        subprocess.run(argv, env=env, check=True, capture_output=True)
    samples, model_samples = [], []
    for _ in range(repeats):  # the two kinds of process alternate
        out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
        samples.append([float(x) for x in out.stdout.split()])
        out = subprocess.run(model_argv, env=env, check=True, capture_output=True, text=True)
        model_samples.append([float(x) for x in out.stdout.split()])
    base_wall, ours_wall, base_cpu, ours_cpu = (
        statistics.median(s[i] for s in samples) for i in range(4)
    )
    model_cpu = statistics.median(s[3] for s in model_samples)
    model_base_cpu = statistics.median(s[2] for s in model_samples)
    workload = "`import fanloop` after `import pydantic, anyio` (baseline: those two), one process"
    first_model = "a first pydantic model after `import pydantic, anyio` (context, not a target)"
    return [
        Row(
            workload,
            "import time (median)",
            ours_wall * 1e3,
            base_wall * 1e3,
            "ms",
            "≤ 2×",
            ours_wall <= 2 * base_wall,
        ),
        Row(workload, "CPU time of the import (median)", ours_cpu * 1e3, base_cpu * 1e3, "ms"),
        Row(first_model, "CPU time (median)", model_cpu * 1e3, model_base_cpu * 1e3, "ms"),
    ]


def cold_start(repeats: int, vendors: tuple[str, ...] = ("anthropic", "openai")) -> list[Row]:
    """Median time to the first request byte of ``fanloop run`` and of SDK-direct."""
    rows: list[Row] = []
    server = _TimedServer()
    with server:
        for vendor in vendors:
            env = _environment(server, vendor, **dict(e.split("=", 1) for e in _EXTRA))
            ours_argv = [sys.executable, "-m", "fanloop", "run", "hi"]
            base_argv = [sys.executable, "-c", _SDK_DIRECT[vendor]]
            floor_argv = [sys.executable, "-c", _FLOOR[vendor]]
            ours: list[tuple[float, float]] = []
            base: list[tuple[float, float]] = []
            floor: list[tuple[float, float]] = []
            if not _common.QUICK:  # untimed: fills the bytecode cache
                _once(server, ours_argv, env)
                _once(server, base_argv, env)
                _once(server, floor_argv, env)
            for _ in range(repeats):  # interleaved, so that drift hits all alike
                ours.append(_once(server, ours_argv, env))
                base.append(_once(server, base_argv, env))
                floor.append(_once(server, floor_argv, env))
            workload = f"`fanloop run` cold start, {vendor} (baseline: SDK-direct script)"
            first = statistics.median(t for t, _ in ours)
            rows += [
                Row(
                    workload,
                    "process start → first request at the server (median)",
                    first * 1e3,
                    statistics.median(t for t, _ in base) * 1e3,
                    "ms",
                    "< 300 ms",
                    first < 0.3,
                ),
                Row(
                    f"`fanloop run` cold start, {vendor} (floor: `httpx2.post` in a `python -c`)",
                    "process start → first request at the server (median)",
                    first * 1e3,
                    statistics.median(t for t, _ in floor) * 1e3,
                    "ms",
                ),
                Row(
                    workload,
                    "process start → first request at the server (best run)",
                    min(t for t, _ in ours) * 1e3,
                    min(t for t, _ in base) * 1e3,
                    "ms",
                ),
                Row(
                    workload,
                    "process start → exit (median)",
                    statistics.median(t for _, t in ours) * 1e3,
                    statistics.median(t for _, t in base) * 1e3,
                    "ms",
                ),
            ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the runs")
    args = parser.parse_args()
    _EXTRA.extend(args.env)
    print(table(import_ratio(max(args.repeats, 11)) + cold_start(args.repeats)))


if __name__ == "__main__":
    main()
