"""The public surface of fanloop.sessions, its doctests, and the example in docs/sessions.md."""

from __future__ import annotations

import doctest
import pickle
import re
from pathlib import Path

import pytest

import fanloop.sessions
from fanloop.sessions import (
    EffectConflict,
    SessionConflict,
    SessionError,
    SessionNotFound,
    _memory,
    _models,
)

DOCS = Path(__file__).parents[2] / "docs" / "sessions.md"


def test_exported_members() -> None:
    assert fanloop.sessions.__all__ == [
        "EffectConflict",
        "EffectReceipt",
        "EffectStatus",
        "MemoryStore",
        "SQLiteStore",
        "Session",
        "SessionConflict",
        "SessionError",
        "SessionInfo",
        "SessionNotFound",
        "SessionRecord",
        "SessionStore",
        "arguments_hash",
        "new_session_id",
    ]
    for name in fanloop.sessions.__all__:
        assert getattr(fanloop.sessions, name).__module__.startswith("fanloop.sessions")


@pytest.mark.parametrize("module", [_memory, _models])
def test_doctests(module: object) -> None:
    failed, tried = doctest.testmod(module)  # type: ignore[arg-type]
    assert tried > 0
    assert failed == 0


def test_docs_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    [example] = [b for b in blocks if "anyio.run(main" in b]
    db = tmp_path / "demo.db"
    exec(compile(example.replace(".fanloop/demo.db", str(db)), str(DOCS), "exec"), {})
    assert db.exists()


@pytest.mark.parametrize(
    "error",
    [
        SessionNotFound("s"),
        SessionConflict("taken", session_id="s"),
        EffectConflict("no", session_id="s", call_id="c"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling(error: SessionError) -> None:
    """They cross process boundaries (multiprocessing, worker pools) intact."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)
