"""Typed output: ``Agent(output_type=...)``, validation sent back to the model, validators,
``ModelRetry``, ``output_invalid``, streaming partial output, typed sub-agents."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from fanloop import Agent, TerminationReason, tool
from fanloop.errors import ModelRetry
from fanloop.messages import ToolResultPart
from fanloop.providers import ModelRequest
from fanloop.testing import ScriptedProvider, call, reply


class Invoice(BaseModel):
    total: float
    currency: Literal["EUR", "USD"]


class Answer(BaseModel):
    answer: str


class NeedMoreInfo(BaseModel):
    question: str


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


def final(**arguments: Any) -> Any:
    return reply(tool_calls=[call("final_result", **arguments)])


def tool_results(request: ModelRequest) -> list[ToolResultPart]:
    return [p for m in request.messages for p in m.content if isinstance(p, ToolResultPart)]


async def test_a_valid_answer_is_the_output() -> None:
    provider = ScriptedProvider([final(total=12.5, currency="EUR")])
    result = await Agent(provider, output_type=Invoice).run("extract")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.output == Invoice(total=12.5, currency="EUR")
    assert json.loads(result.text) == {"total": 12.5, "currency": "EUR"}
    (spec,) = [t for t in provider.requests[0].tools if t.name == "final_result"]
    assert spec.parameters["properties"]["currency"]["enum"] == ["EUR", "USD"]


async def test_a_wrong_answer_goes_back_with_the_errors_then_a_right_one_is_accepted() -> None:
    provider = ScriptedProvider(
        [final(total="lots", currency="GBP"), final(total=3, currency="USD")]
    )
    result = await Agent(provider, output_type=Invoice).run("extract")
    assert result.output == Invoice(total=3, currency="USD")
    assert len(provider.requests) == 2
    (sent_back,) = tool_results(provider.requests[1])
    assert sent_back.is_error
    assert "total" in sent_back.content and "currency" in sent_back.content


async def test_a_model_that_never_gets_it_right_ends_with_output_invalid() -> None:
    provider = ScriptedProvider([final(total="x", currency="EUR")] * 3)
    result = await Agent(provider, output_type=Invoice, output_retries=2).run("extract")
    assert result.termination_reason is TerminationReason.OUTPUT_INVALID
    assert result.output is None
    assert len(provider.requests) == 3
    assert "total" in (result.detail or "")


async def test_a_text_answer_where_a_typed_one_is_wanted_is_sent_back() -> None:
    provider = ScriptedProvider(["it is 12 euros", final(total=12, currency="EUR")])
    result = await Agent(provider, output_type=Invoice).run("extract")
    assert result.output == Invoice(total=12, currency="EUR")
    assert "final_result" in provider.requests[1].messages[-1].text


@pytest.mark.parametrize(
    ("output_type", "arguments", "expected"),
    [
        (int, {"response": 42}, 42),
        (list[str], {"response": ["a", "b"]}, ["a", "b"]),
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Person, {"name": "Ada", "age": 36}, {"name": "Ada", "age": 36}),
        (
            Answer | NeedMoreInfo,
            {"response": {"question": "which year?"}},
            NeedMoreInfo(question="which year?"),
        ),
        (Answer | NeedMoreInfo, {"response": {"answer": "1815"}}, Answer(answer="1815")),
    ],
)
async def test_output_types(output_type: Any, arguments: dict[str, Any], expected: Any) -> None:
    provider = ScriptedProvider([final(**arguments)])
    result = await Agent(provider, output_type=output_type).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED, result.detail
    assert result.output == expected


async def test_str_output_is_the_text() -> None:
    result = await Agent(ScriptedProvider(["hello"])).run("hi")
    assert result.output == result.text == "hello"
    assert "final_result" not in Agent(ScriptedProvider([])).tools


async def test_validators_may_send_the_answer_back_or_correct_it() -> None:
    seen = []

    def positive(invoice: Invoice) -> Invoice:
        seen.append(invoice.total)
        if invoice.total <= 0:
            raise ModelRetry("the total must be positive")
        return invoice

    async def rounded(ctx: Any, invoice: Invoice) -> Invoice:
        assert ctx.deps == "deps"
        return invoice.model_copy(update={"total": round(invoice.total)})

    provider = ScriptedProvider([final(total=-1, currency="EUR"), final(total=2.6, currency="EUR")])
    agent = Agent(provider, output_type=Invoice, output_validators=[positive, rounded])
    result = await agent.run("go", deps="deps")
    assert result.output == Invoice(total=3, currency="EUR")
    assert seen == [-1, 2.6]
    assert "the total must be positive" in tool_results(provider.requests[1])[0].content


async def test_validators_check_text_answers_too() -> None:
    def no_shouting(text: str) -> str:
        if text.isupper():
            raise ModelRetry("do not shout")
        return text

    provider = ScriptedProvider(["HELLO", "hello"])
    result = await Agent(provider, output_validators=[no_shouting]).run("hi")
    assert result.output == "hello"
    assert "do not shout" in provider.requests[1].messages[-1].text


async def test_model_retry_from_a_tool_is_its_error_result() -> None:
    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        raise ModelRetry(f"no city called {city!r}; try its English name")

    provider = ScriptedProvider([reply(tool_calls=[call("lookup", city="Wien")]), "ok"])
    await Agent(provider, tools=[lookup]).run("go")
    (part,) = tool_results(provider.requests[1])
    assert part.is_error and part.content == "no city called 'Wien'; try its English name"


async def test_streaming_a_typed_run_yields_partial_output_then_the_value() -> None:
    provider = ScriptedProvider([final(total=12.5, currency="EUR")], chunk_size=4)
    partials = []
    async with Agent(provider, output_type=Invoice).stream("go") as run:
        async for event in run:
            if event.kind == "output_partial":
                partials.append(event.value)
    assert run.result.output == Invoice(total=12.5, currency="EUR")
    assert len(partials) > 2
    assert partials[-1] == {"total": 12.5, "currency": "EUR"}
    assert all(isinstance(p, dict) for p in partials)


async def test_a_typed_subagent_reaches_its_parent_as_json() -> None:
    child = Agent(
        ScriptedProvider([final(total=7, currency="USD")]), output_type=Invoice, name="extractor"
    )

    def respond(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return reply(tool_calls=[call("extractor", task="extract")])
        return reply(tool_results(request)[0].content)

    result = await Agent(ScriptedProvider(respond), tools=[child.as_tool()]).run("go")
    assert json.loads(result.text) == {"total": 7.0, "currency": "USD"}


async def test_with_options_keeps_the_output_type() -> None:
    agent = Agent(ScriptedProvider([final(response=5)]), output_type=int)
    other = agent.with_options(name="copy")
    assert other.output.output_type is int
    assert list(other.tools) == ["final_result"]


async def test_system_may_be_a_function_of_the_run_context() -> None:
    async def system(ctx: Any) -> str:
        return f"You help {ctx.deps['user']}."

    provider = ScriptedProvider(["hi", "hi again"])
    agent = Agent(provider, system=system)
    await agent.run("hello", deps={"user": "Ada"})
    await agent.run("hello", deps={"user": "Bob"})
    assert [r.system for r in provider.requests] == ["You help Ada.", "You help Bob."]


async def test_raise_if_incomplete_turns_other_endings_into_an_error() -> None:
    from fanloop import Limits
    from fanloop.errors import RunIncomplete

    done = await Agent(ScriptedProvider(["ok"])).run("hi")
    assert done.raise_if_incomplete() is done
    looping = ScriptedProvider([reply(tool_calls=[call("nothing")])] * 3)
    cut = await Agent(looping, limits=Limits(max_turns=1)).run("hi")
    with pytest.raises(RunIncomplete, match="max_turns") as info:
        cut.raise_if_incomplete()
    assert info.value.result is cut
    assert info.value.termination_reason is TerminationReason.MAX_TURNS
