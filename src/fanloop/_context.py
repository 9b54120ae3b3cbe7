"""Context management: track how full the window is, compact older history into a summary.

Before each round the loop estimates the conversation's size: the input and output tokens
the provider reported for the last call, plus about one token per four characters of what was
appended since. Past ``ContextPolicy(compact_threshold=0.8)`` of the model's context window,
the older history is replaced by a summary the provider writes. The cut is made at an assistant
message, so a tool call and its result are always kept or summarised together, and the most
recent messages stay verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._log import logger
from ._model import Halted, call_model
from .events import CompactionFinished, CompactionStarted, ContextCritical
from .limits import media_tokens
from .messages import (
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["check_context", "compact", "estimate_tokens"]

KEEP_RECENT = 6
SUMMARY_PROMPT = (
    "Summarise the conversation so far for your own later use: the user's goals and "
    "constraints, decisions made, facts learned from tools (paths, names, numbers), work done "
    "and work still open. Be complete but concise; write only the summary."
)
SUMMARY_HEADER = "[Summary of the earlier conversation, written to save context]\n"


_TEXTS = (TextPart, ThinkingPart)  # (a tuple: ``A | B`` in the call makes a union each time)
_MEDIA = (ImagePart, DocumentPart)


def _chars(message: Message) -> int:
    n = 0
    for part in message.content:
        if isinstance(part, _TEXTS):
            n += len(part.text)
        elif isinstance(part, ToolResultPart):
            n += len(part.content)
            for media in part.parts:
                n += media_tokens(media) * 4
        elif isinstance(part, ToolCallPart):
            n += len(part.name) + len(str(part.arguments))
        elif isinstance(part, _MEDIA):
            n += media_tokens(part) * 4  # counted as characters, four to a token
    return n


def estimate_tokens(run: RunState) -> int:
    """Tokens the next request will carry: the last reported count plus an estimate since."""
    chars = 0
    for message in run.messages[run.context_base :]:  # (a loop: no generator per round)
        chars += _chars(message)
    return run.context_tokens + chars // 4


async def check_context(run: RunState) -> None:
    """Compact older history when the conversation fills too much of the context window."""
    window = run.agent.context_window
    if not window:
        return
    used = estimate_tokens(run)
    threshold = run.agent.compact_threshold
    if used >= window * threshold:
        logger.info("context_threshold_crossed", used=used, window=window)
        if run.emitter.wants("context_critical"):
            await run.emitter.emit(ContextCritical(used, window, threshold))
        await compact(run)


def _cut(messages: list[Message]) -> int:
    """Where the kept tail starts: an assistant message (so no tool call is parted from its
    result), keeping about KEEP_RECENT messages, fewer when the history is short; 0 when
    there is nothing worth summarising."""
    assistants = [i for i in range(2, len(messages)) if messages[i].role == "assistant"]
    if not assistants:
        return 0
    recent = [i for i in assistants if i >= len(messages) - KEEP_RECENT]
    return recent[0] if recent else assistants[-1]


async def compact(run: RunState) -> bool:
    """Replace the older history with a provider-written summary. False if nothing to cut."""
    messages = run.messages
    cut = _cut(messages)
    if cut < 2:
        return False
    before = len(messages)
    emitter = run.emitter
    await emitter.emit(CompactionStarted(before))
    older = messages[:cut]
    last = older[-1]
    ask = Message(role="user", content=(*last.content, TextPart(text=SUMMARY_PROMPT)))
    # A plain-text summary: no typed-output schema and no forced tool choice for this call.
    request = run.request([], min(run.agent.max_tokens, 4096)).model_copy(
        update={
            "messages": (*older[:-1], ask),
            "output": None,
            "settings": run.settings.model_copy(update={"tool_choice": None}),
        }
    )
    budget = run.budget
    reserved = None
    if budget.metering:  # the summary call spends from the shared budget like any other
        granted = await budget.reserve(
            budget.estimate(request, 0, 0), request.max_tokens, run.agent.model
        )
        if isinstance(granted, tuple):
            return False  # no room for a summary: the round-entry guards end the run
        reserved = granted
        if granted.output_tokens < 1:
            budget.settle(granted, None, run.agent.model)
            return False
        if granted.output_tokens < request.max_tokens:
            request = request.model_copy(update={"max_tokens": granted.output_tokens})
    try:
        response = await call_model(run, request)
    except Halted:
        budget.settle(reserved, None, run.agent.model)
        return False  # the round-entry guards end the run
    except BaseException:
        budget.settle(reserved, None, run.agent.model)
        raise
    await run.account(response, reserved)
    summary = response.text.strip() or "(the model wrote no summary)"
    kept = [Message.user(SUMMARY_HEADER + summary), *messages[cut:]]
    if run.session is not None:
        await run.session.replace(kept)
        kept = list(run.session.messages)  # as stored (valid Unicode: docs/sessions.md)
    run.messages[:] = kept
    run.new_message_index = max(0, run.new_message_index - (cut - 1))
    run.context_tokens = 0
    run.context_base = 0
    await emitter.emit(CompactionFinished(before, len(kept)))
    logger.info("context_compacted", before=before, after=len(kept))
    return True
