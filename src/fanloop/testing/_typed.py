"""One script, one meaning on both test doubles: a typed answer scripted either way.

A typed answer reaches the loop in one of two forms, decided by the agent's ``output_mode`` and
the provider: a call of the ``final_result`` tool (tool mode) or the JSON value as the answer's
text (native structured output). :class:`~fanloop.testing.ScriptedProvider` (tool mode unless
``native_output=True``) and a real provider against :class:`~fanloop.testing.FakeLLMServer`
(native where the API has it) disagree on which form a request asks for, so a script written
for one used to fail on the other. :func:`typed_answer` plays a scripted turn in the form the
request asks for:

- the request asks for a native answer (and offers no ``final_result`` tool) and the turn is a
  single ``final_result`` call: the call's arguments become the answer's JSON text;
- the request offers the ``final_result`` tool (and asks for no native answer) and the turn is
  text holding a JSON value: the value becomes a ``final_result`` call (wrapped as
  ``{"response": ...}`` when the tool takes it that way).

Any other turn plays as written, so a test of a model that answers in the wrong form still can.
"""

from __future__ import annotations

import json
from typing import Any

from .._model_types import ModelResponse, StopReason
from .._output import FINAL_TOOL
from ..messages import TextPart, ThinkingPart, ToolCallPart
from ._script import call

__all__ = ["typed_answer"]


def typed_answer(
    response: ModelResponse, *, native: bool, final_tool: dict[str, Any] | None
) -> ModelResponse:
    """``response`` in the form of typed answer the request asks for (see the module).

    Args:
        response: the scripted turn.
        native: whether the request asks for a native typed answer.
        final_tool: the ``final_result`` tool's parameters when the request offers it.
    """
    calls = response.tool_calls
    if native and final_tool is None:
        if len(calls) == 1 and calls[0].name == FINAL_TOOL:
            thinking = tuple(p for p in response.content if isinstance(p, ThinkingPart))
            text = TextPart(text=json.dumps(calls[0].arguments, ensure_ascii=False))
            return response.model_copy(
                update={"content": (*thinking, text), "stop_reason": StopReason.END_TURN}
            )
        return response
    if final_tool is None or native or calls or not response.text.strip():
        return response
    try:
        value = json.loads(response.text)
    except ValueError:
        return response
    properties = final_tool.get("properties")
    wrapped = isinstance(properties, dict) and set(properties) == {"response"}
    if wrapped and not (isinstance(value, dict) and set(value) == {"response"}):
        value = {"response": value}
    if not isinstance(value, dict):
        return response
    thinking = tuple(p for p in response.content if isinstance(p, ThinkingPart))
    made: ToolCallPart = call(FINAL_TOOL, **value)
    return response.model_copy(
        update={"content": (*thinking, made), "stop_reason": StopReason.TOOL_USE}
    )


def body_asks(api: str, body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """Whether a request body asks for a native typed answer, and the ``final_result`` tool's
    parameters if it offers that tool (on the Chat Completions, Responses and Messages wires)."""
    if api == "openai":
        native = _kind(body.get("response_format")) == "json_schema"
    elif api == "responses":
        text = body.get("text")
        native = isinstance(text, dict) and _kind(text.get("format")) == "json_schema"
    else:
        config = body.get("output_config")
        native = (isinstance(config, dict) and config.get("format") is not None) or (
            body.get("output_format") is not None
        )
    tools = body.get("tools")
    for spec in tools if isinstance(tools, list) else ():
        if not isinstance(spec, dict):
            continue
        function = spec.get("function") if api == "openai" else spec
        if isinstance(function, dict) and function.get("name") == FINAL_TOOL:
            key = "input_schema" if api == "anthropic" else "parameters"
            schema = function.get(key)
            return native, schema if isinstance(schema, dict) else {}
    return native, None


def _kind(value: Any) -> Any:
    return value.get("type") if isinstance(value, dict) else None
