"""Valid Unicode at fanloop's edges: one rule for text that comes in from outside.

A Python ``str`` may hold surrogate code points (U+D800 to U+DFFF) that UTF-8 cannot encode:
JSON's ``\\ud83d`` escape decodes to one, and so does half of an emoji whose surrogate pair a
server split across two stream events. Such text cannot be stored (pydantic, SQLite and
PostgreSQL all refuse it), so fanloop makes it valid where it enters:

- a surrogate pair is joined into the one character it encodes, even when its halves arrive
  in two pieces (:class:`Joiner` holds a trailing high surrogate back for the next piece);
- every other (lone) surrogate becomes U+FFFD, the replacement character.

Everything here is linear in the text, with a fast path: a string that is ASCII (an O(1)
test in CPython) or holds no surrogate is returned as it is. Long strings are handled a
window at a time, so a worker thread doing this work lets go of the interpreter lock
between windows instead of holding the event loop.

See ``docs/sessions.md`` (what a session stores) and ``docs/security.md`` (the wire).
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ._slots import slot_of

__all__ = [
    "INLINE",
    "REPLACEMENT",
    "WINDOW",
    "Joiner",
    "holds_surrogates",
    "is_surrogate_free",
    "known_valid",
    "may_escape_surrogates",
    "off_loop",
    "scrub",
    "scrub_json",
    "scrub_model",
    "valid_models",
    "valid_now",
    "weight",
]

REPLACEMENT = "\ufffd"
"""What a lone surrogate becomes."""

INLINE = 64 * 1024
"""The heaviest value (see :func:`weight`) checked (or encoded, by the session stores) on the
event loop; a heavier one goes to a worker thread. About 0.1 ms of work; a hop to a worker
thread costs about 50 µs."""

WINDOW = 1 << 18
"""Characters handled per C call on long strings (about a millisecond of work)."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_ESCAPE_TEXT = re.compile(r"\\u[dD][89abcdefABCDEF]")

T = TypeVar("T")


def may_escape_surrogates(data: bytes | str) -> bool:
    """Whether JSON text may decode to a surrogate: only a ``\\uD800``-``\\uDFFF`` escape
    can (UTF-8 cannot encode one, so the strict decoder refuses it in raw bytes).

    Callers on a hot path test ``92 in data`` (a backslash: a one-byte search, several times
    cheaper than any longer one) first.
    """
    if isinstance(data, bytes):
        return _ESCAPE.search(data) is not None
    return _ESCAPE_TEXT.search(data) is not None


def is_surrogate_free(text: str) -> bool:
    """Whether ``text`` holds no surrogate code point."""
    if text.isascii():
        return True
    search = _SURROGATE.search
    size = len(text)
    if size <= WINDOW:
        return search(text) is None
    return all(search(text, i, i + WINDOW) is None for i in range(0, size, WINDOW))


