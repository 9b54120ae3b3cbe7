"""``paced(provider, pacing)``: any provider behind a pacing budget."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .._model_types import ModelRequest, ModelResponse
from ..errors import ConfigurationError, ResponseInvalid
from ..events import CitationAdded, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from ..messages import TextPart, ThinkingPart, ToolCallPart
from ._gate import PacedStream, Pacer

__all__ = ["PacedProvider", "paced"]


def paced(provider: Any, pacing: Pacer) -> PacedProvider:
    """``provider`` with every call going through ``pacing`` (for custom providers; the
    built-in ones take ``pacing=`` themselves).

    The result is a provider with the same ``name`` and ``model``. Its ``stream()`` reports
    the waits as :class:`~fanloop.events.PacingWait` events in the run's stream; a provider
    that only has ``complete()`` is streamed as one delta per part, as the loop would.

    Example:
        >>> from fanloop.pacing import Pacing, paced
        >>> from fanloop.testing import ScriptedProvider
        >>> provider = paced(ScriptedProvider(["hi"]), Pacing(requests_per_minute=600))
        >>> provider.name, provider.model
        ('scripted', 'scripted-model')
    """
    return PacedProvider(provider, pacing)


class PacedProvider:
    """A provider behind a :class:`~fanloop.pacing.Pacing` or
    :class:`~fanloop.pacing.RedisPacing` (see :func:`paced`)."""

    def __init__(self, inner: Any, pacing: Pacer) -> None:
        if not isinstance(pacing, Pacer):
            raise ConfigurationError(f"pacing= takes a Pacing or RedisPacing, not {pacing!r}")
        self.inner = inner
        self.pacing = pacing
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self.model = str(getattr(inner, "model", ""))
        self.hosted_tools: frozenset[str] = getattr(inner, "hosted_tools", frozenset())
        self.native_output = bool(getattr(inner, "native_output", False))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The inner provider's answer, once the pacing lets the call through."""
        return await self.pacing.complete(request, self._complete)

    def stream(self, request: ModelRequest) -> PacedStream:
        """The inner provider's stream (or its answer as deltas), behind the pacing."""
        return self.pacing.stream(request, self._open)

    async def aclose(self) -> None:
        """Close the inner provider, if it can be closed."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        complete = self.inner.complete
        if inspect.iscoroutinefunction(complete):
            response = await complete(request)
        else:
            response = await anyio.to_thread.run_sync(complete, request, abandon_on_cancel=True)
            if inspect.isawaitable(response):
                response = await response
        if not isinstance(response, ModelResponse):
            raise ResponseInvalid(
                f"the provider returned {type(response).__name__}, not a ModelResponse",
                provider=self.name,
            )
        return response

    def _open(self, request: ModelRequest) -> Any:
        stream = getattr(self.inner, "stream", None)
        if callable(stream):
            return stream(request)
        return self._as_stream(request)

    @asynccontextmanager
    async def _as_stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
        yield self._deltas(await self._complete(request))

    @staticmethod
    async def _deltas(response: ModelResponse) -> AsyncIterator[Any]:
        for index, part in enumerate(response.content):
            if isinstance(part, TextPart) and part.text:
                yield TextDelta(part.text)
                for citation in part.citations:
                    yield CitationAdded(citation, index)
            elif isinstance(part, ThinkingPart) and part.text:
                yield ThinkingDelta(part.text, part.signature)
            elif isinstance(part, ToolCallPart):
                yield ToolCallStarted(part.id, part.name, index)
                yield ToolCallDelta(part.id, json.dumps(part.arguments), index)
        yield response

    def __repr__(self) -> str:
        return f"paced({self.inner!r}, {self.pacing!r})"
