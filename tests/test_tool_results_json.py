"""What a function tool returns reaches the model as JSON, or fails naming the tool and type."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import pathlib
import uuid
from typing import Any

import pytest

from fanloop import Agent, tool
from fanloop.testing import ScriptedProvider, call, reply


@dataclasses.dataclass
class Meeting:
    when: datetime.datetime
    room: pathlib.Path


class Colour(enum.Enum):
    RED = "red"


class Opaque:
    pass


async def result_of(value: Any) -> tuple[str, bool]:
    """The tool result content (and is_error) the model gets back for a tool returning value."""

    @tool
    def give() -> Any:
        """Give the value."""
        return value

    provider = ScriptedProvider([reply(tool_calls=[call("give")]), "done"])
    await Agent(provider, tools=[give]).run("go")
    (part,) = provider.requests[1].messages[-1].tool_results_parts
    return part.content, part.is_error


async def test_values_pydantic_encodes_reach_the_model_as_json_not_repr() -> None:
    value = {
        "meeting": Meeting(datetime.datetime(2026, 12, 2, 9, 30), pathlib.Path("/a/b")),
        "tags": {3},
        "blob": b"\x00\xff",
        "colour": Colour.RED,
        "id": uuid.UUID(int=1),
        "day": datetime.date(2026, 1, 2),
    }
    content, is_error = await result_of(value)
    assert not is_error
    assert json.loads(content) == {
        "meeting": {"when": "2026-12-02T09:30:00", "room": "/a/b"},
        "tags": [3],
        "blob": "AP8=",
        "colour": "red",
        "id": "00000000-0000-0000-0000-000000000001",
        "day": "2026-01-02",
    }


async def test_a_value_nothing_can_encode_is_an_error_naming_the_tool_and_type() -> None:
    content, is_error = await result_of(Opaque())
    assert is_error
    assert "'give'" in content and "Opaque" in content
    assert "object at 0x" not in content  # never a repr with an address


async def test_strings_and_plain_json_are_unchanged() -> None:
    assert await result_of("plain text") == ("plain text", False)
    assert await result_of({"a": [1, 2.5, None, "é"]}) == ('{"a": [1, 2.5, null, "é"]}', False)


@pytest.mark.parametrize("text", ["\ud83d", "a\udc00b"])
async def test_a_lone_surrogate_in_a_result_is_not_an_encoding_failure(text: str) -> None:
    content, is_error = await result_of({"t": text})
    assert not is_error
    assert json.loads(content)["t"] in (text, text.replace(text.strip("ab"), "\ufffd"))
