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

_FOUND: dict[tuple[type, str], Any] = {}


def slot_of(cls: type, name: str) -> Any:
    """``cls``'s slot descriptor called ``name`` (its ``__get__`` raises ``AttributeError``
    while the slot is empty), or ``None`` when the class has none. Looked up once per class."""
    key = (cls, name)
    try:
        return _FOUND[key]
    except KeyError:
        pass
    found = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), None)
    slot = _FOUND[key] = found if type(found).__name__ == "member_descriptor" else None
    return slot
