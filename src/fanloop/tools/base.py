"""Tools: the :class:`Tool` base class, :class:`ToolResult`, and the :func:`tool` decorator.

A tool is anything the model can ask to run. Subclass :class:`Tool` for full control, or
decorate a function with :func:`tool` to get the JSON schema and argument validation from its
type hints and docstring::

    @tool
    async def search(query: str, limit: int = 10) -> str:
        \"\"\"Search the index.

        Args:
            query: What to look for.
            limit: How many hits to return.
        \"\"\"
        ...

A tool's ``run`` may be ``async def`` or plain ``def``; plain functions run in a bounded pool
of worker threads so they never block the event loop.

A function tool whose first parameter is annotated :class:`RunContext` receives the context of
the run that called it (the user's ``deps``, the run id, the call); a :class:`Tool` subclass
can read the same with :func:`current_context`.
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_type_hints, overload

import pydantic
import pydantic_core

from .._log import logger
from .._model_types import ToolSpec
from .._record import record
from ..errors import ConfigurationError, ToolError
from ..messages import DocumentPart, ImagePart, TextPart, check_result_parts

if TYPE_CHECKING:
    from ..messages import ToolCallPart

__all__ = [
    "FunctionTool",
    "RunContext",
    "Tool",
    "ToolResult",
    "current_context",
    "tool",
]

DepsT = TypeVar("DepsT")


@record(frozen=True)
class ToolResult:
    """What a tool hands back to the model.

    ::

        return ToolResult("The chart:", parts=(ImagePart(data=png),))

    Attributes:
        content: the text the model reads.
        is_error: the call failed; the model should correct itself or give up.
        metadata: extra data for the application (not sent to the model).
        parts: images (:class:`~fanloop.messages.ImagePart`) and PDF documents
            (:class:`~fanloop.messages.DocumentPart`) the model sees beside the text; a list
            is kept as a tuple. At most ``MAX_RESULT_PARTS`` of them, holding at most
            ``MAX_PART_BYTES`` together (``ValueError`` otherwise, which a tool call reports
            as its error result).
    """

    content: str
    is_error: bool = False
    metadata: Mapping[str, Any] | None = None
    parts: tuple[ImagePart | DocumentPart, ...] = ()

    def __post_init__(self) -> None:
        parts = self.parts
        if not parts:
            return
        if not isinstance(parts, tuple):
            parts = tuple(parts)
            object.__setattr__(self, "parts", parts)
        for part in parts:
            if not isinstance(part, ImagePart | DocumentPart):
                raise TypeError(
                    f"ToolResult.parts holds ImagePart and DocumentPart only, "
                    f"not {type(part).__name__}"
                )
        check_result_parts(parts)


@record(frozen=True)
class RunContext(Generic[DepsT]):
    """The context of the run a tool call belongs to.

    Attributes:
        deps: the object passed as ``agent.run(..., deps=...)``.
        run_id: the run's id.
        agent_path: the agents from the root down to the one calling this tool.
        call: the tool call being handled.
        depth: 0 for the root agent, 1 for its sub-agents, and so on.
        session_id: the id of the run's session, if it has one.
    """

    deps: DepsT
    run_id: str
    agent_path: tuple[str, ...]
    call: ToolCallPart
    depth: int = 0
    session_id: str | None = None
    _run: Any = field(default=None, repr=False, compare=False)


_current: contextvars.ContextVar[RunContext[Any]] = contextvars.ContextVar("fanloop_tool_context")


def current_context() -> RunContext[Any]:
    """The :class:`RunContext` of the tool call running in this task.

    Raises:
        LookupError: called outside a tool call.
    """
    return _current.get()


class Tool(ABC):
    """Base class of every tool.

    Class attributes (or instance attributes set in ``__init__``):
        name: what the model calls the tool.
        description: what the tool does, for the model.
        parameters: the JSON schema of the arguments (an ``object`` schema).
        dangerous: the call waits at the confirmation gate and runs alone.
        concurrent_safe: several calls of this tool in one turn may overlap.
        timeout: seconds after which a call becomes an error result.
        max_concurrency: cap on calls of this tool running at once, across runs of one agent.
        concurrency_key: calls of every tool with the same key share the agent's keyed limit
            (see ``Concurrency(concurrency_limits=...)``), across runs and sub-agents.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    dangerous: bool = False
    concurrent_safe: bool = False
    timeout: float | None = None
    max_concurrency: int | None = None
    concurrency_key: str | None = None

    def schema(self) -> dict[str, Any]:
        """The tool as the model sees it: ``name``, ``description`` and ``parameters``."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def spec(self) -> ToolSpec:
        """The provider-independent :class:`~fanloop.providers.ToolSpec` of this tool."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def preview(self, **kwargs: Any) -> str:
        """What the confirmation gate shows before a dangerous call: ``name(arg=value, ...)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return f"{self.name}({args})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against ``parameters`` and return the keyword arguments for run.

        The whole JSON Schema is enforced (nested objects, ``enum``, ``minimum``, ``pattern``,
        ``items``...), by a validator compiled once per tool. Override it for more; raise
        :class:`~fanloop.errors.ToolError` with a message the model can act on.
        """
        problems = schema_problems(self, arguments)
        if problems:
            allowed = ", ".join(self.parameters.get("properties", {})) or "none"
            raise ToolError(
                f"Invalid arguments for tool {self.name!r}: {'; '.join(problems)}. "
                f"Accepted arguments: {allowed}."
            )
        return dict(arguments)

    @abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Do the work: return a :class:`ToolResult`, a string, or any JSON-able value.

        ``async def`` or plain ``def`` (which runs in a worker thread). The loop calls it with
        the validated arguments as keyword arguments.
        """

    def __repr__(self) -> str:
        flags = [f for f in ("dangerous", "concurrent_safe") if getattr(self, f)]
        return f"<{type(self).__name__} {self.name!r}{' ' + ' '.join(flags) if flags else ''}>"


MAX_PROBLEMS = 5
"""How many schema violations an invalid-arguments message lists."""

MAX_PROBLEM_CHARS = 300
"""How long one violation's description may be (it may quote the model's own input)."""


def schema_problems(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` under ``tool.parameters`` (empty when they are valid).

    The validator is compiled on first use and kept on the tool until its ``parameters``
    change. Each problem names where it is (``path.to.field``) and is capped in length.
    """
    validator = _validator_of(tool)
    try:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except RecursionError:
        return ["the arguments are nested too deeply"]
    problems = []
    for error in errors[:MAX_PROBLEMS]:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        message = error.message
        if len(message) > MAX_PROBLEM_CHARS:
            message = message[:MAX_PROBLEM_CHARS] + "...(cut)"
        problems.append(f"{where}: {message}")
    if len(errors) > MAX_PROBLEMS:
        problems.append(f"and {len(errors) - MAX_PROBLEMS} more")
    return problems


