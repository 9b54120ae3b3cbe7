"""The statement check of the SQL tools: one read-only statement that calls nothing with effects.

The statement is split into tokens the way the database's own lexer splits it (PostgreSQL with
``standard_conforming_strings=on``, which the PostgreSQL executor sets on every session, or
SQLite), so a name hidden in a string, a comment or a quoted identifier is seen exactly as the
server will see it. The lexer is linear and the statement is capped at
:data:`MAX_STATEMENT_CHARS`. Anything it does not fully understand (an unterminated string or
comment, unbalanced parentheses, a ``U&`` escape) is refused rather than guessed at.

The check is the first of two layers, never the only one: the executors also run every
statement in a read-only session that refuses to write (see :mod:`fanloop.tools.sql`).
"""

from __future__ import annotations

import functools
import re
from typing import Literal, NamedTuple

from .._record import record
from ..errors import ToolError

__all__ = [
    "MAX_STATEMENT_CHARS",
    "WRAPPABLE",
    "Dialect",
    "Statement",
    "check_statement",
    "denied_function",
    "leading_command",
    "tokenize",
]

Dialect = Literal["postgres", "sqlite"]

MAX_STATEMENT_CHARS = 100_000
"""The longest statement checked (and run), in characters."""

_COMMANDS: dict[Dialect | None, frozenset[str]] = {
    "postgres": frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW"}),
    "sqlite": frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"}),
    None: frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW", "PRAGMA"}),
}
WRAPPABLE = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
"""Commands whose rows can be read through a subquery (and so cut on the server)."""

# Unquoted keywords that have no place in a read-only statement: writing commands (also inside
# WITH and EXPLAIN), SELECT ... INTO (creates a table), EXPLAIN ANALYZE (runs the statement).
_DENIED_WORDS = (
    "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "CREATE", "DROP", "ALTER", "TRUNCATE",
    "GRANT", "REVOKE", "ATTACH", "DETACH", "VACUUM", "REINDEX", "COPY", "CALL", "INTO",
    "ANALYZE", "ANALYSE", "EXECUTE", "DECLARE", "PREPARE", "LOCK", "NOTIFY", "LISTEN",
    "UNLISTEN", "REFRESH", "CLUSTER", "CHECKPOINT", "DISCARD",
)  # fmt: skip
_ROW_LOCKS = frozenset({"UPDATE", "SHARE", "NO", "KEY"})  # FOR UPDATE / SHARE / NO KEY / KEY

# Functions with effects beyond reading rows: server and session control, locks, files, large
# objects, other connections, functions that run SQL given as text, index and cache upkeep,
# and SQLite's extension loading. Matched against the lower-cased name before a "(".
_DENIED_FUNCTIONS = re.compile(
    r"""
      pg_(cancel|terminate)_backend | pg_reload_conf | pg_rotate_logfile.* | pg_promote
    | pg_switch_(wal|xlog) | pg_create_.* | pg_drop_.* | pg_copy_.* | pg_(start|stop)_backup
    | pg_backup_.* | pg_(wal|xlog)_replay_.* | pg_log_.* | pg_logical_.* | .*replication.*
    | .*slot.* | .*reset.* | pg_(try_)?advisory_.* | pg_notify | set_config | pg_sleep.*
    | pg_import_system_collations | pg_nextoid | pg_stop_making_pinned_objects
    | pg_extension_config_dump | binary_upgrade_.* | nextval | setval | setseed
    | pg_read_.* | pg_ls_.* | pg_stat_file | pg_file_.* | pg_logdir_ls | lo_.* | loread
    | lowrite | pg_hba_file_rules | pg_ident_file_mappings | pg_show_all_file_settings
    | dblink.* | pg_background_.* | .*_to_xml.* | ts_stat | ts_rewrite
    | gin_clean_pending_list | brin_.*summarize.* | .*evict.* | pg_prewarm
    | pg_truncate_visibility_map | pg_(clear|set|restore)_.*
    | load_extension | fts3_tokenizer | readfile | writefile | edit | fsdir | zipfile
    """,
    re.VERBOSE,
)
# Relations that read server files or hold secrets (password hashes, foreign-server passwords).
_DENIED_RELATIONS = frozenset(
    {
        "pg_file_settings", "pg_hba_file_rules", "pg_ident_file_mappings", "pg_authid",
        "pg_shadow", "pg_user_mapping", "pg_user_mappings",
    }
)  # fmt: skip

# SQLite pragmas that only read: with an argument (a table or index name, a row limit) or
# without one (a setting's value).
PRAGMAS_WITH_ARG = frozenset(
    {
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
    }
)  # fmt: skip
PRAGMAS_NO_ARG = PRAGMAS_WITH_ARG | frozenset(
    {
        "function_list", "pragma_list", "collation_list", "database_list", "compile_options",
        "module_list", "user_version", "application_id", "schema_version", "data_version",
        "encoding", "page_size", "page_count", "freelist_count", "journal_mode", "foreign_keys",
        "query_only", "auto_vacuum", "cache_size", "synchronous", "busy_timeout",
    }
)  # fmt: skip

