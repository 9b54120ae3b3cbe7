"""Start-up stays light: what ``import fanloop`` (and what the CLI needs before its first request)
does not import. Structural facts, checked in a fresh interpreter; the timings are in
``benchmarks/bench_startup.py`` and docs/performance.md ("Start-up")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    # loaded by the agents that have guardrails or handoffs (and by their names in `fanloop`)
    "fanloop._guardrails",
    "fanloop._handoff",
)


def _child(
    code: str, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON value as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=cwd,
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


def test_a_run_without_a_session_builds_no_validator_before_its_first_request() -> None:
    """A run starts from one shared zero ``Usage`` made without validation: building a
    validator would load pydantic's plugin scan (``importlib.metadata``) before the request.
    The zero still reads as ``Usage()`` does, nothing counted as set."""
    out = _child(
        "import asyncio, json, sys\n"
        "from fanloop import Agent\n"
        "from fanloop.testing import ScriptedProvider\n"
        "from fanloop._model_types import Usage, zero_usage\n"
        "seen = {}\n"
        "def answer(request):\n"
        "    seen['metadata'] = 'importlib.metadata' in sys.modules\n"
        "    return 'hi'\n"
        "result = asyncio.run(Agent(ScriptedProvider([answer])).run('hello'))\n"
        "z = zero_usage()\n"
        "print(json.dumps({'metadata': seen['metadata'], 'text': result.text,\n"
        "    'same': z == Usage(), 'set': sorted(z.model_fields_set),\n"
        "    'unset': z.model_dump(exclude_unset=True)}))\n"
    )
    assert out == {"metadata": False, "text": "hi", "same": True, "set": [], "unset": {}}


def test_the_default_tools_compile_their_patterns_on_first_use() -> None:
    # What `fanloop run` builds before its first request: the tools' specs, not their engines
    # (nor the web tools' connection guard on httpcore2, which a provider on aiohttp never needs).
    out = _child(
        "import json, sys\n"
        "from fanloop.tools import default_tools\n"
        "tools = default_tools()\n"
        "specs = [t.name for t in tools]\n"
        "lazy = ('regex', 'structlog', 'fanloop.tools._html', 'fanloop.tools._sql_check',\n"
        "    'fanloop.tools._sql_pg', 'fanloop.tools._sql_sqlite', 'fanloop.tools._sql_rows',\n"
        "    'httpcore2', 'fanloop.tools._guarded')\n"
        "before = [n for n in lazy if n in sys.modules]\n"
        "from fanloop.tools._secrets import redact\n"
        "hidden = 'sk-' + 'a' * 40 not in redact('key sk-' + 'a' * 40)\n"
        "from fanloop.tools.sql import check_read_only\n"
        "checked = check_read_only('SELECT 1;')\n"
        "from fanloop.tools import guarded_transport\n"
        "guarded = type(guarded_transport()).__name__\n"
        "print(json.dumps({'before': before, 'tools': len(specs), 'hidden': hidden,\n"
        "    'checked': checked, 'guarded': guarded}))\n"
    )
    assert out["before"] == []
    assert out["tools"] > 0
    assert out["hidden"] is True
    assert out["checked"] == "SELECT 1"
    assert out["guarded"] == "_GuardedTransport"  # the connection guard, with httpcore2


# What ``fanloop run`` (on the default SQLite store, without --delegate) has no use for before
# its first request: the other stores, the other commands, sub-agents, the SQL tools' checker
# and engines, Azure's endpoint, the vendor SDKs and the other HTTP stack.
NOT_BEFORE_FIRST_REQUEST = (
    "fanloop.sessions._postgres",
    "fanloop.sessions._pg_pool",
    "fanloop.sessions._pg_schema",
    "fanloop.sessions._memory",
    "psycopg",
    "fanloop._delegate",
    "fanloop.cli._sessions",
    "fanloop.cli._approve",
    "fanloop.cli._demo",
    "fanloop.cli._web",
    "fanloop.tools._sql_check",
    "fanloop.tools._sql_pg",
    "fanloop.tools._sql_sqlite",
    "fanloop.tools._sql_rows",
    "fanloop.providers._azure",
    "anthropic",
    "openai",
    "aiohttp",
    "structlog",
    "starlette",
    "uvicorn",
    "trio",  # installed here (selenium needs it); httpcore2 loads it on first use only
)


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
def test_fanloop_run_imports_only_what_its_first_request_needs(vendor: str, tmp_path: Path) -> None:
    # The first connection attempt stands for the first request: the child notes which modules
    # are loaded by then and stops (nothing listens on the discard port anyway).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLM_", "ANTHROPIC_", "OPENAI_", "FANLOOP_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env.update(
        LLM_PROVIDER=vendor,
        ANTHROPIC_API_KEY="sk-ant-test",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        NO_COLOR="1",
    )
    out = _child(
        "import json, os, socket, sys\n"
        "def connect(self, address):\n"
        "    print(json.dumps({'modules': sorted(sys.modules)}), flush=True)\n"
        "    os._exit(0)\n"
        "socket.socket.connect = connect\n"
        "from fanloop.cli import main\n"
        "main(['run', 'hi'])\n"
        "print(json.dumps({'modules': None}))\n",
        env=env,
        cwd=tmp_path,
    )
    modules = out["modules"]
    assert isinstance(modules, list), "the run ended without connecting"
    # The snapshot is taken where it should be: the provider and the session store are in.
    assert f"fanloop.providers.{vendor}" in modules
    assert "fanloop.sessions._sqlite" in modules
    assert (tmp_path / ".fanloop" / "sessions.db").exists()
    assert [n for n in NOT_BEFORE_FIRST_REQUEST if n in modules] == []


def test_the_session_stores_load_on_first_use() -> None:
    out = _child(
        "import json, sys\n"
        "import fanloop.sessions as s\n"
        "lazy = ('fanloop.sessions._postgres', 'fanloop.sessions._memory')\n"
        "before = [n for n in lazy if n in sys.modules]\n"
        "listed = sorted(n for n in ('MemoryStore', 'PostgresStore') if n in dir(s))\n"
        "from fanloop.sessions import MemoryStore, PostgresStore\n"
        "from fanloop.sessions._memory import MemoryStore as M\n"
        "from fanloop.sessions._postgres import PostgresStore as P\n"
        "print(json.dumps({'before': before, 'listed': listed,\n"
        "    'same': MemoryStore is M and PostgresStore is P and s.MemoryStore is M,\n"
        "    'all': all(hasattr(s, n) for n in s.__all__)}))\n"
    )
    assert out == {
        "before": [],
        "listed": ["MemoryStore", "PostgresStore"],
        "same": True,
        "all": True,
    }
    import fanloop.sessions

    with pytest.raises(AttributeError):
        fanloop.sessions.NoSuchStore  # noqa: B018


def test_the_command_line_builds_only_the_parser_of_the_command_it_runs() -> None:
    import argparse

    from fanloop.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["run", "hi", "--yes"])
    assert (args.command, args.prompt, args.yes) == ("run", "hi", True)
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    built = {name for name, p in commands.choices.items() if len(p._actions) > 1}  # beyond -h
    assert built == {"run"}
    # Asked for, every other command's parser is complete: its help lists its options.
    assert "--session" in commands.choices["chat"].format_help()
    assert "--port" in commands.choices["web"].format_usage()
    assert build_parser().parse_args(["sessions", "approve", "S", "--all"]).all is True


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


def test_httpcore2_loads_trio_only_for_a_run_under_trio() -> None:
    # httpcore2 imports trio (55-60 ms) whenever it is installed; the CLI hands it a stand-in
    # that imports trio on first use (fanloop._httpcore). A run under asyncio never loads it;
    # a run under trio, after httpcore2 was imported that way, still gets trio's locks.
    pytest.importorskip("trio", reason="trio is not installed")
    out = _child(
        "import json, sys\n"
        "import anyio\n"
        "from fanloop._httpcore import trio_on_first_use\n"
        "with trio_on_first_use():\n"
        "    import httpcore2\n"
        "from fanloop import Agent\n"
        "from fanloop.providers.openai import OpenAIProvider\n"
        "from fanloop.testing import FakeLLMServer\n"
        "after_import = 'trio' in sys.modules\n"
        "with FakeLLMServer(['one', 'two']) as server:\n"
        "    provider = OpenAIProvider('m', api_key='k', base_url=server.openai_base_url,\n"
        "                              transport='httpx')\n"
        "    async def main():\n"
        "        try:\n"
        "            return (await Agent(provider).run('hi')).text\n"
        "        finally:\n"
        "            await provider.aclose()\n"
        "    texts = [anyio.run(main)]\n"
        "    after_asyncio = 'trio' in sys.modules\n"
        "    texts.append(anyio.run(main, backend='trio'))\n"
        "print(json.dumps({'after_import': after_import, 'after_asyncio': after_asyncio,\n"
        "    'texts': texts, 'stand_in': type(httpcore2._synchronization.trio).__name__,\n"
        "    'trio_now': type(sys.modules['trio']).__name__}))\n"
    )
    assert out["after_import"] is False
    assert out["after_asyncio"] is False
    assert out["texts"] == ["one", "two"]
    assert out["stand_in"] == "module"  # the stand-in gave httpcore2 the real one on first use
    assert out["trio_now"] == "module"  # the real one, once a run under trio imported it
