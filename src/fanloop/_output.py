"""Typed output: what a run's answer must be, and how it is checked (docs/output.md).

``Agent(output_type=Invoice)`` builds one :class:`OutputSpec` when the agent is made. The
answer reaches it in one of two ways:

- **tool** (every provider): the agent gets a ``final_result`` tool whose parameters are the
  output's JSON schema. The model answers by calling it; the arguments are validated, then the
  ``output_validators`` run, and the run ends with the value. A value that fails goes back to
  the model as the tool's error result, with the validation errors.
- **native** (providers that constrain their output to a JSON schema, such as OpenAI's
  ``response_format``): the request carries the schema and the model's text is the JSON value.

Either way a failure counts against ``output_retries``; one failure more ends the run with
``output_invalid``. A plain-text answer where a typed one is wanted counts as a failure too.
With ``output_type=str`` (the default) none of this runs: the answer is the text.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import pydantic
import pydantic_core

from ._model import Ending
from ._result import TerminationReason
from .errors import ConfigurationError, ModelRetry, ToolError
from .events import OutputPartial, TextDelta, ToolCallDelta, ToolCallStarted
from .messages import Message
from .tools.base import Tool, current_context, strip_titles

if TYPE_CHECKING:
    from ._model_types import ModelResponse
    from ._run import RunState

__all__ = ["FINAL_TOOL", "OutputMode", "OutputSpec", "OutputValidator"]

FINAL_TOOL = "final_result"
"""The name of the tool a typed answer is given through (in tool mode)."""

OutputMode = Literal["auto", "tool", "native"]
OutputValidator = Callable[..., Any]
"""``validator(output)`` or ``validator(ctx, output)``, sync or async: returns the output
(possibly changed) or raises :class:`~fanloop.errors.ModelRetry`."""

MAX_PARTIAL = 1_000_000
"""The longest streamed answer parsed for ``output_partial`` events, in characters."""


class OutputSpec:
    """What the answer of a run must be; built once per agent.

    Args:
        output_type: a pydantic model, a dataclass, a TypedDict, a primitive, ``list[...]``
            or a union of them; ``str`` for a plain-text answer.
        retries: how many failed answers go back to the model before the run ends with
            ``output_invalid``.
        validators: checks run on a validated value, in order.
        mode: ``"tool"``, ``"native"`` or ``"auto"`` (native where the provider has it).
    """

    __slots__ = (
        "_shape",
        "is_text",
        "mode",
        "output_type",
        "retries",
        "validators",
    )

    def __init__(
        self,
        output_type: Any = str,
        *,
        retries: int = 1,
        validators: Iterable[OutputValidator] = (),
        mode: OutputMode = "auto",
    ) -> None:
        if retries < 0:
            raise ConfigurationError("output_retries must be >= 0")
        if mode not in ("auto", "tool", "native"):
            raise ConfigurationError(f"output_mode must be auto, tool or native, got {mode!r}")
        if output_type is None or output_type is str:  # None, as in the Agents SDK: the text
            output_type = str
        elif inspect.isroutine(output_type) or isinstance(output_type, partial):
            raise ConfigurationError(
                f"output_type is the answer's type (a pydantic model, a dataclass, a TypedDict, "
                f"a primitive, list[...] or a union of them), not a function ({output_type!r}); "
                "to check or change the answer, pass output_validators=[...]"
            )
        self.output_type = output_type
        self.is_text = output_type is str
        self.retries = retries
        self.validators = tuple(_validator(v) for v in validators) if validators else ()
        self.mode = mode
        # A plain-text answer needs no adapter or schema: made on first use, if ever.
        self._shape: _Shape | None = None if self.is_text else _shape_of(output_type)

    @property
    def shape(self) -> _Shape:
        """The adapter and schemas of the output type (shared by every spec of the type)."""
        shape = self._shape
        if shape is None:
            shape = self._shape = _shape_of(self.output_type)
        return shape

    @property
    def adapter(self) -> pydantic.TypeAdapter[Any]:
        """The pydantic adapter that validates and dumps values of the output type."""
        return self.shape.adapter

    @property
    def name(self) -> str:
        """The output type's name (``"output"`` when it has none)."""
        return getattr(self.output_type, "__name__", None) or "output"

    @property
    def schema(self) -> dict[str, Any]:
        """The output type's JSON schema (titles stripped). Shared: do not change it."""
        return self.shape.schema

    @property
    def parameters(self) -> dict[str, Any]:
        """The ``final_result`` tool's parameters: :attr:`schema`, or it wrapped in
        ``{"response": ...}`` when it is not an object. Shared: do not change it."""
        return self.shape.parameters

    @property
    def wrapped(self) -> bool:
        """Whether the answer travels as ``{"response": ...}`` (a non-object schema)."""
        return self.shape.wrapped

    # -- the value -------------------------------------------------------------------------

    def parse_arguments(self, arguments: dict[str, Any]) -> Any:
        """Validate the ``final_result`` tool's arguments into the output value."""
        data = arguments.get("response") if self.wrapped else arguments
        if self.wrapped and "response" not in arguments:
            raise ModelRetry('the final result must be given as {"response": ...}')
        return self._validate_python(data)

    def parse_text(self, text: str) -> Any:
        """Validate a native-mode answer (JSON text) into the output value."""
        if self.is_text:
            return text
        try:
            data = json.loads(text)
        except RecursionError:
            raise ModelRetry("the answer is nested too deeply") from None
        except ValueError as exc:
            raise ModelRetry(
                f"the answer is not valid JSON ({exc}); answer with the JSON value only"
            ) from None
        if self.wrapped and isinstance(data, dict) and set(data) == {"response"}:
            data = data["response"]
        return self._validate_python(data)

    def _validate_python(self, data: Any) -> Any:
        try:
            return self.adapter.validate_python(data)
        except pydantic.ValidationError as exc:
            raise ModelRetry(describe(exc)) from None
        except RecursionError:
            raise ModelRetry("the answer is nested too deeply") from None

    async def check(self, run: RunState, value: Any) -> Any:
        """Run the output validators on ``value``; return the (possibly changed) value."""
        for takes_context, fn in self.validators:
            args = (run.context(what=FINAL_TOOL), value) if takes_context else (value,)
            out = fn(*args)
            if inspect.isawaitable(out):
                out = await out
            if out is not None:
                value = out
        return value

    def dump(self, value: Any) -> str:
        """The value as JSON text (what a parent agent sees of a typed sub-agent)."""
        if self.is_text:
            return str(value)
        return self.adapter.dump_json(value).decode()

    # -- the tool mode ---------------------------------------------------------------------

    def tool(self) -> Tool:
        """The ``final_result`` tool that carries a typed answer (tool mode)."""
        return OutputTool(self)

    # -- the end of a turn without tool calls ------------------------------------------------

    async def finish(self, run: RunState, response: ModelResponse, native: bool) -> Ending | None:
        """The ending a final text answer brings, or ``None`` when it was sent back to fix."""

        text = response.text
        if self.is_text or native:
            try:
                value = await self.check(run, self.parse_text(text))
            except ModelRetry as exc:
                return await self._retry(run, str(exc))
            run.output = value
            return Ending(TerminationReason.COMPLETED, text=text if self.is_text else None)
        return await self._retry(
            run,
            f"Give the final answer by calling the {FINAL_TOOL} tool with the answer as its "
            "arguments, not as text.",
        )

    async def _retry(self, run: RunState, why: str) -> Ending | None:
        failed = self.record_failure(run, why)
        if failed is not None:
            return failed
        await run.append(Message.user(f"Your answer was not accepted: {why}\nPlease fix it."))
        return None

    def record_failure(self, run: RunState, why: str) -> Ending | None:
        """Count a failed answer; the ending when it was one too many."""

        run.output_failures += 1
        if run.output_failures > self.retries:
            detail = f"the answer failed validation {run.output_failures} times; last: {why}"
            run.end(TerminationReason.OUTPUT_INVALID, detail)
            return Ending(TerminationReason.OUTPUT_INVALID, detail=detail)
        return None

    # -- streaming ---------------------------------------------------------------------------

    def partial_emitter(
        self, emit: Callable[[Any], Awaitable[None]], native: bool
    ) -> Callable[[Any], Awaitable[None]]:
        """Wrap a delta emitter so it also emits ``output_partial`` events as the answer
        streams (the partially parsed JSON value)."""
        watcher = _PartialWatcher(self, emit, native)
        return watcher.emit


