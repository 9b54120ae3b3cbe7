"""Native structured output through the real SDK clients: OpenAI ``response_format``,
Anthropic ``output_config.format``; retries of a wrong answer; the automatic choice."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from fanloop import Agent, TerminationReason
from fanloop.errors import ConfigurationError
from fanloop.providers._http import HTTPProvider
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply


class Invoice(BaseModel):
    total: float
    currency: Literal["EUR", "USD"]
    note: str | None = None


class Loose(BaseModel):
    total: float
    counts: dict[str, int]  # free-form keys


def schema_sent(server: FakeLLMServer, index: int = 0) -> dict[str, Any] | None:
    return server.requests[index].output_schema


async def test_the_request_carries_the_schema_and_no_final_result_tool(
    server: FakeLLMServer, make: Callable[..., HTTPProvider], api: str
) -> None:
    agent = Agent(make(), output_type=Invoice)
    assert agent.native_output
    server.add('{"total": 12.5, "currency": "EUR", "note": null}')
    result = await agent.run("extract")
    assert result.output == Invoice(total=12.5, currency="EUR")
    body = server.requests[0].body
    assert "tools" not in body  # no final_result tool in native mode
    schema = schema_sent(server)
    assert schema is not None
    assert schema["properties"]["currency"]["enum"] == ["EUR", "USD"]
    assert schema["additionalProperties"] is False
    if api == "openai":
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["name"] == "Invoice"
        assert fmt["json_schema"]["strict"] is True
        assert schema["required"] == ["total", "currency", "note"]  # strict: all required
    else:
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
        assert schema["required"] == ["total", "currency"]


async def test_a_wrong_answer_then_a_right_one_is_one_retry(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    server.add('{"total": "lots", "currency": "GBP"}', '{"total": 3, "currency": "USD"}')
    result = await Agent(make(), output_type=Invoice).run("extract")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.output == Invoice(total=3, currency="USD")
    assert len(server.requests) == 2
    retry = json.dumps(server.requests[1].messages[-1])
    assert "not accepted" in retry and "total" in retry and "currency" in retry
    assert schema_sent(server, 1) == schema_sent(server, 0)


async def test_a_model_that_never_gets_it_right_ends_output_invalid(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    server.add("not json at all", '{"total": 1}', '{"currency": "EUR"}')
    result = await Agent(make(), output_type=Invoice, output_retries=2).run("extract")
    assert result.termination_reason is TerminationReason.OUTPUT_INVALID
    assert result.output is None
    assert len(server.requests) == 3


async def test_a_wrapped_output_type_is_an_object_schema(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    server.add('{"response": [1, 2, 3]}')
    result = await Agent(make(), output_type=list[int]).run("numbers")
    assert result.output == [1, 2, 3]
    schema = schema_sent(server)
    assert schema is not None
    assert schema["type"] == "object" and schema["required"] == ["response"]


async def test_output_mode_tool_overrides_the_native_choice(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    agent = Agent(make(), output_type=Invoice, output_mode="tool")
    assert not agent.native_output
    server.add(reply(tool_calls=[call("final_result", total=2, currency="EUR")]))
    result = await agent.run("extract")
    assert result.output == Invoice(total=2, currency="EUR")
    body = server.requests[0].body
    assert schema_sent(server) is None
    assert [t.get("name") or t["function"]["name"] for t in body["tools"]] == ["final_result"]


async def test_a_free_form_schema(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    # Anthropic cannot say free-form keys: auto mode uses the final_result tool ...
    anthropic = Agent(providers("anthropic"), output_type=Loose)
    assert not anthropic.native_output and "final_result" in anthropic.tools
    with pytest.raises(ConfigurationError, match="output_mode"):
        Agent(providers("anthropic"), output_type=Loose, output_mode="native")
    # ... OpenAI sends it without strict mode.
    openai = Agent(providers("openai"), output_type=Loose)
    assert openai.native_output
    server.add('{"total": 1, "counts": {"a": 2}}')
    result = await openai.run("count")
    assert result.output == Loose(total=1, counts={"a": 2})
    fmt = server.requests[0].body["response_format"]["json_schema"]
    assert fmt["strict"] is False
    assert fmt["schema"]["properties"]["counts"]["additionalProperties"] == {"type": "integer"}


async def test_a_provider_without_native_output_uses_the_tool() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("final_result", total=1, currency="EUR")])])
    agent = Agent(provider, output_type=Invoice)
    assert not agent.native_output and agent.output_format is None
    await agent.run("go")
    assert provider.requests[0].output is None
    native = ScriptedProvider(['{"total": 1, "currency": "EUR"}'], native_output=True)
    result = await Agent(native, output_type=Invoice).run("go")
    assert result.output == Invoice(total=1, currency="EUR")
    assert native.requests[0].output is not None
    assert native.requests[0].output.json_schema["properties"]["total"] == {"type": "number"}
    assert "final_result" not in [t.name for t in native.requests[0].tools]


async def test_text_output_sends_no_format(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    server.add("plain")
    assert (await Agent(make()).run("hi")).text == "plain"
    assert schema_sent(server) is None
    body = server.requests[0].body
    assert "response_format" not in body and "output_config" not in body