def compile_validator(tool: Tool) -> None:
    """Compile the validator of ``tool.parameters`` now, and keep it (else the tool's first
    call compiles it): for work done ahead, such as checking the tools a server lists in a
    worker thread.

    Raises:
        ConfigurationError: ``tool.parameters`` is not a valid JSON Schema.
    """
    _validator_of(tool)


def _validator_of(tool: Tool) -> Any:
    cached = tool.__dict__.get("_fanloop_validator")
    schema = tool.parameters
    if cached is not None and cached[0] is schema:
        return cached[1]
    shared = _VALIDATORS.get(id(schema))
    if shared is not None and shared[0] is schema:  # another instance of the same tool class
        validator = shared[1]
    else:
        validator = _compile(tool, schema)
        if len(_VALIDATORS) >= MAX_VALIDATORS:
            _VALIDATORS.pop(next(iter(_VALIDATORS)), None)
        _VALIDATORS[id(schema)] = (schema, validator)
    tool.__dict__["_fanloop_validator"] = (schema, validator)
    return validator


def _compile(tool: Tool, schema: Any) -> Any:
    from jsonschema import Draft202012Validator, SchemaError, validators

    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)  # most of the cost: the schema checked against its metaschema
    except SchemaError as exc:
        raise ConfigurationError(
            f"tool {tool.name!r} has an invalid parameters schema: {exc.message}"
        ) from None
    return cls(schema)


