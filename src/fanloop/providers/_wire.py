"""Wire helpers shared by the providers: JSON in and out, per-message caches, and the checks
every value read from a server goes through.

A conversation is re-sent whole on every turn and only grows at its end, so each provider
keeps the JSON of every message it has encoded, keyed by the message's identity (messages are
frozen). The cache holds a weak reference: an entry lives exactly as long as its message.

Everything a server sends is untrusted: :func:`loads` bounds the work of decoding it, and the
``read_*`` helpers turn a value of the wrong type or range into :class:`Malformed` (a
``ValueError`` the providers report as :class:`~fanloop.errors.ResponseInvalid`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import weakref
from collections.abc import Callable, Iterable
from operator import is_
from typing import Any, Generic, TypeVar

from .._model_types import JOIN_FROM, JoinedTexts, ModelRequest
from .._slots import slot_of
from .._unicode import may_escape_surrogates, scrub, scrub_json
from ..errors import ResponseTooLarge
from ..messages import INVALID_ARGUMENTS_KEY

__all__ = [
    "MAX_CONTENT_CODINGS",
    "MAX_COUNT",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "Malformed",
    "MessageCache",
    "ResponseTooLarge",
    "ToolsCache",
    "content_codings",
    "dumps",
    "load_frame",
    "loads",
    "new_call_id",
    "parse_arguments",
    "read_call_id",
    "read_count",
    "read_name",
    "read_str",
    "short",
]

MAX_COUNT = 10**9
"""The largest token count one response may report; more is :class:`Malformed`."""

MAX_ID_CHARS = 256
"""Ids longer than this (tool calls, responses, requests) are not kept as the server sent them."""

MAX_NAME_CHARS = 256
"""Tool names longer than this are cut to this length (no tool has such a name, so the
fan-out answers the call with an unknown-tool error the model can act on)."""

MAX_CONTENT_CODINGS = 4
"""The most content codings one response may list in ``Content-Encoding`` (``identity``
aside); a header listing more than four times as many entries is refused without reading
them one by one."""

_BIG_JSON = 1 << 20
_MAX_JSON_TOKENS = 500_000
_ID = re.compile(rf"[!-~]{{1,{MAX_ID_CHARS}}}")  # printable ASCII, no spaces

_decoder = json.JSONDecoder()
_decode = _decoder.decode
_scan: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]
"""The decoder's own scanner: ``(value, end)`` of the JSON value at an index. ``decode``
around it matches a whitespace pattern before and after the value (two regex calls, more
than the scan of a small frame costs); a frame as servers send it has no such whitespace."""


class Malformed(ValueError):
    """A value from the server of the wrong type, shape or range."""


def load_frame(data: bytes | str) -> Any:
    """JSON from UTF-8 bytes (or text), minus ``json.loads``' encoding sniffing (this runs per
    delta), as decoded: a ``\\ud83d`` escape gives a lone surrogate, which the stream
    parsers join with the other half of its pair from the next event (see
    :class:`fanloop._unicode.Joiner`). Everything else wants :func:`loads`.

    Decoding time grows with the number of values, not only the size: a payload over 1 MiB
    holding more than 500,000 separators or containers is refused (:class:`ResponseTooLarge`)
    rather than held on the event loop for a noticeable time. Nesting too deep for the decoder
    is :class:`Malformed`.
    """
    text = data.decode() if isinstance(data, bytes) else data
    if len(text) > _BIG_JSON:
        tokens = text.count(",") + text.count(":") + text.count("[") + text.count("{")
        if tokens > _MAX_JSON_TOKENS:
            raise ResponseTooLarge(f"a JSON payload holding over {_MAX_JSON_TOKENS:,} values")
    try:
        try:
            value, end = _scan(text, 0)
        except StopIteration:  # no value at the start (whitespace, or not JSON)
            return _decode(text)  # (the decoder's own error, or the value after the space)
        if end == len(text):
            return value
        return _decode(text)  # whitespace after the value, or more after it (an error)
    except RecursionError:
        raise Malformed("JSON nested too deeply") from None


def content_codings(values: Iterable[str]) -> list[str]:
    """The content codings of a response, in the order they were applied: the entries of its
    ``Content-Encoding`` headers, lowercased, without ``identity`` and empty entries.

    Raises:
        ResponseTooLarge: more than :data:`MAX_CONTENT_CODINGS` codings (a server can list
            tens of thousands in a few hundred kilobytes of headers, and each one listed is a
            decoder stage), or more than four times as many entries.

    Example:
        >>> content_codings(["gzip", "identity, Deflate"])
        ['gzip', 'deflate']
    """
    entries = 0
    codings: list[str] = []
    for value in values:
        entries += value.count(",") + 1
        if entries > 4 * MAX_CONTENT_CODINGS:
            break
        for entry in value.split(","):
            coding = entry.strip().lower()
            if coding and coding != "identity":
                codings.append(coding)
    if entries > 4 * MAX_CONTENT_CODINGS or len(codings) > MAX_CONTENT_CODINGS:
        raise ResponseTooLarge(
            f"the response lists more content codings than the {MAX_CONTENT_CODINGS} accepted "
            "(Content-Encoding)"
        )
    return codings


def loads(data: bytes | str) -> Any:
    """:func:`load_frame`, then every string made valid Unicode: a surrogate escape that is
    not half of a pair becomes U+FFFD (``docs/security.md``). Costs one substring search
    when the payload holds no ``\\u`` escape."""
    value = load_frame(data)
    if may_escape_surrogates(data):
        return scrub_json(value)
    return value


def short(value: object, limit: int = MAX_ID_CHARS) -> str | None:
    """``value`` (as valid Unicode) if it is a string of at most ``limit`` characters, else
    ``None``."""
    return scrub(value) if type(value) is str and len(value) <= limit else None


def read_str(value: object, field: str) -> str:
    """A string field that may be absent (``None`` is ``""``); any other type is Malformed."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    raise Malformed(f"{field} is a {type(value).__name__}, not a string")


