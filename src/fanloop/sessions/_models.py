"""The plain data that sessions and stores exchange: records, receipts, listings."""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import Any, NamedTuple

from .._record import record
from .._unicode import scrub_json
from ..messages import Message, ToolResultPart

__all__ = [
    "Clock",
    "EffectClaim",
    "EffectReceipt",
    "EffectStatus",
    "SessionInfo",
    "SessionRecord",
    "arguments_hash",
    "new_session_id",
]


class EffectStatus(StrEnum):
    """Where a tool-effect receipt stands.

    ``started`` is the only open state: the tool may or may not have changed the world. The
    other three are final.
    """

    STARTED = "started"
    """Written before the tool ran; the outcome is not known yet."""
    COMMITTED = "committed"
    """The tool finished and its result is recorded."""
    RESOLVED_APPLIED = "resolved_applied"
    """An operator checked the outside world and found the effect applied."""
    RESOLVED_NOT_APPLIED = "resolved_not_applied"
    """An operator checked the outside world and found the effect not applied."""


@record(frozen=True)
class EffectReceipt:
    """The durable record of one dangerous tool call.

    Attributes:
        session_id: the session the call belongs to.
        call_id: the tool call's id; receipts are unique per session and call id.
        turn: the turn the call was made in (as told by the caller of ``begin_effect``).
        tool: the tool's name.
        arguments_hash: :func:`arguments_hash` of the call's arguments. The arguments
            themselves are not stored: they may hold personal data.
        status: where the receipt stands.
        result: the tool's result, once ``committed``.
        started_at: when the receipt was written, in seconds since the epoch.
        finished_at: when it was committed or resolved.
        resolution_note: the operator's note, for resolved receipts.
        attempt: a random token naming the attempt that wrote the receipt. Two workers that
            race to start the same call both try to insert a receipt; the one whose token
            comes back won (see :meth:`Session.claim_effect`). ``None`` on receipts written
            before tokens were kept.
    """

    session_id: str
    call_id: str
    turn: int
    tool: str
    arguments_hash: str
    status: EffectStatus
    result: ToolResultPart | None
    started_at: float
    finished_at: float | None
    resolution_note: str | None
    attempt: str | None = None


class EffectClaim(NamedTuple):
    """What :meth:`Session.claim_effect` returns.

    Attributes:
        won: whether this caller wrote the receipt, and so may run the call.
        receipt: the receipt now stored (the winner's, when ``won`` is false).
    """

    won: bool
    receipt: EffectReceipt


@record(frozen=True)
class SessionInfo:
    """One line of :meth:`SessionStore.list`.

    Attributes:
        id: the session's id.
        created_at: when the session was created, in seconds since the epoch.
        updated_at: when its history or metadata last changed.
        message_count: how many messages it holds.
        title: ``metadata["title"]`` when it is a string.
        open_effects: how many of its receipts are still ``started``.
    """

    id: str
    created_at: float
    updated_at: float
    message_count: int
    title: str | None
    open_effects: int


@record(frozen=True)
class SessionRecord:
    """A session as a store holds it; what ``open_record`` and ``read_record`` return.

    Attributes:
        id: the session's id.
        messages: the history, in order.
        metadata: JSON-compatible data about the session (title...).
        created_at: when the session was created, in seconds since the epoch.
        updated_at: when its history or metadata last changed.
    """

    id: str
    messages: tuple[Message, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """The SHA-256 of the canonical JSON form of tool-call arguments, as hex.

    Keys are sorted and no whitespace is used, so equal arguments give equal hashes whatever
    their key order. The text is made valid Unicode first, as a session stores it (lone
    surrogates become U+FFFD), so a call read back from a session hashes the same.

    Example:
        >>> arguments_hash({"b": 1, "a": [1, 2]}) == arguments_hash({"a": [1, 2], "b": 1})
        True
    """
    canonical = json.dumps(
        scrub_json(arguments),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def new_session_id() -> str:
    """A fresh random session id (16 hex digits)."""
    return secrets.token_hex(8)


def title_of(metadata: Mapping[str, Any]) -> str | None:
    """``metadata["title"]`` when it is a string, else ``None``."""
    title = metadata.get("title")
    return title if isinstance(title, str) else None


class Clock:
    """``time.time()``, but strictly increasing: stores stamp ``updated_at`` with it (under
    their lock), so listings keep the order of the writes even on a coarse system clock."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0.0

    def __call__(self) -> float:
        now = time.time()
        if now <= self._last:
            now = math.nextafter(self._last, math.inf)
        self._last = now
        return now
