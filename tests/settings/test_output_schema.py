"""The strict-schema transformers: OpenAI strict mode and Anthropic's output format."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from fanloop._output import OutputSpec
from fanloop.providers._schema import (
    accepts_null,
    anthropic_schema,
    openai_strict_schema,
    schema_name,
)
from fanloop.testing import example_value


class Item(BaseModel):
    name: str = Field(min_length=1, description="what it is")
    qty: int = Field(ge=1)


class Invoice(BaseModel):
    total: float
    currency: Literal["EUR", "USD"]
    note: str | None = None
    items: list[Item]
    main: Item | None = None


class Tree(BaseModel):
    value: int
    children: list[Tree]


class Cat(BaseModel):
    kind: Literal["cat"]
    meows: bool


class Dog(BaseModel):
    kind: Literal["dog"]
    barks: bool


class Pet(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]


class WithDefault(BaseModel):
    x: int = 5


@dataclasses.dataclass
class Point:
    x: int
    y: int


def params(output_type: Any) -> dict[str, Any]:
    return OutputSpec(output_type).parameters


def objects(schema: Any) -> list[dict[str, Any]]:
    """Every object node of a schema."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found.extend(objects(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(objects(value))
    return found


@pytest.mark.parametrize("output_type", [Invoice, Tree, Pet, Point, list[int], int | str, bool])
def test_strict_form_closes_every_object_and_requires_every_property(output_type: Any) -> None:
    schema = params(output_type)
    strict = openai_strict_schema(schema)
    assert strict is not None
    for node in objects(strict):
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    if "$defs" in schema:
        assert set(strict["$defs"]) == set(schema["$defs"])
    # what the strict form accepts, the output type accepts
    value = example_value(strict)
    jsonschema.validate(value, strict)
    OutputSpec(output_type).parse_arguments(value)


def test_optional_fields_become_required_and_stay_nullable() -> None:
    strict = openai_strict_schema(params(Invoice))
    assert strict is not None
    assert strict["required"] == ["total", "currency", "note", "items", "main"]
    assert accepts_null(strict["properties"]["note"], {})
    assert accepts_null(strict["properties"]["main"], strict["$defs"])
    jsonschema.validate(
        {"total": 1, "currency": "EUR", "note": None, "items": [], "main": None}, strict
    )


def test_unsupported_keywords_are_removed_and_described() -> None:
    strict = openai_strict_schema(params(Invoice))
    assert strict is not None
    name = strict["$defs"]["Item"]["properties"]["name"]
    assert "minLength" not in name
    assert name["description"] == "what it is\n\n{minLength: 1}"
    assert strict["$defs"]["Item"]["properties"]["qty"]["minimum"] == 1  # OpenAI has minimum
    anthropic = anthropic_schema(params(Invoice))
    assert anthropic is not None
    assert anthropic["$defs"]["Item"]["properties"]["qty"] == {
        "type": "integer",
        "description": "{minimum: 1}",
    }


def test_discriminated_unions_become_any_of() -> None:
    strict = openai_strict_schema(params(Pet))
    assert strict is not None
    pet = strict["properties"]["pet"]
    assert "oneOf" not in pet and "discriminator" not in pet
    assert [v["$ref"] for v in pet["anyOf"]] == ["#/$defs/Cat", "#/$defs/Dog"]


@pytest.mark.parametrize(
    "schema",
    [
        params(WithDefault),  # an optional field that does not take null
        params(dict[str, int]),  # free-form keys
        {"type": "object", "properties": {"a": {}}, "required": ["a"]},  # Any
        {"type": "object", "properties": {"t": {"type": "array", "prefixItems": []}}},
        {"type": "object", "properties": {"o": {"type": "object"}}, "required": ["o"]},
        {"type": "string"},  # the root must be an object
    ],
)
def test_what_cannot_be_made_strict_falls_back(schema: dict[str, Any]) -> None:
    assert openai_strict_schema(schema) is None


def test_deep_nesting_is_not_strict() -> None:
    node: dict[str, Any] = {"type": "integer"}
    for _ in range(12):
        node = {"type": "object", "properties": {"a": node}, "required": ["a"]}
    assert openai_strict_schema(node) is None
    assert anthropic_schema(node) is not None


def test_anthropic_keeps_optional_properties_but_not_free_form_ones() -> None:
    assert anthropic_schema(params(WithDefault)) == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert anthropic_schema(params(dict[str, int])) is None


def test_the_input_schema_is_left_alone() -> None:
    schema = params(Invoice)
    before = repr(schema)
    openai_strict_schema(schema)
    anthropic_schema(schema)
    assert repr(schema) == before


def test_schema_names() -> None:
    assert schema_name("Invoice") == "Invoice"
    assert schema_name("list[int]") == "list_int_"
    assert schema_name("") == "output"
    assert len(schema_name("x" * 100)) == 64
