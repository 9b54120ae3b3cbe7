"""The checkpointed steps of a durable run: model calls, tool calls, the confirm gate.

Each wraps a part of the agent from outside, so the loop runs unchanged:

- :class:`DurableProvider` is the run's provider. A model call is one step that streams the
  real provider's answer (its deltas reach the loop as they arrive) and records the final
  :class:`~fanloop.providers.ModelResponse`, or the provider error, as JSON. A recovered
  workflow gets the recorded response back at once, without calling the model.
- :class:`DurableTool` wraps each tool: a call is one step recording the result the model
  sees. A completed call is never run again; one that started but did not complete runs
  again on recovery (at least once, not exactly once).
- :class:`ApprovalGate` is the confirm gate: its answer is a step, so a replay takes the same
  decision; a ``confirm`` that returns :data:`~fanloop.DEFER` makes the workflow wait, durably,
  for :meth:`DurableRun.approve <fanloop.durable.DurableRun.approve>`.
- :class:`OutputCheck` wraps each output validator: its verdict (the value, or the
  ``ModelRetry`` message) is a step, since a validator may look things up.

Determinism: a step's id is taken when it is called. The loop starts a batch's calls as tasks
in the model's order and nothing before a wrapper's step call waits (the wrappers are
``concurrent_safe`` and carry no concurrency caps), so the calls of a batch take their ids in
the model's order in every execution. What a tool really needs — one-after-another calls of a
tool that is not ``concurrent_safe``, its timeout, the agent's per-tool, per-agent and keyed
caps — is applied inside the step, where waiting changes no id.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._approvals import DEFER
from .._fanout import DEFER_IN_SUBAGENT, MAX_ERROR_CHARS, _takes_call, clip
from .._log import logger
from .._model import Progress, _as_provider_error, make_invoker
from .._model_types import ModelRequest, ModelResponse
from ..errors import ModelRetry, ToolError
from ..limits import clean_usage
from ..messages import ToolCallPart
from ..tools.base import Tool, ToolResult, to_result
from ._account import LEASE, Account
from ._codec import RemoteError, error_from_dict, error_to_dict
from ._dbos import Interrupted, dbos, step

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = [
    "ApprovalGate",
    "DurableProvider",
    "DurableTool",
    "Lanes",
    "OutputCheck",
    "approval_topic",
    "cut",
]

APPROVAL_WAIT = 3600.0
"""Seconds of one durable wait for an approval (the wait is renewed until an answer comes)."""


# -- model calls -------------------------------------------------------------------------------


class DurableProvider:
    """A provider whose every call is a DBOS step (see the module docstring).

    Args:
        inner: the real provider.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self.model = str(getattr(inner, "model", ""))
        self.hosted_tools: frozenset[str] = getattr(inner, "hosted_tools", frozenset())
        self.native_output = bool(getattr(inner, "native_output", False))
        # What the inner provider can honour decides the agent's choices (native output for a
        # schema, which settings it refuses): pass its judgements through unchanged.
        accepts = getattr(inner, "accepts_output_schema", None)
        if callable(accepts):
            self.accepts_output_schema = accepts
        supported = getattr(inner, "supported_settings", None)
        if supported is not None:
            self.supported_settings = supported
        self._invoke = make_invoker(inner)

    def stream(self, request: ModelRequest) -> _StepStream:
        """The call as a stream: the live step's deltas, then the response."""
        return _StepStream(self, request)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The call, without deltas."""
        return _response(await step("fanloop.model", self._call, request, None, held_call()))

    async def _call(
        self,
        request: ModelRequest,
        send: Callable[[Any], Awaitable[None]] | None,
        held: HeldCall | None,
    ) -> dict[str, Any]:
        """The step's body: ask the real provider; the response or the error, as JSON.

        With a reservation in the tree's account (``held``), the call keeps its lease alive
        while it runs and charges what it reported before the step records it.
        """
        try:
            if held is None:
                response = await self._invoke(request, send, Progress())
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(held.keep_alive)
                    response = await self._invoke(request, send, Progress())
                    tg.cancel_scope.cancel()
        except Exception as exc:
            return {"error": error_to_dict(_as_provider_error(exc, self.name))}
        if held is not None:
            await held.charge(response)
        return {"response": response.model_dump(mode="json")}


class HeldCall:
    """A model call's reservation in its tree's account (see ``_budget``)."""

    __slots__ = ("account", "model", "rid")

    def __init__(self, account: Account, rid: str, model: str) -> None:
        self.account = account
        self.rid = rid
        self.model = model

    async def keep_alive(self) -> None:
        """Renew the lease while the call runs (a failed renewal is only logged: the lease
        is long enough for the next one)."""
        while True:
            await anyio.sleep(LEASE / 3)
            try:
                await self.account.renew(self.rid)
            except Exception as exc:
                logger.warning("budget_lease_renewal_failed", error=repr(exc))

    async def charge(self, response: ModelResponse) -> None:
        """Charge what the call reported and settle its reservation."""
        await self.account.charge(self.rid, clean_usage(response.usage), self.model)


def held_call() -> HeldCall | None:
    """The reservation the current run holds in a durable account for its next model call."""
    from .._scope import current_run
    from ._budget import durable_budget

    run = current_run()
    budget = durable_budget(run.budget) if run is not None else None
    if run is None or budget is None or budget.held is None:
        return None
    return HeldCall(budget.account(), budget.held, run.agent.model)


def _load_part(data: dict[str, Any]) -> Any:
    """An image or document part of a tool result, from its checkpointed JSON."""
    from ..messages import DocumentPart, ImagePart

    kind = DocumentPart if data.get("kind") == "document" else ImagePart
    return kind.model_validate(data)


def _response(out: dict[str, Any]) -> ModelResponse:
    if out.get("error") is not None:
        raise error_from_dict(out["error"])
    return ModelResponse.model_validate(out["response"])


class _StepStream:
    """``async with provider.stream(request) as events``: the step runs in a task of its own
    and hands its deltas over as they come; a replayed step hands over only the response."""

    def __init__(self, provider: DurableProvider, request: ModelRequest) -> None:
        self._provider = provider
        self._request = request
        self._send, self._recv = anyio.create_memory_object_stream[Any](64)
        self._tg = anyio.create_task_group()
        self._held = held_call()

    async def __aenter__(self) -> AsyncIterator[Any]:
        await self._tg.__aenter__()
        self._tg.start_soon(self._produce, self._send)
        return self

    async def _produce(self, send: MemoryObjectSendStream[Any]) -> None:
        async with send:
            try:
                out = await step(
                    "fanloop.model", self._provider._call, self._request, send.send, self._held
                )
                item: Any = _response(out)
            except (Exception, Interrupted) as exc:
                item = exc
            await send.send(item)

    def __aiter__(self) -> _StepStream:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._recv.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            raise item
        return item

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A step still streaming is cancelled, never failed, so it is not recorded: a replay
        # runs it again rather than finding an error the live run never saw.
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            self._recv.close()


# -- tool calls --------------------------------------------------------------------------------


def cut(content: str, cap: int | None) -> str:
    """``content`` cut to the agent's ``max_tool_result_chars`` as the loop cuts it, inside
    the step, so a checkpoint is never larger than what the model is shown."""
    if cap is None or len(content) <= cap:
        return content
    return (
        f"{content[:cap]}\n[... output truncated: {len(content) - cap} more characters "
        f"not shown (limit {cap})]"
    )


class Lanes:
    """Per tool name, the last call that started: a call of a tool that is not
    ``concurrent_safe`` waits, inside its step, for the one before it (the model's order)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, anyio.Event] = {}

    def join(self, name: str) -> tuple[anyio.Event | None, anyio.Event]:
        """The previous call's done event (``None`` for the first) and this call's own."""
        before = self._last.get(name)
        mine = self._last[name] = anyio.Event()
        return before, mine


class DurableTool(Tool):
    """A tool whose every call is a DBOS step (see the module docstring).

    Validation and the preview stay outside the step (they run again on replay and cost
    nothing); the step records the content and error flag of the result the model sees.

    Args:
        inner: the real tool.
        agent: the agent the tool belongs to (its concurrency caps, thread pool and output cap).
        lanes: the run's :class:`Lanes`.
    """

    concurrent_safe = True

    def __init__(self, inner: Tool, agent: Agent, lanes: Lanes) -> None:
        self.inner = inner
        self.name = inner.name
        self.description = inner.description
        self.parameters = inner.parameters
        self.dangerous = inner.dangerous
        self._agent = agent
        self._lanes = lanes
        self._step = f"fanloop.tool:{inner.name}"

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self.inner.validate(arguments)

    def preview(self, **kwargs: Any) -> str:
        return self.inner.preview(**kwargs)

    async def run(self, **kwargs: Any) -> ToolResult:
        before, mine = (None, None) if self.inner.concurrent_safe else self._lanes.join(self.name)
        try:
            out = await step(self._step, self._body, before, kwargs)
        finally:
            if mine is not None:
                mine.set()
        parts = tuple(_load_part(p) for p in out.get("parts") or ())
        return ToolResult(str(out["content"]), is_error=bool(out["is_error"]), parts=parts)

    async def _body(self, before: anyio.Event | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        if before is not None:
            await before.wait()
        limiters = self._agent.limiters_for(self.inner)
        async with AsyncExitStack() as stack:
            for limiter in limiters:
                await stack.enter_async_context(limiter)
            result = await self._call(kwargs)
        content = cut(result.content, self._agent.max_tool_result_chars)
        parts = [p.model_dump(mode="json") for p in result.parts]
        return {"content": content, "is_error": result.is_error, "parts": parts}

    async def _call(self, kwargs: dict[str, Any]) -> ToolResult:
        """The tool's result as the loop would make it: errors and timeouts become results."""
        inner = self.inner
        name = inner.name
        try:
            if inner.timeout is not None:
                with anyio.fail_after(inner.timeout):
                    value = await self._invoke(kwargs)
            else:
                value = await self._invoke(kwargs)
            return to_result(value)
        except (ToolError, ModelRetry) as exc:
            return ToolResult(str(exc), is_error=True)
        except TimeoutError:
            return ToolResult(
                f"Tool {name!r} timed out after {inner.timeout} seconds.", is_error=True
            )
        except Exception as exc:
            logger.info("tool_failed", tool=name, error=repr(exc), exc_info=True)
            return ToolResult(
                clip(f"Tool {name!r} failed: {type(exc).__name__}: {exc}", MAX_ERROR_CHARS),
                is_error=True,
            )

    async def _invoke(self, kwargs: dict[str, Any]) -> Any:
        agent = self._agent
        inner = self.inner
        if agent.tool_is_async(inner):
            return await inner.run(**kwargs)
        limiter = agent.limiters.get("__threads__", agent.limiters.threads)
        value = await anyio.to_thread.run_sync(
            lambda: inner.run(**kwargs), limiter=limiter, abandon_on_cancel=True
        )
        if inspect.isawaitable(value):
            value = await value
        return value


# -- the confirm gate --------------------------------------------------------------------------


def approval_topic(call_id: str) -> str:
    """The DBOS message topic an approval for ``call_id`` is sent on."""
    return f"fanloop.approval:{call_id}"


def _answer(value: Any) -> bool | str:
    """``True`` runs, a string declines with that reason, anything else declines."""
    if value is True or isinstance(value, str):
        return value
    return False


class ApprovalGate:
    """The confirm gate of a durable run: ``confirm``'s answer is checkpointed as a step.

    A ``confirm`` that returns :data:`~fanloop.DEFER` makes a root run wait, durably (a DBOS
    ``recv`` on the call's topic, across restarts), for the answer sent with
    ``DurableRun.approve``; in a sub-agent it declines, as in one process.

    Args:
        confirm: the agent's ``confirm`` (sync or async; two or three positional parameters).
        can_wait: whether :data:`DEFER` may wait (root runs) or declines (sub-agents).
    """

    def __init__(self, confirm: Callable[..., Any], *, can_wait: bool) -> None:
        self._confirm = confirm
        self._can_wait = can_wait

    async def __call__(self, name: str, preview: str, call: ToolCallPart) -> bool | str:
        out = await step("fanloop.confirm", self._ask, name, preview, call)
        if not out.get("defer"):
            return _answer(out.get("answer"))
        if not self._can_wait:
            return DEFER_IN_SUBAGENT
        return await _wait_for_approval(call.id)

    async def _ask(self, name: str, preview: str, call: ToolCallPart) -> dict[str, Any]:
        confirm = self._confirm
        try:
            if _takes_call(confirm):
                answer = confirm(name, preview, call)
            else:
                answer = confirm(name, preview)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            logger.exception("confirm_failed", tool=name)
            return {"answer": f"Declined: the confirmation prompt failed ({type(exc).__name__})."}
        if answer is DEFER:
            return {"defer": True}
        return {"answer": _answer(answer)}


async def _wait_for_approval(call_id: str) -> bool | str:
    topic = approval_topic(call_id)
    while True:
        try:
            message = await dbos().recv_async(topic, timeout_seconds=APPROVAL_WAIT)
        except Exception as exc:
            raise Interrupted(exc) from exc
        if message is not None:
            return _answer(message)


# -- output validators -------------------------------------------------------------------------


class OutputCheck:
    """An output validator of a durable run: its verdict is a step (see the module docstring).

    Args:
        fn: the validator, ``fn(output)`` or ``fn(ctx, output)``, sync or async.
        takes_context: whether ``fn`` takes the :class:`~fanloop.RunContext` first.
        adapter: the output type's pydantic ``TypeAdapter`` (the value is recorded as JSON).
    """

    def __init__(self, fn: Callable[..., Any], takes_context: bool, adapter: Any) -> None:
        self._fn = fn
        self._takes_context = takes_context
        self._adapter = adapter

    async def __call__(self, ctx: Any, output: Any) -> Any:
        out = await step("fanloop.output_check", self._check, ctx, output)
        if "retry" in out:
            raise ModelRetry(str(out["retry"]))
        if "raise" in out:
            raise RemoteError(str(out["raise"]["message"]), type_name=str(out["raise"]["type"]))
        value = out.get("value")
        return None if value is None else self._adapter.validate_python(value)

    async def _check(self, ctx: Any, output: Any) -> dict[str, Any]:
        try:
            value = self._fn(ctx, output) if self._takes_context else self._fn(output)
            if inspect.isawaitable(value):
                value = await value
        except ModelRetry as exc:
            return {"retry": str(exc)}
        except Exception as exc:
            return {"raise": {"type": type(exc).__name__, "message": str(exc)}}
        if value is None:
            return {"value": None}
        return {"value": self._adapter.dump_python(value, mode="json")}
