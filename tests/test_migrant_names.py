"""Keyword names from pydantic-ai and the OpenAI Agents SDK get an error naming fanloop's own."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from fanloop import Agent
from fanloop.errors import ConfigurationError
from fanloop.testing import ScriptedProvider


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("system_prompt", "system="),
        ("instructions", "system="),
        ("result_type", "output_type="),
        ("model", "first argument"),
        ("message_history", "messages="),
        ("max_turns", "Limits(max_turns="),
    ],
)
def test_agent_refuses_a_migrants_keyword_with_the_fanloop_spelling(name: str, hint: str) -> None:
    with pytest.raises(
        TypeError, match=rf"Agent\(\) .*'{name}'.*in fanloop, use .*{re.escape(hint)}"
    ):
        Agent(ScriptedProvider(["x"]), **{name: "x"})


async def test_run_and_stream_refuse_message_history_and_send_nothing() -> None:
    provider = ScriptedProvider(["x"])
    agent = Agent(provider)
    with pytest.raises(TypeError, match=r"Agent\.run\(\) .*'message_history'.*use messages="):
        await agent.run("hi", message_history=[])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Agent\.stream\(\) .*'user_prompt'.*first argument"):
        agent.stream(user_prompt="hi")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Agent\.run_sync\(\) .*'result_type'"):
        agent.run_sync("hi", result_type=int)  # type: ignore[call-arg]
    assert provider.requests == []
    assert (await agent.run("hi")).text == "x"


def test_unknown_names_keep_pythons_own_error_and_the_signatures_stay_visible() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Agent(ScriptedProvider(["x"]), bogus=1)  # type: ignore[call-arg]
    assert inspect.iscoroutinefunction(Agent.run)
    assert "messages" in inspect.signature(Agent.run).parameters
    assert "system" in inspect.signature(Agent).parameters


def test_run_is_still_a_coroutine_function_bound_or_not_and_help_says_async() -> None:
    """``Agent.run``'s keyword check makes no coroutine of its own (one frame less for each run
    in flight), yet tools that ask whether it is a coroutine function, what it takes, or what
    it is, get the answers ``async def run`` gives."""
    import asyncio
    import pydoc

    agent = Agent(ScriptedProvider(["x"]))
    for run in (Agent.run, agent.run):
        assert inspect.iscoroutinefunction(run)
        assert asyncio.iscoroutinefunction(run)
        assert inspect.isroutine(run)
    assert list(inspect.signature(agent.run).parameters) == [
        "prompt",
        "messages",
        "session",
        "deps",
        "model_settings",
    ]
    assert Agent.run.__name__ == "run" and Agent.run.__doc__ == agent.run.__doc__
    assert "Run the loop on" in (Agent.run.__doc__ or "")
    assert "async run(" in pydoc.render_doc(agent.run, renderer=pydoc.plaintext)
    assert repr(Agent.run) == "<function Agent.run>"
    assert agent.run.__self__ is agent


async def test_run_called_through_the_class_or_super_runs() -> None:
    class Polite(Agent[None, str]):
        async def run(self, prompt: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
            return await super().run(f"please {prompt}", **kwargs)

    provider = ScriptedProvider(["a", "b"])
    assert (await Agent.run(Agent(provider), "hi")).text == "a"
    assert (await Polite(provider).run("go")).text == "b"
    assert [r.messages[-1].text for r in provider.requests] == ["hi", "please go"]
    with pytest.raises(TypeError, match=r"Agent\.run\(\) .*'max_turns'"):
        await Polite(provider).run("go", max_turns=1)


def test_a_refused_run_keyword_fails_at_the_call_with_no_coroutine_left_unawaited() -> None:
    import warnings

    agent = Agent(ScriptedProvider(["x"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited would warn
        with pytest.raises(TypeError, match=r"Agent\.run\(\) .*'max_turns'"):
            agent.run("hi", max_turns=3)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            agent.run("hi", bogus=1)  # type: ignore[call-arg]


async def test_output_type_none_is_text_as_in_the_agents_sdk() -> None:
    agent = Agent(ScriptedProvider(["plain words"]), output_type=None)
    result = await agent.run("hi")
    assert result.output == "plain words" == result.text


@pytest.mark.parametrize("bad", [lambda text: text, len, str.upper])
def test_a_function_as_output_type_is_refused_when_the_agent_is_built(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"not a function.*output_validators="):
        Agent(ScriptedProvider(["x"]), output_type=bad)  # type: ignore[arg-type]
