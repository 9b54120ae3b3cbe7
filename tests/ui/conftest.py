"""Fixtures for the browser-protocol tests."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest
from ui_helpers import NODE_DIR, cache_dir


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """A folder holding ``@ag-ui/client``, ``@ag-ui/core`` and ``ai`` at the versions pinned in
    ``tests/ui/node/package.json``, installed once with npm into the user's cache."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the protocol conformance tests (not installed)")
    folder = cache_dir()
    marker = folder / "installed"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock_file:
        # Test processes running side by side (pytest-xdist's workers) install one at a time:
        # the first installs, the others wait for it and find the marker.
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not marker.exists():
            _install(npm, folder)
            marker.write_text("ok")
    return folder / "node_modules"


def _install(npm: str, folder: Path) -> None:
    """Install the pinned packages into ``folder`` (fails the test if npm does)."""
    shutil.copy(NODE_DIR / "package.json", folder / "package.json")
    lock = NODE_DIR / "package-lock.json"
    if lock.exists():
        shutil.copy(lock, folder / "package-lock.json")
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"npm install failed:\n{done.stdout}\n{done.stderr}")
