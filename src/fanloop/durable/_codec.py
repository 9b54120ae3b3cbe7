"""What crosses a checkpoint or a process boundary, as plain JSON values, and back.

Workflow inputs and outputs, step results and stream entries are all JSON: model responses and
run results are pydantic dumps, errors travel by class name and their keyword context, and an
event is its ``to_dict()`` (see :mod:`fanloop.events`). Nothing here is unpickled.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from .. import errors
from .._model_types import ModelResponse, Usage
from .._result import GuardrailTrip, RunResult
from ..errors import FanloopError, ProviderError
from ..events import Event, RunFinished
from ..messages import Message, ToolCallPart, ToolResultPart

__all__ = [
    "RemoteError",
    "decode_event",
    "dump_prompt",
    "dump_run_output",
    "error_from_dict",
    "error_to_dict",
    "load_prompt",
    "load_run_output",
]


class RemoteError(FanloopError):
    """An error raised in another process, known here by its type name and message.

    Attributes:
        type_name: the class name of the original error.
    """

    def __init__(self, message: str = "", /, *, type_name: str = "Exception") -> None:
        super().__init__(message)
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"RemoteError({self.message!r}, type_name={self.type_name!r})"


# -- prompts -----------------------------------------------------------------------------------


def dump_prompt(prompt: Any) -> dict[str, Any] | None:
    """A prompt (string, :class:`Message` or text parts) as JSON; ``None`` for no prompt."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return {"text": prompt}
    if isinstance(prompt, Message):
        return {"message": prompt.model_dump(mode="json")}
    from .._runner import user_message

    return {"message": user_message(prompt).model_dump(mode="json")}


def load_prompt(data: dict[str, Any] | None) -> str | Message | None:
    """The prompt :func:`dump_prompt` wrote."""
    if data is None:
        return None
    if "text" in data:
        return str(data["text"])
    return Message.model_validate(data["message"])


# -- errors ------------------------------------------------------------------------------------


def error_to_dict(exc: ProviderError) -> dict[str, Any]:
    """A provider error's class name, message and keyword context."""
    return {
        "type": type(exc).__name__,
        "message": exc.message,
        "status_code": exc.status_code,
        "request_id": exc.request_id,
        "retry_after": exc.retry_after,
        "provider": exc.provider,
        "transient": exc.transient,
        "attempts": exc.attempts,
    }


def error_from_dict(data: dict[str, Any]) -> ProviderError:
    """The provider error :func:`error_to_dict` described, as its own class when fanloop has it
    (any other name becomes a plain :class:`ProviderError`)."""
    cls = getattr(errors, str(data.get("type", "")), None)
    if not (isinstance(cls, type) and issubclass(cls, ProviderError)):
        cls = ProviderError
    transient = data.get("transient")
    err = cls(
        str(data.get("message", "")),
        status_code=data.get("status_code"),
        request_id=data.get("request_id"),
        retry_after=data.get("retry_after"),
        provider=data.get("provider"),
        transient=transient if isinstance(transient, bool) and transient != cls.transient else None,
    )
    err.attempts = int(data.get("attempts") or 0)
    return err


# -- run outputs -------------------------------------------------------------------------------


def dump_run_output(
    result: RunResult[Any] | None, error: ProviderError | None, adapter: Any = None
) -> dict[str, Any]:
    """A workflow's output: the run's result (partial when a provider error ended it).

    A typed answer (``result.output``) is dumped with the output type's ``adapter``.
    """
    data = None
    if result is not None:
        data = result.model_dump(mode="json", exclude={"output"})
        output = result.output
        data["output"] = output if adapter is None else adapter.dump_python(output, mode="json")
    return {"result": data, "error": None if error is None else error_to_dict(error)}


def load_run_output(output: dict[str, Any], adapter: Any = None) -> RunResult[Any]:
    """The :class:`RunResult` a workflow returned; its typed answer validated with ``adapter``
    when given (else ``output`` is left as the JSON value).

    Raises:
        ProviderError: the run ended with a provider error that survived its retries (of its
            own class, with the partial result as ``.partial``).
    """
    data = output.get("result")
    result = None
    if data is not None:
        data = dict(data)
        value = data.pop("output", None)
        if value is not None and adapter is not None:
            value = adapter.validate_python(value)
        result = RunResult[Any].model_validate(data).model_copy(update={"output": value})
    if output.get("error") is not None:
        error = error_from_dict(output["error"])
        error.partial = result
        raise error
    assert result is not None
    return result


# -- events ------------------------------------------------------------------------------------

_EVENT_CLASSES: dict[str, type[Any]] = {cls.kind: cls for cls in typing.get_args(Event)}

_MODELS: dict[str, Any] = {
    "call": ToolCallPart,
    "message": Message,
    "response": ModelResponse,
    "turn_usage": Usage,
    "total_usage": Usage,
    "trip": GuardrailTrip,
}


def register_event_class(cls: type[Any]) -> None:
    """Let :func:`decode_event` rebuild events of ``cls`` (a durable-only kind)."""
    _EVENT_CLASSES[cls.kind] = cls


def decode_event(data: dict[str, Any]) -> Any:
    """The event a stream entry describes, or ``None`` for a kind this version does not know.

    Parts, messages, responses and usage are validated back into their models; errors come
    back as their fanloop class when they were provider errors, else as :class:`RemoteError`.
    """
    cls = _EVENT_CLASSES.get(str(data.get("kind")))
    if cls is None:
        return None
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            continue
        value = data[field.name]
        if value is None:
            pass
        elif field.name == "agent_path":
            value = tuple(value)
        elif field.name == "result":
            value = (RunResult if cls is RunFinished else ToolResultPart).model_validate(value)
        elif field.name == "error":
            value = _error_value(value)
        elif field.name in _MODELS:
            value = _MODELS[field.name].model_validate(value)
        values[field.name] = value
    return cls(**values)


def _error_value(data: Any) -> BaseException:
    if not isinstance(data, dict):
        return RemoteError(str(data))
    name = str(data.get("type", "Exception"))
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, ProviderError):
        return cls(str(data.get("message", "")))
    return RemoteError(str(data.get("message", "")), type_name=name)