def read_count(value: object, field: str) -> int:
    """A token count: a non-negative integer up to :data:`MAX_COUNT` (``None`` is 0).

    An integral float (``5.0``) is accepted; strings, booleans, fractions, negatives, NaN and
    absurdly large values are :class:`Malformed`: a count that is not a count must never
    reach a budget.
    """
    if type(value) is int:
        if 0 <= value <= MAX_COUNT:
            return value
    elif value is None:
        return 0
    elif type(value) is float:
        if math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_COUNT:
            return int(value)
    else:
        raise Malformed(f"{field} is a {type(value).__name__}, not a token count")
    raise Malformed(f"{field} is out of range (0 to {MAX_COUNT:,})")


def new_call_id() -> str:
    """A fresh tool-call id for a server that sent none: unique across turns and processes."""
    return f"call_{os.urandom(12).hex()}"


def read_call_id(value: object) -> str:
    """The tool-call id the server sent, or a fresh one when it sent none usable.

    Kept: printable ASCII without spaces, at most :data:`MAX_ID_CHARS` characters. Anything
    else (missing, empty, not a string, too long, control characters) is replaced.
    """
    if type(value) is str and _ID.fullmatch(value):
        return value
    return new_call_id()


def read_name(value: object, field: str) -> str:
    """A tool name: a string of valid Unicode, cut to :data:`MAX_NAME_CHARS` characters."""
    name = scrub(read_str(value, field))
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS]


# The fields a provider's parts, usage and response are made with (``messages._build``): one
# set shared by every instance (a set per part and per response is an object per waiting run
# the collector walks). Frozen models never add to it; ``model_copy`` copies it first.
USAGE_SET = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
TEXT_SET = {"text", "citations"}
CALL_SET = {"id", "name", "arguments"}
ORIGIN_SET = {"provider", "api", "model", "raw"}
RESPONSE_SET = {
    "content",
    "stop_reason",
    "usage",
    "model",
    "provider",
    "raw_stop_reason",
    "origin",
    "stop_details",
    "response_id",
}


