"""ToolSweepProvider and example_value: every tool called once with schema-valid arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from fanloop import Agent, TerminationReason, tool
from fanloop.messages import ToolResultPart
from fanloop.testing import ToolSweepProvider, example_value
from fanloop.tools import DEFAULT_TOOLS, READ_ONLY_TOOLS


class Address(BaseModel):
    street: str = Field(min_length=3)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Order(BaseModel):
    ok: bool
    total: float = Field(gt=0, le=100)


SEEN: dict[str, dict[str, Any]] = {}


@tool
def search(query: Annotated[str, Field(min_length=2, max_length=10)], limit: int = 5) -> str:
    """Search for things."""
    SEEN["search"] = {"query": query, "limit": limit}
    return "found"


@tool
def ship(
    address: Address,
    speed: Literal["slow", "fast"],
    items: Annotated[list[int], Field(min_length=2)],
    weight: Annotated[float, Field(gt=0, lt=1)],
    note: str | None = None,
) -> str:
    """Ship an order."""
    SEEN["ship"] = {"address": address, "speed": speed, "items": items, "weight": weight}
    return "shipped"


@tool
async def count(n: Annotated[int, Field(ge=10, le=20, multiple_of=5)]) -> int:
    """Count to n."""
    SEEN["count"] = {"n": n}
    return n


async def test_every_tool_is_called_once_with_valid_arguments() -> None:
    SEEN.clear()
    sweep = ToolSweepProvider()
    agent = Agent(sweep, tools=[search, ship, count])
    result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert sorted(c.name for c in sweep.calls) == ["count", "search", "ship"]
    assert set(SEEN) == {"count", "search", "ship"}  # each one ran: its arguments validated
    assert 2 <= len(SEEN["search"]["query"]) <= 10
    assert SEEN["count"]["n"] in (10, 15, 20)
    answer = json.loads(result.text)  # the tools' results, by name
    assert answer == {"search": "found", "ship": "shipped", "count": str(SEEN["count"]["n"])}
    results = [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert len(results) == 3 and not any(r.is_error for r in results)
    assert len(sweep.requests) == 2  # one turn of calls, one answer


async def test_a_given_answer_and_a_chosen_set_of_tools() -> None:
    SEEN.clear()
    sweep = ToolSweepProvider("all good", tools=["search", "count"], exclude=["count"])
    result = await Agent(sweep, tools=[search, ship, count]).run("go")
    assert result.text == "all good"
    assert [c.name for c in sweep.calls] == ["search"]


async def test_a_typed_output_is_answered_with_a_valid_value() -> None:
    sweep = ToolSweepProvider()
    result = await Agent(sweep, tools=[search], output_type=Order).run("go")
    assert isinstance(result.output, Order)
    assert [c.name for c in sweep.calls] == ["search", "final_result"]
    native = ToolSweepProvider(native_output=True)
    result = await Agent(native, output_type=list[Order]).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert isinstance(result.output, list) and isinstance(result.output[0], Order)


async def test_the_built_in_tools_take_their_sweep(tmp_path: Path) -> None:
    (tmp_path / "example").write_text("hello\n")
    sweep = ToolSweepProvider("done")
    agent = Agent(sweep, tools=list(READ_ONLY_TOOLS), workspace=str(tmp_path))
    result = await agent.run("go")
    assert result.text == "done"
    assert {c.name for c in sweep.calls} == {t.name for t in READ_ONLY_TOOLS}


@pytest.mark.parametrize("t", DEFAULT_TOOLS, ids=lambda t: t.name)
def test_example_arguments_fit_each_built_in_tool(t: Any) -> None:
    for variant in range(3):
        arguments = example_value(t.parameters, variant=variant)
        jsonschema.validate(arguments, t.parameters)
        t.validate(arguments)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 7},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001},
        {"type": "number", "minimum": -3, "maximum": -2, "multipleOf": 0.5},
        {"type": "integer", "maximum": -10},
        {"type": ["null", "string"], "minLength": 12, "maxLength": 12},
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "uuid"},
        {"type": "string", "pattern": "^[A-Z]+$"},
        {"type": "string", "pattern": "^[0-9]{5}$"},
        {"type": "string", "pattern": r"^[A-Z]{2}-\d{3,}$", "minLength": 7},
        {"type": "string", "pattern": "^(foo|bar)_[a-z]+$"},
        {"enum": ["x", "y", 3]},
        {"const": {"a": 1}},
        {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"type": "integer"}}}]},
        {"oneOf": [{"type": "string", "maxLength": 0}, {"type": "boolean"}]},
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"const": 3}}, "required": ["b"]},
            ]
        },
        {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "uniqueItems": True},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
        {"type": "object", "minProperties": 2, "additionalProperties": {"type": "boolean"}},
        {"type": "object", "required": ["x"]},
        {
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer"},
                        "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                    },
                    "required": ["v", "next"],
                }
            },
            "$ref": "#/$defs/Node",
        },
        True,
        {},
    ],
)
def test_example_value_is_valid(schema: Any) -> None:
    for variant in range(4):
        jsonschema.validate(example_value(schema, variant=variant), schema)


@pytest.mark.parametrize(
    "schema",
    [
        False,
        {"type": "integer", "minimum": 3, "maximum": 2},
        {"type": "array", "items": {"const": 1}, "minItems": 2, "uniqueItems": True},
        {"$ref": "#/$defs/Missing"},
        {
            "$defs": {
                "A": {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/A"}},
                    "required": ["a"],
                }
            },
            "$ref": "#/$defs/A",
        },
    ],
)
def test_a_schema_nothing_fits_is_a_value_error(schema: Any) -> None:
    with pytest.raises(ValueError):
        example_value(schema)
