"""FallbackProvider: ask the next provider when one fails for good (docs/providers.md).

::

    from fanloop.providers import FallbackProvider

    provider = FallbackProvider(
        OpenAIProvider("gpt-4.1"),
        AnthropicProvider("claude-sonnet-4-5"),     # asked when OpenAI fails for good
    )
    agent = Agent(provider, retry=RetryPolicy(max_retries=2))

Each provider gets the run's retry policy of its own: a transient failure (429, 5xx, a
timeout, a broken stream) is retried on the same provider with the usual backoff; once its
retries are spent, or at once for a permanent failure (400, 401, 403, 404, a response over its
cap), the next provider is asked. A ``provider_fallback`` event says who gave up, why, and who
is asked next; the answer's ``ModelResponse.provider`` names who answered. When the last one
fails, its error ends the call (marked not transient: the loop does not start the chain over).

A prompt that does not fit the context window (:class:`~fanloop.errors.ContextWindowExceeded`)
is not a reason to switch: it goes straight to the loop, which compacts the conversation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._log import logger
from .._model import Halted, Invoker, Progress, _as_provider_error, make_invoker, send_guard
from .._retry import RetryPolicy
from .._scope import current_run
from ..errors import ConfigurationError, ContextWindowExceeded, ProviderError, ResponseInvalid
from ..events import ProviderFallback, RetryScheduled
from ._types import ModelRequest, ModelResponse, StopReason

__all__ = ["FallbackProvider"]

_MAY_BE_EMPTY = frozenset({StopReason.MAX_TOKENS, StopReason.REFUSAL})


class FallbackProvider:
    """A provider that asks ``primary``, then each of ``fallbacks`` in turn, until one answers.

    Args:
        primary: the provider asked first (a provider, or a ``"vendor:model"`` string).
        *fallbacks: the providers asked, in order, when the one before failed for good.
        retry: the retry policy of each provider (default: the running agent's ``retry``,
            or ``RetryPolicy()`` outside a run).
        should_fall_back: ``fn(error) -> bool``: whether a failure (transient ones after their
            retries) moves on to the next provider; default: every
            :class:`~fanloop.errors.ProviderError` but ``ContextWindowExceeded``.

    The capabilities are those all the providers share: ``hosted_tools`` and
    ``supported_settings`` are intersections, ``native_output`` is true only when every one
    has it (and accepts the schema). ``model`` is the primary's (it prices usage and sizes
    the context window).

    Attributes:
        providers: the providers, in the order they are asked.
        name: ``"fallback"``.
        model: the primary's model.
    """

    handles_stream_idle = True
    """The stream idle timeout applies to each provider's answer here, so that a stalled
    provider falls over to the next one (the agent does not watch this provider's stream)."""

    def __init__(
        self,
        primary: Any,
        *fallbacks: Any,
        retry: RetryPolicy | None = None,
        should_fall_back: Callable[[ProviderError], bool] | None = None,
    ) -> None:
        from ._resolve import resolve_provider

        owned: list[Any] = []
        providers: list[Any] = []
        for item in (primary, *fallbacks):
            if isinstance(item, str):
                item = resolve_provider(item)
                owned.append(item)
            if not callable(getattr(item, "complete", None)) and not callable(
                getattr(item, "stream", None)
            ):
                raise ConfigurationError(
                    f"{item!r} is not a provider: it needs a complete() or stream() method"
                )
            providers.append(item)
        self.providers: tuple[Any, ...] = tuple(providers)
        self.name = "fallback"
        self.model = str(getattr(providers[0], "model", ""))
        self.retry = retry
        self._should_fall_back = should_fall_back or _falls_back
        self._owned = owned
        self._invokers: dict[float | None, list[Invoker]] = {}
        self.hosted_tools: frozenset[str] = frozenset.intersection(
            *(frozenset(getattr(p, "hosted_tools", frozenset())) for p in providers)
        )
        self.native_output = all(getattr(p, "native_output", False) for p in providers)
        declared = [
            frozenset(s)
            for p in providers
            if (s := getattr(p, "supported_settings", None)) is not None
        ]
        if declared:
            self.supported_settings: frozenset[str] | None = frozenset.intersection(*declared)
        else:
            self.supported_settings = None

    def __repr__(self) -> str:
        names = ", ".join(f"{_name(p)}:{getattr(p, 'model', '')}" for p in self.providers)
        return f"FallbackProvider({names})"

    def accepts_output_schema(self, schema: dict[str, Any]) -> bool:
        """Whether every provider can constrain its answer to ``schema``."""
        for provider in self.providers:
            accepts = getattr(provider, "accepts_output_schema", None)
            if callable(accepts) and not accepts(schema):
                return False
        return True

    async def aclose(self) -> None:
        """Close the providers this one made from ``"vendor:model"`` strings."""
        for provider in self._owned:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()

    # -- answering ---------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` from the first provider that can."""
        run = current_run()
        notify = run.emitter.emit if run is not None else None
        return await self._answer(request, None, notify)

    def stream(self, request: ModelRequest) -> _FallbackStream:
        """Stream the answer to ``request`` from the first provider that can (the deltas of
        an abandoned answer are followed by a ``provider_fallback`` event that says so)."""
        return _FallbackStream(self, request)

    async def _answer(
        self,
        request: ModelRequest,
        emit: Callable[[Any], Awaitable[None]] | None,
        notify: Callable[[Any], Awaitable[None]] | None,
    ) -> ModelResponse:
        """The chain: ``emit`` takes the deltas, ``notify`` the retry and fallback events."""
        run = current_run()
        policy = self.retry or (run.agent.retry if run is not None else RetryPolicy())
        invokers = self._invokers_for(policy.stream_idle_timeout)
        last = len(self.providers) - 1
        error: ProviderError | None = None
        for index, (provider, invoke) in enumerate(zip(self.providers, invokers, strict=True)):
            name = _name(provider)
            attempt = 0
            while True:
                attempt += 1
                progress = Progress()
                try:
                    response = await invoke(request, emit, progress)
                    if not response.content and response.stop_reason not in _MAY_BE_EMPTY:
                        raise ResponseInvalid(
                            "the model returned an empty response "
                            f"(stop reason {response.stop_reason})",
                            provider=name,
                        )
                    return response
                except Exception as exc:
                    error = _as_provider_error(exc, name)
                if not self._should_fall_back(error):
                    raise error  # the loop's own business (its retries, compaction)
                if not policy.should_retry(error, attempt):
                    break
                delay = policy.delay(attempt, error)
                logger.info(
                    "model_call_retry",
                    provider=name,
                    error=type(error).__name__,
                    attempt=attempt,
                    delay=delay,
                )
                if notify is not None:
                    await notify(RetryScheduled(attempt, delay, error, progress.emitted))
                await anyio.sleep(delay)
                _may_send(run, error)
            if index == last:
                break
            _may_send(run, error)
            following = _name(self.providers[index + 1])
            logger.info(
                "provider_fallback",
                from_provider=name,
                to_provider=following,
                error=type(error).__name__,
                message=str(error),
            )
            if notify is not None:
                await notify(ProviderFallback(name, following, error, progress.emitted))
        assert error is not None
        error.transient = False  # type: ignore[misc]  # every provider had its retries
        raise error

    def _invokers_for(self, idle: float | None) -> list[Invoker]:
        invokers = self._invokers.get(idle)
        if invokers is None:
            invokers = self._invokers[idle] = [make_invoker(p, idle) for p in self.providers]
        return invokers


def _may_send(run: Any, error: ProviderError) -> None:
    """Raise :class:`~fanloop._model.Halted` when the run may send no more requests (its
    deadline passed, or a report in its tree spent a budget): a retry or a fallback is a new
    call like any other."""
    if run is not None and (stop := send_guard(run)) is not None:
        raise Halted(stop) from error


def _falls_back(error: ProviderError) -> bool:
    return not isinstance(error, ContextWindowExceeded)


def _name(provider: Any) -> str:
    return str(getattr(provider, "name", type(provider).__name__))


class _Notice:
    """A retry or fallback event, queued behind the deltas sent before it."""

    __slots__ = ("event",)

    def __init__(self, event: Any) -> None:
        self.event = event


class _FallbackStream:
    """``async with provider.stream(request) as events``: the fallback chain runs in a task of
    its own and hands over its deltas as they come, then the response (or the error).

    Its retry and fallback events travel in the same queue and are emitted by the consuming
    task as it reaches them, so they come after the deltas they follow, never before.
    """

    def __init__(self, provider: FallbackProvider, request: ModelRequest) -> None:
        self._provider = provider
        self._request = request
        run = current_run()
        self._emit = run.emitter.emit if run is not None else None
        self._send: MemoryObjectSendStream[Any]
        self._recv: MemoryObjectReceiveStream[Any]
        self._send, self._recv = anyio.create_memory_object_stream[Any](16)
        self._tg = anyio.create_task_group()

    async def __aenter__(self) -> AsyncIterator[Any]:
        await self._tg.__aenter__()
        self._tg.start_soon(self._produce, self._send)
        return self

    async def _produce(self, send: MemoryObjectSendStream[Any]) -> None:
        async def notify(event: Any) -> None:
            await send.send(_Notice(event))

        async with send:
            try:
                item: Any = await self._provider._answer(self._request, send.send, notify)
            except Exception as exc:
                item = exc
            await send.send(item)

    def __aiter__(self) -> _FallbackStream:
        return self

    async def __anext__(self) -> Any:
        while True:
            try:
                item = await self._recv.receive()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
            if isinstance(item, _Notice):
                if self._emit is not None:
                    await self._emit(item.event)
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            self._recv.close()
