"""Model providers: the protocol, the provider-independent types, and configuration.

The real providers live in their own modules, imported when used; they speak the vendors' HTTP
APIs themselves and import a vendor SDK only when given an SDK client (``client=``)::

    from fanloop.providers.anthropic import AnthropicProvider
    from fanloop.providers.openai import OpenAIProvider

:class:`FallbackProvider` asks the next provider when one fails for good.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy
from .._settings import ModelSettings
from ..events import (
    CitationAdded,
    HostedToolProgress,
    StreamDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
)
from ._resolve import from_env, resolve_provider
from ._types import (
    HostedTool,
    ModelRequest,
    ModelResponse,
    OutputFormat,
    StopReason,
    ToolSpec,
    Usage,
)
from .base import Provider, StreamingProvider

if TYPE_CHECKING:
    from .fallback import FallbackProvider

__all__ = [
    "CitationAdded",
    "FallbackProvider",
    "HostedTool",
    "HostedToolProgress",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputFormat",
    "Provider",
    "StopReason",
    "StreamDelta",
    "StreamingProvider",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolSpec",
    "Usage",
    "from_env",
    "resolve_provider",
]


# Imported on first use: it builds on the loop's modules.
__getattr__, __dir__ = lazy(__name__, {"FallbackProvider": ".fallback"})
