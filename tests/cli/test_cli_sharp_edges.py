"""Sharp edges of the command line (#22): where a key goes, vendor names, ``--mcp``, Ctrl-C
in a pipe, and the first run's sessions file."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import PROVIDER, fanloop

from fanloop.testing import FakeLLMServer, call, reply

MCP_SERVER = Path(__file__).parents[1] / "mcp" / "servers" / "tools_server.py"
STORY = "Once upon a time, " + "a loop fanned out its calls and waited for them all. " * 12


def _bare(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the OpenAI variables the fixture sets."""
    return {k: v for k, v in env.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}


# -- where the key goes -----------------------------------------------------------------------


def test_llm_base_url_and_llm_api_key_are_honoured(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    """``LLM_PROVIDER=openai`` with a local server in ``LLM_BASE_URL``: the request goes
    there, carrying ``LLM_API_KEY`` (not towards api.openai.com)."""
    server.add("Local answer.")
    local = _bare(env) | {
        "LLM_PROVIDER": "openai",
        "LLM_MODEL": "gpt-4.1",
        "LLM_BASE_URL": server.openai_base_url,
        "LLM_API_KEY": "sk-local",
    }
    done = fanloop("run", "--root", str(work), "hi", env=local)
    assert done.code == 0, done.err
    assert "Local answer." in done.out
    assert len(server.requests) == 1
    assert server.requests[0].headers["authorization"] == "Bearer sk-local"


def test_llm_api_key_wins_over_the_vendors_own_key(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("Fine.")
    both = env | {"LLM_PROVIDER": "openai-chat", "LLM_API_KEY": "sk-generic"}
    done = fanloop("run", "--model", "gpt-4o", "--root", str(work), "hi", env=both)
    assert done.code == 0, done.err
    assert server.requests[0].headers["authorization"] == "Bearer sk-generic"


def test_llm_base_url_of_another_vendor_is_refused(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    """``LLM_BASE_URL`` belongs to ``$LLM_PROVIDER``: ``--model openai:...`` must not send
    the OpenAI key there."""
    other = env | {"LLM_PROVIDER": "vllm", "LLM_BASE_URL": server.openai_base_url}
    done = fanloop("run", "--model", "openai:gpt-4.1", "--root", str(work), "hi", env=other)
    assert done.code == 2
    assert "LLM_BASE_URL is set for LLM_PROVIDER=vllm" in done.err
    assert "openai" in done.err
    assert server.requests == []


def test_anthropic_auth_token_is_the_key(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("From Claude.")
    claude = _bare(env) | {
        "ANTHROPIC_AUTH_TOKEN": "tok-123",
        "ANTHROPIC_BASE_URL": server.anthropic_base_url,
    }
    done = fanloop(
        "run", "--model", "anthropic:claude-sonnet-4-5", "--root", str(work), "hi", env=claude
    )
    assert done.code == 0, done.err
    assert "From Claude." in done.out
    assert server.requests[0].headers["authorization"] == "Bearer tok-123"


# -- vendor names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "suggested"),
    [
        ("gpt-4.1", "openai:gpt-4.1"),
        ("claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("gemini-2.5-flash", "gemini:gemini-2.5-flash"),
    ],
)
def test_a_bare_model_name_suggests_its_vendor(
    env: dict[str, str], work: Path, model: str, suggested: str
) -> None:
    done = fanloop("run", "--model", model, "--root", str(work), "hi", env=env)
    assert done.code == 2
    assert f"--model {suggested}" in done.err, done.err


def test_a_misspelt_vendor_is_named_with_the_closest_one(env: dict[str, str], work: Path) -> None:
    done = fanloop("run", "--model", "opnai:gpt-4.1", "--root", str(work), "hi", env=env)
    assert done.code == 2
    assert "unknown vendor 'opnai'" in done.err and "did you mean 'openai'?" in done.err
    assert "LLM_PROVIDER" not in done.err  # the user never set it
    assert not (work / ".fanloop").exists()


# -- --mcp ------------------------------------------------------------------------------------


def _mcp_run(server: FakeLLMServer, env: dict[str, str], work: Path, spec: str) -> None:
    server.add(reply(tool_calls=[call("lookup", key="pi")]), "Pi is 3.14159.")
    done = fanloop("run", *PROVIDER, "--root", str(work), "--mcp", spec, "What is pi?", env=env)
    assert done.code == 0, done.err
    assert "Pi is 3.14159." in done.out
    tools = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert {"lookup", "add", "read_file"} <= tools  # the server's tools beside the built-ins
    result = server.requests[1].body["messages"][-1]
    assert result["role"] == "tool" and result["content"] == "3.14159"


def test_mcp_stdio_server(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    _mcp_run(server, env, work, f"{sys.executable} {MCP_SERVER}")


@pytest.fixture
def mcp_url() -> Iterator[str]:
    """A streamable-HTTP MCP server in a subprocess (it prints ``PORT n`` once it listens)."""
    with subprocess.Popen(
        [sys.executable, str(MCP_SERVER), "--http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("PORT "), line
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
        finally:
            proc.kill()


def test_mcp_http_server(
    server: FakeLLMServer, env: dict[str, str], work: Path, mcp_url: str
) -> None:
    _mcp_run(server, env, work, mcp_url)


def test_mcp_server_that_cannot_start_is_an_error_before_the_run(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    bad = f"{sys.executable} -c \"raise SystemExit('NEEDS_A_TOKEN')\""
    done = fanloop("run", *PROVIDER, "--root", str(work), "--mcp", bad, "hi", env=env)
    assert done.code == 1
    assert "NEEDS_A_TOKEN" in done.err and "Traceback" not in done.err
    assert server.requests == []


# -- Ctrl-C in a pipe, and the sessions file --------------------------------------------------


def test_ctrl_c_note_on_stderr_and_usage_counts_what_streamed(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.delta_delay = 0.2  # ~20 s for the whole story: only Ctrl-C ends it early
    server.add(STORY)
    with subprocess.Popen(
        [sys.executable, "-m", "fanloop", "run", *PROVIDER, "--root", str(work), "A story"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            first = proc.stdout.read(len("Once upon"))  # the first streamed text arrived
            assert first == "Once upon"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = first + out
    assert proc.returncode == 130, err
    assert "^C cancelling" in err and "^C cancelling" not in out
    assert "⊘ cancelled" in out
    usage = re.search(r"tokens in ~([\d,]+) · out ~([\d,]+)", out)
    assert usage is not None, out
    assert int(usage[1].replace(",", "")) > 0 and int(usage[2].replace(",", "")) > 0
    assert "estimated" in out


def test_first_run_says_it_created_the_sessions_file_once(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("One.", "Two.")
    db = work / ".fanloop" / "sessions.db"
    first = fanloop("run", *PROVIDER, "--root", str(work), "hi", env=env)
    assert first.code == 0, first.err
    assert first.err.count(f"created {db}") == 1
    assert f"created {db}" not in first.out
    second = fanloop("run", *PROVIDER, "--root", str(work), "again", env=env)
    assert second.code == 0, second.err
    assert "created" not in second.err