def _fix(text: str) -> str:
    # UTF-16 with surrogatepass turns a pair of surrogate code points into the bytes of the
    # character they encode; decoding with "replace" turns each lone one into U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def scrub(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD.

    Returns ``text`` itself when there is nothing to change.

    Example:
        >>> scrub("a\\ud83d\\ude00 b\\ud800") == "a\\U0001f600 b\\ufffd"
        True
    """
    if text.isascii():
        return text
    search = _SURROGATE.search
    size = len(text)
    if size <= WINDOW:
        return text if search(text) is None else _fix(text)
    pieces: list[str] = []
    changed = False
    start = 0
    while start < size:
        end = min(start + WINDOW, size)
        if end < size and "\ud800" <= text[end - 1] <= "\udbff":
            end -= 1  # never cut a pair in two
        piece = text[start:end]
        if search(text, start, end) is not None:
            piece = _fix(piece)
            changed = True
        pieces.append(piece)
        start = end
    return "".join(pieces) if changed else text


# Type tuples for the walks' ``isinstance`` checks: ``list | tuple`` written in a call makes
# a new union object each time it runs, once per item walked.
_SEQUENCES = (list, tuple)
_SCALARS = (bool, int, float)
_SCALARS_AND_BYTES = (bool, int, float, bytes)


def _containers(value: Any) -> Any:
    """The children of a JSON-like container (or pydantic model), else ``None``."""
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, _SEQUENCES):
        return value
    fields = getattr(value, "__pydantic_fields__", None)
    if fields is not None and not known_valid(value):  # a vouched model: nothing to look at
        return [getattr(value, name) for name in fields]
    return None


def holds_surrogates(value: Any) -> bool:
    """Whether any string in ``value`` holds a surrogate: a string, a JSON-like tree of
    dicts, lists and tuples (keys included), or pydantic models holding them.

    The walk is iterative, so any depth is fine.
    """
    stack = [value]
    pop = stack.pop
    push = stack.extend
    while stack:
        item = pop()
        if type(item) is str:
            if not is_surrogate_free(item):
                return True
        elif item is None or isinstance(item, _SCALARS_AND_BYTES):
            continue
        else:
            children = _containers(item)
            if children is not None:
                push(children)
    return False


def scrub_json(value: T) -> T:
    """``value`` with :func:`scrub` applied to every string in it, dict keys included.

    ``value`` is returned unchanged (the same object) when no string needs a change;
    otherwise it is copied, dicts as dicts and lists and tuples as lists (as JSON would give
    them back). The walk is iterative, so any depth is fine.
    """
    if not holds_surrogates(value):
        return value
    return _rebuilt(value)  # type: ignore[no-any-return]


def _rebuilt(value: Any) -> Any:
    def copy(item: Any) -> Any:
        if type(item) is str:
            return scrub(item)
        if isinstance(item, dict):
            new: dict[Any, Any] = {}
            work.append((item, new))
            return new
        if isinstance(item, _SEQUENCES):
            out: list[Any] = []
            work.append((item, out))
            return out
        return item

    work: list[tuple[Any, Any]] = []
    root = copy(value)
    while work:
        source, target = work.pop()
        if isinstance(target, dict):
            for key, item in source.items():
                target[scrub(key) if type(key) is str else key] = copy(item)
        else:
            target.extend(copy(item) for item in source)
    return root


_VALID: dict[int, weakref.ref[Any]] = {}
"""The (frozen) models known to hold valid Unicode, by identity, for as long as they live: a
message checked on its way into a session is not scanned again by the store. A class with a
``__fanloop_valid__`` slot (messages, responses) keeps the mark on each object instead."""


def known_valid(model: Any) -> bool:
    """Whether :func:`scrub_model` already vouched for this very object."""
    slot = slot_of(type(model), "__fanloop_valid__")
    if slot is not None:
        try:
            return slot.__get__(model) is True
        except AttributeError:  # never marked
            return False
    entry = _VALID.get(id(model))
    return entry is not None and entry() is model


def vouch(model: Any) -> None:
    """Remember that the frozen ``model`` holds valid Unicode only (its maker made it so:
    e.g. a provider's turn decoded from a checked stream), so that no check walks it; a
    model holding it is still walked, but not into it."""
    slot = slot_of(type(model), "__fanloop_valid__")
    if slot is not None:  # on the object itself: no table entry, no reference to track
        slot.__set__(model, True)
        return
    key = id(model)
    try:  # (not contextlib.suppress: this runs once per turn and per checked message)
        # The key rides on the reference: one shared callback, no closure per model.
        ref = weakref.KeyedRef(model, _forget, key)
    except TypeError:  # not weak-referenceable: checked every time
        return
    _VALID[key] = ref


def forget_valid(model: Any) -> None:
    """Take back :func:`vouch` for ``model`` (its dicts may have been written to since)."""
    slot = slot_of(type(model), "__fanloop_valid__")
    if slot is not None:
        with contextlib.suppress(AttributeError):  # (never marked)
            slot.__delete__(model)
        return
    _VALID.pop(id(model), None)


def vouch_parsed(model: Any, *configured: str) -> None:
    """Vouch for a provider's turn that its parser decoded from frames none of which held a
    surrogate escape (:func:`may_escape_surrogates`; strict UTF-8 decoding yields none
    otherwise), so that appending it walks nothing. ``configured``: the strings it holds that
    came from configuration, not from the server (the model and provider names), checked here.
    """
    for text in configured:  # (a loop: no generator per turn)
        if not (text.isascii() or is_surrogate_free(text)):
            return
    vouch(model)


def _forget(ref: weakref.KeyedRef[int, Any]) -> None:
    if _VALID.get(ref.key) is ref:
        del _VALID[ref.key]


def scrub_model(model: T) -> T:
    """A frozen pydantic model with :func:`scrub` applied to every string in it (``model``
    itself when none needs a change).

    The copy is validated again from the model's (scrubbed) Python dump. The result is
    remembered (while it lives), so checking it again costs nothing.
    """
    if known_valid(model):
        return model
    if holds_surrogates(model):
        cls: Any = type(model)
        model = cls.model_validate(_rebuilt(model.model_dump()))  # type: ignore[attr-defined]
    vouch(model)
    return model


class Joiner:
    """Makes a stream of text pieces valid Unicode, piece by piece, so the pieces it returns
    join into the same text as :func:`scrub` of the whole.

    A piece that ends in a high surrogate keeps it back: the next piece may start with the
    low half of the same pair. :meth:`flush` ends the stream (a surrogate still held is lone:
    it becomes U+FFFD).

    Example:
        >>> joiner = Joiner()
        >>> joiner.push("ab\\ud83d")
        'ab'
        >>> joiner.push("\\ude00c") == "\\U0001f600c"
        True
        >>> joiner.push("d\\ud83d"), joiner.flush() == "\\ufffd"
        ('d', True)
    """

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = ""

    def push(self, text: str) -> str:
        """The valid text of ``text`` (what was held back before it, first)."""
        if self.held:
            text = self.held + text
            self.held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            self.held = text[-1]
            text = text[:-1]
        return scrub(text)

    def flush(self) -> str:
        """What is still held, as text: ``""`` or U+FFFD."""
        if not self.held:
            return ""
        self.held = ""
        return REPLACEMENT


_WEIGHT = 32  # the weight of one value besides its text


def weight(value: Any, limit: int, *, to_check: bool = False) -> int:
    """How heavy ``value`` is, counted until it passes ``limit`` (then ``limit + 1``).

    Strings count their characters, bytes their base64 size, every value 32 more. The walk
    stops as soon as the count passes ``limit``, so it costs at most ``limit / 32`` steps.
    ``to_check``: the weight of checking its text, in which a vouched model (see
    :func:`vouch`) weighs nothing more (as work of any other kind, it weighs what it holds).
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += _WEIGHT
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, bytes):
            total += len(item) * 4 // 3
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, _SEQUENCES):
            stack += item
        else:
            fields = getattr(item, "__pydantic_fields__", None)
            if fields is not None and not (to_check and known_valid(item)):
                stack += (getattr(item, name) for name in fields)
        if total > limit:
            return limit + 1
    return total


