"""Names a module exports but loads on first use (PEP 562 ``__getattr__`` and ``__dir__``).

A module keeps what only some programs need out of its own import::

    __getattr__, __dir__ = lazy(__name__, {"PostgresStore": "._postgres"})

Each name maps to the module that defines it, relative to the package of the module that
exports it (as in a ``from . import``). On first use the module is imported and the value kept
in the exporting module's namespace, so later uses are ordinary attribute look-ups.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy"]


def lazy(
    module: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``module`` that load ``names`` on first use."""

    def __getattr__(name: str) -> Any:
        source = names.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from importlib import import_module

        exporter = sys.modules[module]
        value = getattr(import_module(source, exporter.__package__), name)
        setattr(exporter, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module]), *names})

    return __getattr__, __dir__
