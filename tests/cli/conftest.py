"""Drive ``python -m fanloop`` as a user would: subprocesses and a pseudo-terminal, against a
FakeLLMServer started by the test (the CLI talks to it through the real OpenAI client)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import Terminal

from fanloop.testing import FakeLLMServer

_SCRUB = (
    "FANLOOP_STORE",
    "FANLOOP_STORE_SCHEMA",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "NO_COLOR",
    "LLM_PROVIDER",
    "LLM_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(chars_per_delta=6) as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The workspace root the CLI runs in (``--root``)."""
    root = tmp_path / "work"
    root.mkdir()
    return root


@pytest.fixture
def env(server: FakeLLMServer, tmp_path: Path) -> dict[str, str]:
    """The environment of the CLI process: pointed at the fake server, home in tmp."""
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY="sk-test",
        HOME=str(tmp_path / "home"),
        FANLOOP_HOME=str(tmp_path / "fanloop-home"),
        TERM="xterm",
        PYTHONUNBUFFERED="1",
    )
    return out


@pytest.fixture
def terminal(env: dict[str, str]) -> Iterator[type[Terminal]]:
    """Opens :class:`Terminal` sessions and closes them after the test."""
    opened: list[Terminal] = []

    class Opened(Terminal):
        def __init__(
            self,
            *args: str,
            env: dict[str, str] = env,
            cwd: Path | None = None,
            columns: int | None = None,
        ):
            super().__init__(*args, env=env, cwd=cwd, columns=columns)
            opened.append(self)

    yield Opened
    for t in opened:
        t.close()
