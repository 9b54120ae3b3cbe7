"""The ``env`` tool: read environment variables, with sensitive values masked.

The rules live in :mod:`fanloop.tools._secrets`, shared with the ``bash`` and git tools. A
value is masked whole when its variable's name looks sensitive (KEY, TOKEN, SECRET, PASSWORD,
CREDENTIAL, AUTH, COOKIE, SESSION, PRIVATE, DSN, DATABASE_URL...; not ``PWD``, the working
directory) or when the value is itself a credential (a known token prefix such as ``sk-``,
``ghp_``, ``xoxb-`` or ``AKIA``, a private key, a long random-looking token); then the model
learns that the variable is set and how long it is, not what it holds. Otherwise every secret
found inside the value (a vendor token, a JSON Web Token, a bearer credential, a URL password,
a key-like field of JSON or ``key=value`` text) is replaced by ``******``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._blocking import Stop, run_blocking
from ._secrets import is_sensitive_name, mask_value
from ._workspace import arg_str_list, truncate
from .base import Tool, ToolResult

__all__ = ["EnvTool", "is_sensitive_name", "mask_value"]


class EnvTool(Tool):
    """``env``: read environment variables (sensitive values masked).

    Args:
        environ: the mapping to read (default: ``os.environ`` at call time).
        max_value_chars: longer values are cut.
        max_chars: characters returned at most.
    """

    name = "env"
    description = (
        "Read environment variables. With names, returns those variables (or says they are "
        "unset); without, lists every variable. Values of sensitive variables (keys, tokens, "
        "secrets, passwords, credentials) are masked."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Variables to read. Default: all of them.",
            },
            "prefix": {
                "type": "string",
                "description": "Only list variables whose name starts with this prefix.",
            },
        },
        "additionalProperties": False,
    }
    concurrent_safe = True

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        max_value_chars: int = 500,
        max_chars: int = 20_000,
    ) -> None:
        self.environ = environ
        self.max_value_chars = max_value_chars
        self.max_chars = max_chars

    async def run(self, **kwargs: Any) -> ToolResult:
        """Read the variables; see the class docstring."""
        environ = dict(os.environ if self.environ is None else self.environ)
        names = arg_str_list(kwargs, "names")
        prefix = kwargs.get("prefix") or ""
        if not isinstance(prefix, str):
            prefix = str(prefix)
        # Masking scans every value shown: done in a worker thread, off the event loop.
        return await run_blocking(self._read, environ, names, prefix)

    def _read(
        self, stop: Stop, environ: dict[str, str], names: list[str] | None, prefix: str
    ) -> ToolResult:
        if names is None:
            names = sorted(n for n in environ if n.startswith(prefix))
            if not names:
                what = f" starting with {prefix!r}" if prefix else ""
                return ToolResult(f"No environment variables{what}.")
        lines = []
        for name in names:
            stop.check()
            if name not in environ:
                lines.append(f"{name} is not set")
                continue
            value = truncate(mask_value(name, environ[name]), self.max_value_chars, what="value")
            lines.append(f"{name}={value}")
        return ToolResult(truncate("\n".join(lines), self.max_chars, what="environment"))
