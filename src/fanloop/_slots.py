"""Memos kept on the objects they are about, in slots that are not pydantic fields.

:class:`~fanloop.messages.Message` and :class:`~fanloop.providers.ModelResponse` declare
``__fanloop_valid__`` (their text is known to be valid Unicode: ``_unicode.vouch``) and a
message ``__fanloop_wire__`` (its wire text as a provider last rendered it:
``providers._wire.MessageCache``). A slot is not copied, pickled, compared or serialised, and
keeping the memo on the object costs the collector nothing, where a side table keyed by
identity held a weak reference per object. Other classes fall back to such a table.
"""

from __future__ import annotations

from typing import Any

_OWNERS: list[tuple[type, dict[str, Any]]] = []
"""The classes that declare memo slots, with their slot descriptors by name (registered once,
where each class is defined; their subclasses inherit the slots)."""


_EXACT: dict[type, dict[str, Any]] = {}
"""The same slots by owner class, for the common case of an object of that very class."""


def register(cls: type) -> None:
    """Record ``cls``'s memo slots (the names in its own ``__slots__``)."""
    slots = {name: cls.__dict__[name] for name in cls.__dict__["__slots__"]}
    _OWNERS.append((cls, slots))
    # An owner's objects have its memo slots and those of any owner it derives from.
    _EXACT[cls] = {
        name: slot
        for owner, own in _OWNERS
        if owner in cls.__mro__
        for name, slot in own.items()
        if owner is cls or name not in slots
    }


def slot_of(cls: type, name: str) -> Any:
    """The slot descriptor called ``name`` that instances of ``cls`` have (its ``__get__``
    raises ``AttributeError`` while the slot is empty), or ``None``. Nothing is cached per
    class: a class made at run time (``pydantic.create_model``) is not kept alive by it."""
    slots = _EXACT.get(cls)
    if slots is not None:  # an owner itself: one lookup
        return slots.get(name)
    mro = cls.__mro__  # (not issubclass: pydantic's metaclass is an ABCMeta, 20 times slower)
    for owner, slots in _OWNERS:
        if owner in mro:
            return slots.get(name)
    return None
