"""Handoffs: one agent hands the conversation to another, which finishes the run (docs/handoffs.md).

``Agent(handoffs=[billing, handoff(refunds, input_filter=...)])`` gives the model one tool per
handoff, ``transfer_to_<name>``. When the model calls one, the call gets its result
("Transferred to billing.") so the transcript stays valid, the rest of the batch runs as
usual, and once the batch's results are in the conversation the run goes on with the target:
the same :class:`~fanloop._run.RunState` (conversation, session, budget, deadline, run id,
turn count), the target's system prompt, tools, provider, settings and output type, and
events that carry the target's name at the end of their ``agent_path``.

Unlike :meth:`Agent.as_tool <fanloop.Agent.as_tool>`, control does not come back: the
target's answer is the run's answer.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ._dispatch import Emitter
from ._record import record
from ._result import TerminationReason
from ._run import _NO_OUTPUT, dynamic_system
from .errors import ConfigurationError
from .events import HandoffOccurred
from .messages import Message, ToolCallPart
from .tools.base import Tool, ToolResult, current_context

if TYPE_CHECKING:
    from ._agent import Agent
    from ._run import RunState

__all__ = [
    "ACTIVE_AGENT_KEY",
    "MAX_HANDOFFS",
    "Handoff",
    "HandoffTool",
    "InputFilter",
    "handoff",
    "handoff_tools",
    "take_handoff",
]

MAX_HANDOFFS: Final = 10
"""How many handoffs one run may take; the next one ends the run with ``max_turns``."""

ACTIVE_AGENT_KEY: Final = "fanloop.active_agent"
"""The session metadata key naming the agent a handoff left in charge (for ``resume``)."""

MAX_REACHABLE = 256
"""How many agents a resume searches through the handoff graph for the one in charge."""

InputFilter = Callable[[tuple[Message, ...]], "Sequence[Message] | Awaitable[Sequence[Message]]"]
"""``input_filter(messages) -> messages``, sync or async: the history the target starts from."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {
            "type": "string",
            "description": "Optional: why the conversation is handed over.",
        }
    },
    "additionalProperties": False,
}


@record(frozen=True)
class Handoff:
    """A handoff an agent can take: made by :func:`handoff` (a bare agent in
    ``Agent(handoffs=[...])`` is ``handoff(agent)``).

    Attributes:
        target: the agent that takes over, or a function of no arguments returning it (for
            agents that hand back to an agent made after them).
        tool_name: the tool the model calls, ``transfer_to_<name>``.
        description: the tool's description, for the model.
        input_filter: ``input_filter(messages) -> messages``, sync or async, or ``None`` (the
            target sees the whole history).
    """

    target: Agent[Any, Any] | Callable[[], Agent[Any, Any]]
    tool_name: str
    description: str
    input_filter: InputFilter | None = None

    def agent(self) -> Agent[Any, Any]:
        """The target agent (a function target is called now)."""
        target = self.target
        if callable(target):
            target = target()
            if not _is_agent(target):
                raise ConfigurationError(
                    f"the target function of handoff {self.tool_name!r} returned "
                    f"{type(target).__name__}, not an Agent"
                )
        return target


def _is_agent(value: object) -> bool:
    """Whether ``value`` is an :class:`~fanloop.Agent` (by its shape: this module sits below
    the agent's, so it does not import it)."""
    return isinstance(getattr(value, "handoffs", None), tuple) and callable(
        getattr(value, "_execute", None)
    )


