"""What PostgresStore keeps apart from its methods: the schema, its migrations, the SQL text,
and the connection settings. Nothing here imports psycopg.

Layout (schema version 2, in the schema the store was given, ``fanloop`` by default)::

    fanloop_schema_migrations  version PK, applied_at         one row per applied migration
    fanloop_sessions           id PK, created_at, updated_at, message_count, metadata (text)
    fanloop_messages           (session_id, idx) PK, role, json (json)   one row per message
    fanloop_effects            (session_id, call_id) PK, seq, turn, tool, arguments_hash,
                               status, result (json), started_at, finished_at, resolution_note,
                               attempt (version 2)

The tables carry a ``fanloop_`` prefix so that ``schema="public"`` cannot collide with an
application's own ``sessions`` table. Messages and results are stored as ``json`` (not
``jsonb``): the exact text the store wrote (``model_dump_json()``, or the same JSON written a
piece at a time for a large value), which ``jsonb`` would re-order and which may hold
``\\u0000`` (``jsonb`` refuses it). That text travels as UTF-8 ``bytea`` in binary form
(``convert_from`` / ``convert_to`` on the server), so the client never converts a large
string in one call. The metadata is the text ``json.dumps``
wrote, as in SQLite: it may hold ``NaN`` or ``Infinity`` (a model can put them in tool-call
arguments that end up there), which the ``json`` type refuses.
"""

from __future__ import annotations

import hashlib
import math
import re

from .._record import record
from ._pg_copy import PIECE, RECEIPT_TYPES, STAGED

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Statements",
    "check_schema",
    "connection_options",
    "lock_key",
    "redact",
]

# Migration i takes the schema from version i to version i + 1; "{s}" is the quoted schema.
# Never edit a released one: append a new one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE {s}.fanloop_sessions (
            id            text PRIMARY KEY,
            created_at    double precision NOT NULL,
            updated_at    double precision NOT NULL,
            message_count bigint NOT NULL DEFAULT 0,
            metadata      text NOT NULL DEFAULT '{{}}'
        )
        """,
        """
        CREATE TABLE {s}.fanloop_messages (
            session_id text NOT NULL REFERENCES {s}.fanloop_sessions (id) ON DELETE CASCADE,
            idx        bigint NOT NULL,
            role       text NOT NULL,
            json       json NOT NULL,
            PRIMARY KEY (session_id, idx)
        )
        """,
        """
        CREATE TABLE {s}.fanloop_effects (
            session_id      text NOT NULL REFERENCES {s}.fanloop_sessions (id) ON DELETE CASCADE,
            call_id         text NOT NULL,
            seq             bigint GENERATED ALWAYS AS IDENTITY,
            turn            bigint NOT NULL,
            tool            text NOT NULL,
            arguments_hash  text NOT NULL,
            status          text NOT NULL CHECK (status IN
                                ('started', 'committed', 'resolved_applied',
                                 'resolved_not_applied')),
            result          json,
            started_at      double precision NOT NULL,
            finished_at     double precision,
            resolution_note text,
            PRIMARY KEY (session_id, call_id)
        )
        """,
        "CREATE INDEX fanloop_effects_by_status ON {s}.fanloop_effects (session_id, status)",
        "CREATE INDEX fanloop_sessions_by_update ON {s}.fanloop_sessions (updated_at)",
    ),
    ("ALTER TABLE {s}.fanloop_effects ADD COLUMN attempt text",),
)

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes; older schemas are migrated on first use."""

_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_NOW = "extract(epoch FROM clock_timestamp())::double precision"
_KEPT = (
    "e.session_id, e.call_id, e.turn, e.tool, e.arguments_hash, e.status, e.started_at, "
    "e.finished_at, e.resolution_note, e.attempt"
)
_NO_RECEIPT = ", ".join(f"NULL::{t}" for t in RECEIPT_TYPES[2:])


def _receipts(sessions: str, effects: str, where: str) -> str:
    """A statement that copies out the session's row (index ``-1``: the session exists),
    then each of its receipts that ``where`` keeps, in ``seq`` order, with the JSON of its
    result in pieces of :data:`PIECE` bytes, a row a piece (see ``_pg_copy.read_receipts``)."""
    return (
        f"COPY (WITH s AS (SELECT id FROM {sessions} WHERE id = %(id)s), "
        f"e AS MATERIALIZED (SELECT e.seq, {_KEPT}, convert_to(e.result::text, 'UTF8') AS r "
        f"FROM {effects} e JOIN s ON e.session_id = s.id{where}) "
        f"SELECT -1::bigint, 0, {_NO_RECEIPT} FROM s "
        "UNION ALL SELECT e.seq, c.i, e.session_id, e.call_id, e.turn, e.tool, "
        f"e.arguments_hash, e.status, substring(e.r FROM c.i * {PIECE} + 1 FOR {PIECE}), "
        "e.started_at, e.finished_at, e.resolution_note, e.attempt FROM e, "
        f"generate_series(0, greatest(coalesce(length(e.r), 0) - 1, 0) / {PIECE}) AS c(i) "
        "ORDER BY 1, 2) TO STDOUT (FORMAT BINARY)"
    )


