"""``httpcore2`` imported without ``trio``, which it loads only to run under ``trio``.

``httpcore2`` (under ``httpx2``'s own transport) imports ``trio`` at its import whenever
``trio`` is installed, for the locks and events it uses when a request runs under ``trio``.
That import costs 55-60 ms, more than a third of the time ``fanloop run`` takes before its
first request, in a process that runs on ``asyncio``. ``trio`` is often installed without being
used (``selenium``, for one, requires it).

:func:`trio_on_first_use` hands ``httpcore2`` a stand-in for ``trio`` while it is imported:
the stand-in imports ``trio`` the first time ``httpcore2`` uses it, so a run under ``trio`` works
as before (the stand-in then forwards every attribute), and a run under ``asyncio`` never loads
it. Nothing changes where ``trio`` is already imported, is not installed, or ``httpcore2`` is
already imported.

Only the CLI uses it, at start-up. While the block runs, the stand-in is in ``sys.modules``,
where every thread sees it: a thread of the same program importing ``trio`` at that moment
would get the stand-in, and ``from trio.lowlevel import ...`` fails on it. A library cannot
know what its host's other threads do; the CLI's process runs nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["trio_on_first_use"]


class _Trio(types.ModuleType):
    """Stands for ``trio`` in ``httpcore2``: the real module is imported on first use."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import machinery's and copy's questions
            raise AttributeError(name)
        if sys.modules.get("trio") is self:  # used during the import itself
            del sys.modules["trio"]
        real = importlib.import_module("trio")
        for holder in ("httpcore2._synchronization", "httpcore2._backends.trio"):
            module = sys.modules.get(holder)
            if module is not None and module.__dict__.get("trio") is self:
                module.trio = real  # type: ignore[attr-defined]  # from now on, directly
        return getattr(real, name)


@contextmanager
def trio_on_first_use() -> Iterator[None]:
    """Within this block, ``import trio`` gives the stand-in (see the module's docstring)."""
    if (
        "trio" in sys.modules
        or "httpcore2" in sys.modules
        or importlib.util.find_spec("trio") is None
    ):
        yield
        return
    stand_in = _Trio("trio")
    sys.modules["trio"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("trio") is stand_in:
            del sys.modules["trio"]
