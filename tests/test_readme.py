"""The README's examples run as a newcomer would run them: pasted into a file, as a script.

The first two need a model: they run against the fake server (the real Anthropic client over
HTTP, the key and address from the environment, as the README says), and must exit cleanly,
with nothing on stderr (no "Unclosed client session").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from fanloop.testing import FakeLLMServer, call, reply

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def run_script(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, env=full
    )


def test_the_offline_example_runs_as_it_stands(tmp_path: Path) -> None:
    script = tmp_path / "offline.py"
    script.write_text(blocks()[2])
    out = run_script(script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["49"]
    assert out.stderr == ""


def test_the_first_examples_run_against_a_server_and_exit_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "first.py"
    script.write_text(blocks()[0] + "\n\n" + blocks()[1])
    with FakeLLMServer() as server:
        server.add(
            reply(tool_calls=[call("add", a=2, b=40)]),
            reply(tool_calls=[call("add", a=42, b=7)]),
            '{"total": 49, "steps": ["2+40=42", "42+7=49"]}',  # native structured output
            "42",
            "43.",
        )
        out = run_script(
            script,
            {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.anthropic_base_url},
        )
        conversation = server.requests[4].body["messages"]
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "49"
    assert lines[2:] == ["42", "43.", "completed"]
    assert out.stderr == ""
    # The streamed second question continued the conversation.
    assert len(conversation) == 3


def test_the_streaming_example_runs_on_its_own(tmp_path: Path) -> None:
    """Each block runs as written: the second needs nothing from the first."""
    script = tmp_path / "chat.py"
    script.write_text(blocks()[1])
    with FakeLLMServer() as server:
        server.add("42", "43.")
        out = run_script(
            script,
            {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.anthropic_base_url},
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["42", "43.", "completed"]
    assert out.stderr == ""


def test_without_a_key_the_first_example_fails_early_naming_the_variable(tmp_path: Path) -> None:
    script = tmp_path / "first.py"
    script.write_text(blocks()[0])
    out = run_script(script)
    assert out.returncode == 1
    assert "ConfigurationError: AnthropicProvider needs an API key" in out.stderr
    assert "ANTHROPIC_API_KEY" in out.stderr.splitlines()[-1]
    assert len(out.stderr.splitlines()) < 40  # was a 60-line SDK TypeError at the first request
