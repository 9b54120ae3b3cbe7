"""Helpers shared by the tool tests (imported as ``tools_helpers``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from fanloop.messages import ToolCallPart
from fanloop.tools import RunContext
from fanloop.tools.base import _current

PG_DSN = os.environ.get("FANLOOP_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
"""The test server (override with FANLOOP_TEST_PG_DSN)."""


@contextlib.contextmanager
def run_context(
    *, session_id: str | None = None, run_id: str = "run-1", depth: int = 0
) -> Iterator[RunContext[None]]:
    """Make tool calls in this block look like calls from a run."""
    ctx: RunContext[None] = RunContext(
        deps=None,
        run_id=run_id,
        agent_path=("root",) if depth == 0 else ("root", "sub"),
        call=ToolCallPart(id="call-1", name="read_file", arguments={}),
        depth=depth,
        session_id=session_id,
    )
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stdout."""
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def pg_count(schema: str) -> int:
    """Rows in ``schema.items``, read on a normal connection."""
    import psycopg

    with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.items").fetchone()
        assert row is not None
        return int(row[0])
