"""ToolSweepProvider: calls every tool once with schema-valid arguments, then answers."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .._model_types import ModelRequest, ModelResponse
from ..messages import ToolCallPart, ToolResultPart
from ._examples import example_value
from ._script import call, reply
from ._scripted import ScriptedProvider

__all__ = ["ToolSweepProvider"]

_FINAL = "final_result"


class ToolSweepProvider(ScriptedProvider):
    """A test provider that calls every tool the agent offers, once each, in one turn, with
    arguments made from each tool's JSON schema; then it answers.

    It checks the wiring of an agent without a model: every tool is reachable, takes
    arguments its own schema allows, and returns. The answer is ``answer`` when given, else
    a JSON object of each tool's result (``{"tool": "result", ...}``); for a typed output it
    is a schema-valid value (through the ``final_result`` tool, or as JSON text when the
    output is native). A sub-agent it drives (``delegate``) sweeps its own tools the same way.

    Args:
        answer: the final text answer (default: the tools' results as JSON).
        tools: call only these tools (default: all but ``final_result``).
        exclude: never call these tools.
        **options: passed to :class:`ScriptedProvider` (``name``, ``model``, ``stream``...).

    Attributes:
        calls: every tool call it made, in order.
    """

    def __init__(
        self,
        answer: str | None = None,
        *,
        tools: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        **options: Any,
    ) -> None:
        options.setdefault("name", "tool-sweep")
        options.setdefault("model", "tool-sweep")
        super().__init__(self._respond, **options)
        self.answer = answer
        self.only = frozenset(tools) if tools is not None else None
        self.exclude = frozenset(exclude)
        self.calls: list[ToolCallPart] = []

    def _respond(self, request: ModelRequest) -> ModelResponse:
        results = _last_results(request)
        if results is None:
            calls = [
                call(spec.name, **example_value(spec.parameters))
                for spec in request.tools
                if spec.name != _FINAL
                and spec.name not in self.exclude
                and (self.only is None or spec.name in self.only)
            ]
            if calls:
                self.calls.extend(calls)
                return reply(tool_calls=calls)
            results = []
        final = next((t for t in request.tools if t.name == _FINAL), None)
        if final is not None:
            answer = call(_FINAL, **example_value(final.parameters))
            self.calls.append(answer)
            return reply(tool_calls=[answer])
        if request.output is not None:
            return reply(json.dumps(example_value(request.output.json_schema)))
        if self.answer is not None:
            return reply(self.answer)
        return reply(json.dumps(dict(results)))


def _last_results(request: ModelRequest) -> list[tuple[str, str]] | None:
    """The (tool name, result) pairs that answer the conversation's last turn; ``None``
    when the last message is a prompt (the tools are still to be called)."""
    messages = request.messages
    if not messages:
        return None
    results = [p for p in messages[-1].content if isinstance(p, ToolResultPart)]
    if not results:
        return None
    names: dict[str, str] = {}
    for message in messages:
        for part in message.content:
            if isinstance(part, ToolCallPart):
                names[part.id] = part.name
    return [(names.get(r.call_id, r.call_id), r.content) for r in results]
