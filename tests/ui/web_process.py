"""``fanloop web`` as a real subprocess, for the tests of the command and of its page."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

_SCRUB = (
    "FANLOOP_STORE",
    "FANLOOP_WEB_TOKEN",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "LLM_PROVIDER",
    "LLM_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
)
_URL = re.compile(r"(http://\S+)")


def web_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of the command: no keys, no proxies, a home of its own."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(HOME=str(home), FANLOOP_HOME=str(home / ".fanloop"), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class WebServer:
    """``python -m fanloop web ARGS --port 0``, started and stopped by a test.

    Attributes:
        url: the URL the command printed (with ``?token=`` when it has one).
        base: the URL without the query.
    """

    def __init__(self, *args: str, env: dict[str, str], cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fanloop", "web", *args, "--port", "0"],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.rest = self.stderr = ""
        self.first_line = self._line(timeout=30.0)
        found = _URL.search(self.first_line)
        if found is None:
            self.stop()
            raise AssertionError(f"no URL in {self.first_line!r}; stderr: {self.stderr}")
        self.url = found.group(1)
        self.base = self.url.split("?", 1)[0]

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                return self.proc.stdout.readline()
            if self.proc.poll() is not None:
                break
        return ""

    def stop(self, sig: int = signal.SIGINT, timeout: float = 15.0) -> int:
        """Send ``sig`` and wait for the exit (killed if it takes longer than ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.rest, self.stderr = out, err
        return self.proc.returncode

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
