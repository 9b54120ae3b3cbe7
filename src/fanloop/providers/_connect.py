"""Why a connection could not be made, in a few words: shared by both HTTP transports
(``_http`` for httpx, ``_aiohttp``), so neither imports the other for it."""

from __future__ import annotations

import os
import ssl

import httpx2

__all__ = ["clip", "connect_reason"]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} more chars]"


def _is_cert_error(error: BaseException) -> bool:
    return (
        isinstance(error, ssl.SSLCertVerificationError)
        or "certificate" in type(error).__name__.lower()
    )


def connect_reason(exc: BaseException) -> str:
    """Why a connection could not be made, in a few words, from ``exc`` and its causes."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 16 and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in chain:
        if isinstance(error, ssl.SSLError):  # attributes may be missing on a subclass
            kind = "certificate not accepted" if _is_cert_error(error) else "failed"
            detail = getattr(error, "verify_message", None) or getattr(error, "reason", None)
            return clip(f"TLS {kind}: {detail or error}", 200)
    import socket

    for error in chain:
        if isinstance(error, socket.gaierror):
            return "the host name cannot be resolved"
    for error in chain:
        if isinstance(error, TimeoutError | httpx2.TimeoutException):
            return "timed out"
    for error in chain:
        if isinstance(error, OSError) and isinstance(error.errno, int) and error.errno > 0:
            return os.strerror(error.errno).lower()
    text = str(exc) or type(exc).__name__
    if text.startswith("[Errno "):  # "[Errno 111] Connection refused"
        text = text.partition("] ")[2] or text
        text = text[:1].lower() + text[1:]
    return clip(text, 200)
