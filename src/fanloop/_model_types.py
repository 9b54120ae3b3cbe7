"""The provider-independent request, response and usage types: data, below the engine and
the providers (``fanloop.providers`` re-exports them)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._settings import ModelSettings
from ._slots import register as register_slots
from ._unicode import known_valid, vouch
from .messages import (
    Citation,
    Message,
    Origin,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    _build,
    _unrendered,
)

__all__ = [
    "HostedTool",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputFormat",
    "StopReason",
    "ToolSpec",
    "Usage",
]


class StopReason(StrEnum):
    """Why the model stopped, normalised across providers.

    The provider's own value is kept in ``ModelResponse.raw_stop_reason``.
    """

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"
    PAUSED = "paused"
    UNKNOWN = "unknown"


class Usage(BaseModel):
    """Token counts. ``input_tokens`` excludes cache reads and writes.

    ``reasoning_tokens`` is the part of ``output_tokens`` the model spent reasoning (OpenAI's
    ``output_tokens_details.reasoning_tokens``); it is already counted (and priced) in
    ``output_tokens``, never added to it.

    Every count is a non-negative integer: a negative one (which would refund a budget) is a
    ``pydantic.ValidationError`` (a ``ValueError``). The providers check what a server
    reports before it gets here (:class:`~fanloop.errors.ResponseInvalid` otherwise).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return _build(
            Usage,
            {
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "cache_read_tokens": self.cache_read_tokens + other.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens + other.cache_write_tokens,
                "reasoning_tokens": self.reasoning_tokens + other.reasoning_tokens,
            },
        )

    @property
    def total_input_tokens(self) -> int:
        """Input tokens including cache reads and writes: the prompt the model saw."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        """All input (cached or not) plus output tokens."""
        return self.total_input_tokens + self.output_tokens


_ZERO: list[Usage] = []


def zero_usage() -> Usage:
    """One shared ``Usage()`` (it is frozen): what a run and a budget start from, without a
    model instance (and its set of fields) of their own per run. Constructed, not validated:
    the first run of a process does not build ``Usage``'s validator (and pydantic's scan of the
    installed distributions for plugins) before its first request."""
    if not _ZERO:
        _ZERO.append(Usage.model_construct())
    return _ZERO[0]


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class HostedTool(BaseModel):
    """A tool the provider runs on its side (e.g. ``HostedTool("web_search")``).

    A provider declares which kinds it supports in a ``hosted_tools`` attribute (a frozenset of
    kinds); ``Agent`` rejects hosted tools the provider does not support.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, kind: str | None = None, /, **data: Any) -> None:
        if kind is not None:
            data["kind"] = kind
        super().__init__(**data)


class OutputFormat(BaseModel):
    """The JSON schema a model's answer must follow (native structured output).

    The loop puts one on a request when the agent's typed output goes through the provider's
    native structured output; the answer is then the JSON value as text. The schema is the
    plain one (pydantic's): each provider turns it into what its API accepts (e.g. OpenAI's
    strict form).

    Attributes:
        name: a name for the schema (letters, digits, ``_`` and ``-``; at most 64).
        json_schema: the JSON schema (of a JSON object).
        strict: ``None`` (the default) asks for strict adherence where the schema allows it;
            ``False`` never asks.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str = "output"
    json_schema: dict[str, Any]
    strict: bool | None = None


class JoinedTexts(dict[int, tuple[tuple[Message, ...], tuple[str, ...]]]):
    """A run's memo of its conversation's wire texts, by provider cache: the messages its last
    request carried and their texts (see ``providers._wire.MessageCache.texts``). The run holds
    it; the requests it makes hold it by a weak reference, so a request kept after its run
    keeps no conversation."""

    __slots__ = ("__weakref__",)


def no_joined() -> None:
    """Held by a request whose run keeps no memo (yet) where a weak reference to one goes:
    called, it gives ``None``, as a dead reference does (and reading the slot raises nothing)."""


JOIN_FROM = 8
"""The messages from which a run keeps its conversation's texts for the next request (a
shorter conversation is read message by message, and its run makes no memo)."""


class ModelRequest(BaseModel):
    """Everything a provider needs for one model call.

    ``max_tokens`` is the output budget to send (the loop's, clamped to the run's limits),
    whatever ``settings.max_tokens`` says. ``temperature`` and ``stop_sequences`` are filled
    from ``settings`` by the loop, for providers that read only them; ``settings`` carries the
    rest (:class:`~fanloop.ModelSettings`), and ``output`` the schema of a native typed answer.
    """

    # Not a field: a weak reference to the memo of the conversation's wire texts kept by the
    # run that made it (JoinedTexts; see fanloop.providers._wire.joined_memo). Never copied,
    # pickled or compared.
    __slots__ = ("__fanloop_joined__",)

    model_config = ConfigDict(frozen=True, defer_build=True)
    system: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
    thinking_budget: int | None = None
    hosted_tools: tuple[HostedTool, ...] = ()
    extra: dict[str, Any] = Field(default_factory=dict)
    settings: ModelSettings | None = None
    output: OutputFormat | None = None


class ModelResponse(BaseModel):
    """One finished model turn.

    ``content`` may be empty only when ``stop_reason`` is ``MAX_TOKENS``. A response holding a
    :class:`~fanloop.messages.ToolCallPart` uses ``TOOL_USE`` unless it was cut off at
    ``MAX_TOKENS``. ``stop_details`` carries provider detail such as a refusal's ``category``.
    """

    # Not a field: whether its parser vouched for its text (see fanloop._unicode.vouch).
    __slots__ = ("__fanloop_valid__",)

    model_config = ConfigDict(frozen=True, defer_build=True)
    content: tuple[Part, ...] = ()
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    provider: str = ""
    raw_stop_reason: str | None = None
    origin: Origin | None = None
    stop_details: dict[str, Any] | None = None
    response_id: str | None = None

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def citations(self) -> tuple[Citation, ...]:
        """The citations of the text parts, in order."""
        return tuple(c for p in self.content if isinstance(p, TextPart) for c in p.citations)

    @property
    def thinking(self) -> str:
        """The concatenated thinking parts."""
        return "".join(p.text for p in self.content if isinstance(p, ThinkingPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The tool calls the model asked for, in order."""
        return tuple([p for p in self.content if isinstance(p, ToolCallPart)])  # (no generator)

    def to_message(self) -> Message:
        """This turn as an assistant message of the conversation."""
        message = _build(
            Message, {"role": "assistant", "content": self.content, "origin": self.origin}
        )
        if known_valid(self):  # (its parser vouched for it: appending it walks nothing)
            vouch(message)
        return _unrendered(message)


register_slots(ModelRequest)
register_slots(ModelResponse)