async def off_loop(heavy: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: in a worker thread when ``heavy``, else here (on the event loop)."""
    if heavy:
        from anyio import to_thread  # imported by the first call, not by `import fanloop`

        return await to_thread.run_sync(fn, *args)
    return fn(*args)


def _light_and_clean(models: Sequence[Any], limit: int) -> bool:
    """Whether ``models`` weigh at most ``limit`` to check (as :func:`weight` counts, with
    ``to_check``) and hold no surrogate (as :func:`holds_surrogates` looks): the two walks
    in one, the common case's only walk. It stops at the first surrogate, or as soon as the
    count passes ``limit`` (before searching the string that passes it); ``False`` then
    leaves the answer to those two.
    """
    total = 0
    stack = list(models)
    pop = stack.pop
    check = is_surrogate_free
    while stack:
        item = pop()
        total += _WEIGHT
        cls = type(item)
        if cls is str:
            total += len(item)
            if total > limit or not (item.isascii() or check(item)):
                return False
            continue
        if cls is tuple or cls is list:
            stack += item
        elif cls is dict:
            stack += item.keys()
            stack += item.values()
        elif item is None or cls is bool or cls is int or cls is float:
            continue
        elif isinstance(item, str):  # a subclass (an enum member, say): counted, not searched
            total += len(item)  # (as holds_surrogates looks only at str itself)
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, _SEQUENCES):
            stack += item
        elif isinstance(item, bytes):
            total += len(item) * 4 // 3
        elif not isinstance(item, _SCALARS):
            fields = getattr(item, "__pydantic_fields__", None)
            if fields is not None and not known_valid(item):
                for name in fields:  # (a loop: no generator per model walked)
                    stack.append(getattr(item, name))
        if total > limit:
            return False
    return True


def valid_now(models: Sequence[T]) -> bool:
    """Whether ``models`` are valid Unicode as they stand, told without leaving the loop:
    each is known to be (:func:`vouch`), or all are light and clean (and are vouched for
    now). ``False`` leaves them to :func:`valid_models` (one may need a change, or be too
    heavy to walk here)."""
    for model in models:  # (a loop: no generator per append)
        if not known_valid(model):
            break
    else:
        return True
    if _light_and_clean(models, INLINE):
        for model in models:
            vouch(model)
        return True
    return False


async def valid_models(models: Sequence[T]) -> tuple[T, ...]:
    """``models`` (messages, tool results) with their text made valid Unicode (each one that
    needs no change is returned itself); heavy ones are checked in a worker thread.

    Each model is walked once (and then remembered: see :func:`vouch`), when it is light and
    clean (the common case); else once more to weigh it and once to scrub it.
    """
    if valid_now(models):
        return tuple(models)
    heavy = sum(weight(m, INLINE, to_check=True) for m in models) > INLINE
    return await off_loop(heavy, lambda: tuple(scrub_model(m) for m in models))  # type: ignore[no-any-return]
