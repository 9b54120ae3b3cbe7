"""The one door to DBOS: imported lazily, and every step taken through :func:`step`.

``import fanloop`` never imports DBOS; the durable layer asks for it with :func:`require`,
which names the extra to install when it is missing.

A step's own failures are checkpointed as data (see the callers), so anything that escapes
``DBOS.run_step_async`` is DBOS itself failing: the workflow was cancelled, the system database
is unreachable, a recovered workflow took a different path. That must stop the workflow rather
than reach the model as a tool error or be retried as a provider error, so it travels out of
the loop as :class:`Interrupted`, a ``BaseException`` the loop does not catch, and the workflow
re-raises the original error for DBOS to handle.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from dbos import DBOS

__all__ = [
    "Interrupted",
    "dbos",
    "interrupted_cause",
    "outside_workflow",
    "require",
    "step",
    "system_database_url",
]

T = TypeVar("T")

INSTALL_HINT = "fanloop.durable needs DBOS; install the extra: pip install 'fanloop[durable]'"


def require() -> Any:
    """The ``dbos`` module, or a :class:`ConfigurationError` naming the extra to install."""
    try:
        import dbos as module
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    return module


def dbos() -> type[DBOS]:
    """The ``DBOS`` class (imported on first use)."""
    return require().DBOS  # type: ignore[no-any-return]


class Interrupted(BaseException):
    """DBOS failed under a step: carried out of the loop to the workflow, which re-raises
    :attr:`error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


def interrupted_cause(exc: BaseException) -> BaseException | None:
    """The DBOS error inside ``exc`` (itself, a cause, or a member of an exception group)."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Interrupted):
            return current.error
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return None


async def step(name: str, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Run ``fn(*args)`` as the DBOS step ``name`` of the current workflow.

    Its step id is taken when this is called (before its first ``await``), so steps started
    in a deterministic order get the same ids when a recovered workflow replays them. A
    completed step is not run again: its recorded result comes back.
    """
    try:
        result: T = await dbos().run_step_async({"name": name}, fn, *args)
        return result
    except Exception as exc:
        raise Interrupted(exc) from exc


def system_database_url() -> str:
    """The URL of the launched DBOS's system database (where durable budgets are kept).

    DBOS has no public accessor for it: this reads the configuration DBOS was built with.
    """
    try:
        config: Any = require()._dbos._get_dbos_instance()._config
        url = config["system_database_url"]
    except Exception as exc:  # not launched, or DBOS changed its internals
        raise ConfigurationError(
            f"cannot find the DBOS system database's URL ({type(exc).__name__}: {exc}); "
            "configure DBOS with system_database_url and launch it first"
        ) from exc
    if not isinstance(url, str) or not url:
        raise ConfigurationError("DBOS has no system_database_url")
    return url


async def outside_workflow(fn: Callable[[], Awaitable[T]]) -> T:
    """Await ``fn()`` in a task with an empty context, as if no workflow or step were running.

    DBOS refuses to start a workflow from inside a step; a sub-agent's workflow is enqueued
    from its parent's step this way, under an id derived from that step's, so that a step run
    again after a crash finds the sub-agent it started instead of starting another.
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(_call(fn), context=contextvars.Context())
    return await task  # cancelling the caller cancels the task too


async def _call(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()
