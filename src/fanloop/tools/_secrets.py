"""Which environment variables and values hold secrets, and how they are masked.

One set of rules, shared by the ``env`` tool (which masks what it shows), the ``bash`` and git
tools (which do not hand such variables to the programs they start) and anything that logs
text that may carry a credential.

A variable is secret when its **name** looks sensitive (it contains KEY, TOKEN, SECRET, PASSW,
PASSPHRASE, CRED, PRIVATE, AUTH (not AUTHOR), COOKIE, SESSION, SIGNATURE, BEARER, JWT, WEBHOOK,
MNEMONIC, DSN, SALT, or a PASS/PWD/PW/PIN/OTP/PAT/DATABASE_URL/CONNECTION_STRING word; ``PWD``
and ``OLDPWD``, the working directories, are not) or when its **value** carries one:

- a token of a well-known shape anywhere in the text (OpenAI and Anthropic ``sk-...``, GitHub
  ``ghp_``/``github_pat_``..., GitLab ``glpat-``, Slack ``xoxb-`` and webhooks, AWS key ids
  ``AKIA``/``ASIA``..., Google ``AIza``/``ya29.``, npm ``npm_``, PyPI, Hugging Face, Stripe
  ``sk_live_``/``rk_live_``/``whsec_``, SendGrid, JSON Web Tokens, PEM private key blocks...);
- a credential after ``Bearer``/``Basic`` or in an ``Authorization:`` header;
- the password of a URL (``scheme://user:password@host``, up to the *last* ``@``, so a password
  holding ``/`` or ``@`` is hidden whole);
- the value of a key-like field: ``"api_key": "..."``, ``password=...``, ``_authToken=...``,
  ``"auth": "..."`` (Docker), ``AccountKey=...``, ``--token ...``;
- or the whole value is one long random-looking token (mixed case and digits, high entropy).

Every pattern is anchored on a literal or a token boundary and bounded, so the scan is linear in
the text; values longer than :data:`MAX_SCAN` characters are masked whole, unchecked.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import regex

__all__ = [
    "MASK",
    "MAX_SCAN",
    "contains_secret",
    "is_secret_variable",
    "is_sensitive_name",
    "mask_value",
    "redact",
    "scrub_environ",
]

MASK = "******"
"""What replaces a secret inside a text."""

MAX_SCAN = 65_536
"""Characters of a value that are checked; a longer value is masked whole."""

_TIMEOUT = 2.0  # seconds: a safety net, the patterns are linear

# The patterns are compiled on first use (:func:`_compiled`): compiling them all, with the
# ``regex`` module's import, is tens of ms that a process which never scrubs need not pay.
_SENSITIVE_NAME = (
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CRED|PRIVATE|AUTH(?!OR)|COOKIE|SESSION|SIGNATURE"
    r"|BEARER|JWT|WEBHOOK|MNEMONIC|DSN|SALT"
    r"|(?:^|_)(?:PASS|PWD|PW|PIN|OTP|TOTP|PAT|CONN(?:ECTION)?_?STR(?:ING)?|DATABASE_URL)(?:_|$)"
)
_NOT_SENSITIVE = frozenset(
    {
        "PWD",
        "OLDPWD",
        "XAUTHORITY",
        "KEYTIMEOUT",
        "TOKENIZERS_PARALLELISM",
        "DESKTOP_SESSION",
        "XDG_SESSION_ID",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_CLASS",
        "XDG_SESSION_DESKTOP",
    }
)

# A value that *starts* with one of these is a credential whatever its length.
_SECRET_START = (
    r"\s*(?:sk-|sk_live_|sk_test_|rk_live_|rk_test_|whsec_|ghp_|gho_|ghs_|ghu_|ghr_|github_pat_"
    r"|glpat-|xox[abposr]-|xapp-|npm_|pypi-|hf_|AIza|ya29\.|GOCSPX-|(?:AKIA|ASIA)[A-Z0-9]{12}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.)"
)

_T = r"[A-Za-z0-9_-]"  # a token character
_B = r"(?<![A-Za-z0-9])"  # a token starts here
_VENDOR = (
    rf"sk-{_T}{{16,}}",  # OpenAI, Anthropic (sk-ant-...), project and service-account keys
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe
    r"whsec_[A-Za-z0-9]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{20,}",
    rf"gl(?:pat|ptt|dt|rt|cbt|oas|ft|imt|soat|agent)-{_T}{{16,}}",  # GitLab
    r"GR1348941[A-Za-z0-9_-]{16,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"xapp-[0-9]-[A-Za-z0-9-]{10,}",
    r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    rf"AIza{_T}{{30,}}",  # Google
    rf"ya29\.{_T}{{20,}}",
    rf"GOCSPX-{_T}{{20,}}",
    r"npm_[A-Za-z0-9]{30,}",
    rf"pypi-AgE{_T}{{20,}}",
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    rf"SG\.{_T}{{16,}}\.{_T}{{16,}}",  # SendGrid
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"do[opr]_v1_[a-f0-9]{64}",  # DigitalOcean
    r"dapi[a-f0-9]{32}",  # Databricks
    r"ATATT3[A-Za-z0-9_=-]{20,}",  # Atlassian
    r"AGE-SECRET-KEY-1[0-9A-Z]{50,}",
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{10,}",
    r"discord(?:app)?\.com/api/webhooks/[0-9]{5,}/[A-Za-z0-9_-]{20,}",
    rf"eyJ{_T}{{5,}}\.{_T}{{5,}}\.{_T}*",  # JSON Web Token
)
_N = r"[A-Za-z0-9_.-]"  # a character of a field name
_FIELD = (  # the name of a key-like field inside a value: a whole run of name characters
    rf"(?<!{_N})(?={_N}{{0,40}}?"
    r"(?i:key|token|secret|passw(?:or)?d|pwd|passphrase|credential|auth(?!or)|cookie|session"
    r"|signature|sig|private))"
    rf"{_N}{{1,80}}+"
)
_QUOTED = r'"(?:[^"\\\n]|\\.){1,8192}"|\'[^\'\n]{1,8192}\''
_BARE = r"[^\s\"',;&{}()\[\]<>]{1,8192}"
_SECRETS = (
    # a PEM private key, up to its END line (or the end of the text)
    r"(?P<pem>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----"
    r"(?:.*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----|.*))"
    # Authorization: <scheme> <credential>, Bearer <credential>
    r"|(?i:(?:proxy-)?authorization[\"']?\s{0,5}[:=]\s{0,5}[\"']?(?:[A-Za-z-]{1,20}\s{1,5})?"
    r"|(?<![A-Za-z0-9])(?:bearer|basic)\s{1,5})"
    r"(?P<cred>[A-Za-z0-9._~+/=:-]{6,8192})"
    # "name": "value", name=value, name: value, --name value
    rf"|(?P<q>[\"']?)(?=[A-Za-z_]){_FIELD}(?P=q)(?:\s{{0,5}}=|(?<=[\"'])\s{{0,5}}:|:(?=\s))"
    rf"\s{{0,5}}(?P<field>{_QUOTED}|{_BARE})"
    rf"|(?=--){_FIELD}(?:\s{{1,5}}|=)(?P<opt>{_BARE})"
    # a token of a known shape
    rf"|{_B}(?P<token>{'|'.join(_VENDOR)})"
)
_RUN = r"[^\s\"'<>`]+"  # where a URL may be


class _Patterns(NamedTuple):
    sensitive_name: regex.Pattern[str]
    secret_start: regex.Pattern[str]
    secrets: regex.Pattern[str]
    run: regex.Pattern[str]


@functools.cache
def _compiled() -> _Patterns:
    """The patterns, compiled once (on first use: see above)."""
    import regex

    return _Patterns(
        regex.compile(_SENSITIVE_NAME, regex.IGNORECASE),
        regex.compile(_SECRET_START),
        regex.compile(_SECRETS, regex.DOTALL),
        regex.compile(_RUN),
    )


def is_sensitive_name(name: str) -> bool:
    """Whether a variable called ``name`` should have its value masked.

    Example:
        >>> is_sensitive_name("OPENAI_API_KEY"), is_sensitive_name("HOME")
        (True, False)
    """
    return (
        name.upper() not in _NOT_SENSITIVE and _compiled().sensitive_name.search(name) is not None
    )


def redact(text: str) -> str:
    """``text`` with every secret found in it replaced by :data:`MASK`.

    The scan is linear in ``len(text)``; a text the scan cannot finish (it never should) comes
    back withheld entirely.

    Example:
        >>> redact("curl -H 'Authorization: Bearer abc123def456' https://u:p@ss@host/x")
        "curl -H 'Authorization: Bearer ******' https://u:******@host/x"
    """
    try:
        text = _compiled().secrets.sub(_replace, text, concurrent=True, timeout=_TIMEOUT)
    except TimeoutError:
        return f"{MASK} (withheld: {len(text):,} characters could not be checked for secrets)"
    return _mask_url_passwords(text) if "://" in text else text


def contains_secret(value: str) -> bool:
    """Whether ``value`` holds a secret (a credential of any kind listed in the module doc)."""
    if len(value) > MAX_SCAN or _is_whole_secret(value):
        return True
    return redact(value) != value


def is_secret_variable(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` must not be shown or handed to a program."""
    return is_sensitive_name(name) or contains_secret(value)


