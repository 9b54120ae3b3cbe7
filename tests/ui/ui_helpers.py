"""Helpers for the browser-protocol tests: a live uvicorn server on 127.0.0.1, and the
official JavaScript clients run with Node (see ``node/package.json``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from fanloop import NullObserver
from fanloop.observers import ConversationSummary

NODE_DIR = Path(__file__).parent / "node"


class _Server(uvicorn.Server):
    """uvicorn that says when it listens (instead of a test polling for it)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


@contextmanager
def serve(app: Any, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread on a free port of 127.0.0.1; yields its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", **options)
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not server.ready.wait(30):
            raise RuntimeError("uvicorn did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256((NODE_DIR / "package.json").read_bytes()).hexdigest()[:16]
    return Path(base) / "fanloop-tests" / f"node-{digest}"


def run_node(node_modules: Path, script: str, *args: str, timeout: float = 120) -> str:
    """Run ``tests/ui/node/<script>`` with the installed packages; its stdout."""
    env = {**os.environ, "NODE_PATH": str(node_modules)}
    done = subprocess.run(
        [shutil.which("node") or "node", str(NODE_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"node {script} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


class Ended(NullObserver):
    """Says how each run ended, to a test in another thread."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.done = threading.Event()

    def on_conversation_end(self, summary: ConversationSummary) -> None:
        self.reasons.append(str(summary.termination_reason))
        self.done.set()
