"""Provider-independent conversation data: messages and their parts.

Data only, no I/O. Every type is a frozen pydantic model, so messages can be shared between
runs, hashed into sets, serialised to JSON and validated back::

    >>> msg = Message.user("hello")
    >>> msg.text
    'hello'
    >>> Message.model_validate_json(msg.model_dump_json()) == msg
    True

Tool results travel to the model in a ``user`` message, in the order of the calls that asked
for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "INVALID_ARGUMENTS_KEY",
    "Message",
    "Origin",
    "Part",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
]

Role: TypeAlias = Literal["user", "assistant"]

INVALID_ARGUMENTS_KEY = "__fanloop_invalid_json__"
"""A provider that receives tool-call arguments that are not a JSON object sets
``ToolCallPart.arguments`` to ``{INVALID_ARGUMENTS_KEY: raw_text}``; the fan-out answers such a
call with an error result that quotes the text, so the model can correct itself."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")

M = TypeVar("M", bound=BaseModel)


def _build(cls: type[M], values: dict[str, Any]) -> M:
    """Make a model from values that are already valid, skipping validation.

    For fanloop's hot paths only: ``values`` must name every field, with valid values. It is
    about twice as fast as ``model_construct`` (which also fills defaults).
    """
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", values)
    object.__setattr__(model, "__pydantic_fields_set__", set(values))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model


class TextPart(BaseModel):
    """Plain text from the user or the model."""

    model_config = _FROZEN
    kind: Literal["text"] = "text"
    text: str


class ThinkingPart(BaseModel):
    """The model's reasoning. ``signature`` must be sent back unchanged with the turn.

    ``redacted`` holds an opaque encrypted block the provider asked to be replayed as is.
    """

    model_config = _FROZEN
    kind: Literal["thinking"] = "thinking"
    text: str
    signature: str | None = None
    redacted: str | None = None


class ToolCallPart(BaseModel):
    """The model asks for a tool to be called with ``arguments``."""

    model_config = _FROZEN
    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResultPart(BaseModel):
    """What a tool call produced, addressed to the call by ``call_id``."""

    model_config = _FROZEN
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    content: str
    is_error: bool = False


Part: TypeAlias = Annotated[
    TextPart | ThinkingPart | ToolCallPart | ToolResultPart, Field(discriminator="kind")
]


class Origin(BaseModel):
    """The provider's own wire form of an assistant turn, for exact replay.

    A provider that sets ``ModelResponse.origin`` may, when a later request contains a message
    with a matching ``provider`` and ``api``, send ``raw`` instead of translating the parts.
    """

    model_config = ConfigDict(frozen=True)
    provider: str
    api: str
    model: str
    raw: Any = None


class Message(BaseModel):
    """One message of a conversation."""

    model_config = _FROZEN
    role: Role
    content: tuple[Part, ...]
    origin: Origin | None = None

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text part."""
        return _build(
            cls,
            {
                "role": "user",
                "content": (_build(TextPart, {"kind": "text", "text": text}),),
                "origin": None,
            },
        )

    @classmethod
    def assistant(cls, *parts: TextPart | ThinkingPart | ToolCallPart | str) -> Message:
        """An assistant message; plain strings become text parts."""
        return cls(
            role="assistant",
            content=tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts),
        )

    @classmethod
    def tool_results(cls, results: Iterable[ToolResultPart]) -> Message:
        """The user message that carries tool results back to the model."""
        return _build(cls, {"role": "user", "content": tuple(results), "origin": None})

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The tool calls in this message, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolCallPart))

    @property
    def tool_results_parts(self) -> tuple[ToolResultPart, ...]:
        """The tool results in this message, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolResultPart))
