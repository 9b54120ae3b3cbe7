"""ModelSettings on the wire: every field through the real SDK clients to FakeLLMServer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fanloop import Agent, ModelSettings
from fanloop.errors import ConfigurationError, ProviderError
from fanloop.messages import Message
from fanloop.providers import ModelRequest, ToolSpec
from fanloop.providers._http import HTTPProvider
from fanloop.testing import FakeLLMServer

WEATHER = ToolSpec(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def request(settings: ModelSettings | None, *, tools: bool = True, **fields: Any) -> ModelRequest:
    return ModelRequest(
        messages=(Message.user("go"),),
        tools=(WEATHER,) if tools else (),
        max_tokens=fields.pop("max_tokens", 256),
        settings=settings,
        **fields,
    )


async def sent(server: FakeLLMServer, provider: HTTPProvider, req: ModelRequest) -> dict[str, Any]:
    server.add("ok")
    await provider.complete(req)
    body: dict[str, Any] = server.requests[-1].body
    return body


async def test_every_setting_on_the_wire(
    server: FakeLLMServer, make: Callable[..., HTTPProvider], api: str
) -> None:
    settings = ModelSettings(
        temperature=0.3,
        top_p=0.8,
        max_tokens=999,  # the request's max_tokens is what is sent
        stop=["END", "STOP"],
        tool_choice="required",
        parallel_tool_calls=False,
        seed=None if api == "anthropic" else 42,
        extra={"top_k": 5},
    )
    body = await sent(server, make(), request(settings))
    assert body["temperature"] == 0.3
    assert body["top_p"] == 0.8
    assert body["top_k"] == 5
    if api == "anthropic":
        assert body["max_tokens"] == 256
        assert body["stop_sequences"] == ["END", "STOP"]
        assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
        assert "seed" not in body and "parallel_tool_calls" not in body
    else:
        assert body["max_completion_tokens"] == 256
        assert body["stop"] == ["END", "STOP"]
        assert body["tool_choice"] == "required"
        assert body["parallel_tool_calls"] is False
        assert body["seed"] == 42


@pytest.mark.parametrize(
    ("choice", "anthropic", "openai"),
    [
        ("auto", {"type": "auto"}, "auto"),
        ("none", {"type": "none"}, "none"),
        ("required", {"type": "any"}, "required"),
        (
            "get_weather",
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
async def test_tool_choice_shapes(
    server: FakeLLMServer,
    make: Callable[..., HTTPProvider],
    api: str,
    choice: str,
    anthropic: Any,
    openai: Any,
) -> None:
    body = await sent(server, make(), request(ModelSettings(tool_choice=choice)))
    assert body["tool_choice"] == (anthropic if api == "anthropic" else openai)


async def test_parallel_tool_calls_on_its_own(
    server: FakeLLMServer, make: Callable[..., HTTPProvider], api: str
) -> None:
    body = await sent(server, make(), request(ModelSettings(parallel_tool_calls=False)))
    if api == "anthropic":
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    else:
        assert body["parallel_tool_calls"] is False
    body = await sent(server, make(), request(ModelSettings(parallel_tool_calls=True)))
    assert ("parallel_tool_calls" in body) is (api == "openai")
    assert "tool_choice" not in body


async def test_without_tools_no_tool_options_are_sent(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    settings = ModelSettings(tool_choice="auto", parallel_tool_calls=False, top_p=0.5)
    body = await sent(server, make(), request(settings, tools=False))
    assert "tool_choice" not in body and "parallel_tool_calls" not in body
    assert body["top_p"] == 0.5


async def test_a_forced_tool_without_tools_is_refused_before_sending(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    provider = make()
    with pytest.raises(ConfigurationError, match="no tools"):
        await provider.complete(request(ModelSettings(tool_choice="required"), tools=False))
    assert server.requests == []


async def test_extra_is_merged_last(
    server: FakeLLMServer, make: Callable[..., HTTPProvider]
) -> None:
    provider = make(extra_body={"top_p": 0.1, "metadata": {"user_id": "u"}})
    settings = ModelSettings(top_p=0.5, extra={"top_p": 0.9, "temperature": 1.0})
    body = await sent(server, provider, request(settings, temperature=0.2, extra={"x": 1}))
    assert body["top_p"] == 0.9  # settings.extra wins over the setting and extra_body
    assert body["temperature"] == 1.0
    assert body["metadata"] == {"user_id": "u"}
    assert body["x"] == 1


async def test_anthropic_has_no_seed(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    provider = providers("anthropic")
    with pytest.raises(ConfigurationError, match="seed"):
        Agent(provider, model_settings=ModelSettings(seed=1))
    agent = Agent(provider)
    with pytest.raises(ConfigurationError, match="seed"):
        await agent.run("go", model_settings=ModelSettings(seed=1))
    with pytest.raises(ConfigurationError, match="seed"):  # used directly, too
        await provider.complete(request(ModelSettings(seed=1)))
    assert server.requests == []


async def test_anthropic_refuses_a_forced_tool_with_thinking(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    provider = providers("anthropic")
    req = request(ModelSettings(tool_choice="required"), thinking_budget=2048)
    with pytest.raises(ConfigurationError, match="thinking"):
        await provider.complete(req)
    agent = Agent(provider, tools=[get_weather], model_settings=ModelSettings(thinking_budget=2048))
    with pytest.raises(ProviderError, match="thinking"):  # never sent
        await agent.run("go", model_settings=ModelSettings(tool_choice="get_weather"))
    assert server.requests == []


async def test_openai_presets_put_max_tokens_in_their_field(
    server: FakeLLMServer, providers: Callable[..., HTTPProvider]
) -> None:
    provider = providers("openai", max_tokens_field="max_tokens")
    agent = Agent(provider, model_settings=ModelSettings(max_tokens=77))
    server.add("ok")
    await agent.run("go")
    body = server.requests[-1].body
    assert body["max_tokens"] == 77 and "max_completion_tokens" not in body


async def test_agent_settings_through_the_loop_over_http(
    server: FakeLLMServer, make: Callable[..., HTTPProvider], api: str
) -> None:
    agent = Agent(
        make(),
        tools=[get_weather],
        model_settings=ModelSettings(temperature=0, tool_choice="auto", max_tokens=321),
    )
    server.add("ok", "ok")
    await agent.run("go")
    await agent.run("go", model_settings=ModelSettings(temperature=0.5, tool_choice="none"))
    first, second = (r.body for r in server.requests)
    assert first["temperature"] == 0 and second["temperature"] == 0.5
    assert first["max_tokens" if api == "anthropic" else "max_completion_tokens"] == 321
    if api == "anthropic":
        assert (first["tool_choice"], second["tool_choice"]) == ({"type": "auto"}, {"type": "none"})
    else:
        assert (first["tool_choice"], second["tool_choice"]) == ("auto", "none")
