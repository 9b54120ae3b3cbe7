"""The provider protocol.

A provider turns a :class:`ModelRequest` into a :class:`ModelResponse`. The smallest one has a
``name``, a ``model`` and ``complete()`` (async, or plain ``def`` — a synchronous ``complete``
runs in a worker thread)::

    class EchoProvider:
        name = "echo"
        model = "echo-v1"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(content=(TextPart(text="hi"),), stop_reason=StopReason.END_TURN,
                                 usage=Usage(), model=self.model, provider=self.name)

A provider that can stream also has ``stream(request)``: an async context manager whose
iteration yields :data:`~fanloop.events.StreamDelta` events as they arrive and then, last, the
final :class:`ModelResponse`. A provider without ``stream`` still works: its answer reaches
consumers as one big delta.

Optional attributes: ``hosted_tools`` (a frozenset of :class:`HostedTool` kinds the provider
runs itself) and ``aclose()`` (release connections; ``Agent`` never calls it on a provider it
was handed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from ..events import StreamDelta
from ._types import HostedTool, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage

__all__ = [
    "HostedTool",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "StopReason",
    "StreamingProvider",
    "ToolSpec",
    "Usage",
]


@runtime_checkable
class Provider(Protocol):
    """What ``Agent`` needs from a model provider."""

    name: str
    model: str

    def complete(self, request: ModelRequest) -> Awaitable[ModelResponse] | ModelResponse:
        """Answer one request (``async def`` or plain ``def``)."""
        ...


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A provider that can stream its answer."""

    def stream(
        self, request: ModelRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamDelta | ModelResponse]]:
        """Yield deltas as they arrive, then the final :class:`ModelResponse`."""
        ...
