"""One script means the same on ScriptedProvider and on a real provider over FakeLLMServer:
a typed answer scripted as a ``final_result`` call or as JSON text plays in the form each
request asks for (tool mode or native structured output)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from fanloop import Agent
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply


class City(BaseModel):
    name: str
    population: int


AS_CALL = [reply(tool_calls=[call("final_result", name="Oslo", population=709_000)])]
AS_TEXT = ['{"name": "Oslo", "population": 709000}']
WANT = City(name="Oslo", population=709_000)

REAL: dict[str, Callable[[str], Any]] = {
    "chat": lambda url: OpenAIProvider("gpt-4.1", base_url=f"{url}/v1", api_key="k"),
    "responses": lambda url: OpenAIResponsesProvider("gpt-5", base_url=f"{url}/v1", api_key="k"),
    "anthropic": lambda url: AnthropicProvider("claude-sonnet-4-5", base_url=url, api_key="k"),
}


@pytest.mark.parametrize("script", [AS_CALL, AS_TEXT], ids=["final_result call", "JSON text"])
@pytest.mark.parametrize("mode", ["auto", "tool", "native"])
async def test_a_typed_answer_script_plays_on_the_scripted_provider(
    script: list[Any], mode: str
) -> None:
    provider = ScriptedProvider(list(script), native_output=mode != "tool")
    agent = Agent(provider, output_type=City, output_mode=mode)  # type: ignore[arg-type]
    result = await agent.run("biggest city of Norway?")
    assert result.output == WANT
    assert len(provider.requests) == 1  # no retry, no "no scripted turn left"


@pytest.mark.parametrize("script", [AS_CALL, AS_TEXT], ids=["final_result call", "JSON text"])
@pytest.mark.parametrize("mode", ["auto", "tool"])
@pytest.mark.parametrize("wire", list(REAL))
async def test_the_same_script_plays_over_http(script: list[Any], mode: str, wire: str) -> None:
    async with FakeLLMServer(list(script)) as server:
        agent = Agent(REAL[wire](server.url), output_type=City, output_mode=mode)  # type: ignore[arg-type]
        result = await agent.run("biggest city of Norway?")
        assert result.output == WANT
        assert len(server.requests) == 1


async def test_a_primitive_answer_is_wrapped_for_the_tool_and_unwrapped_natively() -> None:
    for native in (False, True):
        provider = ScriptedProvider(["42"], native_output=native)
        result = await Agent(provider, output_type=int).run("answer?")
        assert result.output == 42
    provider = ScriptedProvider([reply(tool_calls=[call("final_result", response=7)])])
    async with FakeLLMServer([reply(tool_calls=[call("final_result", response=7)])]) as server:
        over_http = Agent(REAL["chat"](server.url), output_type=int)
        assert (await over_http.run("answer?")).output == 7
    assert (await Agent(provider, output_type=int).run("answer?")).output == 7


async def test_a_model_that_answers_in_prose_still_fails_validation_as_written() -> None:
    provider = ScriptedProvider(["Oslo, I think.", *AS_CALL])
    result = await Agent(provider, output_type=City).run("biggest city of Norway?")
    assert result.output == WANT
    assert len(provider.requests) == 2  # prose is not turned into an answer
