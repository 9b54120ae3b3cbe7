"""The public surface of fanloop.sessions and its doctests (tests/test_docs.py runs the docs)."""

from __future__ import annotations

import doctest
import pickle

import pytest

import fanloop.sessions
from fanloop.sessions import (
    EffectConflict,
    SessionConflict,
    SessionError,
    SessionNotFound,
    _memory,
    _models,
    _pg_schema,
)


def test_exported_members() -> None:
    assert fanloop.sessions.__all__ == [
        "EffectClaim",
        "EffectConflict",
        "EffectReceipt",
        "EffectStatus",
        "MemoryStore",
        "PendingApproval",
        "PostgresStore",
        "SQLiteStore",
        "Session",
        "SessionConflict",
        "SessionError",
        "SessionInfo",
        "SessionNotFound",
        "SessionRecord",
        "SessionSpend",
        "SessionStore",
        "arguments_hash",
        "new_session_id",
        "pending_approvals",
        "session_budget",
        "session_spend",
        "set_session_budget",
    ]
    approvals = {"pending_approvals"}  # shared with fanloop's core
    budget = {"SessionSpend", "session_budget", "session_spend", "set_session_budget"}
    for name in fanloop.sessions.__all__:
        module = getattr(fanloop.sessions, name).__module__
        home = (
            "fanloop._result"  # a run's result names the calls it waits for
            if name == "PendingApproval"
            else "fanloop._approvals"
            if name in approvals
            else "fanloop._session_budget"
            if name in budget
            else "fanloop.sessions"
        )
        assert module.startswith(home)


@pytest.mark.parametrize("module", [_memory, _models, _pg_schema])
def test_doctests(module: object) -> None:
    failed, tried = doctest.testmod(module)  # type: ignore[arg-type]
    assert tried > 0
    assert failed == 0


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
