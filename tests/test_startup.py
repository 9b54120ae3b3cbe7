"""Start-up stays light: what ``import fanloop`` (and what the CLI needs before its first request)
does not import. Structural facts, checked in a fresh interpreter; the timings are in
``benchmarks/bench_startup.py`` and docs/performance.md ("Start-up")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Modules only some programs need: a run on asyncio, an HTTP client, a vendor SDK, the web UI,
# a session store, the default tools. ``import fanloop`` must leave them to those programs.
NOT_ON_IMPORT = (
    "asyncio",
    "ssl",
    "socket",
    "subprocess",
    "concurrent.futures",
    "email",
    "importlib.metadata",  # pydantic's plugin loader: runs when a first validator is built
    "structlog",
    "rich",
    "regex",
    "sqlite3",
    "jsonschema",
    "httpx2",
    "httpcore2",
    "aiohttp",
    "anthropic",
    "openai",
    "starlette",
    "uvicorn",
    "fanloop.providers",
    "fanloop.sessions",
    "fanloop.tools._builtin",
    "fanloop.cli",
)


def _child(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON value as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_import_fanloop_leaves_heavy_modules_unimported() -> None:
    out = _child(
        "import json, sys\n"
        "import fanloop\n"
        "from fanloop import Agent, ModelSettings, RunResult, tool\n"
        "from fanloop.messages import Message\n"
        f"names = {NOT_ON_IMPORT!r}\n"
        "print(json.dumps({'loaded': [n for n in names if n in sys.modules],\n"
        "    'built': Message.__pydantic_complete__}))\n"
    )
    assert out["loaded"] == []
    # The models build their validators on first use (defer_build), not at import.
    assert out["built"] is False


def test_models_still_validate_and_dump_after_a_deferred_build() -> None:
    out = _child(
        "import json\n"
        "from fanloop import ModelSettings\n"
        "from fanloop.messages import Message\n"
        "from fanloop._settings import NO_SETTINGS\n"
        "m = Message.user('hello')\n"
        "back = Message.model_validate_json(m.model_dump_json())\n"
        "try:\n"
        "    ModelSettings(temperature='hot')\n"
        "    rejected = False\n"
        "except ValueError:\n"
        "    rejected = True\n"
        "print(json.dumps({'same': back == m, 'rejected': rejected,\n"
        "    'none': NO_SETTINGS == ModelSettings(), 'dump': NO_SETTINGS.model_dump()}))\n"
    )
    assert out["same"] is True
    assert out["rejected"] is True
    assert out["none"] is True
    assert isinstance(out["dump"], dict) and set(out["dump"].values()) == {None}


def test_the_default_tools_compile_their_patterns_on_first_use() -> None:
    # What `fanloop run` builds before its first request: the tools' specs, not their engines.
    out = _child(
        "import json, sys\n"
        "from fanloop.tools import default_tools\n"
        "tools = default_tools()\n"
        "specs = [t.name for t in tools]\n"
        "before = [n for n in ('regex', 'structlog', 'fanloop.tools._html') if n in sys.modules]\n"
        "from fanloop.tools._secrets import redact\n"
        "hidden = 'sk-' + 'a' * 40 not in redact('key sk-' + 'a' * 40)\n"
        "print(json.dumps({'before': before, 'tools': len(specs), 'hidden': hidden}))\n"
    )
    assert out["before"] == []
    assert out["tools"] > 0
    assert out["hidden"] is True


def test_a_run_without_structlog_logs_to_stdlib_with_its_context_and_never_imports_it() -> None:
    out = _child(
        "import json, logging, sys\n"
        "import anyio\n"
        "from fanloop import Agent, tool\n"
        "from fanloop.testing import ScriptedProvider, call, reply\n"
        "records = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): records.append(record.getMessage())\n"
        "log = logging.getLogger('fanloop'); log.addHandler(Keep()); log.setLevel(logging.INFO)\n"
        "@tool\n"
        "def explode() -> str:\n"
        "    'Fail.'\n"
        "    raise RuntimeError('boom')\n"
        "agent = Agent(ScriptedProvider([reply(tool_calls=[call('explode')]), 'done']),\n"
        "    tools=[explode])\n"
        "result = anyio.run(agent.run, 'go')\n"
        "failed = [r for r in records if r.startswith('tool_failed')]\n"
        "print(json.dumps({'structlog': 'structlog' in sys.modules, 'text': result.text,\n"
        "    'tagged': bool(failed) and all(f'run_id={result.run_id!r}' in r for r in failed),\n"
        "    'path': bool(failed) and all(\"agent_path='agent'\" in r for r in failed)}))\n"
    )
    assert out == {"structlog": False, "text": "done", "tagged": True, "path": True}


@pytest.mark.parametrize("first", ["structlog", "fanloop"])
def test_bound_context_is_restored_after_a_run(first: str) -> None:
    # With structlog imported the context goes through its contextvars; without, through
    # fanloop's own. Either way nothing stays bound in the caller after the run.
    imports = "import structlog\n" if first == "structlog" else ""
    out = _child(
        "import json, sys\n" + imports + "import anyio\n"
        "from fanloop import Agent\n"
        "from fanloop._log import _BOUND\n"
        "from fanloop.testing import ScriptedProvider\n"
        "anyio.run(Agent(ScriptedProvider(['hi'])).run, 'hello')\n"
        "ctx = {}\n"
        "if 'structlog' in sys.modules:\n"
        "    from structlog.contextvars import get_contextvars\n"
        "    ctx = get_contextvars()\n"
        "print(json.dumps({'own': dict(_BOUND.get()), 'structlog': ctx}))\n"
    )
    assert out == {"own": {}, "structlog": {}}