class OutputTool(Tool):
    """``final_result``: the model gives its typed answer as this tool's arguments."""

    concurrent_safe = False

    def __init__(self, spec: OutputSpec) -> None:
        self.output_spec = spec
        self.name = FINAL_TOOL
        self.description = (
            "Give your final answer. Call this once, when you are done, with the answer as "
            "the arguments; it ends the conversation."
        )
        self.parameters = spec.parameters

    def validate(self, arguments: Any) -> dict[str, Any]:
        return dict(arguments)  # checked by the output type in run, where failures count

    async def run(self, **arguments: Any) -> str:
        run: RunState = current_context()._run
        if run.output_set:
            return "A final result was already accepted; this one was ignored."
        spec = self.output_spec
        try:
            value = await spec.check(run, spec.parse_arguments(arguments))
        except ModelRetry as exc:
            why = str(exc)
            if spec.record_failure(run, why) is not None:
                return f"Not accepted: {why}"
            raise ToolError(
                f"Not accepted: {why}. Call {FINAL_TOOL} again with a fixed answer."
            ) from None
        run.output = value
        run.end(TerminationReason.COMPLETED, None)
        return "Final result accepted."


class _PartialWatcher:
    __slots__ = ("_buffer", "_call", "_emit", "_last", "_native", "_spec")

    def __init__(
        self, spec: OutputSpec, emit: Callable[[Any], Awaitable[None]], native: bool
    ) -> None:
        self._spec = spec
        self._emit = emit
        self._native = native
        self._call: str | None = None
        self._buffer: list[str] = []
        self._last: Any = None

    async def emit(self, event: Any) -> None:
        await self._emit(event)
        if self._native:
            if isinstance(event, TextDelta):
                await self._grow(event.text)
        elif isinstance(event, ToolCallStarted):
            if event.name == FINAL_TOOL:
                self._call, self._buffer, self._last = event.call_id, [], None
        elif isinstance(event, ToolCallDelta) and event.call_id == self._call:
            await self._grow(event.arguments_delta)

    async def _grow(self, piece: str) -> None:
        self._buffer.append(piece)
        text = "".join(self._buffer)
        if len(text) > MAX_PARTIAL:
            return
        self._buffer = [text]
        try:
            value = pydantic_core.from_json(text, allow_partial=True)
        except ValueError:
            return
        if self._spec.wrapped and not self._native:
            if not isinstance(value, dict) or "response" not in value:
                return
            value = value["response"]
        if value != self._last and (value or self._last is not None):
            self._last = value
            await self._emit(OutputPartial(value))


