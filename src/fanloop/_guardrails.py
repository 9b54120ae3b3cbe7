"""Guardrails: checks of a run's prompt and of its final answer that can end it
(docs/guardrails.md).

Around the turn loop, per run::

    blocking input guardrails            # run_in_parallel=False: before the first model call
    start the other input guardrails     # a task beside the loop, not before it
    run the loop                         # no tool call starts until they all pass (run.gate)
        a trip: cancel the loop          # the model request in flight is cut off
    wait for the input guardrails        # an answer never outruns its prompt's check
    output guardrails on the answer      # after output validation, concurrently
    a trip: end with guardrail_tripped

A guardrail's function returns a :class:`GuardrailResult`; one that raises is a bug and its
exception propagates out of the run, as a tool's would out of a test.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, cast, overload

import anyio

from ._loop import run_loop
from ._record import record
from ._result import GuardrailTrip, RunResult, TerminationReason
from .errors import ConfigurationError
from .events import GuardrailTripped

if TYPE_CHECKING:
    from ._run import RunState
    from .tools.base import RunContext

__all__ = [
    "Guardrail",
    "GuardrailResult",
    "Guardrails",
    "InputGuardrail",
    "OutputGuardrail",
    "input_guardrail",
    "output_guardrail",
]

GuardrailFn: TypeAlias = Callable[..., "GuardrailResult | Awaitable[GuardrailResult]"]
"""``fn(ctx, prompt)`` for an input guardrail, ``fn(ctx, output)`` or ``fn(ctx, output,
text)`` for an output guardrail; sync or async; returns a :class:`GuardrailResult`."""


@record(frozen=True)
class GuardrailResult:
    """What a guardrail's function returns.

    Attributes:
        tripped: ``True`` ends the run with ``guardrail_tripped`` (the Agents SDK's
            ``tripwire_triggered``); ``False`` lets it go on.
        info: anything worth keeping about the check (a score, the category found); it
            reaches ``result.guardrail.info`` when the guardrail trips.
        message: a note on why, for ``result.detail`` and ``result.guardrail.message``.
    """

    tripped: bool
    info: Any = None
    message: str | None = None


class Guardrail:
    """A check of a run's prompt or final answer (see :class:`InputGuardrail`,
    :class:`OutputGuardrail`)."""

    __slots__ = ("_is_async", "fn", "name")
    kind: ClassVar[Literal["input", "output"]]
    _arity: ClassVar[tuple[int, ...]]  # the positional arguments the function may take
    _signature: ClassVar[str]  # its parameters, for the error that says so

    def __init__(self, fn: GuardrailFn, *, name: str | None = None) -> None:
        if isinstance(fn, Guardrail) or not callable(fn):
            raise ConfigurationError(
                f"an {self.kind} guardrail wraps a function, not {type(fn).__name__}"
            )
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", type(fn).__name__))
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 (an async __call__, not callability)
        )

    def _check_arity(self, fn: Callable[..., Any]) -> int:
        """How many positional arguments ``fn`` takes (one of ``_arity``), or a clear error."""
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # no signature to read (a builtin): trust it
            return self._arity[0]
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return self._arity[-1]
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(p.default is p.empty for p in positional)
        for n in self._arity:
            if required <= n <= len(positional):
                return n
        shapes = " or ".join(f"{n} positional arguments" for n in self._arity)
        raise ConfigurationError(
            f"{self.kind} guardrail {self.name!r} must take {shapes} "
            f"({self._signature}), not {len(positional)}"
        )

    async def _verdict(self, *args: Any) -> GuardrailTrip | None:
        """Call the function; the trip it reports, or ``None`` when it passes."""
        out: Any
        if self._is_async:
            out = await cast("Awaitable[Any]", self.fn(*args))
        else:  # in a worker thread, as a sync tool runs: it cannot stall the model call
            out = await anyio.to_thread.run_sync(partial(self.fn, *args))
            if inspect.isawaitable(out):
                out = await out
        if not isinstance(out, GuardrailResult):
            hint = (
                " (a bare bool is ambiguous: say GuardrailResult(tripped=True) to stop the run)"
                if isinstance(out, bool)
                else ""
            )
            raise ConfigurationError(
                f"{self.kind} guardrail {self.name!r} returned {type(out).__name__}, not a "
                f"GuardrailResult{hint}"
            )
        if not out.tripped:
            return None
        message = None if out.message is None else str(out.message)
        return GuardrailTrip(name=self.name, kind=self.kind, message=message, info=out.info)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class InputGuardrail(Guardrail):
    """A check of the prompt a run is given: ``fn(ctx, prompt) -> GuardrailResult``.

    ``ctx`` is the run's :class:`~fanloop.RunContext` (``ctx.deps``, ``ctx.run_id``...);
    ``prompt`` is the text of the user message(s) the run was given (images and documents are
    not in it). A run given no prompt (``resume``, or ``run(messages=...)`` alone) has none to
    check.

    Args:
        fn: the check, sync (run in a worker thread) or async.
        name: its name in ``result.guardrail`` and ``result.detail`` (default: the
            function's).
        run_in_parallel: start it together with the first model call (the default: a check
            that passes adds no latency; one that trips cuts the model call off). ``False``
            runs it, and waits for it, before the first model call is sent.
    """

    __slots__ = ("run_in_parallel",)
    kind: ClassVar[Literal["input", "output"]] = "input"
    _arity = (2,)
    _signature = "ctx, prompt"

    def __init__(
        self, fn: GuardrailFn, *, name: str | None = None, run_in_parallel: bool = True
    ) -> None:
        super().__init__(fn, name=name)
        self._check_arity(fn)
        self.run_in_parallel = run_in_parallel

    async def check(self, ctx: RunContext[Any], prompt: str) -> GuardrailTrip | None:
        """Run the check: the trip it reports, or ``None`` when the prompt passes."""
        return await self._verdict(ctx, prompt)


class OutputGuardrail(Guardrail):
    """A check of a run's final answer: ``fn(ctx, output) -> GuardrailResult``.

    ``output`` is the answer as the agent's ``output_type``, after output validation (the text
    for a text agent). A function with a third positional parameter also receives the answer's
    text (a typed answer's JSON).

    Args:
        fn: the check, sync (run in a worker thread) or async.
        name: its name in ``result.guardrail`` and ``result.detail`` (default: the
            function's).
    """

    __slots__ = ("_with_text",)
    kind: ClassVar[Literal["input", "output"]] = "output"
    _arity = (2, 3)
    _signature = "ctx, output[, text]"

    def __init__(self, fn: GuardrailFn, *, name: str | None = None) -> None:
        super().__init__(fn, name=name)
        self._with_text = self._check_arity(fn) == 3

    async def check(self, ctx: RunContext[Any], output: Any, text: str) -> GuardrailTrip | None:
        """Run the check: the trip it reports, or ``None`` when the answer passes."""
        if self._with_text:
            return await self._verdict(ctx, output, text)
        return await self._verdict(ctx, output)


@overload
def input_guardrail(
    fn: GuardrailFn, /, *, name: str | None = None, run_in_parallel: bool = True
) -> InputGuardrail: ...
@overload
def input_guardrail(
    *, name: str | None = None, run_in_parallel: bool = True
) -> Callable[[GuardrailFn], InputGuardrail]: ...
def input_guardrail(
    fn: GuardrailFn | None = None, /, *, name: str | None = None, run_in_parallel: bool = True
) -> InputGuardrail | Callable[[GuardrailFn], InputGuardrail]:
    """Make ``fn(ctx, prompt) -> GuardrailResult`` an :class:`InputGuardrail`: as
    ``@input_guardrail``, ``@input_guardrail(name=..., run_in_parallel=False)`` or
    ``input_guardrail(fn, name=...)``."""
    if fn is None:
        return partial(InputGuardrail, name=name, run_in_parallel=run_in_parallel)
    return InputGuardrail(fn, name=name, run_in_parallel=run_in_parallel)


@overload
def output_guardrail(fn: GuardrailFn, /, *, name: str | None = None) -> OutputGuardrail: ...
@overload
def output_guardrail(*, name: str | None = None) -> Callable[[GuardrailFn], OutputGuardrail]: ...
def output_guardrail(
    fn: GuardrailFn | None = None, /, *, name: str | None = None
) -> OutputGuardrail | Callable[[GuardrailFn], OutputGuardrail]:
    """Make ``fn(ctx, output) -> GuardrailResult`` an :class:`OutputGuardrail`: as
    ``@output_guardrail``, ``@output_guardrail(name=...)`` or ``output_guardrail(fn, name=...)``."""
    if fn is None:
        return partial(OutputGuardrail, name=name)
    return OutputGuardrail(fn, name=name)


@record(frozen=True)
class Guardrails:
    """An agent's guardrails, sorted once when the agent is made, and how a run uses them."""

    blocking: tuple[InputGuardrail, ...]  # run_in_parallel=False: before the first model call
    parallel: tuple[InputGuardrail, ...]
    output: tuple[OutputGuardrail, ...]

    @staticmethod
    def build(guardrails: Iterable[Any]) -> tuple[tuple[Guardrail, ...], Guardrails | None]:
        """The guardrails as given (checked) and the set a run uses (``None``: none given)."""
        if isinstance(guardrails, Guardrail):
            raise ConfigurationError("guardrails= takes a list: guardrails=[...]")
        given = tuple(guardrails)
        for g in given:
            if not isinstance(g, InputGuardrail | OutputGuardrail):
                raise ConfigurationError(
                    f"guardrails= takes InputGuardrail and OutputGuardrail objects, not "
                    f"{type(g).__name__}: wrap a function with @input_guardrail or "
                    "@output_guardrail"
                )
        if not given:
            return given, None
        inputs = [g for g in given if isinstance(g, InputGuardrail)]
        return given, Guardrails(
            blocking=tuple(g for g in inputs if not g.run_in_parallel),
            parallel=tuple(g for g in inputs if g.run_in_parallel),
            output=tuple(g for g in given if isinstance(g, OutputGuardrail)),
        )

    async def run(self, run: RunState) -> RunResult:
        """``run``'s loop with its guardrails around it; how the run ended."""
        prompt = _prompt_of(run) if self.blocking or self.parallel else None
        if prompt is not None and self.blocking:
            ctx = run.context(what="input_guardrail")
            trip = await _first_trip(self.blocking, ctx, prompt)
            if trip is not None:
                return await _tripped(run, trip)
        if prompt is not None and self.parallel:
            result = await self._beside_loop(run, prompt)
        else:
            result = await run_loop(run)
        if not self.output or result.termination_reason is not TerminationReason.COMPLETED:
            return result
        ctx = run.context(what="output_guardrail")
        trip = await _first_trip(self.output, ctx, result.output, result.text)
        return result if trip is None else await _tripped(run, trip)

    async def _beside_loop(self, run: RunState, prompt: str) -> RunResult:
        """The loop, with the parallel input guardrails checking ``prompt`` beside it."""
        ctx = run.context(what="input_guardrail")
        gate = run.gate = anyio.Event()
        loop_scope = anyio.CancelScope()
        tripped: list[GuardrailTrip] = []
        failed: list[Exception] = []
        result: RunResult | None = None

        async def check() -> None:
            try:
                trip = await _first_trip(self.parallel, ctx, prompt)
            except Exception as exc:
                failed.append(exc)
                loop_scope.cancel()
                return
            if trip is None:
                gate.set()
            else:
                tripped.append(trip)
                loop_scope.cancel()  # cuts the model request in flight off

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(check)
                with loop_scope:
                    try:
                        result = await run_loop(run)
                    except Exception as exc:  # kept bare (not in an exception group)
                        failed.append(exc)
                        tg.cancel_scope.cancel()
        finally:
            run.gate = None
        if failed:
            raise failed[0]
        if tripped:  # even when the loop finished first: its answer is not given
            return await _tripped(run, tripped[0])
        assert result is not None
        return result


def _prompt_of(run: RunState) -> str | None:
    """The text of the user messages the run was given (``None``: it was given none)."""
    texts = [
        m.text
        for m in run.messages[run.new_message_index :]
        if m.role == "user" and not m.tool_results_parts
    ]
    return "\n\n".join(texts) if texts else None


async def _first_trip(
    guardrails: tuple[InputGuardrail, ...] | tuple[OutputGuardrail, ...],
    ctx: RunContext[Any],
    *args: Any,
) -> GuardrailTrip | None:
    """Run ``guardrails`` concurrently; the first trip (which stops the others), or ``None``.

    The first exception one raises propagates as itself, not in an exception group."""
    if len(guardrails) == 1:
        trip: GuardrailTrip | None = await guardrails[0].check(ctx, *args)
        return trip
    tripped: list[GuardrailTrip] = []
    failed: list[Exception] = []

    async def one(guardrail: Any, scope: anyio.CancelScope) -> None:
        try:
            trip = await guardrail.check(ctx, *args)
        except Exception as exc:
            failed.append(exc)
            scope.cancel()
            return
        if trip is not None and not tripped:
            tripped.append(trip)
            scope.cancel()

    async with anyio.create_task_group() as tg:
        for guardrail in guardrails:
            tg.start_soon(one, guardrail, tg.cancel_scope)
    if failed:
        raise failed[0]
    return tripped[0] if tripped else None


async def _tripped(run: RunState, trip: GuardrailTrip) -> RunResult:
    """The run's result, ended by ``trip``: no answer (``text`` empty; ``output`` ``None``
    for a typed answer), the trip in ``result.guardrail`` and named in ``result.detail``."""
    await run.emitter.emit(GuardrailTripped(trip))
    why = f": {trip.message}" if trip.message else ""
    detail = f"{trip.kind} guardrail {trip.name!r} tripped{why}"
    result = run.result(TerminationReason.GUARDRAIL_TRIPPED, text="", detail=detail)
    update: dict[str, Any] = {"guardrail": trip}
    if not run.agent.output.is_text:
        update["output"] = None
    return result.model_copy(update=update)
