"""MemoryStore: sessions in a dict, for tests and short-lived programs."""

from __future__ import annotations

import builtins
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .._unicode import valid_models
from ..messages import Message
from ._codec import valid_receipt
from ._errors import SessionConflict, SessionError, SessionNotFound
from ._models import (
    Clock,
    EffectReceipt,
    EffectStatus,
    SessionInfo,
    SessionRecord,
    new_session_id,
    title_of,
)
from ._session import Session

__all__ = ["MemoryStore"]


@dataclasses.dataclass(slots=True)
class _Entry:
    created_at: float
    updated_at: float
    messages: list[Message] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    receipts: dict[str, EffectReceipt] = dataclasses.field(default_factory=dict)

    def record(self, session_id: str) -> SessionRecord:
        return SessionRecord(
            session_id, tuple(self.messages), dict(self.metadata), self.created_at, self.updated_at
        )


class MemoryStore:
    """A :class:`SessionStore` that keeps everything in this process's memory.

    Nothing survives the process. Safe to share between tasks and threads.

    Example:
        >>> import anyio
        >>> async def main() -> int:
        ...     store = MemoryStore()
        ...     session = await store.open("demo")
        ...     return await session.append(Message.user("hi"))
        >>> anyio.run(main)
        0
    """

    def __init__(self) -> None:
        """Make an empty store."""
        self._sessions: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._clock = Clock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemoryStore sessions={len(self._sessions)}>"

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _get(self, session_id: str) -> _Entry:
        if self._closed:
            raise SessionError("the session store is closed")
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    # -- what applications call ------------------------------------------------------------

    async def open(self, session_id: str | None = None) -> Session:
        """The session with this id, created empty if it does not exist."""
        return Session(self, await self.open_record(session_id or new_session_id()))

    async def load(self, session_id: str) -> Session:
        """The existing session with this id (:class:`SessionNotFound` if none)."""
        return Session(self, await self.read_record(session_id))

    async def delete(self, session_id: str) -> None:
        """Delete a session with its messages and receipts."""
        with self._lock:
            self._get(session_id)
            del self._sessions[session_id]

    async def aclose(self) -> None:
        """Forget every session; the store cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._sessions.clear()

    # -- what Session calls ----------------------------------------------------------------

    async def open_record(self, session_id: str) -> SessionRecord:
        """Create the session if needed and return what is stored."""
        if not session_id:
            raise ValueError("a session id cannot be empty")
        with self._lock:
            if self._closed:
                raise SessionError("the session store is closed")
            now = self._clock()
            entry = self._sessions.setdefault(session_id, _Entry(now, now))
            return entry.record(session_id)

    async def read_record(self, session_id: str) -> SessionRecord:
        """What is stored for the session."""
        with self._lock:
            return self._get(session_id).record(session_id)

    async def append_messages(
        self, session_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        """Store ``messages`` from index ``start`` (:class:`SessionConflict` if taken)."""
        messages = await valid_models(messages)  # as the other stores keep them
        with self._lock:
            entry = self._get(session_id)
            if len(entry.messages) != start:
                raise SessionConflict(
                    f"session {session_id!r} holds {len(entry.messages)} messages, "
                    f"not {start}: another writer changed it",
                    session_id=session_id,
                )
            entry.messages.extend(messages)
            entry.updated_at = self._clock()

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole history."""
        messages = await valid_models(messages)
        with self._lock:
            entry = self._get(session_id)
            entry.messages = list(messages)
            entry.updated_at = self._clock()

    async def update_metadata(self, session_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the metadata; ``None`` removes a key."""
        with self._lock:
            entry = self._get(session_id)
            entry.metadata = _merged(entry.metadata, changes)
            entry.updated_at = self._clock()
            return dict(entry.metadata)

    async def update_metadata_if(
        self, session_id: str, key: str, expected: Any, changes: Mapping[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Merge ``changes`` only if ``metadata[key] == expected``; return whether it was."""
        with self._lock:
            entry = self._get(session_id)
            if entry.metadata.get(key) != expected:
                return False, dict(entry.metadata)
            entry.metadata = _merged(entry.metadata, changes)
            entry.updated_at = self._clock()
            return True, dict(entry.metadata)

    async def add_receipt(self, receipt: EffectReceipt) -> EffectReceipt:
        """Insert ``receipt`` unless its call id has one; return the stored receipt."""
        receipt = await valid_receipt(receipt)
        with self._lock:
            receipts = self._get(receipt.session_id).receipts
            return receipts.setdefault(receipt.call_id, receipt)

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        """Overwrite the stored receipt if its status is ``expected``; return the stored one."""
        receipt = await valid_receipt(receipt)
        with self._lock:
            receipts = self._get(receipt.session_id).receipts
            current = receipts.get(receipt.call_id)
            if current is None or current.status is not expected:
                return current
            receipts[receipt.call_id] = receipt
            return receipt

    async def get_receipt(self, session_id: str, call_id: str) -> EffectReceipt | None:
        """The receipt for this call id, if any."""
        with self._lock:
            return self._get(session_id).receipts.get(call_id)

    async def list_receipts(
        self, session_id: str, status: EffectStatus | None = None
    ) -> builtins.list[EffectReceipt]:
        """The session's receipts, oldest first."""
        with self._lock:
            receipts = self._get(session_id).receipts.values()
            return [r for r in receipts if status is None or r.status is status]

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session, the most recently updated first."""
        with self._lock:
            if self._closed:
                raise SessionError("the session store is closed")
            infos = [
                SessionInfo(
                    id=sid,
                    created_at=e.created_at,
                    updated_at=e.updated_at,
                    message_count=len(e.messages),
                    title=title_of(e.metadata),
                    open_effects=sum(r.status is EffectStatus.STARTED for r in e.receipts.values()),
                )
                for sid, e in self._sessions.items()
            ]
        infos.sort(key=lambda i: (-i.updated_at, i.id))
        return infos


def _merged(metadata: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**metadata, **changes}
    return {k: v for k, v in merged.items() if v is not None}
