"""The run the current task works for, as a context variable.

``Agent`` sets it for the whole of a run (a sub-agent's run sets its own, inside the tool call
that started it). It lets a provider wrapper such as
:class:`~fanloop.providers.FallbackProvider` reach the run it answers for: its retry policy
and its event emitter. Code outside a run sees ``None``.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["current_run"]

_run: contextvars.ContextVar[RunState | None] = contextvars.ContextVar(
    "fanloop_current_run", default=None
)


def current_run() -> RunState | None:
    """The :class:`~fanloop._run.RunState` of the run this task belongs to, if any."""
    return _run.get()


def enter_run(run: RunState) -> contextvars.Token[RunState | None]:
    """Mark ``run`` as the current run; undo with :func:`leave_run`."""
    return _run.set(run)


def leave_run(token: contextvars.Token[RunState | None]) -> None:
    """Restore the run that was current before :func:`enter_run`."""
    _run.reset(token)
