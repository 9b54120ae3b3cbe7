"""ModelSettings: the value, the agent's settings and its shortcuts, per-run settings, checks."""

from __future__ import annotations

import pydantic
import pytest

from fanloop import Agent, Limits, ModelSettings, TerminationReason
from fanloop.errors import ConfigurationError
from fanloop.messages import TextPart
from fanloop.providers import ModelRequest, ModelResponse, StopReason, Usage
from fanloop.testing import ScriptedProvider


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


# -- the value ------------------------------------------------------------------------------


def test_settings_normalise_and_validate() -> None:
    settings = ModelSettings(temperature=0, stop="END", tool_choice="auto")
    assert settings.stop == ("END",)
    assert ModelSettings(stop=["a", "b"]).stop == ("a", "b")
    for bad in (
        {"temperature": -1},
        {"top_p": 1.5},
        {"max_tokens": 0},
        {"stop": [""]},
        {"tool_choice": ""},
        {"extra": {"messages": []}},
        {"temperatur": 1},
        {"temperature": float("nan")},
    ):
        with pytest.raises(pydantic.ValidationError):
            ModelSettings(**bad)


def test_merge_overrides_field_by_field_and_joins_extra() -> None:
    base = ModelSettings(temperature=0, top_p=0.5, extra={"a": 1, "b": 1})
    merged = base.merge(ModelSettings(temperature=0.7, seed=3, extra={"b": 2}))
    assert merged == ModelSettings(temperature=0.7, top_p=0.5, seed=3, extra={"a": 1, "b": 2})
    assert base.merge(None) is base
    assert base.merge(ModelSettings()) is base


# -- the agent's settings -----------------------------------------------------------------


async def test_the_agents_settings_reach_every_request() -> None:
    provider = ScriptedProvider(["one"])
    settings = ModelSettings(temperature=0.2, top_p=0.9, stop=["END"], seed=7, max_tokens=300)
    await Agent(provider, model_settings=settings).run("go")
    (request,) = provider.requests
    assert request.settings == settings
    assert request.max_tokens == 300
    # the plain fields custom providers read are filled from the settings too
    assert request.temperature == 0.2
    assert request.stop_sequences == ("END",)


async def test_sampling_lives_in_the_settings() -> None:
    provider = ScriptedProvider(["one"])
    agent = Agent(provider, model_settings=ModelSettings(temperature=0.3, max_tokens=123))
    assert agent.model_settings == ModelSettings(temperature=0.3, max_tokens=123)
    assert (agent.temperature, agent.max_tokens) == (0.3, 123)
    await agent.run("go")
    assert provider.requests[0].temperature == 0.3
    assert provider.requests[0].max_tokens == 123
    assert Agent(provider).max_tokens == 4096
    with pytest.raises(pydantic.ValidationError):
        ModelSettings(max_tokens=0)


def test_with_options_replaces_the_settings() -> None:
    agent = Agent(ScriptedProvider(), model_settings=ModelSettings(temperature=0, seed=1))
    warmer = agent.with_options(
        model_settings=agent.model_settings.merge(ModelSettings(temperature=0.9))
    )
    assert warmer.model_settings == ModelSettings(temperature=0.9, seed=1)
    other = agent.with_options(model_settings=ModelSettings(top_p=0.5))
    assert other.model_settings == ModelSettings(top_p=0.5)
    assert agent.with_options(name="copy").model_settings == agent.model_settings


# -- per-run settings -----------------------------------------------------------------------


async def test_run_settings_override_the_agents_for_that_run_only() -> None:
    provider = ScriptedProvider(lambda request: "ok")
    agent = Agent(provider, model_settings=ModelSettings(temperature=0, top_p=0.5, max_tokens=100))
    await agent.run("one", model_settings=ModelSettings(temperature=0.8, max_tokens=50))
    await agent.run("two")
    first, second = provider.requests
    assert first.settings == ModelSettings(temperature=0.8, top_p=0.5, max_tokens=50)
    assert (first.temperature, first.max_tokens) == (0.8, 50)
    assert second.settings == agent.model_settings
    assert (second.temperature, second.max_tokens) == (0, 100)


async def test_stream_takes_run_settings() -> None:
    provider = ScriptedProvider(lambda request: "ok")
    agent = Agent(provider)
    async with agent.stream("go", model_settings=ModelSettings(seed=5)) as run:
        async for _ in run:
            pass
    assert provider.requests[-1].settings is not None
    assert provider.requests[-1].settings.seed == 5


def test_run_sync_takes_run_settings() -> None:
    provider = ScriptedProvider(lambda request: "ok")
    Agent(provider).run_sync("go", model_settings=ModelSettings(top_p=0.25))
    assert provider.requests[-1].settings == ModelSettings(top_p=0.25)


async def test_the_budget_still_clamps_a_run_max_tokens() -> None:
    provider = ScriptedProvider(lambda request: "ok")
    agent = Agent(provider, limits=Limits(max_output_tokens=200))
    result = await agent.run("go", model_settings=ModelSettings(max_tokens=5000))
    assert result.termination_reason is TerminationReason.COMPLETED
    assert provider.requests[0].max_tokens <= 200


# -- what a provider cannot honour ---------------------------------------------------------


async def test_a_setting_the_provider_cannot_honour_is_refused_early() -> None:
    provider = ScriptedProvider(["never"], supported_settings={"temperature"})
    with pytest.raises(ConfigurationError, match="seed"):
        Agent(provider, model_settings=ModelSettings(seed=1))
    agent = Agent(provider, model_settings=ModelSettings(temperature=0, max_tokens=10))
    with pytest.raises(ConfigurationError, match="top_p"):
        await agent.run("go", model_settings=ModelSettings(top_p=0.5))
    assert provider.requests == []  # nothing was sent


async def test_tool_choice_must_name_a_tool_of_the_agent() -> None:
    provider = ScriptedProvider(["never"])
    with pytest.raises(ConfigurationError, match="subtract"):
        Agent(provider, tools=[add], model_settings=ModelSettings(tool_choice="subtract"))
    with pytest.raises(ConfigurationError, match="required"):
        Agent(provider, model_settings=ModelSettings(tool_choice="required"))
    agent = Agent(provider, tools=[add], model_settings=ModelSettings(tool_choice="add"))
    assert agent.model_settings.forced_tool == "add"
    with pytest.raises(ConfigurationError):
        await Agent(provider).run("go", model_settings=ModelSettings(tool_choice="add"))
    Agent(provider, model_settings=ModelSettings(tool_choice="none"))  # fine without tools


async def test_a_custom_provider_still_works_and_sees_the_settings() -> None:
    seen: list[ModelRequest] = []

    class EchoClient:  # the smallest custom provider: name, model, a plain complete()
        name = "echo"
        model = "echo-v1"

        def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append(request)
            last = request.messages[-1]
            text = " ".join(p.text for p in last.content if isinstance(p, TextPart))
            return ModelResponse(
                content=(TextPart(text=f"Echo: {text}"),),
                stop_reason=StopReason.END_TURN,
                usage=Usage(),
                model=self.model,
                provider=self.name,
            )

    agent = Agent([], client=EchoClient(), model_settings=ModelSettings(seed=3, top_p=0.1))
    result = await agent.run("hello")
    assert result.text == "Echo: hello"
    assert seen[0].settings == ModelSettings(seed=3, top_p=0.1)
    assert (await Agent([], client=EchoClient()).run("hi")).text == "Echo: hi"
