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

:func:`record` goes one step further for the classes ``import fanloop`` defines by the dozen (the
events): it declares the dataclass with ``eq=False, repr=False, init=False`` and
:func:`by_fields`, and compiles the ``__init__`` the dataclass machinery would have written the
first time the class is called (or its ``__init__`` looked up on the class, as
``inspect.signature`` does). Compiling it is more than a third of defining a dataclass, and a
program uses a few of the event classes, not all of them.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, cast, dataclass_transform

__all__ = ["by_fields", "record"]

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


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(*, slots: bool = True, kw_only: bool = False, frozen: bool = False) -> Callable[[T], T]:
    """A dataclass with :func:`by_fields` comparison and repr, its ``__init__`` compiled on first
    use (see the module docstring). Fields may have defaults and default factories; the class
    may define ``__post_init__``; ``InitVar`` and ``field(init=False)`` are refused."""

    def make(cls: T) -> T:
        bases = [
            vars(b)["__dataclass_params__"]
            for b in cls.__mro__[1:]
            if "__dataclass_params__" in vars(b)
        ]
        if frozen and any(not b.frozen for b in bases):
            raise TypeError("cannot inherit frozen dataclass from a non-frozen one")
        # A frozen record's __setattr__ and __delattr__ are shared, not compiled (see _freeze),
        # unless a base is frozen too: the machinery then checks the pair, so it writes them.
        shared = frozen and not bases
        undocumented = not cls.__dict__.get("__doc__")
        if undocumented:  # else the machinery would ask a base record's __init__ for its
            cls.__doc__ = "-"  # signature (compiling it) to write one
        made: Any = dataclasses.dataclass(
            cls,
            init=False,
            eq=False,
            repr=False,
            slots=slots,
            kw_only=kw_only,
            frozen=frozen and not shared,
        )
        _check(made)
        if shared:
            _freeze(made)
        if undocumented:  # as the machinery writes it
            made.__doc__ = made.__name__ + str(_signature(made)).replace(" -> None", "")
        by_fields(made)
        made.__init__ = _LazyInit(made)
        return cast(T, made)

    return make


def _freeze(cls: Any) -> None:
    """Make the dataclass ``cls`` frozen as ``dataclass(frozen=True)`` does: assigning or
    deleting a field raises ``FrozenInstanceError`` (any attribute, on ``cls`` itself), and with
    slots, pickling and copying set the fields past that guard."""
    names = frozenset(f.name for f in dataclasses.fields(cls))
    frozen_error = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise frozen_error(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    for method in (__setattr__, __delattr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    if "__slots__" in cls.__dict__:
        cls.__getstate__ = _frozen_getstate
        cls.__setstate__ = _frozen_setstate
    params = copy.copy(cls.__dataclass_params__)
    params.frozen = True
    cls.__dataclass_params__ = params


def _frozen_getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _frozen_setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)


def _check(cls: type) -> None:
    """Refuse at definition what the dataclass ``__init__`` would have refused, and what
    :func:`_compile_init` does not write."""
    initvar = getattr(dataclasses, "_FIELD_INITVAR", None)
    if any(getattr(f, "_field_type", None) is initvar for f in cls.__dataclass_fields__.values()):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__qualname__}: a record takes no InitVar")
    defaulted = None
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"{cls.__qualname__}.{f.name}: a record's fields are all in __init__")
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if f.kw_only:
            continue
        if has_default:
            defaulted = f.name
        elif defaulted is not None:
            raise TypeError(
                f"{cls.__qualname__}: non-default argument {f.name!r} follows default argument"
            )


def _signature(cls: type) -> inspect.Signature:
    """The signature of the record ``cls``'s ``__init__``, without compiling it."""
    params = []
    for f in sorted(dataclasses.fields(cls), key=lambda f: bool(f.kw_only)):
        if f.default_factory is not dataclasses.MISSING:
            default: Any = _FACTORY
        else:
            default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        kind = (
            inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        params.append(inspect.Parameter(f.name, kind, default=default, annotation=f.type))
    return inspect.Signature(params, return_annotation=None)


class _LazyInit:
    """A record class's ``__init__`` until its first use: then the dataclass ``__init__``,
    compiled and put in its place."""

    __slots__ = ("owner",)

    def __init__(self, owner: type) -> None:
        self.owner = owner

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        real = _compile_init(self.owner)
        return real if instance is None else real.__get__(instance, owner)


class _Factory:
    """A parameter left to its default factory (shown as the dataclass machinery shows it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _compile_init(cls: type) -> Callable[..., None]:
    """Write and compile ``cls.__init__`` as the dataclass machinery does, and install it."""
    fields = dataclasses.fields(cls)
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY, "_object": object}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        name = f.name
        if f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = f.default_factory
            param = f"{name}=_FACTORY"
            value = f"_factory_{name}() if {name} is _FACTORY else {name}"
        elif f.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = f.default
            param = f"{name}=_default_{name}"
            value = name
        else:
            param = value = name
        (keyword if f.kw_only else positional).append(param)
        if frozen:
            body.append(f"  _object.__setattr__(self, {name!r}, {value})")
        else:
            body.append(f"  self.{name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}) -> None:\n" + ("\n".join(body) or "  pass") + "\n"
    code = compile(source, f"<record {cls.__qualname__}>", "exec", dont_inherit=True)
    exec(code, namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__annotations__ = {f.name: f.type for f in fields} | {"return": None}
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    type.__setattr__(cls, "__init__", init)
    return init
