"""Errors raised by sessions and their stores.

::

    FanloopError
     └── SessionError                 a session or its store refused an operation
          ├── SessionNotFound         no session with that id (also a KeyError)
          ├── SessionConflict         another writer changed the session first
          └── EffectConflict          a receipt cannot make that move (also a ValueError)
"""

from __future__ import annotations

from typing import Any

from ..errors import FanloopError

__all__ = ["EffectConflict", "SessionConflict", "SessionError", "SessionNotFound"]


class SessionError(FanloopError):
    """Base class of the errors raised by sessions and session stores."""


class SessionNotFound(SessionError, KeyError):
    """No session with this id exists in the store.

    Attributes:
        session_id: the id that was asked for.
    """

    def __init__(self, session_id: str, /) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.session_id,)


class SessionConflict(SessionError):
    """Another writer appended to or replaced the session since this object last read it.

    Nothing was written. Call :meth:`Session.reload` to see the stored history, then decide.

    Attributes:
        session_id: the session's id.
    """

    def __init__(self, message: str, /, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.message, {"session_id": self.session_id})


class EffectConflict(SessionError, ValueError):
    """A tool-effect receipt cannot make the requested move.

    Raised when a call id is admitted again with another tool or other arguments, when a
    receipt that is not ``started`` is committed or resolved, or when there is no receipt.

    Attributes:
        session_id: the session's id.
        call_id: the tool call's id.
    """

    def __init__(self, message: str, /, *, session_id: str, call_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.call_id = call_id

    def __reduce__(self) -> tuple[Any, ...]:
        kw = {"session_id": self.session_id, "call_id": self.call_id}
        return _rebuild, (type(self), self.message, kw)


def _rebuild(cls: type[SessionError], message: str, kw: dict[str, str]) -> SessionError:
    """Unpickle an error whose context is keyword-only."""
    return cls(message, **kw)