# One token per match; every alternative is linear (possessive, and the alternatives that can
# start at one character are tried in the order the server's lexer prefers them).
_ID_START = r"A-Za-z_\x80-\U0010ffff"
_ID_CONT = _ID_START + r"0-9$"
_COMMON = rf"""
      (?P<space>[ \t\n\r\f\v]++)
    | (?P<block>/\*)
    | (?P<uescape>[uU]&['"])
    | (?P<nul>\x00)
    | {{prefixed}}
    | (?P<word>[{_ID_START}][{_ID_CONT}]*+)
    | (?P<number>(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][+-]?[0-9]++)?)
    | (?P<string>'[^']*+(?:''[^']*+)*+')
    | (?P<ident>"[^"]*+(?:""[^"]*+)*+")
    | (?P<open>['"])
    | (?P<other>.)
"""
# The token patterns (large Unicode classes) are compiled on first use, not when the SQL tool
# is imported: about 10 ms of every CLI start otherwise.
_PG_TOKEN = _COMMON.format(
    prefixed=r"""
          (?P<comment>--[^\n\r]*+)
        | (?P<string2>[eE]'[^'\\]*+(?:(?:\\.|'')[^'\\]*+)*+' | [bBxX]'[^']*+')
        | (?P<open2>[eEbBxX]')
        | (?P<dollar>\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*+)?\$)
        | (?P<param>\$[0-9]++)
        """
)
_SQLITE_TOKEN = _COMMON.format(
    prefixed=r"""
          (?P<comment>--[^\n]*+)
        | (?P<string2>[xX]'[^']*+')
        | (?P<open2>[xX]')
        | (?P<ident2>`[^`]*+(?:``[^`]*+)*+`|\[[^\]]*+\])
        | (?P<open3>[`\[])
        """
)


@functools.cache
def _token_pattern(postgres: bool) -> re.Pattern[str]:
    return re.compile(_PG_TOKEN if postgres else _SQLITE_TOKEN, re.VERBOSE | re.DOTALL)


_COMMENT_MARK = re.compile(r"/\*|\*/")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class Token(NamedTuple):
    """One token: ``kind`` is word, ident, string, number, param or other; ``name`` is the name
    a word or quoted identifier stands for (words folded to lower case as the server folds
    them)."""

    kind: str
    text: str
    name: str = ""


@record(frozen=True)
class Statement:
    """A checked statement.

    Attributes:
        text: the statement without a trailing ``;``.
        command: its first keyword, upper-case (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW,
            PRAGMA).
    """

    text: str
    command: str


def _refuse(message: str) -> ToolError:
    return ToolError(f"sql_query refused the statement: {message}")


def tokenize(sql: str, dialect: Dialect = "postgres") -> list[Token]:
    """Split ``sql`` into tokens, without whitespace and comments, as the database would.

    Raises:
        ToolError: an unterminated string, identifier or comment, a ``U&`` escape or a NUL.
    """
    postgres = dialect == "postgres"
    match_token = _token_pattern(postgres).match
    tokens: list[Token] = []
    append = tokens.append
    pos, end = 0, len(sql)
    while pos < end:
        match = match_token(sql, pos)
        assert match is not None  # "other" matches any character
        kind, text, pos = match.lastgroup, match.group(), match.end()
        if kind == "word":
            append(Token("word", text, text.translate(_ASCII_LOWER)))
        elif kind in ("space", "comment"):
            pass
        elif kind in ("number", "other", "param"):
            append(Token(kind, text))
        elif kind in ("string", "string2"):
            append(Token("string", text))
        elif kind == "ident":
            append(Token("ident", text, text[1:-1].replace('""', '"')))
        elif kind == "ident2":
            append(Token("ident", text, text[1:-1].replace("``", "`")))
        elif kind == "block":
            pos = _skip_block_comment(sql, pos, nested=postgres)
        elif kind == "dollar":
            close = sql.find(text, pos)
            if close < 0:
                raise _refuse(f"the dollar-quoted string {text} is not closed.")
            pos = close + len(text)
            append(Token("string", sql[match.start() : pos]))
        elif kind == "uescape":
            raise _refuse("U&'...' and U&\"...\" escapes are not accepted; write the text plainly.")
        elif kind == "nul":
            raise _refuse("it contains a NUL character.")
        else:  # open, open2: a quote that does not close
            raise _refuse(f"the quoted text starting with {text} is not closed.")
    return tokens


