"""Test doubles for fanloop and for applications built on it.

- :class:`ScriptedProvider` plays scripted turns at the model seam (no HTTP).
- :class:`FakeLLMServer` is a real HTTP server on 127.0.0.1 that speaks the Anthropic Messages
  and OpenAI Chat Completions wire formats, for testing the real SDK code paths.
- :func:`reply`, :func:`call` and :class:`Fault` build scripted turns and injected failures.
- :class:`ToolSweepProvider` calls every tool once with schema-valid arguments, then answers;
  :func:`example_value` makes such a value for any JSON schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy
from ._examples import example_value
from ._faults import Hostile, RateLimit, RateLimitLog
from ._script import Fault, call, reply
from ._scripted import ScriptedProvider
from ._sweep import ToolSweepProvider

if TYPE_CHECKING:
    from ._server import FakeLLMServer

__all__ = [
    "FakeLLMServer",
    "Fault",
    "Hostile",
    "RateLimit",
    "RateLimitLog",
    "ScriptedProvider",
    "ToolSweepProvider",
    "call",
    "example_value",
    "reply",
]


__getattr__, __dir__ = lazy(__name__, {"FakeLLMServer": "._server"})
