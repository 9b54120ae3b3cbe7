"""Wire-building helpers shared by the providers: compact JSON and per-message caches.

A conversation is re-sent whole on every turn and only grows at its end, so each provider
keeps the JSON of every message it has encoded, keyed by the message's identity (messages are
frozen). The cache holds a weak reference: an entry lives exactly as long as its message.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..messages import INVALID_ARGUMENTS_KEY

__all__ = ["MessageCache", "ToolsCache", "dumps", "loads", "parse_arguments"]

_decode = json.JSONDecoder().decode


def loads(data: bytes) -> Any:
    """``json.loads`` for UTF-8 bytes, minus its encoding sniffing (this runs per delta)."""
    return _decode(data.decode())


dumps: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":")).encode
"""Compact JSON text (ASCII-only, so ``.encode()`` of the result is always valid UTF-8)."""

_loads = json.loads

K = TypeVar("K")


class MessageCache(Generic[K]):
    """Per-object memo of wire text, keyed by identity, evicted when the object dies."""

    __slots__ = ("__weakref__", "_entries", "_render")

    def __init__(self, render: Callable[[K], str]) -> None:
        self._render = render
        self._entries: dict[int, tuple[weakref.ref[Any], str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: K) -> str:
        """The wire text of ``obj``, rendered once per object."""
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        text = self._render(obj)
        entries = self._entries

        def evict(_ref: weakref.ref[Any], key: int = key) -> None:
            entries.pop(key, None)

        try:
            ref = weakref.ref(obj, evict)
        except TypeError:  # not weak-referenceable: render every time
            return text
        entries[key] = (ref, text)
        return text


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
        value = _loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {INVALID_ARGUMENTS_KEY: raw}
