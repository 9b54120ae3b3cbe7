"""Session: one conversation, persisted message by message, with its tool-effect receipts."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from .._log import logger
from .._unicode import scrub, valid_models
from ._codec import hash_arguments, plain_metadata
from ._errors import EffectConflict
from ._models import EffectClaim, EffectReceipt, EffectStatus, SessionRecord

if TYPE_CHECKING:
    from ..messages import Message, ToolCallPart, ToolResultPart
    from ._store import SessionStore

__all__ = ["Session"]


class Session:
    """One conversation held in a :class:`SessionStore`.

    Get one with ``await store.open(id)`` or ``await store.load(id)``. Every change is written
    to the store before the coroutine that makes it returns, so a process that dies loses
    nothing already appended. Changes made through one ``Session`` object are applied in the
    order they were called; if another writer (another object, another process) changed the
    same session in between, the write is refused with
    :class:`~fanloop.sessions.SessionConflict` rather than interleaved.

    Text is stored as valid Unicode: a message (or result, or note) holding a lone surrogate
    is stored, and kept in :attr:`messages`, with each surrogate pair joined and each lone
    surrogate replaced by U+FFFD, so what this object holds is what a reload gives (see
    ``docs/sessions.md``).

    Attributes:
        id: the session's id.
        store: the store it lives in.
        created_at: when the session was created, in seconds since the epoch.
    """

    __slots__ = ("_lock", "_messages", "_metadata", "_snapshot", "created_at", "id", "store")

    def __init__(self, store: SessionStore, record: SessionRecord) -> None:
        """Wrap a stored record; stores call this from ``open`` and ``load``."""
        self.store = store
        self.id = record.id
        self.created_at = record.created_at
        self._messages = list(record.messages)
        self._snapshot: tuple[Message, ...] | None = record.messages
        self._metadata = dict(record.metadata)
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} messages={len(self._messages)}>"

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation as persisted, oldest first."""
        if self._snapshot is None:
            self._snapshot = tuple(self._messages)
        return self._snapshot

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the session's metadata; change it with :meth:`set_metadata`."""
        return dict(self._metadata)

    # -- history -------------------------------------------------------------------------

    async def append(self, message: Message) -> int:
        """Persist one message at the end of the history.

        The message is stored (and kept) with its text made valid Unicode; read it back as
        ``messages[index]``.

        Returns:
            The message's index in :attr:`messages`.

        Raises:
            SessionConflict: another writer changed the session since this object read it.
            SessionNotFound: the session was deleted.
        """
        (message,) = await valid_models((message,))
        async with self._lock:
            index = len(self._messages)
            with anyio.CancelScope(shield=True):
                await self.store.append_messages(self.id, index, (message,))
                self._messages.append(message)
                self._snapshot = None
            return index

    async def extend(self, messages: Sequence[Message]) -> None:
        """Persist several messages at the end of the history, all or none."""
        if not messages:
            return
        messages = await valid_models(messages)
        async with self._lock:
            with anyio.CancelScope(shield=True):
                await self.store.append_messages(self.id, len(self._messages), messages)
                self._messages.extend(messages)
                self._snapshot = None

    async def replace(self, messages: Sequence[Message]) -> None:
        """Atomically swap the whole history (after compaction, for example).

        Either the new history is stored in full or the old one is left untouched.
        """
        new = await valid_models(tuple(messages))
        async with self._lock:
            with anyio.CancelScope(shield=True):
                await self.store.replace_messages(self.id, new)
                before, self._messages, self._snapshot = len(self._messages), list(new), new
        logger.debug("session_replaced", session_id=self.id, before=before, after=len(new))

    async def set_metadata(self, **changes: Any) -> None:
        """Merge ``changes`` into the metadata and persist it; ``None`` removes a key.

        Raises:
            TypeError: a value is not JSON-serialisable.
        """
        # Round-trip through JSON so every store holds (and returns) the same plain values.
        normalised = await plain_metadata(changes)
        async with self._lock:
            with anyio.CancelScope(shield=True):
                self._metadata = await self.store.update_metadata(self.id, normalised)

    async def set_metadata_if(self, key: str, expected: Any, **changes: Any) -> bool:
        """Merge ``changes`` into the metadata only if the *stored* ``metadata[key]`` equals
        ``expected`` (``None``: the key is absent), atomically in the store.

        Of several writers, in any processes, that expect the same value, exactly one wins:
        this is how a claim on shared session state is taken. Either way :attr:`metadata`
        afterwards shows what is stored.

        Returns:
            Whether the change was made.

        Raises:
            TypeError: a value is not JSON-serialisable.
        """
        normalised = await plain_metadata({"expected": expected, "changes": changes})
        expected, normalised = normalised["expected"], normalised["changes"]
        async with self._lock:
            with anyio.CancelScope(shield=True):
                won, self._metadata = await self.store.update_metadata_if(
                    self.id, key, expected, normalised
                )
        return won

    async def reload(self) -> None:
        """Re-read the history and metadata from the store."""
        async with self._lock:
            record = await self.store.read_record(self.id)
            self._messages, self._snapshot = list(record.messages), record.messages
            self._metadata = dict(record.metadata)

    # -- tool-effect receipts ------------------------------------------------------------

    async def begin_effect(self, *, turn: int, call: ToolCallPart) -> EffectReceipt:
        """Durably record that a dangerous tool call is about to run (status ``started``).

        Call this before running the tool and :meth:`commit_effect` after. If the session
        already holds a receipt for ``call.id`` with the same tool and arguments, that
        receipt is returned unchanged and nothing is written: look at its status before
        running anything (``committed``: replay ``result``; ``started``: another attempt
        may have applied the effect, the outcome is uncertain). To know whether *this* call
        wrote the receipt, use :meth:`claim_effect`.

        Args:
            turn: the turn the call belongs to.
            call: the tool call.

        Raises:
            EffectConflict: the call id already has a receipt for another tool or other
                arguments.
        """
        return (await self.claim_effect(turn=turn, call=call)).receipt

    async def claim_effect(self, *, turn: int, call: ToolCallPart) -> EffectClaim:
        """Record that a dangerous call is about to run, as :meth:`begin_effect` does, and
        say whether this caller won the right to run it.

        Of any number of callers, in any number of processes, that claim the same call id,
        exactly one gets ``won=True`` and may run the tool; every other one gets the stored
        receipt with ``won=False`` and must not run it: it replays the receipt's result once
        it is committed, and while it is ``started`` the outcome is not known.

        Args:
            turn: the turn the call belongs to.
            call: the tool call.

        Raises:
            EffectConflict: the call id already has a receipt for another tool or other
                arguments.
        """
        receipt = EffectReceipt(
            session_id=self.id,
            call_id=call.id,
            turn=turn,
            tool=scrub(call.name),
            arguments_hash=await hash_arguments(call.arguments),
            status=EffectStatus.STARTED,
            result=None,
            started_at=time.time(),
            finished_at=None,
            resolution_note=None,
            attempt=secrets.token_hex(16),
        )
        with anyio.CancelScope(shield=True):
            stored = await self.store.add_receipt(receipt)
        if stored.tool != receipt.tool or stored.arguments_hash != receipt.arguments_hash:
            raise EffectConflict(
                f"call {call.id!r} was admitted before with other "
                f"{'arguments' if stored.tool == receipt.tool else 'tool'} "
                f"({stored.tool}, arguments hash {stored.arguments_hash[:12]}); "
                "a call id cannot be re-admitted with different content",
                session_id=self.id,
                call_id=call.id,
            )
        return EffectClaim(stored.attempt == receipt.attempt, stored)

    async def commit_effect(self, call_id: str, result: ToolResultPart) -> EffectReceipt:
        """Record that the call finished with ``result`` (status ``committed``).

        Committing the same result twice is harmless.

        Raises:
            EffectConflict: no receipt was started for the call, or it is already
                committed with another result or resolved.
            ValueError: ``result.call_id`` is not ``call_id``.
        """
        if result.call_id != call_id:
            raise ValueError(f"result for call {result.call_id!r} given to commit {call_id!r}")
        (result,) = await valid_models((result,))
        current = await self._require(call_id)
        if current.status is EffectStatus.COMMITTED and current.result == result:
            return current
        self._expect_started(current, "commit")
        done = dataclasses.replace(
            current, status=EffectStatus.COMMITTED, result=result, finished_at=time.time()
        )
        return await self._transition(current, done)

    async def resolve_effect(
        self, call_id: str, *, applied: bool, note: str | None = None
    ) -> EffectReceipt:
        """Record an operator's finding on a receipt left ``started``.

        After checking the outside world, the operator says whether the effect was applied.
        The receipt keeps everything it recorded and gains the outcome, the time and the
        note, so either outcome stays as evidence. Resolving again the same way is harmless.

        Raises:
            EffectConflict: no receipt exists for the call, or it is not ``started``.
        """
        status = EffectStatus.RESOLVED_APPLIED if applied else EffectStatus.RESOLVED_NOT_APPLIED
        note = None if note is None else scrub(note)
        current = await self._require(call_id)
        if current.status is status and current.resolution_note == note:
            return current
        self._expect_started(current, "resolve")
        done = dataclasses.replace(
            current, status=status, finished_at=time.time(), resolution_note=note
        )
        stored = await self._transition(current, done)
        logger.info(
            "session_effect_resolved",
            session_id=self.id,
            tool_call_id=call_id,
            tool=current.tool,
            status=str(status),
        )
        return stored

    async def effect(self, call_id: str) -> EffectReceipt | None:
        """The receipt for a call id, if there is one."""
        return await self.store.get_receipt(self.id, call_id)

    async def effects(self, status: EffectStatus | None = None) -> list[EffectReceipt]:
        """The session's receipts, oldest first; only those with ``status`` if given."""
        return await self.store.list_receipts(self.id, status)

    async def _require(self, call_id: str) -> EffectReceipt:
        current = await self.store.get_receipt(self.id, call_id)
        if current is None:
            raise EffectConflict(
                f"no effect receipt for call {call_id!r}", session_id=self.id, call_id=call_id
            )
        return current

    def _expect_started(self, current: EffectReceipt, action: str) -> None:
        if current.status is not EffectStatus.STARTED:
            raise EffectConflict(
                f"cannot {action} the receipt for call {current.call_id!r}: "
                f"it is {current.status.value}",
                session_id=self.id,
                call_id=current.call_id,
            )

    async def _transition(self, current: EffectReceipt, done: EffectReceipt) -> EffectReceipt:
        with anyio.CancelScope(shield=True):
            stored = await self.store.update_receipt(done, expected=EffectStatus.STARTED)
        if stored != done:
            # Someone else moved the receipt between our read and our write.
            self._expect_started(stored or current, "update")
            raise EffectConflict(
                f"the store did not record the receipt for call {done.call_id!r}",
                session_id=self.id,
                call_id=done.call_id,
            )
        return done
