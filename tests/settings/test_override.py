"""``agent.override(...)``: swap the provider (or other options) for the code under test."""

from __future__ import annotations

from typing import Literal

import anyio
import pytest
from pydantic import BaseModel

from fanloop import Agent, ModelSettings
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.testing import ScriptedProvider, call, reply


class Verdict(BaseModel):
    ok: bool
    level: Literal["low", "high"]


async def test_an_application_agent_is_tested_without_rebuilding_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-never-used")
    support = Agent("anthropic:claude-haiku-4-5", system="Be kind.")  # the application's

    async def handle(message: str) -> str:  # the application's code
        return (await support.run(message)).text

    scripted = ScriptedProvider(["Happy to help!"])
    with support.override(provider=scripted) as replaced:
        assert await handle("hi") == "Happy to help!"
        assert support.provider is scripted
        assert replaced.provider is scripted
    assert scripted.requests[0].system == "Be kind."  # the rest of the agent is kept
    assert isinstance(support.provider, AnthropicProvider)
    await support.aclose()


async def test_runs_outside_the_block_are_unaffected() -> None:
    original = ScriptedProvider(lambda request: "original")
    agent = Agent(original)
    entered = anyio.Event()
    outside_done = anyio.Event()
    texts: dict[str, str] = {}

    async def inside() -> None:
        with agent.override(provider=ScriptedProvider(lambda request: "overridden")):
            entered.set()
            texts["inside"] = (await agent.run("a")).text
            await outside_done.wait()  # the block is still open while the other run goes
            texts["inside_again"] = (await agent.run("b")).text

    async def outside() -> None:
        await entered.wait()
        texts["outside"] = (await agent.run("c")).text
        outside_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(inside)
        tg.start_soon(outside)
    assert texts == {"inside": "overridden", "inside_again": "overridden", "outside": "original"}


async def test_stream_resume_and_as_tool_follow_the_override() -> None:
    helper = Agent(ScriptedProvider(lambda request: "real helper"), name="helper")
    boss = Agent(
        ScriptedProvider([reply(tool_calls=[call("helper", task="do it")]), "done"]),
        tools=[helper.as_tool()],
    )
    fake = ScriptedProvider(lambda request: "fake helper")
    with helper.override(provider=fake):
        handle = helper.stream("x")
        async with handle as run:
            async for _ in run:
                pass
        assert run.result.text == "fake helper"
        result = await boss.run("delegate")
    assert result.text == "done"
    assert len(fake.requests) == 2  # the stream and the sub-agent run


def test_run_sync_follows_the_override() -> None:
    agent = Agent(ScriptedProvider(lambda request: "real"))
    with agent.override(provider=ScriptedProvider(lambda request: "fake")):
        assert agent.run_sync("x").text == "fake"
    assert agent.run_sync("x").text == "real"


async def test_overrides_nest_and_change_any_option() -> None:
    provider = ScriptedProvider(lambda request: "ok")
    agent = Agent(provider, model_settings=ModelSettings(temperature=0))
    with agent.override(model_settings=ModelSettings(temperature=0.9)):
        with agent.override(system="inner"):
            await agent.run("x")
        await agent.run("y")
    await agent.run("z")
    inner, outer, plain = provider.requests
    assert (inner.temperature, inner.system) == (0.9, "inner")
    assert (outer.temperature, outer.system) == (0.9, None)
    assert plain.temperature == 0


async def test_the_override_redecides_native_output() -> None:
    native = ScriptedProvider(['{"ok": true, "level": "low"}'], native_output=True)
    agent = Agent(native, output_type=Verdict)
    assert agent.native_output
    tool_mode = ScriptedProvider([reply(tool_calls=[call("final_result", ok=False, level="high")])])
    with agent.override(provider=tool_mode) as replaced:
        assert not replaced.native_output
        result = await agent.run("judge")
    assert result.output == Verdict(ok=False, level="high")
    assert "final_result" in [t.name for t in tool_mode.requests[0].tools]
    assert (await agent.run("judge")).output == Verdict(ok=True, level="low")
