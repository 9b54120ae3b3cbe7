"""The provider-independent types, for the provider modules: they live in
:mod:`fanloop._model_types`, below the engine, so importing them does not load the providers."""

from .._model_types import (
    HostedTool,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OutputFormat,
    StopReason,
    ToolSpec,
    Usage,
)

__all__ = [
    "HostedTool",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputFormat",
    "StopReason",
    "ToolSpec",
    "Usage",
]
