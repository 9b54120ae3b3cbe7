"""fanloop's logger: structlog when the application configured it, quiet stdlib otherwise.

The library never configures logging. Unconfigured structlog prints every level to stdout,
which would be noise in an application that never asked for fanloop's logs (and fatal in an
MCP stdio server). So each call goes to ``structlog.get_logger("fanloop")`` when structlog is
configured and to the stdlib ``logging.getLogger("fanloop")`` otherwise, where the application's
logging configuration decides. An application that configured no logging at all gets the
standard library's default: warnings and errors (a tool or a callback of its own that raised,
with its traceback) on stderr, nothing else, and never anything on stdout.

Event names are fixed snake_case strings; values are key-value pairs. ``run_id``,
``agent_path`` are bound through structlog's contextvars by the loop (see :func:`bind_run`),
so every line of a run carries them; in a process that has not imported structlog nothing is
bound: a line takes them from the run the task works for (:func:`fanloop._scope.current_run`)
when it is written, so a run that logs nothing pays nothing for them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._scope import current_run

if TYPE_CHECKING:
    import logging

# fanloop never imports structlog itself: an application that uses it has imported it (to
# configure it) before its first run; one that has not cannot have configured it, and does not
# pay for the import (tens of ms with rich installed: structlog's dev console loads it). Until
# then a run's bound context lives in ``_BOUND``; lines to structlog carry it too.

__all__ = ["bind", "bind_run", "logger", "unbind"]

# logging's own values (DEBUG, INFO...): ``logging`` is imported by the first log line
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "exception": 40}


@functools.cache
def _stdlib() -> logging.Logger:
    import logging

    return logging.getLogger("fanloop")


_BOUND: ContextVar[Mapping[str, Any]] = ContextVar(
    "fanloop_log_context", default=MappingProxyType({})
)
_OWN = "fanloop._log"  # the key of a token of ``_BOUND`` among bind()'s tokens


class _Logger:
    __slots__ = ()

    def _log(self, level: str, event: str, kw: dict[str, Any]) -> None:
        structlog = sys.modules.get("structlog")
        bound = _BOUND.get()
        if structlog is None:
            bound = {**_run_fields(), **bound}
        exc_info = bool(kw.pop("exc_info", False)) or level == "exception"
        if structlog is not None and _structlog_wanted():
            if exc_info and level != "exception":
                kw["exc_info"] = True
            getattr(structlog.get_logger("fanloop"), level)(event, **{**bound, **kw})
            return
        lvl = _LEVELS[level]
        std = _stdlib()
        if not std.isEnabledFor(lvl):
            return
        if structlog is not None:
            from structlog.contextvars import get_contextvars

            bound = {**bound, **get_contextvars()}
        fields = {**bound, **kw}
        text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
        std.log(lvl, text, exc_info=exc_info)

    def debug(self, event: str, **kw: Any) -> None:
        self._log("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        self._log("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._log("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        self._log("error", event, kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._log("exception", event, kw)


def _structlog_wanted() -> bool:
    """Whether the application set structlog up to receive logs.

    ``structlog.is_configured()`` alone is not enough: it stays true after
    ``structlog.testing.capture_logs()`` (which reconfigures and restores), when the output is
    again structlog's default: everything printed to stdout.
    """
    import structlog
    import structlog.testing

    if not structlog.is_configured():
        return False
    config = structlog.get_config()
    if any(isinstance(p, structlog.testing.LogCapture) for p in config["processors"]):
        return True
    factory = config["logger_factory"]
    return not (
        isinstance(factory, structlog.PrintLoggerFactory)
        and getattr(factory, "_file", None) in (None, sys.stdout, sys.__stdout__)
    )


logger = _Logger()


def _run_fields() -> Mapping[str, Any]:
    """``run_id`` and ``agent_path`` of the run the current task works for (none outside)."""
    run = current_run()
    if run is None:
        return _NOTHING
    return {"run_id": run.run_id, "agent_path": "/".join(run.emitter.path)}


_NOTHING: Mapping[str, Any] = MappingProxyType({})


def bind_run(run_id: str, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    """Bind a run's ``run_id`` and ``agent_path`` for structlog (its contextvars, which the
    application's own lines in the run carry too). Without structlog imported nothing is
    bound (``None``): :class:`_Logger` finds them on the current run."""
    if "structlog" not in sys.modules:
        return None
    from structlog.contextvars import bind_contextvars

    return bind_contextvars(run_id=run_id, agent_path="/".join(path))


def bind(**kw: Any) -> Mapping[str, Any]:
    """Bind context for every log line of the current task (and the tasks it starts).

    Returns the tokens to hand to :func:`unbind`, which restores what was bound before.
    """
    if "structlog" not in sys.modules:
        return {_OWN: _BOUND.set({**_BOUND.get(), **kw})}
    from structlog.contextvars import bind_contextvars

    return bind_contextvars(**kw)


def unbind(tokens: Mapping[str, Any] | None) -> None:
    """Restore the context :func:`bind` (or :func:`bind_run`) replaced."""
    if tokens is None:
        return
    own = tokens.get(_OWN)
    if own is not None:
        _BOUND.reset(own)
        return
    from structlog.contextvars import reset_contextvars

    reset_contextvars(**tokens)
