"""How the stores turn messages, tool results and metadata into stored JSON and back, without
holding the event loop, and the rule that keeps what they hold valid Unicode.

Three sizes, by the characters a value holds (its strings, its media as base64, and 32 for
each value in it), measured on a 2-core machine:

- up to :data:`INLINE` (64 Ki): on the event loop, with pydantic's one-shot calls (at most
  about 0.1 ms; a hop to a worker thread costs about 50 µs);
- up to :data:`~fanloop._unicode.WINDOW` (256 Ki): in a worker thread, one-shot (the call
  holds the interpreter lock, so the loop waits for it: about 2 ms at most);
- larger: in a worker thread, a bounded piece at a time (:mod:`._bigjson`), so the loop runs
  between pieces. A 50 MiB message holds the loop for no single stretch longer than the few
  milliseconds of one piece, or one copy of its longest string.

Text is valid Unicode (``docs/sessions.md``): :func:`valid_models` joins surrogate pairs and
turns lone surrogates into U+FFFD before a message is stored, so what a session holds in memory
is what it reads back. Reading refuses stored text that breaks the rule, or is not JSON, with
:class:`~fanloop.sessions.SessionError`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from .._unicode import (
    INLINE,
    WINDOW,
    off_loop,
    scrub,
    scrub_json,
    scrub_model,
    valid_models,
    weight,
)
from ..messages import Message, ToolResultPart
from . import _bigjson
from ._errors import SessionError
from ._models import EffectReceipt, EffectStatus, SessionRecord, arguments_hash, title_of

__all__ = [
    "dump_metadata",
    "dump_models",
    "hash_arguments",
    "load_metadata",
    "load_record",
    "merge_metadata",
    "merged_metadata",
    "plain_metadata",
    "receipt_from_row",
    "receipt_row",
    "receipts_from_rows",
    "release",
    "stored_receipt_row",
    "title_in",
    "valid_receipt",
]

_MEDIA = frozenset({"image", "document"})

M = TypeVar("M", bound=BaseModel)


# -- messages and tool results -------------------------------------------------------------


async def hash_arguments(arguments: Mapping[str, Any]) -> str:
    """:func:`~fanloop.sessions.arguments_hash` of ``arguments``, computed off the loop when
    they are heavy (the same text, written a piece at a time)."""
    return await off_loop(weight(arguments, INLINE) > INLINE, _hash, arguments)  # type: ignore[no-any-return]


def _hash(arguments: Mapping[str, Any]) -> str:
    if weight(arguments, WINDOW) <= WINDOW:
        return arguments_hash(arguments)
    canonical = _bigjson.dump(scrub_json(dict(arguments)), sort_keys=True)
    return hashlib.sha256(canonical).hexdigest()


def _dump(model: BaseModel) -> bytes:
    """The JSON of ``model``: one call when light, else a piece at a time."""
    try:
        if weight(model, WINDOW) <= WINDOW:
            return model.__pydantic_serializer__.to_json(model)
        return _bigjson.dump(model.model_dump(mode="json"))
    except (PydanticSerializationError, UnicodeEncodeError):
        # A lone surrogate in a model that did not come through Session: same rule.
        clean = scrub_model(model)
        if clean is model:
            raise
        return _dump(clean)


async def dump_models(models: Sequence[BaseModel]) -> list[bytes]:
    """The JSON of each model, as UTF-8 (off the loop when they are heavy)."""
    heavy = sum(weight(m, INLINE) for m in models) > INLINE
    return await off_loop(heavy, lambda: [_dump(m) for m in models])  # type: ignore[no-any-return]


def _load(cls: type[M], data: bytes | str, what: str) -> M:
    try:
        if len(data) <= WINDOW:
            return cls.model_validate_json(data)
        raw = data if isinstance(data, bytes) else data.encode()
        return cls.model_validate(_media_as_bytes(_bigjson.load(raw)))
    except (ValidationError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SessionError(f"{what} cannot be read: {first}") from exc


def _media_as_bytes(tree: Any) -> Any:
    """Decode the base64 data of the images and documents in a message's (or tool result's)
    JSON value, as pydantic does when it validates JSON text (``_bigjson`` gives Python
    values, which pydantic would take as the text itself)."""
    if type(tree) is not dict:
        return tree
    holders = [tree.get("content"), tree.get("parts")]
    while holders:
        items = holders.pop()
        if type(items) is not list:
            continue
        for part in items:
            if type(part) is not dict:
                continue
            if part.get("kind") in _MEDIA and type(part.get("data")) is str:
                part["data"] = _base64(part["data"])
            elif part.get("kind") == "tool_result":
                holders.append(part.get("parts"))
    return tree


def _base64(text: str) -> bytes:
    """URL-safe (or standard) base64, decoded a window at a time."""
    step = WINDOW - WINDOW % 4
    return b"".join(base64.urlsafe_b64decode(text[i : i + step]) for i in range(0, len(text), step))


# -- metadata ------------------------------------------------------------------------------


def _dump_json(value: Any) -> str:
    """``json.dumps`` (``NaN`` allowed), or the same text a piece at a time when heavy."""
    if weight(value, WINDOW) <= WINDOW:
        return json.dumps(value)
    return _bigjson.dump(value, allow_nan=True).decode()


def _load_json(text: str | bytes) -> Any:
    if len(text) <= WINDOW:
        return json.loads(text)
    return _bigjson.load(text if isinstance(text, bytes) else text.encode(), surrogates=True)


async def plain_metadata(changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` as the plain JSON values every store holds and returns (a round trip
    through JSON), its text made valid Unicode.

    Raises:
        TypeError: a value is not JSON-serialisable.
    """
    heavy = weight(changes, INLINE) > INLINE

    def plain() -> dict[str, Any]:
        return _load_json(_dump_json(scrub_json(dict(changes))))  # type: ignore[no-any-return]

    return await off_loop(heavy, plain)  # type: ignore[no-any-return]


