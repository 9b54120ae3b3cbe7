"""The typed events of a run.

One stream of events feeds every consumer: ``agent.stream()`` iterates them, observers and
hooks are called from them. Each event class has a ``kind`` string that names it (a text delta
has ``kind == "text_delta"`` and its chunk in ``.text``) and two lineage fields: ``agent_path``,
the names from the root agent down to the agent that emitted it, and ``parent_call_id``, the id
of the tool call that delegated to that agent (``None`` at the root).

The first six kinds (text, thinking and tool-call deltas, citations, hosted-tool progress) are
also what a streaming provider yields before its final :class:`~fanloop.providers.ModelResponse`.

Events are plain slotted dataclasses: cheap to make, one per streamed delta. ``to_dict()``
gives a JSON-ready form.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from ._record import record
from .messages import Citation, Message, ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from ._model_types import ModelRequest, ModelResponse, Usage
    from ._result import GuardrailTrip, RunResult

__all__ = [
    "ApprovalRequested",
    "ApprovalResolved",
    "BudgetKind",
    "BudgetWarning",
    "CitationAdded",
    "CompactionFinished",
    "CompactionStarted",
    "ContextCritical",
    "ContextUsage",
    "Event",
    "GuardrailTripped",
    "HandoffOccurred",
    "HostedToolProgress",
    "MessageAppended",
    "ModelFailed",
    "OutputPartial",
    "PacingCapped",
    "PacingReason",
    "PacingUnavailable",
    "PacingWait",
    "ProviderFallback",
    "RequestStarted",
    "ResponseCompleted",
    "RetryScheduled",
    "RunFinished",
    "RunStarted",
    "StallDetected",
    "StreamDelta",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolFinished",
    "ToolStarted",
    "TurnCompleted",
    "UsageUpdated",
]

BudgetKind: TypeAlias = Literal[
    "turns", "deadline", "input_tokens", "output_tokens", "total_tokens", "cost", "tool_calls"
]
PacingReason: TypeAlias = Literal["requests", "tokens", "concurrency", "cooldown"]
"""What a paced model call waited for: a request slot, token budget, a concurrency slot, or the
group's cooldown after a rate limit (see :mod:`fanloop.pacing`)."""


