"""Tool-call ids that name exactly one call each.

A result is matched to its call by id, and a dangerous call's durable receipt is keyed by it,
so two calls sharing an id could be answered with each other's results. Ids come from the
model's server, which may omit them (the provider then invents one), repeat one within a turn,
or reuse the id of an earlier call. Before a turn enters the transcript, every id that is
empty, too long, repeated within the turn, or already used in the run's history or by a
receipt of its session is replaced with a fresh one.

A turn whose ids were replaced keeps its provider's wire form (``origin``) when the ids can be
rewritten in it too: the Responses API's output items, whose ``reasoning`` items must go back
with the calls they preceded (servers that number calls ``call_0`` on every turn would
otherwise lose their reasoning from the second turn on). Other wire forms are dropped, and
the provider translates the turn's parts instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ._ids import new_id
from ._model_types import ModelResponse
from ._unicode import known_valid, vouch
from .messages import Origin, ToolCallPart

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["MAX_CALL_ID", "distinct_call_ids", "fresh_call_id", "renamed_origin"]

MAX_CALL_ID = 128
"""The longest tool-call id kept as the server sent it."""


def fresh_call_id() -> str:
    """A new tool-call id, unique across turns, runs and processes (or from the id source a
    replaying engine installed, see :mod:`fanloop._ids`)."""
    return new_id("call")


def distinct_call_ids(response: ModelResponse, seen: set[str]) -> ModelResponse:
    """``response`` with every tool call's id unique among ``seen``, the ids the run used
    (:func:`known_call_ids`; the new ones are added to it). See the module docstring.

    A response whose ids all had to stay as they were is returned as it is. One that was
    changed gets an ``origin`` carrying the new ids (:func:`renamed_origin`), or none, so the
    provider translates its parts on the next request instead of replaying them.
    """
    content = list(response.content)
    for part in content:
        if isinstance(part, ToolCallPart):
            break
    else:  # no tool call (a loop: most turns take this way, without a generator)
        return response
    changed = False
    for index, part in enumerate(content):
        if not isinstance(part, ToolCallPart):
            continue
        call_id = part.id
        if not call_id or len(call_id) > MAX_CALL_ID or call_id in seen:
            call_id = fresh_call_id()
            while call_id in seen:  # pragma: no cover - a uuid4 collision
                call_id = fresh_call_id()
            content[index] = _replaced(part, {"id": call_id})
            changed = True
        seen.add(call_id)
    if not changed:
        return response
    ids = [part.id for part in content if isinstance(part, ToolCallPart)]
    origin = renamed_origin(response.origin, ids)
    renamed = _replaced(response, {"content": tuple(content), "origin": origin})
    if known_valid(response):  # fresh ids are ASCII: as valid as the turn, no walk to append
        vouch(renamed)
    return renamed


def renamed_origin(origin: Origin | None, ids: list[str]) -> Origin | None:
    """``origin`` with its tool calls renamed ``ids`` (in order), or ``None`` when its wire
    form is not one whose calls this knows how to rename.

    Responses API output items: each ``function_call`` item gets the next id as its
    ``call_id`` (the items are copied, never changed in place); every other item, reasoning
    first, stays as it was. The turn is no longer the one the server stored
    (``store=True``), so it is sent in full rather than by ``previous_response_id``.
    """
    if origin is None or origin.api != "responses" or type(origin.raw) is not dict:
        return None
    output = origin.raw.get("output")
    if type(output) is not list:
        return None
    calls = iter(ids)
    items: list[Any] = []
    for item in output:
        if type(item) is dict and item.get("type") == "function_call":
            call_id = next(calls, None)
            if call_id is None:
                return None
            item = {**item, "call_id": call_id}
        items.append(item)
    if next(calls, None) is not None:
        return None
    raw = {**origin.raw, "output": items}
    if "stored" in raw:
        raw["stored"] = False
    return _replaced(origin, {"raw": raw})


async def known_call_ids(run: RunState) -> set[str]:
    """The ids already used in ``run``: its history's calls and its session's receipts."""
    if run.call_ids is None:
        ids = {c.id for m in run.messages if m.role == "assistant" for c in m.tool_calls}
        if run.session is not None:
            ids.update(r.call_id for r in await run.session.effects())
        run.call_ids = ids
    return run.call_ids


M = TypeVar("M", bound=BaseModel)


def _replaced(model: M, changes: dict[str, Any]) -> M:
    """``model.model_copy(update=changes)``, at a fraction of its cost on the per-turn path
    (the same shallow copy: the fields set grow by the changed ones)."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=changes)
    copy = type(model).__new__(type(model))
    _set_attr(copy, "__dict__", {**model.__dict__, **changes})
    _set_attr(copy, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _set_attr(copy, "__pydantic_extra__", None)
    _set_attr(copy, "__pydantic_private__", None)
    return copy


_set_attr = object.__setattr__