def dump_metadata(metadata: Mapping[str, Any]) -> str:
    """The stored text of ``metadata`` (call it off the loop when it is heavy)."""
    return _dump_json(dict(metadata))


def merged_metadata(
    stored: str | bytes, changes: Mapping[str, Any], session_id: str
) -> tuple[dict[str, Any], str]:
    """The stored metadata with ``changes`` merged in (a ``None`` value removes a key), and
    its text (call it off the loop when heavy)."""
    merged = {**load_metadata(stored, session_id), **changes}
    metadata = {k: v for k, v in merged.items() if v is not None}
    return metadata, dump_metadata(metadata)


async def merge_metadata(
    stored: str | bytes, changes: Mapping[str, Any], session_id: str
) -> tuple[dict[str, Any], str]:
    """:func:`merged_metadata`, off the loop when heavy."""
    heavy = len(stored) + weight(changes, INLINE) > INLINE
    return await off_loop(heavy, merged_metadata, stored, changes, session_id)  # type: ignore[no-any-return]


def load_metadata(text: str | bytes, session_id: str) -> dict[str, Any]:
    """The metadata stored as ``text``.

    Raises:
        SessionError: the text is not a JSON object.
    """
    try:
        value = _load_json(text)
    except ValueError as exc:
        raise SessionError(f"the metadata of session {session_id!r} cannot be read") from exc
    if type(value) is not dict:
        raise SessionError(f"the metadata of session {session_id!r} is not a JSON object")
    return scrub_json(value)  # stored by an older fanloop, it may hold lone surrogates


# -- receipts ------------------------------------------------------------------------------


async def valid_receipt(receipt: EffectReceipt) -> EffectReceipt:
    """``receipt`` with its text (tool name, note, result) made valid Unicode."""
    tool = scrub(receipt.tool)
    note = None if receipt.resolution_note is None else scrub(receipt.resolution_note)
    result = receipt.result
    if result is not None:
        (result,) = await valid_models((result,))
    if tool is receipt.tool and note is receipt.resolution_note and result is receipt.result:
        return receipt
    return dataclasses.replace(receipt, tool=tool, resolution_note=note, result=result)


async def receipt_row(receipt: EffectReceipt) -> tuple[Any, ...]:
    """A receipt's stored columns (its result as JSON bytes, its text valid Unicode):
    ``session_id, call_id, turn, tool, arguments_hash, status, result, started_at,
    finished_at, resolution_note, attempt``."""
    return (await stored_receipt_row(receipt))[1]


