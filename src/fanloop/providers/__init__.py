"""Model providers: the protocol, the provider-independent types, and configuration.

The real providers live in their own modules and import their SDKs only when used::

    from fanloop.providers.anthropic import AnthropicProvider
    from fanloop.providers.openai import OpenAIProvider
"""

from ..events import StreamDelta, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from ._resolve import from_env, resolve_provider
from ._types import HostedTool, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from .base import Provider, StreamingProvider

__all__ = [
    "HostedTool",
    "ModelRequest",
    "ModelResponse",
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