_encoder = json.JSONEncoder(separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON text (ASCII-only, so ``.encode()`` of the result is always valid UTF-8).

    What ``JSONEncoder.encode`` does, minus its Python layers (``iterencode`` makes a closure
    and reads nine settings on every call): the C encoder is made here, with a fresh table
    of the containers being encoded (a circular reference is a ``ValueError``, as there).
    """
    if _make_encoder is None or type(value) is str:  # (a string: encode's own short cut)
        return _encoder.encode(value)
    return "".join(
        _make_encoder({}, _default, _ascii, None, ":", ",", False, False, True)(value, 0)
    )


_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # (None: no C accelerator)
_ascii = json.encoder.encode_basestring_ascii
_default = _encoder.default  # (bound once: a bound method is an object a call)


K = TypeVar("K")


class MessageCache(Generic[K]):
    """Per-object memo of wire text, evicted when the object dies.

    A message keeps its text on itself (its ``__fanloop_wire__`` slot, with the cache that
    rendered it: one provider's text is not another's); any other object, in a table keyed by
    identity.
    """

    __slots__ = ("__weakref__", "_entries", "_render", "_token")

    def __init__(self, render: Callable[[K], str]) -> None:
        self._render = render
        self._token = next(_CACHES)
        self._entries: dict[int, _Entry] = {}

    def __len__(self) -> int:
        """The entries of the identity table (objects without a slot for their text)."""
        return len(self._entries)

    def texts(self, objs: Iterable[K], joined: JoinedTexts | None = None) -> list[str]:
        """The wire texts of ``objs`` that render to anything, in order, to be joined with
        commas: :meth:`get` for each.

        ``joined``: the run's memo of its conversation's texts (:func:`joined_memo` of its
        request). For a conversation (a tuple) of :data:`JOIN_FROM` messages or more, the
        texts of the messages the last request carried are taken from it as they are, when
        this one starts with those very objects; only the messages after them are looked at
        (a request carries the whole conversation, so this runs on every turn: without it,
        every message is).
        """
        if joined is None:
            return self._each(objs)
        token = self._token
        if type(objs) is not tuple or len(objs) < JOIN_FROM:
            joined.pop(token, None)  # (a conversation cut short: let the longer one go)
            return self._each(objs)
        kept = joined.get(token)
        if kept is not None and len(objs) >= len(kept[0]) and all(map(is_, objs, kept[0])):
            out = [*kept[1], *self._each(objs[len(kept[0]) :])]
        else:
            out = self._each(objs)
        joined[token] = (objs, tuple(out))  # (the texts themselves: no joined copy)
        return out

    def _each(self, objs: Iterable[K]) -> list[str]:
        """:meth:`get` for each of ``objs`` (skipping the empty), with the memo slot looked
        up once per class rather than once per object."""
        out: list[str] = []
        append = out.append
        token = self._token
        cls: Any = None
        slot: Any = None
        read: Any = None
        for obj in objs:
            if type(obj) is not cls:
                cls = type(obj)
                slot = slot_of(cls, "__fanloop_wire__")
                read = None if slot is None else slot.__get__
            if read is not None:  # :meth:`_get`'s memo hit, inline (150 -> 100 ns a message)
                try:
                    memo = read(obj)
                except AttributeError:  # never rendered: render it (not _get: a second raise)
                    text = self._render(obj)
                    slot.__set__(obj, (token, text))
                    if text:
                        append(text)
                    continue
                if memo[0] == token:
                    if memo[1]:
                        append(memo[1])
                    continue
            text = self._get(obj, slot)
            if text:
                append(text)
        return out

    def get(self, obj: K) -> str:
        """The wire text of ``obj``, rendered once per object."""
        return self._get(obj, slot_of(type(obj), "__fanloop_wire__"))

    def _get(self, obj: K, slot: Any) -> str:
        """:meth:`get`, given the memo slot of ``obj``'s class (``None``: it has none)."""
        if slot is not None:
            try:
                token, text = slot.__get__(obj)
            except AttributeError:  # never rendered
                pass
            else:
                if token == self._token:
                    return text  # type: ignore[no-any-return]
            text = self._render(obj)
            slot.__set__(obj, (self._token, text))  # (one store: a reader sees both or none)
            return text
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry() is obj:
            return entry.text
        text = self._render(obj)
        try:
            entry = _Entry(obj, _evict)
        except TypeError:  # not weak-referenceable: render every time
            return text
        entry.key = key
        entry.text = text
        entry.entries = self._entries
        self._entries[key] = entry
        return text


def add_joined(pieces: list[str], texts: list[str]) -> None:
    """Add ``texts`` to ``pieces`` with a comma between each two: one ``"".join`` of ``pieces``
    then copies each text once (joining the texts first would copy them twice)."""
    if texts:
        joined = [","] * (2 * len(texts) - 1)
        joined[::2] = texts
        pieces += joined


_CACHES = itertools.count()
"""Numbers the caches, so a slot's text names the one that made it (never reused, unlike an
``id``)."""


def joined_memo(request: Any) -> JoinedTexts | None:
    """The memo of its conversation's wire texts that the run which made ``request`` keeps
    (:class:`~fanloop._model_types.JoinedTexts`), or ``None``: a request made elsewhere, or
    one whose run is over (the request holds the memo by a weak reference)."""
    try:
        ref = _read_joined(request)
    except (AttributeError, TypeError):  # made by hand, or not a ModelRequest
        return None
    return ref()  # type: ignore[no-any-return]


_read_joined = slot_of(ModelRequest, "__fanloop_joined__").__get__


class _Entry(weakref.ref):  # type: ignore[type-arg]
    """A :class:`MessageCache` entry: the weak reference itself carries the text and where it
    is kept, so that its one shared callback evicts it (no closure, cell and tuple per
    message: with thousands of runs in flight those are objects the collector walks)."""

    __slots__ = ("entries", "key", "text")

    key: int
    text: str
    entries: dict[int, _Entry]


def _evict(entry: _Entry) -> None:
    entries = entry.entries
    if entries.get(entry.key) is entry:
        del entries[entry.key]


class ToolsCache:
    """Memo of the tools JSON, keyed by the identity of the request's tool tuples.

    An agent builds its tool specs once, so every request of its runs hits the same entry.
    """

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = 64) -> None:
        self._entries: dict[tuple[int, int], tuple[Any, Any, str]] = {}
        self._limit = limit

    def get(self, tools: Any, hosted: Any, render: Callable[[], str]) -> str:
        """The JSON for ``(tools, hosted)``, rendered by ``render`` on a miss."""
        key = (id(tools), id(hosted))
        entry = self._entries.get(key)
        if entry is not None and entry[0] is tools and entry[1] is hosted:
            return entry[2]
        text = render()
        if len(self._entries) >= self._limit:
            self._entries.clear()
        # The entry holds both tuples, so their ids cannot be reused while it exists.
        self._entries[key] = (tools, hosted, text)
        return text


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool-call arguments from their JSON text.

    Empty text is ``{}``. Text that is not a JSON object becomes
    ``{INVALID_ARGUMENTS_KEY: raw}``, which the fan-out answers with an error result.
    """
    if not raw or raw.isspace():
        return {}
    try:
        value = loads(raw)
    except (ValueError, ResponseTooLarge):
        value = None
    if isinstance(value, dict):
        return value
    return {INVALID_ARGUMENTS_KEY: raw}
