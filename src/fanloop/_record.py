"""Dataclasses whose ``__eq__``, ``__hash__`` and ``__repr__`` are shared, not compiled per class.

The dataclass machinery writes each method it adds as source text and compiles it, class by
class: a frozen dataclass with equality and a repr costs about a millisecond to define on
Python 3.11, most of it in those compiles, and ``import fanloop`` defines dozens. A class
declared ``@dataclass(..., eq=False, repr=False)`` under :func:`by_fields` gets the three
methods as one shared implementation that reads the class's fields, and behaves as the
generated ones do: equality compares the fields with ``compare`` set, as a tuple, between
instances of exactly the same class; the hash is that of the same tuple (of the fields with
``hash`` set, else ``compare``) for a frozen class, and a mutable class is unhashable; the repr
lists the fields with ``repr`` set, and is safe against a value that contains the instance.
``__init__`` (and a frozen class's ``__setattr__``) are still the dataclass's own: they are on
the paths that build instances, and it writes them faster than any shared one would run.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, TypeVar

__all__ = ["by_fields"]

T = TypeVar("T", bound=type)

_NAMES = "__by_fields__"  # (compared, hashed, shown): field names, set on each class


def by_fields(cls: T) -> T:
    """Give the dataclass ``cls`` field-wise ``__eq__``, ``__hash__`` and ``__repr__``.

    ``cls`` must be a dataclass declared with ``eq=False, repr=False`` that defines none of the
    three itself (the dataclass machinery would keep a method the class defines).
    """
    params = cls.__dict__.get("__dataclass_params__")
    if params is None or params.eq or params.repr:
        raise TypeError(
            f"{cls.__qualname__}: by_fields needs a dataclass with eq=False, repr=False"
        )
    if any(name in cls.__dict__ for name in ("__eq__", "__hash__", "__repr__")):
        raise TypeError(f"{cls.__qualname__} defines __eq__, __hash__ or __repr__ itself")
    setattr(cls, _NAMES, _field_names(cls))
    cls.__eq__ = _eq  # type: ignore[assignment]
    cls.__repr__ = _repr  # type: ignore[assignment]
    cls.__hash__ = _hash if params.frozen else None  # type: ignore[assignment]
    return cls


def _field_names(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    fields = dataclasses.fields(cls)
    return (
        tuple(f.name for f in fields if f.compare),
        tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)),
        tuple(f.name for f in fields if f.repr),
    )


def _names(cls: type, which: int) -> tuple[str, ...]:
    names = cls.__dict__.get(_NAMES)
    if names is None:  # a subclass (a dataclass with fields of its own, or not): its fields
        names = _field_names(cls)
        setattr(cls, _NAMES, names)
    return names[which]


def _eq(self: Any, other: object) -> bool:
    cls = self.__class__
    if other.__class__ is not cls:
        return NotImplemented  # type: ignore[no-any-return]
    names = _names(cls, 0)
    mine = tuple([getattr(self, n) for n in names])
    theirs = tuple([getattr(other, n) for n in names])
    return bool(mine == theirs)


def _hash(self: Any) -> int:
    return hash(tuple([getattr(self, n) for n in _names(self.__class__, 1)]))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    cls = self.__class__
    shown = ", ".join([f"{n}={getattr(self, n)!r}" for n in _names(cls, 2)])
    return f"{cls.__qualname__}({shown})"
