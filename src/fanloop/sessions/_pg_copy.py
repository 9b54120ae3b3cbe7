"""Large values to and from PostgreSQL, a piece at a time.

A statement's parameters go to the server in one message that libpq builds in one call, and
a row comes back as one message that libpq and psycopg copy in one go: for a 50 MiB message
either holds the event loop for a tenth of a second or more. So:

- writing, past :data:`STAGE_BYTES`, the store first copies the values into a temporary table
  of the connection (``COPY ... FROM STDIN`` in binary form, written :data:`PIECE` bytes at a
  time, letting the loop run between pieces), then runs its statement on that table, in the
  same transaction (the table empties itself at commit);
- reading a session, the server cuts each message's JSON into rows of :data:`PIECE` bytes
  (``COPY (...) TO STDOUT``), which arrive one by one (:func:`read_record`); reading
  receipts, it cuts each result's JSON the same way (:func:`read_receipts`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = [
    "PIECE",
    "RECEIPT_TYPES",
    "STAGED",
    "STAGE_BYTES",
    "read_receipts",
    "read_record",
    "stage",
]

STAGE_BYTES = 1024 * 1024
"""Values heavier than this in all (bytes of JSON) are staged instead of sent as parameters."""

PIECE = 256 * 1024
"""Bytes handed to libpq at a time."""

STAGED = "pg_temp.fanloop_staging"
"""The temporary table: ``n`` (1, 2, ... in the order given) and ``data`` (bytea)."""

_CREATE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS fanloop_staging "
    "(n integer NOT NULL, data bytea NOT NULL) ON COMMIT DELETE ROWS"
)
_COPY = f"COPY {STAGED} (n, data) FROM STDIN (FORMAT BINARY)"
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_TRAILER = struct.pack("!h", -1)


async def stage(conn: AsyncConnection[Any], blobs: Sequence[bytes]) -> None:
    """Copy ``blobs`` into :data:`STAGED` as rows ``1, 2, ...``; call it inside the
    transaction of the statement that reads them."""
    await conn.execute(_CREATE)
    async with conn.cursor().copy(_COPY) as copy:
        await copy.write(_SIGNATURE)
        for number, blob in enumerate(blobs, 1):
            await copy.write(struct.pack("!hiii", 2, 4, number, len(blob)))
            view = memoryview(blob)
            for start in range(0, len(blob), PIECE):
                await copy.write(view[start : start + PIECE])
                await anyio.lowlevel.checkpoint()
        await copy.write(_TRAILER)


async def read_record(
    conn: AsyncConnection[Any], statement: str, session_id: str
) -> tuple[float, float, bytes, list[list[bytes]]] | None:
    """A session as ``statement`` (``Statements.read``) copies it out: its times, its
    metadata, and the pieces of each message's JSON, in order; ``None`` if there is none."""
    head: tuple[float, float, bytes] | None = None
    messages: list[list[bytes]] = []
    last = None
    async with conn.cursor().copy(statement, {"id": session_id}) as copy:
        copy.set_types(["int8", "int4", "float8", "float8", "bytea"])
        async for index, _piece, created, updated, data in copy.rows():
            if index < 0:
                head = (created, updated, data)
            elif index == last:
                messages[-1].append(data)
            else:
                messages.append([data])
                last = index
            await anyio.lowlevel.checkpoint()
    return None if head is None else (*head, messages)


RECEIPT_TYPES = (
    "int8",  # seq: the receipt's place, -1 for the row that says the session exists
    "int4",  # the piece's number
    "text",  # session_id
    "text",  # call_id
    "int8",  # turn
    "text",  # tool
    "text",  # arguments_hash
    "text",  # status
    "bytea",  # a piece of the result's JSON
    "float8",  # started_at
    "float8",  # finished_at
    "text",  # resolution_note
    "text",  # attempt
)
"""The columns :func:`read_receipts` reads."""


async def read_receipts(
    conn: AsyncConnection[Any], statement: str, params: dict[str, str]
) -> list[list[Any]] | None:
    """The receipts as ``statement`` (``Statements.get_receipt`` and its kin) copies them
    out, in order: each one's stored columns (see ``_codec.receipt_from_row``), with its
    result as the list of its JSON's pieces (or ``None``); ``None`` if there is no session."""
    found = False
    rows: list[list[Any]] = []
    last = None
    async with conn.cursor().copy(statement, params) as copy:
        copy.set_types(list(RECEIPT_TYPES))
        async for seq, _piece, *columns in copy.rows():
            if seq < 0:
                found = True
            elif seq == last:
                rows[-1][6].append(columns[6])
            else:
                if columns[6] is not None:
                    columns[6] = [columns[6]]
                rows.append(columns)
                last = seq
            await anyio.lowlevel.checkpoint()
    return rows if found else None