def leading_command(sql: str, dialect: Dialect = "postgres") -> str:
    """The first keyword of ``sql`` (upper-case), past whitespace and comments; ``""`` if the
    statement does not start with a word. Reads no further than that word."""
    postgres = dialect == "postgres"
    match_token = _token_pattern(postgres).match
    pos, end = 0, min(len(sql), MAX_STATEMENT_CHARS)
    while pos < end:
        match = match_token(sql, pos)
        assert match is not None
        kind, pos = match.lastgroup, match.end()
        if kind == "block":
            try:
                pos = _skip_block_comment(sql, pos, nested=postgres)
            except ToolError:
                return ""
        elif kind not in ("space", "comment"):
            return match.group().upper() if kind == "word" else ""
    return ""


def _skip_block_comment(sql: str, pos: int, *, nested: bool) -> int:
    """The position after the block comment whose ``/*`` ends at ``pos`` (PostgreSQL nests
    them)."""
    depth, at = 1, pos
    while True:
        match = _COMMENT_MARK.search(sql, at)
        if match is None:
            raise _refuse("a /* comment is not closed.")
        at = match.end()
        if match.group() == "*/":
            depth -= 1
            if depth == 0:
                return at
        elif nested:
            depth += 1


def denied_function(name: str) -> bool:
    """Whether a function of this name is refused (it changes state, reads server files, runs
    SQL given as text or reaches another server)."""
    return _DENIED_FUNCTIONS.fullmatch(name.lower()) is not None


def check_statement(sql: str, dialect: Dialect | None = None) -> Statement:
    """Check that ``sql`` is one read-only statement for ``dialect`` (``None``: either).

    Raises:
        ToolError: with what was refused and why, in words the model can act on.
    """
    if len(sql) > MAX_STATEMENT_CHARS:
        raise _refuse(f"it is longer than {MAX_STATEMENT_CHARS} characters.")
    tokens = tokenize(sql, "sqlite" if dialect == "sqlite" else "postgres")
    while tokens and tokens[-1] == ("other", ";", ""):
        tokens.pop()
    if not tokens:
        raise ToolError("The SQL statement is empty.")
    if ("other", ";", "") in tokens:
        raise ToolError("sql_query runs exactly one statement; send the statements one by one.")
    _check_parentheses(tokens)
    first = tokens[0]
    command = first.name.upper() if first.kind == "word" else first.text
    allowed = _COMMANDS[dialect]
    if command not in allowed:
        names = ", ".join(sorted(allowed))
        raise ToolError(
            f"sql_query only runs read-only statements ({names}); this one starts with {command!r}."
        )
    _check_words(tokens)
    if command == "PRAGMA":
        _check_pragma(tokens)
    end = sql.rstrip()
    while end.endswith(";"):
        end = end[:-1].rstrip()
    return Statement(end, command)


def _check_parentheses(tokens: list[Token]) -> None:
    depth = 0
    for token in tokens:
        if token.kind == "other" and token.text in ("(", ")"):
            depth += 1 if token.text == "(" else -1
            if depth < 0:
                break
    if depth != 0:
        raise _refuse("its parentheses are not balanced.")


def _check_words(tokens: list[Token]) -> None:
    words = {t.name.upper() for t in tokens if t.kind == "word"}
    denied = [word for word in _DENIED_WORDS if word in words]
    if denied:
        raise ToolError(
            f"sql_query only runs read-only statements; this one contains {', '.join(denied)} "
            '(a column of such a name must be quoted: "name").'
        )
    for i, token in enumerate(tokens):
        if token.kind not in ("word", "ident"):
            continue
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        opens = following is not None and following.kind == "other" and following.text == "("
        if opens and denied_function(token.name):
            raise _refuse(
                f"it calls {token.name}(), which changes server or session state, reads server "
                "files or runs other SQL; sql_query only reads rows."
            )
        if token.name.lower() in _DENIED_RELATIONS:
            raise _refuse(f"{token.name} holds server files or secrets.")
        if (
            token.kind == "word"
            and token.name == "for"
            and following is not None
            and following.kind == "word"
            and following.name.upper() in _ROW_LOCKS
        ):
            raise _refuse("FOR UPDATE / FOR SHARE take row locks; sql_query only reads.")


def _check_pragma(tokens: list[Token]) -> None:
    texts = [t.text for t in tokens]
    if "=" in texts:
        raise ToolError("PRAGMA assignments change settings; sql_query only reads.")
    names = [t for t in tokens[1:] if t.kind in ("word", "ident")]
    if len(names) >= 2 and texts[2:3] == ["."]:  # PRAGMA schema.name
        names = names[1:]
    name = names[0].name.lower() if names else ""
    has_arg = "(" in texts
    if name not in (PRAGMAS_WITH_ARG if has_arg else PRAGMAS_NO_ARG):
        shown = f"{name}(...)" if has_arg else name
        raise ToolError(
            f"PRAGMA {shown} may change a setting; sql_query only runs reading pragmas "
            f"({', '.join(sorted(PRAGMAS_WITH_ARG))} with an argument, or a setting's name)."
        )