def check_schema(schema: str) -> str:
    """``schema`` quoted for SQL, once it is known to be a plain identifier.

    Raises:
        ValueError: it is not 1-63 letters, digits and underscores, not starting with a digit.
    """
    if not isinstance(schema, str) or not _SCHEMA.fullmatch(schema) or schema.startswith("pg_"):
        raise ValueError(
            f"schema must be 1-63 letters, digits or underscores, not starting with a digit "
            f"or 'pg_', not {schema!r}"
        )
    return f'"{schema}"'


def lock_key(schema: str) -> int:
    """The advisory lock (a signed 64-bit key) held while migrating ``schema``."""
    digest = hashlib.sha256(f"fanloop.sessions.migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def connection_options(statement_timeout: float, existing: str | None) -> str:
    """The libpq ``options`` every connection starts with.

    ``synchronous_commit`` is on, so a write is on the server's disk when its call returns;
    the DSN's own ``options`` come next and may turn it off (see docs/sessions.md). Then every
    statement is bounded (``statement_timeout``, which also covers waiting for a lock), and a
    transaction left idle by a stalled client is ended by the server after the same time; these
    come last, so nothing in the DSN loosens them.
    """
    ms = max(1, math.ceil(statement_timeout * 1000))
    bounds = f"-c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}"
    return " ".join(x for x in ("-c synchronous_commit=on", existing, bounds) if x)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_URL_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#]*")
_KV_PASSWORD = re.compile(r"""(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:\\.|\S)*)""")


def redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``****`` (for messages and ``repr``).

    In a URL, everything between the first ``:`` of the user info and its last ``@`` is
    hidden (more than the password when the URL is odd, never less).

    Example:
        >>> redact("postgresql://kim:hunter2@db:5432/app?sslmode=require&password=x")
        'postgresql://kim:****@db:5432/app?sslmode=require&password=****'
        >>> redact("host=db user=kim password='a b' dbname=app")
        'host=db user=kim password=**** dbname=app'
    """
    scheme = _SCHEME.match(dsn)
    if scheme is None:
        return _KV_PASSWORD.sub(r"\1****", dsn)
    rest = dsn[scheme.end() :]
    info, at, host = rest.rpartition("@")
    if at and ":" in info:
        rest = f"{info.partition(':')[0]}:****@{host}"
    return scheme.group() + _URL_PASSWORD.sub(r"\1****", rest)


@record(frozen=True)
class Statements:
    """Every statement the store runs, with its schema filled in (built once per store)."""

    open: str
    read: str
    append: str
    touch: str
    count: str
    replace_head: str
    replace_clear: str
    insert_messages: str
    metadata_for_update: str
    metadata_set: str
    delete: str
    list: str
    exists: str
    add_receipt: str
    update_receipt: str
    get_receipt: str
    list_receipts: str
    list_receipts_with_status: str
    # The same writes reading their JSON from the staging table (see _pg_copy.py).
    append_staged: str
    insert_staged: str
    add_receipt_staged: str
    update_receipt_staged: str

    @classmethod
    def build(cls, s: str) -> Statements:
        """The statements for quoted schema ``s``."""
        sessions, messages, effects = (
            f"{s}.fanloop_sessions",
            f"{s}.fanloop_messages",
            f"{s}.fanloop_effects",
        )
        insert_messages = (
            f"INSERT INTO {messages} (session_id, idx, role, json) "
            "SELECT %(id)s, %(start)s::bigint + m.n - 1, m.role, "
            "convert_from(m.json, 'UTF8')::json "
            "FROM unnest(%(roles)s::text[], %(jsons)b::bytea[]) WITH ORDINALITY AS m(role, json, n)"
        )
        insert_staged = (
            f"INSERT INTO {messages} (session_id, idx, role, json) "
            "SELECT %(id)s, %(start)s::bigint + m.n - 1, m.role, "
            "convert_from(t.data, 'UTF8')::json "
            "FROM unnest(%(roles)s::text[]) WITH ORDINALITY AS m(role, n) "
            f"JOIN {STAGED} t ON t.n = m.n"
        )
        bump = (
            f"WITH bumped AS (UPDATE {sessions} SET message_count = %(end)s, "
            f"updated_at = {_NOW} WHERE id = %(id)s AND message_count = %(start)s "
            "RETURNING id) "
        )
        add_receipt = (
            f"INSERT INTO {effects} (session_id, call_id, turn, tool, arguments_hash, "
            "status, result, started_at, finished_at, resolution_note, attempt) "
            "VALUES (%s, %s, %s, %s, %s, %s, convert_from(%b::bytea, 'UTF8')::json, "
            "%s, %s, %s, %s) "
            "ON CONFLICT (session_id, call_id) DO NOTHING RETURNING call_id"
        )
        update_receipt = (
            f"UPDATE {effects} SET turn = %s, tool = %s, arguments_hash = %s, status = %s, "
            "result = convert_from(%b::bytea, 'UTF8')::json, started_at = %s, "
            "finished_at = %s, resolution_note = %s, attempt = %s "
            "WHERE session_id = %s AND call_id = %s AND status = %s RETURNING call_id"
        )
        result = "convert_from(%b::bytea, 'UTF8')::json"
        staged_result = f"(SELECT convert_from(t.data, 'UTF8')::json FROM {STAGED} t WHERE t.n = 1)"
        return cls(
            open=(
                f"INSERT INTO {sessions} (id, created_at, updated_at) "
                f"VALUES (%s, {_NOW}, {_NOW}) ON CONFLICT (id) DO NOTHING"
            ),
            # One statement (one snapshot): the session's row first (index -1), then each
            # message's JSON in pieces of PIECE bytes (see _pg_copy.read_record).
            read=(
                "COPY (WITH h AS (SELECT created_at, updated_at, metadata "
                f"FROM {sessions} WHERE id = %(id)s), "
                "m AS MATERIALIZED (SELECT idx, convert_to(json::text, 'UTF8') AS j "
                f"FROM {messages} WHERE session_id = %(id)s) "
                "SELECT -1::bigint, 0, h.created_at, h.updated_at, "
                "convert_to(h.metadata, 'UTF8') FROM h "
                f"UNION ALL SELECT m.idx, c.i, NULL, NULL, substring(m.j FROM c.i * {PIECE} + 1 "
                f"FOR {PIECE}) FROM m, generate_series(0, greatest(length(m.j) - 1, 0) / {PIECE}) "
                "AS c(i) ORDER BY 1, 2) TO STDOUT (FORMAT BINARY)"
            ),
            # One statement: the optimistic check and the rows, atomic without a BEGIN.
            append=bump + insert_messages.replace("FROM unnest", "FROM bumped, unnest"),
            touch=(
                f"UPDATE {sessions} SET updated_at = {_NOW} "
                "WHERE id = %(id)s AND message_count = %(start)s"
            ),
            count=f"SELECT message_count FROM {sessions} WHERE id = %s",
            replace_head=(
                f"UPDATE {sessions} SET message_count = %(end)s, updated_at = {_NOW} "
                "WHERE id = %(id)s"
            ),
            replace_clear=f"DELETE FROM {messages} WHERE session_id = %(id)s",
            insert_messages=insert_messages,
            metadata_for_update=f"SELECT metadata FROM {sessions} WHERE id = %s FOR UPDATE",
            metadata_set=(
                f"UPDATE {sessions} SET metadata = %s, updated_at = {_NOW} WHERE id = %s"
            ),
            delete=f"DELETE FROM {sessions} WHERE id = %s",
            list=(
                "SELECT s.id, s.created_at, s.updated_at, s.message_count, s.metadata, "
                f"(SELECT count(*) FROM {effects} e WHERE e.session_id = s.id "
                "AND e.status = 'started') "
                f'FROM {sessions} s ORDER BY s.updated_at DESC, s.id COLLATE "C"'
            ),
            exists=f"SELECT 1 FROM {sessions} WHERE id = %s",
            add_receipt=add_receipt,
            update_receipt=update_receipt,
            # One row (the receipt's columns, or NULLs) if the session exists, else none.
            # The receipts are copied out like the messages: a result of tens of MiB comes
            # back a piece at a time, not as one row that libpq and psycopg copy in one go.
            get_receipt=_receipts(sessions, effects, " WHERE e.call_id = %(call)s"),
            list_receipts=_receipts(sessions, effects, ""),
            list_receipts_with_status=_receipts(sessions, effects, " WHERE e.status = %(status)s"),
            append_staged=bump + insert_staged.replace("FROM unnest", "FROM bumped, unnest"),
            insert_staged=insert_staged,
            add_receipt_staged=add_receipt.replace(result, staged_result),
            update_receipt_staged=update_receipt.replace(result, staged_result),
        )
