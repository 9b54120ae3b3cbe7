"""How a run ended: :class:`TerminationReason` and :class:`RunResult`."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from ._model_types import Usage
from ._record import record
from .errors import RunIncomplete
from .messages import Citation, Message

__all__ = ["GuardrailTrip", "OutputT", "PendingApproval", "RunResult", "TerminationReason"]

OutputT = TypeVar("OutputT", default=str)
"""The type of a run's typed answer (``Agent(output_type=...)``); ``str`` by default."""


class TerminationReason(StrEnum):
    """Why a run ended. Every run ends with exactly one; ``unknown`` never on a healthy path."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    DEADLINE = "deadline"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    TOOL_CALL_BUDGET = "tool_call_budget"
    MODEL_REFUSAL = "model_refusal"
    MAX_TOKENS = "max_tokens"
    CONTEXT_EXHAUSTED = "context_exhausted"
    STALLED = "stalled"
    CANCELLED = "cancelled"
    PROVIDER_ERROR = "provider_error"
    EFFECT_OUTCOME_UNCERTAIN = "effect_outcome_uncertain"
    AWAITING_APPROVAL = "awaiting_approval"
    OUTPUT_INVALID = "output_invalid"
    GUARDRAIL_TRIPPED = "guardrail_tripped"
    UNKNOWN = "unknown"

    # lower-case aliases, so ``TerminationReason.max_turns == "max_turns"`` reads as in the docs
    completed = "completed"
    max_turns = "max_turns"
    deadline = "deadline"
    token_budget = "token_budget"
    cost_budget = "cost_budget"
    tool_call_budget = "tool_call_budget"
    model_refusal = "model_refusal"
    max_tokens = "max_tokens"
    context_exhausted = "context_exhausted"
    stalled = "stalled"
    cancelled = "cancelled"
    provider_error = "provider_error"
    effect_outcome_uncertain = "effect_outcome_uncertain"
    awaiting_approval = "awaiting_approval"
    output_invalid = "output_invalid"
    guardrail_tripped = "guardrail_tripped"
    unknown = "unknown"


@record(frozen=True)
class PendingApproval:
    """A dangerous call waiting for a person.

    Attributes:
        call_id: the tool call's id: the key to answer it with.
        name: the tool's name.
        arguments: the call's arguments.
        preview: what the confirmation gate showed (a diff, ``$ command``...).
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    preview: str

    def to_json(self) -> dict[str, Any]:
        """The approval as plain JSON values."""
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "preview": self.preview,
        }


def _info_json(value: Any) -> Any:
    """A guardrail's ``info`` as JSON: its own JSON form, else its ``str()``."""
    return to_jsonable_python(value, fallback=str)


class GuardrailTrip(BaseModel):
    """The guardrail that ended a run (``RunResult.guardrail``, the ``GuardrailTripped``
    event).

    Attributes:
        name: the guardrail's name (its function's name unless given).
        kind: ``"input"`` (it checked the prompt) or ``"output"`` (the final answer).
        message: the guardrail's own note on why, if it gave one.
        info: what the guardrail returned as ``info`` (any value; in JSON, as its JSON form or
            its ``str()``).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    kind: Literal["input", "output"]
    message: str | None = None
    info: Annotated[Any, PlainSerializer(_info_json, when_used="json")] = None


class RunResult(BaseModel, Generic[OutputT]):
    """The outcome of one run.

    Attributes:
        output: the answer as the agent's ``output_type``, validated (``str``, the default:
            the same as ``text``). ``None`` when the run ended without a valid answer.
        text: the final answer (for a refusal, an honest sentence naming the category; for a
            typed answer, its JSON).
        messages: the whole conversation, including what the run added.
        usage: tokens spent by the run, sub-agents included.
        turns: model rounds taken.
        elapsed: wall-clock seconds.
        termination_reason: how the run ended.
        run_id: the run's id.
        new_message_index: ``messages[new_message_index:]`` is what this run added.
        tool_calls: tool calls handled by the run.
        cost_usd: estimated cost from the model price table (``None`` if the model is unknown).
        detail: a human-readable note on why the run ended, when it did not complete.
        pending_approvals: for ``awaiting_approval``, the calls waiting for a person (call id,
            tool name, arguments, preview); answer them with
            ``agent.resume(session, approvals={call_id: True | False | "reason"})``.
        guardrail: for ``guardrail_tripped``, the guardrail that tripped
            (:class:`GuardrailTrip`: its name, ``"input"`` or ``"output"``, message and info).
        last_agent: the name of the agent in charge when the run ended: the one it was started
            on, or the last one a handoff gave it to (docs/handoffs.md).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    if TYPE_CHECKING:
        output: OutputT
    else:  # any value at run time: serialised as what it is, whatever the agent's type
        output: Any = None
    text: str = ""
    messages: tuple[Message, ...] = ()
    usage: Usage = Field(default_factory=Usage)
    turns: int = 0
    elapsed: float = 0.0
    termination_reason: TerminationReason = TerminationReason.UNKNOWN
    run_id: str = ""
    new_message_index: int = 0
    tool_calls: int = 0
    cost_usd: float | None = None
    detail: str | None = None
    pending_approvals: tuple[PendingApproval, ...] = ()
    guardrail: GuardrailTrip | None = None
    last_agent: str = ""

    def raise_if_incomplete(self) -> RunResult[OutputT]:
        """Return this result if the run completed; raise otherwise.

        One line turns every other ending (a limit, a refusal, an invalid answer, a call
        waiting for approval...) into an error::

            result = (await agent.run("...")).raise_if_incomplete()

        Raises:
            RunIncomplete: the run ended some other way; the error carries this result.
        """
        if self.termination_reason is TerminationReason.COMPLETED:
            return self

        detail = f": {self.detail}" if self.detail else ""
        raise RunIncomplete(
            f"the run ended with {self.termination_reason.value}{detail}", result=self
        )

    @property
    def new_messages(self) -> tuple[Message, ...]:
        """The messages this run added to the conversation."""
        return self.messages[self.new_message_index :]

    @property
    def citations(self) -> tuple[Citation, ...]:
        """The sources the final answer cites: the citations on the text of the last
        assistant message this run added (``()`` when it has none)."""
        for message in reversed(self.new_messages):
            if message.role == "assistant":
                return message.citations
        return ()

    def __str__(self) -> str:
        return self.text