def mask_value(name: str, value: str) -> str:
    """``value`` as the model may see it: masked whole, with its secrets masked, or as is.

    A sensitive name, a value that is itself a credential (or holds a private key) and a value
    too long to check are masked whole (the model learns only the length); otherwise each
    secret inside the value is replaced by :data:`MASK`.

    Example:
        >>> mask_value("REDIS", "redis://user:hunter2@host:6379/0")
        'redis://user:******@host:6379/0'
    """
    if not value:
        return "(empty)"
    if is_sensitive_name(name) or _is_whole_secret(value):
        return f"{MASK} (masked, {len(value)} characters)"
    if len(value) > MAX_SCAN:
        return f"{MASK} (masked, {len(value)} characters: too long to check for secrets)"
    return redact(value)


def scrub_environ(environ: Mapping[str, str], *, keep: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``environ`` without its secret variables (see :func:`is_secret_variable`).

    Args:
        environ: the environment to copy.
        keep: names passed through even though they look secret.
    """
    kept = frozenset(keep)
    return {n: v for n, v in environ.items() if n in kept or not is_secret_variable(n, v)}


def _replace(match: regex.Match[str]) -> str:
    for group in ("cred", "field", "opt"):
        start = match.start(group)
        if start >= 0:
            value: str = match.group(group)
            masked = MASK
            if value[:1] in "\"'" and len(value) > 1:  # keep the quotes of a quoted value
                masked = value[0] + MASK + value[-1]
            return str(match.string[match.start() : start]) + masked
    return MASK


def _mask_url_passwords(text: str) -> str:
    """Mask ``scheme://user:PASSWORD@`` up to the last ``@`` of each whitespace-free run."""
    out: list[str] = []
    last = 0
    for run in _compiled().run.finditer(text):
        start, end = run.span()
        at = text.rfind("@", start, end)
        if at < 0:
            continue
        pos = text.find("://", start, at)
        while pos >= 0:
            user = pos + 3
            colon = user
            while colon < at and text[colon] not in ":/@":
                colon += 1
            if colon < at and text[colon] == ":" and colon + 1 < at:
                out.append(text[last : colon + 1])
                out.append(MASK)
                last = at
                break
            pos = text.find("://", user, at)
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _is_whole_secret(value: str) -> bool:
    """A value that is a credential by itself: a known prefix, a private key, a random token."""
    head = value[:MAX_SCAN]
    if _compiled().secret_start.match(head) or ("PRIVATE KEY" in head and "-----BEGIN" in head):
        return True
    return _looks_random(value.strip())


def _looks_random(token: str) -> bool:
    """A long single token of mixed case and digits that reads like random data (a value past
    :data:`MAX_SCAN` characters is masked whole before it gets here)."""
    if not 24 <= len(token) <= MAX_SCAN or token.startswith(("/", ".")):
        return False
    classes = []
    for ch in token:
        if ch.isascii() and ch.isupper():
            classes.append(0)
        elif ch.isascii() and ch.islower():
            classes.append(1)
        elif ch.isascii() and ch.isdigit():
            classes.append(2)
        elif ch in "+/=_-":
            classes.append(3)
        else:
            return False
    if not {0, 1, 2} <= set(classes):
        return False
    switches = sum(a != b for a, b in itertools.pairwise(classes))
    if switches < 0.4 * (len(token) - 1):
        return False
    counts = Counter(token)
    entropy = -sum(c / len(token) * math.log2(c / len(token)) for c in counts.values())
    return entropy >= 3.5