_VALIDATORS: dict[int, tuple[Any, Any]] = {}
"""id of a parameters schema -> (the schema, its validator): tools of one class share their
class's schema object, so a fresh instance (a new agent's tool set) skips the checking. The
schema is held, so its id cannot be reused while the entry lives."""
MAX_VALIDATORS = 256
"""How many schemas keep a shared validator; the oldest is dropped past that."""


def to_result(value: Any) -> ToolResult:
    """Turn whatever a tool returned into a :class:`ToolResult`.

    A string is the content; an :class:`~fanloop.messages.ImagePart` or
    :class:`~fanloop.messages.DocumentPart`, or a list of them mixed with
    :class:`~fanloop.messages.TextPart`, becomes a result carrying them in ``parts``; other
    values are given as JSON, encoded as pydantic encodes them (dataclasses, datetimes, sets,
    enums, UUIDs, paths; bytes as base64).

    Raises:
        TypeError: the value is of a type pydantic cannot encode (the loop reports it as the
            tool's failure, naming the tool and the type).
    """
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    if value is None:
        return ToolResult("")
    if isinstance(value, ImagePart | DocumentPart):
        return ToolResult("", parts=(value,))
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, TextPart | ImagePart | DocumentPart) for v in value)
    ):  # text and media, as a prompt is written
        texts = [v.text for v in value if isinstance(v, TextPart)]
        media = tuple(v for v in value if not isinstance(v, TextPart))
        return ToolResult("\n".join(texts), parts=media)
    if isinstance(value, pydantic.BaseModel):
        return ToolResult(value.model_dump_json())
    try:  # what pydantic can encode: dataclasses, datetimes, sets, enums, UUIDs, paths...
        plain = pydantic_core.to_jsonable_python(value, bytes_mode="base64")
    except pydantic_core.PydanticSerializationError as exc:
        raise TypeError(
            f"it returned a {type(value).__qualname__}, which fanloop cannot send to the model "
            f"as JSON ({exc}); return a str, a pydantic model, or data pydantic can encode"
        ) from None
    return ToolResult(json.dumps(plain, ensure_ascii=False))


