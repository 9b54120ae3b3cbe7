"""The run the current task works for, as a context variable.

``Agent`` sets it for the whole of a run (a sub-agent's run sets its own, inside the tool call
that started it). It lets a provider wrapper such as
:class:`~fanloop.providers.FallbackProvider` reach the run it answers for: its retry policy
and its event emitter. Code outside a run sees ``None``.

The variable holds a weak reference to the run, not the run. Every callback the event loop
schedules while a run is current carries a snapshot of the context it was scheduled in, and a
cancelled timer stays in the loop's heap until it is due (a read timeout: minutes). A snapshot
that held the run would keep the whole finished run (its conversation, its state) alive as
long; one that holds a weak reference keeps only the reference.
"""

from __future__ import annotations

import contextvars
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["current_run"]

_run: contextvars.ContextVar[weakref.ref[RunState] | None] = contextvars.ContextVar(
    "fanloop_current_run", default=None
)


def current_run() -> RunState | None:
    """The :class:`~fanloop._run.RunState` of the run this task belongs to, if any."""
    ref = _run.get()
    return None if ref is None else ref()


def enter_run(run: RunState) -> contextvars.Token[weakref.ref[RunState] | None]:
    """Mark ``run`` as the current run; undo with :func:`leave_run`."""
    return _run.set(weakref.ref(run))


def leave_run(token: contextvars.Token[weakref.ref[RunState] | None]) -> None:
    """Restore the run that was current before :func:`enter_run`."""
    _run.reset(token)