class _Shape:
    """What an output type gives every spec of it: its adapter and schemas."""

    __slots__ = ("adapter", "parameters", "schema", "wrapped")

    def __init__(self, output_type: Any, parent_depth: int) -> None:
        try:
            self.adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
                output_type, _parent_depth=parent_depth
            )
            schema = self.adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            raise ConfigurationError(f"output_type {output_type!r} cannot be used: {exc}") from None
        schema = strip_titles(schema)
        self.schema: dict[str, Any] = schema
        self.wrapped: bool = schema.get("type") != "object"
        if self.wrapped:  # primitives, lists and unions travel as {"response": ...}
            wrapper: dict[str, Any] = {
                "type": "object",
                "properties": {"response": schema},
                "required": ["response"],
                "additionalProperties": False,
            }
            defs = schema.pop("$defs", None)
            if defs:
                wrapper["$defs"] = defs
            self.parameters: dict[str, Any] = wrapper
        else:
            self.parameters = schema


_SHAPES: dict[tuple[Any, str], _Shape] = {}
"""Output type (and its repr, which tells ``int | str`` from ``str | int``) -> its shape."""
MAX_SHAPES = 256
"""How many output types keep their shape; the oldest is dropped past that."""


def _shape_of(output_type: Any) -> _Shape:
    """The shape of ``output_type``, made once per type: a pydantic adapter and its JSON
    schema cost tens of microseconds, too much to pay for every agent."""
    # The adapter resolves forward references in OutputSpec.__init__'s namespace, as when that
    # made the adapter itself (frames up from pydantic's: _Shape, here, OutputSpec.__init__).
    try:
        key = (output_type, repr(output_type))
        found = _SHAPES.get(key)
    except TypeError:  # unhashable (Annotated metadata, say): made each time
        return _Shape(output_type, parent_depth=4)
    if found is None:
        found = _Shape(output_type, parent_depth=4)
        if len(_SHAPES) >= MAX_SHAPES:
            _SHAPES.pop(next(iter(_SHAPES)), None)
        _SHAPES[key] = found
    return found


def describe(error: pydantic.ValidationError) -> str:
    """Validation errors as one line each, with where they are: precise enough to fix."""
    lines = []
    for item in error.errors(include_url=False)[:10]:
        where = ".".join(str(p) for p in item["loc"]) or "the value"
        lines.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(lines)
    if more > 0:
        lines.append(f"and {more} more")
    return "; ".join(lines)


def _validator(fn: OutputValidator) -> tuple[bool, OutputValidator]:
    """A validator and whether it takes the :class:`RunContext` first."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False, fn
    return len(params) >= 2, fn
