"""``Agent.with_options()`` / ``Agent.override()``: a copy is made from every argument the agent
was made from, so no option is lost on the way (docs/model-settings.md, on ``override``)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fanloop import (
    Agent,
    Concurrency,
    ContextPolicy,
    Delegation,
    GuardrailResult,
    Hooks,
    Limits,
    ModelSettings,
    NullObserver,
    RetryPolicy,
    input_guardrail,
)
from fanloop._fanout import LimiterPool
from fanloop.providers import HostedTool
from fanloop.testing import ScriptedProvider
from fanloop.tools import ReadFileTool


class Answer(BaseModel):
    text: str


def lookup(query: str) -> str:
    """Look something up."""
    return query


def older_spelling_tool(n: int) -> int:
    """A tool given positionally, in the older ``Agent(tools, client=provider)`` spelling."""
    return n


def check_answer(output: Answer) -> Answer:
    return output


def confirm(name: str, preview: str) -> bool:
    return True


@input_guardrail
def polite(ctx: Any, prompt: str) -> GuardrailResult:
    return GuardrailResult(tripped=False)


def parameters() -> list[str]:
    return [name for name in inspect.signature(Agent.__init__).parameters if name != "self"]


def every_option(tmp_path: Path) -> dict[str, Any]:
    """A value other than the default for every parameter of ``Agent.__init__``."""
    (tmp_path / "skills" / "greet").mkdir(parents=True)
    (tmp_path / "skills" / "greet" / "SKILL.md").write_text(
        "---\nname: greet\ndescription: Say hello.\n---\nSay hello.\n"
    )
    provider = ScriptedProvider(hosted_tools=frozenset({"web_search"}))
    return {
        "provider": [older_spelling_tool],
        "system": "Be brief.",
        "tools": [lookup, HostedTool("web_search")],
        "limits": Limits(max_turns=7),
        "retry": RetryPolicy(max_retries=5),
        "confirm": confirm,
        "auto_approve": True,
        "observer": NullObserver(),
        "hooks": Hooks(),
        "delegation": Delegation(
            system="You help.", max_depth=2, tools=[ReadFileTool(root=str(tmp_path))]
        ),
        "memory": True,
        "skills": True,
        "name": "everything",
        "model_settings": ModelSettings(
            top_p=0.5,
            max_tokens=1000,
            max_tokens_ceiling=9000,
            temperature=0.25,
            thinking_budget=2048,
        ),
        "concurrency": Concurrency(
            max_concurrency=3,
            tool_concurrency={"lookup": 1},
            concurrency_limits={"test-agent-options-db": 2},
            tool_threads=8,
        ),
        "context": ContextPolicy(
            context_window=50_000, compact_threshold=0.5, max_tool_result_chars=1234
        ),
        "workspace": str(tmp_path),
        "output_type": Answer,
        "output_retries": 3,
        "output_validators": [check_answer],
        "output_mode": "tool",
        "guardrails": [polite],
        "handoffs": [Agent(ScriptedProvider(), name="specialist")],
        "client": provider,
        "_limiters": LimiterPool(threads=8),
    }


# What a copy builds afresh rather than shares, so it cannot compare equal to the original's:
# the prebuilt provider call and observer table, the caps keyed by the agent's id, the output
# spec and the tools the agent makes itself (delegate, remember, read_skill, final_result), and
# the ownership of a provider made from a model string (a copy borrows it).
MADE_PER_AGENT = {"_invoke", "_table", "_caps", "_options", "output", "tools", "_owns_provider"}


def test_the_option_table_covers_every_parameter(tmp_path: Path) -> None:
    options = every_option(tmp_path)
    assert sorted(options) == sorted(parameters())  # a new parameter must be added here too
    defaults = {name: p.default for name, p in inspect.signature(Agent.__init__).parameters.items()}
    assert all(options[name] != defaults[name] for name in options)


def test_with_options_without_changes_keeps_every_option(tmp_path: Path) -> None:
    agent = Agent(**every_option(tmp_path))
    copy = agent.with_options()
    assert sorted(agent._options) == sorted(parameters())
    for name in parameters():
        assert copy._options[name] == agent._options[name], name
    for slot in Agent.__slots__:
        if slot not in MADE_PER_AGENT:
            assert getattr(copy, slot) == getattr(agent, slot), slot
    assert list(copy.tools) == list(agent.tools)
    assert copy.tools["lookup"] is agent.tools["lookup"]
    assert copy.output.output_type is Answer and copy.output.retries == 3
    delegation = agent._options["delegation"]
    assert copy.tools["delegate"]._tools == delegation.tools  # type: ignore[attr-defined]
    assert copy.tools["delegate"]._system == "You help."  # type: ignore[attr-defined]
    assert copy.tools["delegate"]._max_depth == 2  # type: ignore[attr-defined]
    assert copy.max_depth == 2 and copy.max_concurrency == 3 and copy.context_window == 50_000
    assert copy.thinking_budget == 2048 and copy.max_tokens_ceiling == 9000
    assert [h.kind for h in copy.hosted_tools] == ["web_search"]


def test_override_without_changes_keeps_every_option(tmp_path: Path) -> None:
    agent = Agent(**every_option(tmp_path))
    with agent.override() as replaced:
        assert dict(replaced._options) == dict(agent._options)


def test_a_change_replaces_only_its_own_option() -> None:
    agent = Agent(
        ScriptedProvider(), name="a", model_settings=ModelSettings(max_tokens=100, temperature=0.5)
    )
    copy = agent.with_options(
        model_settings=agent.model_settings.merge(ModelSettings(temperature=0.1))
    )
    assert copy.model_settings == ModelSettings(max_tokens=100, temperature=0.1)
    assert copy.name == "a"
    changed = {k for k in agent._options if copy._options[k] != agent._options[k]}
    assert changed == {"model_settings"}


def test_a_new_tool_threads_gets_a_new_pool_with_the_same_keys() -> None:
    agent = Agent(
        ScriptedProvider(),
        concurrency=Concurrency(concurrency_limits={"test-agent-options-key": 2}),
    )
    same = agent.with_options(name="b")
    assert same.limiters is agent.limiters
    copy = agent.with_options(concurrency=Concurrency(tool_threads=4))
    assert copy.limiters is not agent.limiters
    assert copy.limiters.threads == 4
    assert copy.limiters.keys == {"test-agent-options-key": 2}


def test_with_options_refuses_an_unknown_name_with_the_fanloop_spelling() -> None:
    agent = Agent(ScriptedProvider())
    with pytest.raises(TypeError, match="system="):
        agent.with_options(system_prompt="x")
