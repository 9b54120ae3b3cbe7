"""JSON for large values, a bounded piece of work at a time.

pydantic's ``model_dump_json`` and ``model_validate_json``, like ``json.dumps`` and
``json.loads``, do their whole job in one call that holds the interpreter lock: moved to a
worker thread, encoding a 50 MiB message still stops the event loop for the whole call (about
half a second). The two functions here do the same work in pieces: no call into C handles
more than :data:`~fanloop._unicode.WINDOW` characters of one string, so a worker thread
running them lets the event loop run between pieces. They are slower than the one-shot calls
and are only used past a size (see ``_codec.py``).

- :func:`dump` writes what ``model_dump(mode="json")`` gives (dicts with string keys, lists,
  tuples, strings, numbers, booleans, ``None``) as compact UTF-8 JSON; long strings are
  escaped a window at a time.
- :func:`load` reads any JSON text. Its string literals longer than :data:`LONG` bytes are cut
  out and decoded a window at a time (never inside an escape, a UTF-8 sequence or a surrogate
  pair); the rest, with a placeholder where each was, is decoded in one call. The stored text
  is untrusted: malformed JSON is a ``ValueError``, and so is a lone surrogate escape (as
  pydantic refuses it); nothing recurses on the input.

What stays one call: the final join of a long string (a copy), and the rest of a document
once its long strings are out, which is large only for hundreds of thousands of small values.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from .._unicode import WINDOW, holds_surrogates, is_surrogate_free, may_escape_surrogates

__all__ = ["LONG", "dump", "load"]

LONG = 64 * 1024
"""String literals longer than this (in bytes) are decoded apart, a window at a time."""

_escape: Callable[[str], str] = json.encoder.encode_basestring
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_decode = json.JSONDecoder().decode
_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)  # a string literal's body
_KEY = re.compile(rb"[ \t\r\n]*:")  # what follows a string literal that is an object key
_END: Any = object()
_QUOTE = 0x22
_BACKSLASH = 0x5C


# -- writing -----------------------------------------------------------------------------------


def dump(value: Any, *, allow_nan: bool = False, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON (non-ASCII characters as they are): the bytes of
    ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, with the same options.

    Args:
        value: the value.
        allow_nan: write floats that are not finite as ``json.dumps`` does (``NaN``,
            ``Infinity``), instead of refusing them.
        sort_keys: write the members of each object in the order of their keys.

    Raises:
        TypeError: a value JSON cannot hold (or a key JSON cannot name).
        ValueError: a float that is not finite (unless ``allow_nan``).
        UnicodeEncodeError: a string holding a lone surrogate.
    """
    out: list[bytes] = []
    write = out.append
    frames: list[list[Any]] = []  # [iterator, is_object, first]
    item = value
    while True:
        if isinstance(item, str):
            _write_str(item, write)
        elif item is None:
            write(b"null")
        elif item is True:
            write(b"true")
        elif item is False:
            write(b"false")
        elif isinstance(item, int):
            write(int.__repr__(item).encode())
        elif isinstance(item, float):
            if math.isfinite(item):
                write(float.__repr__(item).encode())
            elif allow_nan:
                write(b"NaN" if item != item else b"Infinity" if item > 0 else b"-Infinity")
            else:
                raise ValueError(f"{item!r} cannot be written as JSON")
        elif isinstance(item, dict):
            write(b"{")
            members = sorted(item.items()) if sort_keys else item.items()
            frames.append([iter(members), True, True])
        elif isinstance(item, list | tuple):
            write(b"[")
            frames.append([iter(item), False, True])
        else:
            raise TypeError(f"a {type(item).__name__} cannot be written as JSON")
        while frames:
            frame = frames[-1]
            following = next(frame[0], _END)
            if following is _END:
                write(b"}" if frame[1] else b"]")
                frames.pop()
                continue
            if frame[2]:
                frame[2] = False
            else:
                write(b",")
            if frame[1]:
                key, item = following
                _write_str(key if isinstance(key, str) else _key(key, allow_nan), write)
                write(b":")
            else:
                item = following
            break
        else:
            return b"".join(out)


def _key(key: Any, allow_nan: bool) -> str:
    """An object key that is not a string, named as ``json.dumps`` names it."""
    if key is True or key is False or key is None:
        return "true" if key is True else "false" if key is False else "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        if math.isfinite(key):
            return float.__repr__(key)
        if allow_nan:
            return "NaN" if key != key else "Infinity" if key > 0 else "-Infinity"
        raise ValueError(f"{key!r} cannot be written as JSON")
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _write_str(text: str, write: Callable[[bytes], Any]) -> None:
    if len(text) <= WINDOW:
        write(_escape(text).encode())
        return
    write(b'"')
    for start in range(0, len(text), WINDOW):
        write(_escape(text[start : start + WINDOW])[1:-1].encode())
    write(b'"')


# -- reading -----------------------------------------------------------------------------------


