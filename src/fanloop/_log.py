"""fanloop's logger: structlog when the application configured it, quiet stdlib otherwise.

The library never configures logging. Unconfigured structlog prints every level to stdout,
which would be noise in an application that never asked for fanloop's logs (and fatal in an
MCP stdio server). So each call goes to ``structlog.get_logger("fanloop")`` when structlog is
configured and to the stdlib ``logging.getLogger("fanloop")`` otherwise, where the application's
logging configuration decides (by default: warnings and errors only, on stderr).

Event names are fixed snake_case strings; values are key-value pairs. ``run_id``,
``agent_path``, ``turn`` and ``tool_call_id`` are bound through structlog's contextvars by the
loop (see :func:`bind`), so every line of a run carries them.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, get_contextvars

__all__ = ["bind", "logger"]

_std = logging.getLogger("fanloop")
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
}


class _Logger:
    __slots__ = ()

    def _log(self, level: str, event: str, kw: dict[str, Any]) -> None:
        if structlog.is_configured():
            getattr(structlog.get_logger("fanloop"), level)(event, **kw)
            return
        lvl = _LEVELS[level]
        if not _std.isEnabledFor(lvl):
            return
        fields = {**get_contextvars(), **kw}
        text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
        _std.log(lvl, text, exc_info=level == "exception")

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


logger = _Logger()


def bind(**kw: Any) -> None:
    """Bind context for every log line of the current task (and the tasks it starts)."""
    bind_contextvars(**kw)
