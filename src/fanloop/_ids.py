"""Where fanloop's own ids come from: run ids and the tool-call ids it invents.

Random by default (unique across runs and processes). A workflow engine that replays a run
(see :mod:`fanloop.durable`) needs the same ids on every replay: it installs a deterministic
source for the code it runs with :func:`id_source`.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

__all__ = ["IdKind", "counter_source", "id_source", "new_id"]

IdKind = Literal["run", "call"]

_source: contextvars.ContextVar[Callable[[IdKind], str] | None] = contextvars.ContextVar(
    "fanloop_id_source", default=None
)


def new_id(kind: IdKind) -> str:
    """A new run id (16 hex digits) or tool-call id (``call_`` and 24 hex digits)."""
    source = _source.get()
    if source is not None:
        return source(kind)
    if kind == "run":
        return os.urandom(8).hex()
    return f"call_{os.urandom(12).hex()}"


@contextmanager
def id_source(source: Callable[[IdKind], str]) -> Iterator[None]:
    """Make ids with ``source`` in this task (and the tasks it starts) for the block."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def counter_source(seed: str) -> Callable[[IdKind], str]:
    """Ids derived from ``seed`` and a counter: the same sequence on every replay that asks
    for them in the same order."""
    counter = itertools.count(1)

    def make(kind: IdKind) -> str:
        digest = uuid.uuid5(uuid.NAMESPACE_URL, f"{seed}/{next(counter)}").hex
        return digest[:16] if kind == "run" else f"call_{digest[:24]}"

    return make