def load(data: bytes, *, surrogates: bool = False) -> Any:
    """The value of the JSON text ``data`` (UTF-8).

    Args:
        data: the text.
        surrogates: keep what lone surrogate escapes decode to, as ``json.loads`` does,
            instead of refusing them.

    Raises:
        ValueError: ``data`` is not valid JSON, or not UTF-8, or holds a lone surrogate
            escape (unless ``surrogates``).
    """
    spans = _long_strings(data)
    if not spans:
        return _load_whole(data, surrogates)
    nonce = f"\x00{secrets.token_hex(16)}:"
    values: dict[str, str] = {}
    pieces: list[bytes] = []
    position = 0
    for number, (start, end) in enumerate(spans):
        key = f"{nonce}{number}"
        values[key] = _string(data, start + 1, end - 1, surrogates)
        pieces += (data[position:start], json.dumps(key).encode())
        position = end
    pieces.append(data[position:])
    tree = _load_whole(b"".join(pieces), surrogates)
    return _put_back(tree, values)


def _load_whole(data: bytes, surrogates: bool) -> Any:
    text = data.decode()
    try:
        value = _decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not surrogates and may_escape_surrogates(text) and holds_surrogates(value):
        raise ValueError("the JSON text holds a lone surrogate escape")
    return value


def _long_strings(data: bytes) -> list[tuple[int, int]]:
    """Where the string literals longer than :data:`LONG` bytes that are values (not object
    keys) start and end (the quotes included)."""
    spans: list[tuple[int, int]] = []
    size = len(data)
    find = data.find
    body = _BODY.match
    position = 0
    while (start := find(b'"', position)) >= 0:
        end = start + 1
        while True:
            stop = body(data, end, min(end + WINDOW, size))
            assert stop is not None  # the pattern matches the empty string
            reached = stop.end()
            if reached >= size:
                raise ValueError("a JSON string that never ends")
            if data[reached] == _QUOTE:
                break
            if reached == end:  # a backslash that ends the text
                raise ValueError("a JSON string that never ends")
            end = reached  # stopped at the window's edge (maybe before a cut escape): go on
        end = reached
        if end - start - 1 > LONG and _KEY.match(data, end + 1) is None:
            spans.append((start, end + 1))
        position = end + 1
    return spans


def _backslashes_before(data: bytes, floor: int, position: int) -> int:
    """How many backslashes stand right before ``position`` (not counting before ``floor``)."""
    window = data[max(floor, position - 64) : position]
    count = len(window) - len(window.rstrip(b"\\"))
    if count == len(window) and position - 64 > floor:
        window = data[floor:position]
        count = len(window) - len(window.rstrip(b"\\"))
    return count


def _high(escape: bytes) -> bool:
    return escape[:3] in (b"\\ud", b"\\uD") and escape[3:4] in b"89abAB" and len(escape) == 6


def _low(escape: bytes) -> bool:
    return escape[:3] in (b"\\ud", b"\\uD") and escape[3:4] in b"cdefCDEF" and len(escape) == 6


def _cut(data: bytes, floor: int, position: int) -> int:
    """A place at or before ``position`` (and after ``floor``, a place already safe) where a
    string literal's body can be cut: not inside a UTF-8 sequence, an escape, or between the
    two escapes of a surrogate pair (``floor`` itself when there is none)."""
    while position > floor and 0x80 <= data[position] < 0xC0:
        position -= 1
    if _backslashes_before(data, floor, position) % 2:
        position -= 1  # "\x" would be cut after its backslash
    for start in range(max(floor, position - 5), position):
        if (
            data[start] == _BACKSLASH
            and data[start + 1 : start + 2] == b"u"
            and _backslashes_before(data, floor, start) % 2 == 0
        ):
            position = start  # "\uXXXX" would be cut
            break
    if (
        position - 6 >= floor
        and _low(data[position : position + 6])
        and _high(data[position - 6 : position])
        and _backslashes_before(data, floor, position - 6) % 2 == 0
    ):
        position -= 6
    return position


def _string(data: bytes, start: int, end: int, surrogates: bool) -> str:
    """The decoded body ``data[start:end]`` of a string literal, a window at a time."""
    pieces: list[str] = []
    while start < end:
        reach = WINDOW
        cut = start
        while cut <= start:  # no safe place in reach (only with a tiny window): reach further
            cut = end if end - start <= reach else _cut(data, start, start + reach)
            reach *= 2
        pieces.append(_piece(data[start:cut], surrogates))
        start = cut
    return "".join(pieces)


def _piece(body: bytes, surrogates: bool) -> str:
    text = (body + b'"').decode()
    value, stop = _scanstring(text, 0, True)
    if stop != len(text):
        raise ValueError("a JSON string ends early")
    if not surrogates and may_escape_surrogates(body) and not is_surrogate_free(value):
        raise ValueError("the JSON text holds a lone surrogate escape")
    return value


def _put_back(tree: Any, values: dict[str, str]) -> Any:
    """``tree`` with each placeholder string replaced by its value (each used once)."""
    if type(tree) is str:
        tree = values.pop(tree, tree)
    stack = [tree]
    while stack:
        node = stack.pop()
        items: Iterator[tuple[Any, Any]]
        if type(node) is dict:
            items = iter(node.items())
        elif type(node) is list:
            items = enumerate(node)
        else:
            continue
        for key, item in items:
            if type(item) is str:
                if item in values:
                    node[key] = values.pop(item)
            elif type(item) is dict or type(item) is list:
                stack.append(item)
    if values:
        raise ValueError("a long JSON string was not where it was cut out")
    return tree