def handoff(
    agent: Agent[Any, Any] | Callable[[], Agent[Any, Any]],
    *,
    name: str | None = None,
    description: str | None = None,
    input_filter: InputFilter | None = None,
) -> Handoff:
    """A handoff to ``agent`` for ``Agent(handoffs=[...])``.

    Args:
        agent: the agent that takes over; or a function of no arguments returning it, to hand
            back to an agent that is made later (then ``name`` is required).
        name: the tool's name (default ``transfer_to_<agent name>``, with characters outside
            ``[A-Za-z0-9_-]`` made ``_``, cut to 64).
        description: the tool's description (default: one made from the agent's name).
        input_filter: ``input_filter(messages) -> messages``, sync or async: the history the
            target starts from (e.g. without tool calls). The conversation (and the session)
            holds the filtered history from then on.

    Raises:
        ConfigurationError: ``name`` breaks the tool-name rule, ``agent`` is neither an agent
            nor a function, a function target has no ``name``, or ``input_filter`` is not
            callable.
    """
    if _is_agent(agent):
        target_name = agent.name  # type: ignore[union-attr]
    elif callable(agent):
        if name is None:
            raise ConfigurationError(
                "a handoff to a function returning an agent needs name= (the tool's name)"
            )
        target_name = name
    else:
        raise ConfigurationError(
            f"a handoff goes to an Agent (or a function returning one), not {type(agent).__name__}"
        )
    if name is None:
        name = tool_name_for(target_name)
    elif not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise ConfigurationError(
            f"handoff name {name!r} is not a tool name: 1 to 64 of A-Z, a-z, 0-9, _ and -"
        )
    if input_filter is not None and not callable(input_filter):
        raise ConfigurationError("input_filter must be a function of the messages")
    if description is None:
        description = (
            f"Hand the conversation over to the {target_name!r} agent, which takes it from "
            "here and answers the user."
        )
    return Handoff(agent, name, description, input_filter)


def tool_name_for(agent_name: str) -> str:
    """``transfer_to_<agent_name>`` under the tool-name rule ``[A-Za-z0-9_-]{1,64}``."""
    return f"transfer_to_{_UNSAFE.sub('_', agent_name) or 'agent'}"[:64]


class HandoffTool(Tool):
    """The tool the model calls to take a handoff (see :func:`handoff`)."""

    parameters = _SCHEMA
    concurrent_safe = True

    def __init__(self, spec: Handoff) -> None:
        self.handoff = spec
        self.name = spec.tool_name
        self.description = spec.description

    async def run(self, reason: str | None = None) -> ToolResult:
        try:
            ctx = current_context()
        except LookupError:
            return ToolResult("A handoff can only be taken inside an agent run.", is_error=True)
        run: RunState = ctx._run
        first = _first_handoff_call(run, ctx.call)
        if first is not None and first.id != ctx.call.id:
            return ToolResult(
                f"Not transferred: this turn already hands the conversation over with "
                f"{first.name!r}; only the first handoff of a turn is taken.",
                is_error=True,
            )
        if run.handoffs >= MAX_HANDOFFS:
            detail = f"the run reached its limit of {MAX_HANDOFFS} handoffs (a handoff loop?)"
            run.end(TerminationReason.MAX_TURNS, detail)
            return ToolResult(f"Not transferred: {detail}.", is_error=True)
        return ToolResult(f"Transferred to {self.handoff.agent().name}.")


def handoff_tools(
    handoffs: Iterable[Any], agent_name: str
) -> tuple[tuple[Handoff, ...], list[HandoffTool]]:
    """The handoffs of ``Agent(handoffs=...)`` (agents made into :class:`Handoff`) and their
    tools; two with one tool name are a :class:`~fanloop.errors.ConfigurationError`."""
    if isinstance(handoffs, Handoff | str) or _is_agent(handoffs):
        raise ConfigurationError("handoffs= takes a list of agents or handoff(...) objects")
    specs: list[Handoff] = []
    seen: dict[str, Handoff] = {}
    for item in handoffs:
        spec = handoff(item) if _is_agent(item) else item
        if not isinstance(spec, Handoff):
            raise ConfigurationError(
                f"agent {agent_name!r}: a handoff is an Agent or handoff(...), "
                f"not {type(item).__name__}"
            )
        if spec.tool_name in seen:
            raise ConfigurationError(
                f"agent {agent_name!r} has two handoffs named {spec.tool_name!r}; give one "
                "another tool name with handoff(agent, name=...)"
            )
        seen[spec.tool_name] = spec
        specs.append(spec)
    return tuple(specs), [HandoffTool(s) for s in specs]


def _first_handoff_call(run: RunState, call: ToolCallPart) -> ToolCallPart | None:
    """The first handoff call of the turn that holds ``call`` (in the model's order)."""
    if not run.messages or run.messages[-1].role != "assistant":
        return None
    calls = run.messages[-1].tool_calls
    if all(c.id != call.id for c in calls):
        return None
    tools = run.agent.tools
    return next((c for c in calls if isinstance(tools.get(c.name), HandoffTool)), None)


