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

from .._approvals import PendingApproval, pending_approvals
from .._session_budget import SessionSpend, session_budget, session_spend, set_session_budget
from ._errors import EffectConflict, SessionConflict, SessionError, SessionNotFound
from ._memory import MemoryStore
from ._models import (
    EffectClaim,
    EffectReceipt,
    EffectStatus,
    SessionInfo,
    SessionRecord,
    arguments_hash,
    new_session_id,
)
from ._postgres import PostgresStore
from ._session import Session
from ._sqlite import SQLiteStore
from ._store import SessionStore

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
