"""ScriptedProvider: a provider that plays back scripted turns, for tests (yours and ours)."""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import anyio

from .._model_types import ModelRequest, ModelResponse
from .._output import FINAL_TOOL
from .._unicode import valid_now, vouch_parsed
from ..errors import ScriptExhausted
from ..events import (
    CitationAdded,
    StreamDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
)
from ..messages import TextPart, ThinkingPart, ToolCallPart
from ._typed import typed_answer

__all__ = ["ScriptedProvider", "Turn"]

Turn: TypeAlias = (
    "ModelResponse | str | BaseException | type[BaseException] | Callable[[ModelRequest], Any]"
)


class ScriptedProvider:
    """Plays back a script of model turns and records every request it saw.

    Each script item answers one request, in order. An item may be a
    :class:`~fanloop.providers.ModelResponse` (see :func:`~fanloop.testing.reply`), a string (a
    text answer), an exception (raised instead of answering), or a function of the
    :class:`~fanloop.providers.ModelRequest` (sync or async) returning any of those. Pass a
    single function instead of a list to answer every request with it.

    Streaming splits text, thinking and tool-call arguments into ``chunk_size``-character deltas
    (a text part's citations follow its text as :class:`~fanloop.events.CitationAdded`),
    sleeping ``delay`` seconds between them (and ``first_delay`` before the first); with
    ``stream=False`` the provider has only ``complete()``.

    ``native_output=True`` makes it a provider with native structured output (a typed answer
    is then scripted as its JSON text; ``request.output`` holds the schema), and
    ``supported_settings`` declares which :class:`~fanloop.ModelSettings` fields it honours
    (default: it takes them all, as a custom provider does).

    Example:
        >>> from fanloop.testing import reply, call
        >>> provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=2)]), "3"])
    """

    def __init__(
        self,
        script: Iterable[Turn] | Callable[[ModelRequest], Any] = (),
        *,
        model: str = "scripted-model",
        name: str = "scripted",
        chunk_size: int = 16,
        delay: float = 0.0,
        first_delay: float = 0.0,
        stream: bool = True,
        hosted_tools: frozenset[str] = frozenset(),
        record: bool = True,
        native_output: bool = False,
        supported_settings: Iterable[str] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.chunk_size = max(1, chunk_size)
        self.delay = delay
        self.first_delay = first_delay
        self.hosted_tools = hosted_tools
        self.native_output = native_output
        if supported_settings is not None:
            self.supported_settings = frozenset(supported_settings)
        self.requests: list[ModelRequest] = []
        self._record = record
        if callable(script) and not isinstance(script, type):
            self._responder: Callable[[ModelRequest], Any] | None = script
            self._script: deque[Turn] = deque()
        else:
            self._responder = None
            self._script = deque(script)  # type: ignore[arg-type]
        if not stream:
            self.stream = None  # type: ignore[assignment]

    @property
    def remaining(self) -> int:
        """Scripted turns not yet played."""
        return len(self._script)

    def add(self, *turns: Turn) -> None:
        """Append turns to the script."""
        self._script.extend(turns)

    async def _next(self, request: ModelRequest) -> ModelResponse:
        response = await self._scripted(request)
        # A typed answer plays in the form the request asks for (testing/_typed.py).
        final = next((t for t in request.tools if t.name == FINAL_TOOL), None)
        if request.output is None and final is None:
            return response
        return typed_answer(
            response,
            native=request.output is not None,
            final_tool=final.parameters if final is not None else None,
        )

    async def _scripted(self, request: ModelRequest) -> ModelResponse:
        if self._record:
            self.requests.append(request)
        if self._responder is not None:
            item: Any = self._responder
        elif self._script:
            item = self._script.popleft()
        else:
            raise ScriptExhausted(
                f"ScriptedProvider has no turn left for request #{len(self.requests)}"
            )
        return await self._resolve(item, request)

    async def _resolve(self, item: Any, request: ModelRequest) -> ModelResponse:
        while True:
            if isinstance(item, ModelResponse):
                # A scripted turn's text is checked for lone surrogates once, however often
                # it plays (not each time it joins a conversation); its copy says the same.
                clean = valid_now((item,))
                response: ModelResponse = item
                if not response.model or not response.provider:
                    response = response.model_copy(
                        update={
                            "model": response.model or self.model,
                            "provider": response.provider or self.name,
                        }
                    )
                    if clean:  # (and the names filled in are this provider's own: checked)
                        vouch_parsed(response, response.model, response.provider)
                return response
            if isinstance(item, str):
                return ModelResponse(
                    content=(TextPart(text=item),), model=self.model, provider=self.name
                )
            if isinstance(item, BaseException) or (
                isinstance(item, type) and issubclass(item, BaseException)
            ):
                raise item
            if callable(item):
                item = item(request)
                if inspect.isawaitable(item):
                    item = await item
                continue
            raise TypeError(f"cannot play script item {item!r}")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with the next scripted turn."""
        if self.first_delay:
            await anyio.sleep(self.first_delay)
        return await self._next(request)

    def stream(self, request: ModelRequest) -> Any:
        """Stream the next scripted turn as deltas, then yield the response."""
        return self._stream(request)

    @asynccontextmanager
    async def _stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamDelta | ModelResponse]]:
        yield self._deltas(request)

    async def _deltas(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        if self.first_delay:
            await anyio.sleep(self.first_delay)
        response = await self._next(request)
        n = self.chunk_size
        for index, part in enumerate(response.content):
            if isinstance(part, TextPart):
                for i in range(0, len(part.text), n):
                    await self._pause()
                    yield TextDelta(part.text[i : i + n])
                for citation in part.citations:
                    yield CitationAdded(citation, index)
            elif isinstance(part, ThinkingPart):
                for i in range(0, len(part.text), n):
                    await self._pause()
                    yield ThinkingDelta(part.text[i : i + n])
            elif isinstance(part, ToolCallPart):
                await self._pause()
                yield ToolCallStarted(part.id, part.name, index)
                args = json.dumps(part.arguments)
                for i in range(0, len(args), n):
                    await self._pause()
                    yield ToolCallDelta(part.id, args[i : i + n], index)
        yield response

    async def _pause(self) -> None:
        if self.delay:
            await anyio.sleep(self.delay)