@record(kw_only=True)
class _Event:
    # The event classes are records (fanloop._record): dataclasses whose ``__eq__`` and
    # ``__repr__`` are shared rather than compiled for each class, and whose ``__init__`` is
    # compiled when the class is first used. They behave as the generated ones.
    kind: ClassVar[str]
    agent_path: tuple[str, ...] = ()
    parent_call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of this event (pydantic models are dumped in JSON mode)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            out[f.name] = _jsonable(getattr(self, f.name))
        return out


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, BaseException):
        return {"type": type(value).__name__, "message": str(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


# -- deltas: what a streaming provider yields, re-emitted by the loop ------------------------


@record()
class TextDelta(_Event):
    """A chunk of the answer's text, as it arrives."""

    kind: ClassVar[Literal["text_delta"]] = "text_delta"
    text: str


@record()
class ThinkingDelta(_Event):
    """A chunk of the model's reasoning; ``signature`` set when the provider sends one."""

    kind: ClassVar[Literal["thinking_delta"]] = "thinking_delta"
    text: str
    signature: str | None = None


@record()
class ToolCallStarted(_Event):
    """A tool call began streaming; its arguments follow as :class:`ToolCallDelta`."""

    kind: ClassVar[Literal["tool_call_started"]] = "tool_call_started"
    call_id: str
    name: str
    index: int = 0


@record()
class ToolCallDelta(_Event):
    """A fragment of a streaming tool call's JSON arguments."""

    kind: ClassVar[Literal["tool_call_delta"]] = "tool_call_delta"
    call_id: str
    arguments_delta: str
    index: int = 0


@record()
class CitationAdded(_Event):
    """The model cited a source for the text it is writing.

    ``citation`` is also kept on the finished text part (``TextPart.citations``);
    ``index`` is the part's place in the turn's content as the provider numbers it
    (Anthropic's content block, the Responses API's output item; 0 on Chat Completions).
    """

    kind: ClassVar[Literal["citation_added"]] = "citation_added"
    citation: Citation
    index: int = 0


MAX_PROGRESS_DETAIL = 8
"""The most fields of a :class:`HostedToolProgress` ``detail``."""
MAX_PROGRESS_CHARS = 4096
"""The longest string in a :class:`HostedToolProgress` ``detail`` (longer ones are cut)."""


@record()
class HostedToolProgress(_Event):
    """A tool the provider runs on its side (web search, file search, code interpreter,
    MCP, image generation, Anthropic's server tools) moved on.

    ``tool`` is the tool's kind (``"web_search"``, ``"file_search"``, ``"code_interpreter"``,
    ``"mcp"``, ``"image_generation"``, or an Anthropic server tool's name such as
    ``"web_fetch"``); ``call_id`` the provider's id of the call (its output item or block);
    ``status`` what happened, from the provider's event (``"in_progress"``, ``"searching"``,
    ``"interpreting"``, ``"code_delta"``, ``"arguments_delta"``, ``"completed"``,
    ``"failed"``...). ``detail`` holds a few small values the event carried (a code or
    arguments delta, a search query), strings cut to :data:`MAX_PROGRESS_CHARS`. The call
    and its result stay in the turn (``origin``) and go back with the conversation.
    """

    kind: ClassVar[Literal["hosted_tool_progress"]] = "hosted_tool_progress"
    tool: str
    call_id: str
    status: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


StreamDelta: TypeAlias = (
    TextDelta | ThinkingDelta | ToolCallStarted | ToolCallDelta | CitationAdded | HostedToolProgress
)


@record()
class OutputPartial(_Event):
    """A typed answer as it streams: ``value`` is the partially parsed JSON value so far
    (a dict for an object output), sent whenever it grows. The validated value is
    ``run.result.output`` at the end."""

    kind: ClassVar[Literal["output_partial"]] = "output_partial"
    value: Any


# -- the run ----------------------------------------------------------------------------------


@record()
class RunStarted(_Event):
    """A run began.

    ``trace_context`` is set when the run goes on from an earlier one that an
    OpenTelemetry observer traced (a batch parked for approval, resumed with
    ``agent.resume``; a durable run recovered on another worker): the W3C ``traceparent`` /
    ``tracestate`` stored with the session or the workflow, as read back (untrusted: see
    :mod:`fanloop.otel`, which validates it).
    """

    kind: ClassVar[Literal["run_started"]] = "run_started"
    run_id: str
    agent_name: str
    model: str
    provider: str = ""
    trace_context: dict[str, str] | None = None


@record()
class RunFinished(_Event):
    """A run ended; ``result.termination_reason`` says how."""

    kind: ClassVar[Literal["run_finished"]] = "run_finished"
    result: RunResult
    error: BaseException | None = None


@record()
class RequestStarted(_Event):
    """A model request is about to be sent (``attempt`` counts from 1).

    ``step`` numbers every model request of the run, retries included, from 1: the same step
    is on the request's other events (response, retry, failure), its log lines and its span,
    so one sampling step can be traced end to end.
    """

    kind: ClassVar[Literal["request_started"]] = "request_started"
    request: ModelRequest
    turn: int
    attempt: int = 1
    step: int = 0


@record()
class ResponseCompleted(_Event):
    """A model response arrived whole."""

    kind: ClassVar[Literal["response_completed"]] = "response_completed"
    response: ModelResponse
    turn: int
    step: int = 0


@record()
class RetryScheduled(_Event):
    """A model call failed and will be retried after ``delay`` seconds.

    ``attempt`` is the number of the attempt that failed (from 1). ``discard_partial`` is true
    when deltas of the failed attempt were already emitted: consumers should drop them.
    """

    kind: ClassVar[Literal["retry_scheduled"]] = "retry_scheduled"
    attempt: int
    delay: float
    error: Exception
    discard_partial: bool = False
    step: int = 0


@record()
class ModelFailed(_Event):
    """A model call failed for good, after ``attempts`` attempts."""

    kind: ClassVar[Literal["model_failed"]] = "model_failed"
    error: Exception
    attempts: int
    step: int = 0


@record()
class ProviderFallback(_Event):
    """A :class:`~fanloop.providers.FallbackProvider` gave up on ``from_provider`` after
    ``error`` (once its retries were spent, or at once when the error is not transient) and
    asks ``to_provider`` instead. ``discard_partial`` is true when deltas of the abandoned
    answer were already emitted. The answer's ``ModelResponse.provider`` names who answered.
    """

    kind: ClassVar[Literal["provider_fallback"]] = "provider_fallback"
    from_provider: str
    to_provider: str
    error: Exception
    discard_partial: bool = False


@record()
class UsageUpdated(_Event):
    """Token usage after a model call: this turn's, the run's total, seconds since start."""

    kind: ClassVar[Literal["usage_updated"]] = "usage_updated"
    turn_usage: Usage
    total_usage: Usage
    elapsed: float


@record()
class ContextUsage(_Event):
    """How much of the model's context window the conversation fills (``limit`` 0: unknown)."""

    kind: ClassVar[Literal["context_usage"]] = "context_usage"
    used: int
    limit: int


@record()
class ContextCritical(_Event):
    """The conversation crossed the share of the context window (``threshold``) past which
    older history is compacted; sent before the compaction starts."""

    kind: ClassVar[Literal["context_critical"]] = "context_critical"
    used: int
    limit: int
    threshold: float


@record()
class TurnCompleted(_Event):
    """A round of the loop ended: the model answered and its tool calls (``tool_calls`` of
    them) have their results in the transcript."""

    kind: ClassVar[Literal["turn_completed"]] = "turn_completed"
    turn: int
    tool_calls: int
    elapsed: float


@record()
class CompactionStarted(_Event):
    """Older history is about to be compacted into a summary."""

    kind: ClassVar[Literal["compaction_started"]] = "compaction_started"
    message_count: int


@record()
class CompactionFinished(_Event):
    """History was compacted from ``before_count`` to ``after_count`` messages."""

    kind: ClassVar[Literal["compaction_finished"]] = "compaction_finished"
    before_count: int
    after_count: int


@record()
class BudgetWarning(_Event):
    """A limit is close: ``used`` of ``limit`` has been spent (at the ``warn_at`` share)."""

    kind: ClassVar[Literal["budget_warning"]] = "budget_warning"
    budget: BudgetKind
    used: float
    limit: float


@record()
class StallDetected(_Event):
    """The same tool was called with the same arguments ``count`` times in a row."""

    kind: ClassVar[Literal["stall_detected"]] = "stall_detected"
    tool_name: str
    count: int


@record()
class PacingWait(_Event):
    """A paced model call waited ``seconds`` before it was sent (see :mod:`fanloop.pacing`).

    Sent after each wait, before the request goes out; a long wait is reported in steps of
    at most 30 s. ``reason`` says what it waited for; ``key`` names the pacing group.
    """

    kind: ClassVar[Literal["pacing_wait"]] = "pacing_wait"
    seconds: float
    reason: PacingReason
    key: str = ""


@record()
class PacingUnavailable(_Event):
    """The shared pacing backend (Redis) could not be reached for a model call.

    ``fail_open``: the call went out unpaced; otherwise it failed with
    :class:`~fanloop.pacing.PacingUnreachable` (a transient error, so it is retried).
    """

    kind: ClassVar[Literal["pacing_unavailable"]] = "pacing_unavailable"
    key: str
    error: str
    fail_open: bool


@record()
class PacingCapped(_Event):
    """A value read back from the shared pacing state (Redis) was out of bounds, and was capped
    or ignored (see :class:`~fanloop.pacing.RedisPacing`).

    ``detail`` says what was found and what was done, e.g. ``"cool was 1e+09 s ahead (capped
    at max_cooldown = 60 s)"``. The state is repaired where it lies; the call goes on within
    the caps.
    """

    kind: ClassVar[Literal["pacing_capped"]] = "pacing_capped"
    key: str
    detail: str


# -- guardrails -------------------------------------------------------------------------------


@record()
class GuardrailTripped(_Event):
    """A guardrail tripped: the run ends with ``guardrail_tripped`` (docs/guardrails.md)."""

    kind: ClassVar[Literal["guardrail_tripped"]] = "guardrail_tripped"
    trip: GuardrailTrip


# -- tools ------------------------------------------------------------------------------------


@record()
class ApprovalRequested(_Event):
    """A dangerous call waits at the confirmation gate; ``preview`` is what the user sees."""

    kind: ClassVar[Literal["approval_requested"]] = "approval_requested"
    call: ToolCallPart
    preview: str


@record()
class ApprovalResolved(_Event):
    """The gate answered; ``reason`` is what the model is told when declined."""

    kind: ClassVar[Literal["approval_resolved"]] = "approval_resolved"
    call: ToolCallPart
    approved: bool
    reason: str | None = None


@record()
class ToolStarted(_Event):
    """A tool call is being handled (also sent for unknown tools and invalid arguments)."""

    kind: ClassVar[Literal["tool_started"]] = "tool_started"
    call: ToolCallPart


@record()
class ToolFinished(_Event):
    """A tool call produced its result (possibly an error result) after ``duration`` s."""

    kind: ClassVar[Literal["tool_finished"]] = "tool_finished"
    call: ToolCallPart
    result: ToolResultPart
    duration: float = 0.0


@record()
class HandoffOccurred(_Event):
    """The model took a handoff: from here on ``to_agent`` answers (docs/handoffs.md).

    Sent with the lineage of the agent handing over; the events after it carry ``to_agent``
    at the end of their ``agent_path``. ``call_id`` is the id of the handoff tool call.
    """

    kind: ClassVar[Literal["handoff"]] = "handoff"
    from_agent: str
    to_agent: str
    call_id: str


@record()
class MessageAppended(_Event):
    """A message joined the conversation at position ``index`` (and was persisted)."""

    kind: ClassVar[Literal["message_appended"]] = "message_appended"
    message: Message
    index: int


Event: TypeAlias = (
    TextDelta
    | ThinkingDelta
    | ToolCallStarted
    | ToolCallDelta
    | CitationAdded
    | HostedToolProgress
    | OutputPartial
    | RunStarted
    | RunFinished
    | RequestStarted
    | ResponseCompleted
    | RetryScheduled
    | ModelFailed
    | ProviderFallback
    | UsageUpdated
    | ContextUsage
    | ContextCritical
    | TurnCompleted
    | CompactionStarted
    | CompactionFinished
    | BudgetWarning
    | StallDetected
    | PacingWait
    | PacingUnavailable
    | PacingCapped
    | GuardrailTripped
    | ApprovalRequested
    | ApprovalResolved
    | ToolStarted
    | ToolFinished
    | HandoffOccurred
    | MessageAppended
)
