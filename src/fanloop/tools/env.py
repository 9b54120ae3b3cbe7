"""The ``env`` tool: read environment variables, with sensitive values masked.

A value is masked when its variable's name looks sensitive (it contains KEY, TOKEN, SECRET,
PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, PRIVATE, AUTH (not AUTHOR), COOKIE, SESSION,
SIGNATURE, DSN, SALT, a PASS/PWD/PIN word, DATABASE_URL...) or when the value itself looks
like a credential (a PEM private key, a well-known token prefix such as ``sk-``, ``ghp_``,
``xoxb-`` or ``AKIA``). Passwords embedded in URLs (``scheme://user:password@host``) are masked
in every value. Masking errs on the side of hiding: the model learns that the variable is set
and how long it is, not what it holds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ._workspace import arg_str_list, truncate
from .base import Tool, ToolResult

__all__ = ["EnvTool", "is_sensitive_name", "mask_value"]

_SENSITIVE = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE|AUTH(?!OR)|COOKIE|SESSION|SIGNATURE"
    r"|DSN|SALT|(?:^|_)(?:PASS|PWD|PW|PIN|CONN(?:ECTION)?_?STRING|DATABASE_URL)(?:_|$)",
    re.IGNORECASE,
)
_NOT_SENSITIVE = frozenset({"PWD", "OLDPWD", "XAUTHORITY"})
_SECRET_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----|^(?:sk-|sk_live_|rk_live_|ghp_|gho_|ghs_|ghu_|"
    r"github_pat_|glpat-|xox[abposr]-|AKIA|ASIA|AIza|ya29\.|eyJ[A-Za-z0-9_-]{10,}\.)"
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@\s/]+)@")


def is_sensitive_name(name: str) -> bool:
    """Whether a variable called ``name`` should have its value masked.

    Example:
        >>> is_sensitive_name("OPENAI_API_KEY"), is_sensitive_name("HOME")
        (True, False)
    """
    return name.upper() not in _NOT_SENSITIVE and _SENSITIVE.search(name) is not None


def mask_value(name: str, value: str) -> str:
    """``value`` as the model may see it: masked entirely, or with URL passwords masked."""
    if is_sensitive_name(name) or _SECRET_VALUE.search(value.strip()):
        return f"****** (masked, {len(value)} characters)" if value else "(empty)"
    return _URL_PASSWORD.sub(r"\g<scheme>:******@", value)


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
        environ = os.environ if self.environ is None else self.environ
        names = arg_str_list(kwargs, "names")
        prefix = kwargs.get("prefix") or ""
        if not isinstance(prefix, str):
            prefix = str(prefix)
        if names is None:
            names = sorted(n for n in environ if n.startswith(prefix))
            if not names:
                what = f" starting with {prefix!r}" if prefix else ""
                return ToolResult(f"No environment variables{what}.")
        lines = []
        for name in names:
            if name not in environ:
                lines.append(f"{name} is not set")
                continue
            value = truncate(mask_value(name, environ[name]), self.max_value_chars, what="value")
            lines.append(f"{name}={value}")
        return ToolResult(truncate("\n".join(lines), self.max_chars, what="environment"))
