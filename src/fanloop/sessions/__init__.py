"""Durable conversations: sessions, their stores, and tool-effect receipts.

::

    from fanloop.sessions import SQLiteStore

    store = SQLiteStore(".fanloop/sessions.db")
    session = await store.open("support-42")      # created if new, loaded if not
    await session.append(Message.user("hello"))   # on disk before it returns

A :class:`Session` persists every message as it is appended and keeps a receipt for every
dangerous tool call (written ``started`` before the tool runs, ``committed`` after), so a
process that dies loses nothing already done and a resumed run knows which effects are
uncertain. Stores are pluggable behind the :class:`SessionStore` protocol; fanloop ships
:class:`MemoryStore`, :class:`SQLiteStore` and :class:`PostgresStore` (extra
``fanloop[postgres]``; psycopg is imported when a store is made, not here). See
``docs/sessions.md``.
"""

from typing import TYPE_CHECKING

from .._approvals import PendingApproval, pending_approvals
from .._lazy import lazy
from .._session_budget import SessionSpend, session_budget, session_spend, set_session_budget
from ._errors import EffectConflict, SessionConflict, SessionError, SessionNotFound
from ._models import (
    EffectClaim,
    EffectReceipt,
    EffectStatus,
    SessionInfo,
    SessionRecord,
    arguments_hash,
    new_session_id,
)
from ._session import Session
from ._sqlite import SQLiteStore
from ._store import SessionStore

if TYPE_CHECKING:
    from ._memory import MemoryStore
    from ._postgres import PostgresStore

# Loaded on first use: a program on one store does not pay for the others (``fanloop run``
# on SQLite, its default, needs neither the in-memory store nor the PostgreSQL one).
_LAZY = {"MemoryStore": "._memory", "PostgresStore": "._postgres"}
__getattr__, __dir__ = lazy(__name__, _LAZY)


__all__ = [
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