async def stored_receipt_row(receipt: EffectReceipt) -> tuple[EffectReceipt, tuple[Any, ...]]:
    """The receipt as it will be stored (its text valid Unicode), and its :func:`receipt_row`:
    a store that wrote the row as given returns the first without reading it back."""
    r = await valid_receipt(receipt)
    result = None if r.result is None else (await dump_models((r.result,)))[0]
    return r, (
        r.session_id,
        r.call_id,
        r.turn,
        r.tool,
        r.arguments_hash,
        r.status.value,
        result,
        r.started_at,
        r.finished_at,
        r.resolution_note,
        r.attempt,
    )


def receipt_from_row(row: Sequence[Any]) -> EffectReceipt:
    """The receipt stored as ``row`` (the columns of :func:`receipt_row`, the result's JSON
    whole or as a list of pieces); call it off the loop when its result is heavy.

    Raises:
        SessionError: the stored result or status cannot be read.
    """
    sid, call_id, turn, tool, hash_, status, result, started, finished, note, attempt = row
    try:
        state = EffectStatus(status)
    except ValueError:
        raise SessionError(f"the receipt for call {call_id!r} has no known status") from None
    return EffectReceipt(
        session_id=sid,
        call_id=call_id,
        turn=turn,
        tool=tool,
        arguments_hash=hash_,
        status=state,
        result=None
        if result is None
        else _load(
            ToolResultPart,
            b"".join(result) if isinstance(result, list) else result,
            f"the result of call {call_id!r}",
        ),
        started_at=started,
        finished_at=finished,
        resolution_note=note,
        attempt=attempt,
    )


async def receipts_from_rows(rows: Sequence[Sequence[Any]]) -> list[EffectReceipt]:
    """:func:`receipt_from_row` of each row, off the loop when their results are heavy. A list
    of rows is handed over and emptied, so long results are freed where they are decoded (see
    :func:`load_record`)."""
    heavy = sum(_size(row[6]) for row in rows) > INLINE

    def decode() -> list[EffectReceipt]:
        receipts = [receipt_from_row(row) for row in rows]
        if isinstance(rows, list):
            rows.clear()
        return receipts

    return await off_loop(heavy, decode)  # type: ignore[no-any-return]


def _size(stored: bytes | list[bytes] | None) -> int:
    if stored is None:
        return 0
    return sum(map(len, stored)) if isinstance(stored, list) else len(stored)


# -- records -------------------------------------------------------------------------------


async def load_record(
    session_id: str,
    created: float,
    updated: float,
    metadata: str | bytes,
    texts: Sequence[bytes | str | list[bytes]],
) -> SessionRecord:
    """The record of a session read as stored text (each message's JSON whole, or as a list
    of pieces), decoded off the loop when heavy.

    A list of texts is handed over: each is dropped from it once decoded, so that a long one is
    freed where it was decoded (in the worker thread when heavy). Freeing a buffer of tens of
    MiB gives its pages back to the system, 4-17 ms for 54 MB, and several times that on a busy
    machine: done on the event loop when the caller's frame let go of it, that stalled the loop.

    Raises:
        SessionError: a stored message or the metadata cannot be read.
    """
    size = sum(sum(map(len, t)) if isinstance(t, list) else len(t) for t in texts)
    heavy = size + len(metadata) > INLINE

    def decode() -> SessionRecord:
        owned = texts if isinstance(texts, list) else None
        messages = []
        for index in range(len(texts)):
            text = texts[index]
            if owned is not None:
                owned[index] = b""
            raw = b"".join(text) if isinstance(text, list) else text
            del text
            where = f"message {index} of session {session_id!r}"
            messages.append(_load(Message, raw, where))
            del raw  # the last reference to a long text: freed here
        return SessionRecord(
            session_id, tuple(messages), load_metadata(metadata, session_id), created, updated
        )

    return await off_loop(heavy, decode)  # type: ignore[no-any-return]


async def release(texts: list[Any]) -> None:
    """Empty ``texts`` (long stored texts no longer needed) in a worker thread: freeing tens of
    MiB gives pages back to the system, which on the event loop stalls it (see
    :func:`load_record`)."""
    await off_loop(True, texts.clear)


def title_in(metadata: str | bytes) -> str | None:
    """The title in stored metadata, if it has one (``None`` when it cannot be read)."""
    try:
        return title_of(load_metadata(metadata, ""))
    except SessionError:
        return None