async def take_handoff(run: RunState) -> None:
    """At the start of a round: if the batch just answered took a handoff (its first handoff
    call with a result that is not an error), the target is put in charge for this round.

    Read from the transcript, so a batch parked for approval and resumed in another process,
    or a run continued from its messages, still hands off.
    """
    messages = run.messages
    if len(messages) < 2 or messages[-1].role != "user" or messages[-2].role != "assistant":
        return
    tools = run.agent.tools
    taken = next(
        (c for c in messages[-2].tool_calls if isinstance(tools.get(c.name), HandoffTool)), None
    )
    if taken is None:
        return
    answered = next((p for p in messages[-1].tool_results_parts if p.call_id == taken.id), None)
    if answered is None or answered.is_error:
        return
    tool = tools[taken.name]
    assert isinstance(tool, HandoffTool)
    await switch(run, tool.handoff, taken.id)


async def switch(run: RunState, spec: Handoff | None, call_id: str, target: Any = None) -> None:
    """Put ``spec``'s target (or ``target``) in charge of ``run`` from its next round."""
    source = run.agent
    agent: Agent[Any, Any] = spec.agent() if spec is not None else target
    agent = agent._active()  # inside Agent.override(), the replacement takes over
    old = run.emitter
    if spec is not None:
        run.handoffs += 1
        await old.emit(HandoffOccurred(source.name, agent.name, call_id))
        if spec.input_filter is not None:
            await _filter_history(run, spec.input_filter)
    run.emitter = Emitter(
        old.table,
        path=(*old.path, agent.name),
        parent_call_id=old.parent_call_id,
        send=old.send,
        parent=old.parent,
    )
    run.agent = agent
    run.settings = agent.model_settings
    run.max_tokens = agent.max_tokens
    run.stall = None  # the new agent's threshold, from its first batch on
    own_turns = agent.limits.max_turns  # turns count across the run: the tighter limit holds
    if own_turns is not None and (run.max_turns is None or own_turns < run.max_turns):
        run.max_turns = own_turns
        run.warned_turns = False
    run.output = _NO_OUTPUT
    run.output_failures = 0
    run.system = agent.system_for_run()
    if callable(agent.system):
        run.system = await dynamic_system(agent.system, run)
    if spec is not None and run.session is not None and run.parent is None:
        await run.session.set_metadata(**{ACTIVE_AGENT_KEY: agent.name})


async def _filter_history(run: RunState, fn: InputFilter) -> None:
    """Replace the conversation with what ``fn`` makes of it (the session too)."""
    before = tuple(run.messages)
    out = fn(before)
    if inspect.isawaitable(out):
        out = await out
    if isinstance(out, Message) or not isinstance(out, Sequence | tuple | list):
        raise ConfigurationError(
            f"input_filter must return a sequence of messages, not {type(out).__name__}"
        )
    kept = list(out)
    if any(not isinstance(m, Message) for m in kept):
        raise ConfigurationError("input_filter must return Message objects only")
    if kept == list(before):
        return
    if run.session is not None:
        await run.session.replace(kept)
    run.messages[:] = kept
    run.new_message_index = min(run.new_message_index, len(kept))
    run.context_tokens = 0
    run.context_base = 0


async def enter_active_agent(run: RunState, *, resumed: bool) -> None:
    """At the start of a root run on a session: a resume goes on with the agent a handoff left
    in charge (when the resumed agent reaches it through its handoffs); a new run starts with
    the agent it was called on, so the session forgets the old one."""
    session = run.session
    if session is None or run.parent is not None:
        return
    name = session.metadata.get(ACTIVE_AGENT_KEY)
    if name is None or name == run.agent.name:
        return
    if not resumed:
        await session.set_metadata(**{ACTIVE_AGENT_KEY: None})
        return
    target = reachable(run.agent, name)
    if target is not None:
        await switch(run, None, "", target)


def reachable(start: Agent[Any, Any], name: str) -> Agent[Any, Any] | None:
    """The first agent named ``name`` that ``start`` reaches through handoffs (breadth
    first, at most :data:`MAX_REACHABLE` agents looked at)."""
    seen = {id(start)}
    queue = [start]
    while queue and len(seen) <= MAX_REACHABLE:
        agent = queue.pop(0)
        for spec in agent.handoffs:
            target = spec.agent()
            if target.name == name:
                return target
            if id(target) not in seen:
                seen.add(id(target))
                queue.append(target)
    return None
