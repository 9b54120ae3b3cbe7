"""The async protocol every session store implements.

A store has two layers. The high-level methods (``open``, ``load``, ``list``, ``delete``,
``aclose``) are what applications call. The low-level methods are what a
:class:`~fanloop.sessions.Session` calls; each one is a single atomic step, so a store for
another database needs nothing but a transaction per method. ``open`` and ``load`` are
usually two lines::

    async def open(self, session_id: str | None = None) -> Session:
        return Session(self, await self.open_record(session_id or new_session_id()))

    async def load(self, session_id: str) -> Session:
        return Session(self, await self.read_record(session_id))
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..messages import Message
    from ._models import EffectReceipt, EffectStatus, SessionInfo, SessionRecord
    from ._session import Session

__all__ = ["SessionStore"]


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live: the pluggable async store protocol.

    Every method may be called concurrently from many tasks, for different sessions or the
    same one. Every write is durable when its coroutine returns. Unknown session ids raise
    :class:`~fanloop.sessions.SessionNotFound` in every method that takes one, except
    ``open`` and ``open_record`` (which create the session).
    """

    # -- what applications call ------------------------------------------------------------

    async def open(self, session_id: str | None = None) -> Session:
        """The session with this id, created empty if it does not exist.

        Args:
            session_id: the id; ``None`` makes a new random one.
        """
        ...

    async def load(self, session_id: str) -> Session:
        """The existing session with this id.

        Raises:
            SessionNotFound: there is none.
        """
        ...

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session in the store, the most recently updated first."""
        ...

    async def delete(self, session_id: str) -> None:
        """Delete a session with its messages and receipts.

        Raises:
            SessionNotFound: there is none.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources. The store cannot be used afterwards."""
        ...

    # -- what Session calls ----------------------------------------------------------------

    async def open_record(self, session_id: str) -> SessionRecord:
        """Create the session if it does not exist, then return what is stored."""
        ...

    async def read_record(self, session_id: str) -> SessionRecord:
        """Return what is stored for the session."""
        ...

    async def append_messages(
        self, session_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        """Store ``messages`` at indices ``start``, ``start + 1``... in one transaction.

        Raises:
            SessionConflict: the session does not hold exactly ``start`` messages (another
                writer got there first); nothing was written.
        """
        ...

    async def replace_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the whole history with ``messages`` in one transaction."""
        ...

    async def update_metadata(self, session_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the metadata (a ``None`` value removes the key).

        The values are JSON-compatible. Returns the metadata as now stored.
        """
        ...

    async def update_metadata_if(
        self, session_id: str, key: str, expected: Any, changes: Mapping[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Merge ``changes`` into the metadata only if ``metadata[key] == expected``.

        A compare-and-set, in one transaction: of any number of callers, in any number of
        processes, that expect the same value, exactly one succeeds. ``expected=None`` means
        the key is absent. The values are JSON-compatible.

        Returns:
            Whether the change was made, and the metadata as now stored (unchanged when it
            was not).
        """
        ...

    async def add_receipt(self, receipt: EffectReceipt) -> EffectReceipt:
        """Insert ``receipt`` unless the session already has one for its call id.

        Returns the receipt now stored for that call id: ``receipt`` itself, or the one that
        was there before (unchanged).
        """
        ...

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        """Overwrite the stored receipt for ``receipt.call_id`` if its status is ``expected``.

        A compare-and-set: returns the receipt now stored (``receipt`` on success, the
        unchanged one otherwise), or ``None`` if there is no receipt for that call id.
        """
        ...

    async def get_receipt(self, session_id: str, call_id: str) -> EffectReceipt | None:
        """The receipt for this call id, if there is one."""
        ...

    async def list_receipts(
        self, session_id: str, status: EffectStatus | None = None
    ) -> builtins.list[EffectReceipt]:
        """The session's receipts (only those with ``status`` if given), oldest first."""
        ...