def _doc_sections(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and the ``Args:`` descriptions."""
    doc = inspect.cleandoc(doc)
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if stripped.endswith(":") and not line.startswith(" ") and stripped[:-1].isalpha():
            section = "other"
            continue
        if section == "summary":
            summary_lines.append(line)
        elif section == "args" and stripped:
            indent = len(line) - len(line.lstrip())
            name, sep, text = stripped.partition(":")
            name = name.split("(")[0].strip()
            if sep and indent <= 4 and name.isidentifier():
                current = name
                args[current] = text.strip()
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(summary_lines).strip(), args


def strip_titles(schema: Any) -> Any:
    """``schema`` without pydantic's ``title`` annotations (a property *named* ``title``, whose
    value is a schema, not a string, stays)."""
    if isinstance(schema, dict):
        return {
            k: strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [strip_titles(v) for v in schema]
    return schema


class FunctionTool(Tool):
    """A tool made from a function by :func:`tool`. Calling it calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        dangerous: bool = False,
        concurrent_safe: bool = False,
        timeout: float | None = None,
        max_concurrency: int | None = None,
        concurrency_key: str | None = None,
        preview: Callable[..., str] | None = None,
    ) -> None:
        if not callable(fn):
            given = f"the name {fn!r}" if isinstance(fn, str) else f"{fn!r} ({type(fn).__name__})"
            raise ConfigurationError(
                f"a tool is a function or a Tool object, not {given}: pass the function itself "
                "(tools=[add], not tools=['add'])"
            )
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", ""))
        if not _TOOL_NAME.fullmatch(self.name):
            hint = (
                "a lambda has no name of its own: give one with tool(fn, name='...')"
                if self.name == "<lambda>"
                else "give another with tool(fn, name='...')"
            )
            raise ConfigurationError(
                f"tool name {self.name!r} is not 1-64 letters, digits, '_' or '-' (what model "
                f"APIs accept): {hint}"
            )
        summary, arg_docs = _doc_sections(fn.__doc__ or "")
        self.description = description if description is not None else summary
        self.dangerous = dangerous
        self.concurrent_safe = concurrent_safe
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.concurrency_key = concurrency_key
        self._preview = preview
        self.is_async = inspect.iscoroutinefunction(fn)

        try:
            hints = get_type_hints(fn, include_extras=True)
        except NameError as exc:
            raise ConfigurationError(
                f"tool {self.name!r}: cannot resolve type hints: {exc}"
            ) from exc
        params = list(inspect.signature(fn).parameters.values())
        # A function defined in a class body and decorated there: its first parameter is the
        # instance, bound when the tool is read from an instance (see __get__).
        self._method = _is_method(fn, params)
        if self._method:
            params = params[1:]
        self.takes_context = bool(params) and _is_run_context(hints.get(params[0].name))
        if self.takes_context:
            params = params[1:]
        fields: dict[str, Any] = {}
        untyped: list[str] = []
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ConfigurationError(f"tool {self.name!r}: *args/**kwargs are not supported")
            if p.name not in hints:
                untyped.append(p.name)
            annotation = hints.get(p.name, Any)
            default = ... if p.default is p.empty else p.default
            fields[p.name] = (
                annotation,
                pydantic.Field(default, description=arg_docs.get(p.name)),
            )
        self._model = pydantic.create_model(
            f"{self.name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        self.parameters = strip_titles(self._model.model_json_schema())
        self._fields = tuple(fields)
        if untyped:
            logger.warning(
                "tool_untyped_parameters",
                tool=self.name,
                parameters=untyped,
                hint="the model sees no type for them (an empty schema): annotate them",
            )

    def __get__(self, instance: object, owner: type | None = None) -> FunctionTool:
        """A tool decorated in a class body, read from an instance: the tool of that instance's
        method (its schema is the one built once, without ``self``)."""
        if instance is None or not self._method:
            return self
        bound = copy.copy(self)
        bound.fn = self.fn.__get__(instance, owner)
        bound._method = False
        return bound

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            model = self._model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise ToolError(
                f"Invalid arguments for tool {self.name!r}: {problems}. "
                f"Expected schema: {json.dumps(self.parameters)}"
            ) from None
        return {name: getattr(model, name) for name in self._fields}

    def preview(self, **kwargs: Any) -> str:
        if self._preview is not None:
            return self._preview(**kwargs)
        return super().preview(**kwargs)

    def run(self, **kwargs: Any) -> Any:
        if self._method:
            raise ToolError(
                f"tool {self.name!r} is a method: give the agent the instance's tool "
                f"(tools=[obj.{self.name}]), not the class's"
            )
        if self.takes_context:
            return self.fn(current_context(), **kwargs)
        return self.fn(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _is_method(fn: Callable[..., Any], params: list[inspect.Parameter]) -> bool:
    """Whether ``fn`` is a plain function defined in a class body, taking the instance."""
    if inspect.ismethod(fn) or not inspect.isfunction(fn) or not params:
        return False
    owner, _, _ = fn.__qualname__.rpartition(".")
    return bool(owner) and not owner.endswith("<locals>") and params[0].name == "self"


def _is_run_context(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", annotation)
    return origin is RunContext


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    dangerous: bool = False,
    concurrent_safe: bool = False,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    concurrency_key: str | None = None,
    preview: Callable[..., str] | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    dangerous: bool = False,
    concurrent_safe: bool = False,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    concurrency_key: str | None = None,
    preview: Callable[..., str] | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a :class:`Tool` from a function; use bare (``@tool``) or with options.

    The JSON schema comes from the type hints (through pydantic), the description from the
    docstring's summary and each argument's description from its ``Args:`` section.

    Args:
        fn: the function (when used bare).
        name: the tool's name; defaults to the function's.
        description: overrides the docstring summary.
        dangerous: put calls behind the confirmation gate.
        concurrent_safe: let several calls of this tool in one turn overlap.
        timeout: seconds before a call becomes an error result.
        max_concurrency: cap on calls running at once.
        concurrency_key: share a keyed concurrency limit with other tools.
        preview: a function of the arguments giving the confirmation text.
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            dangerous=dangerous,
            concurrent_safe=concurrent_safe,
            timeout=timeout,
            max_concurrency=max_concurrency,
            concurrency_key=concurrency_key,
            preview=preview,
        )

    return wrap(fn) if fn is not None else wrap
