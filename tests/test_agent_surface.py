"""The ``Agent`` arguments, grouped (docs/reference.md, "Agent arguments"): ``Concurrency``,
``ContextPolicy``, sampling in ``ModelSettings``, nesting and tools in ``Delegation``, hosted
tools in ``tools=``. Every old spelling is refused with the new one, never taken silently."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from fanloop import Agent, Concurrency, ContextPolicy, Delegation, ModelSettings, tool
from fanloop.errors import ConfigurationError
from fanloop.messages import ToolResultPart
from fanloop.providers import HostedTool, ModelRequest
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply

MOVED = {
    "max_tokens": ("model_settings=ModelSettings(max_tokens=...)", 100),
    "temperature": ("model_settings=ModelSettings(temperature=...)", 0.5),
    "thinking_budget": ("model_settings=ModelSettings(thinking_budget=...)", 2048),
    "max_tokens_ceiling": ("model_settings=ModelSettings(max_tokens_ceiling=...)", 9000),
    "max_concurrency": ("concurrency=Concurrency(max_concurrency=...)", 2),
    "tool_concurrency": ("concurrency=Concurrency(tool_concurrency=...)", {"x": 1}),
    "concurrency_limits": ("concurrency=Concurrency(concurrency_limits=...)", {"db": 1}),
    "tool_threads": ("concurrency=Concurrency(tool_threads=...)", 8),
    "context_window": ("context=ContextPolicy(context_window=...)", 50_000),
    "compact_threshold": ("context=ContextPolicy(compact_threshold=...)", 0.5),
    "max_tool_result_chars": ("context=ContextPolicy(max_tool_result_chars=...)", 1000),
    "max_depth": ("delegation=Delegation(max_depth=...)", 2),
    "delegate_tools": ("delegation=Delegation(tools=[...])", []),
    "hosted_tools": ("tools=[...]", [HostedTool("web_search")]),
}


def test_every_argument_is_one_idea() -> None:
    names = [n for n in inspect.signature(Agent.__init__).parameters if n != "self"]
    assert names[:1] == ["provider"]
    assert not set(MOVED) & set(names)
    for name in ("concurrency", "context", "model_settings", "delegation", "tools"):
        assert name in names
    assert len(names) <= 25


@pytest.mark.parametrize("name", sorted(MOVED))
def test_an_old_spelling_is_refused_naming_the_new_one(name: str) -> None:
    hint, value = MOVED[name]
    provider = ScriptedProvider(["x"])
    expected = re.escape(f"Agent({name}=...) moved: use {hint}")
    with pytest.raises(TypeError, match=expected):
        Agent(provider, **{name: value})
    agent = Agent(provider)
    with pytest.raises(TypeError, match=re.escape(f"Agent.with_options({name}=...) moved")):
        agent.with_options(**{name: value})
    with pytest.raises(TypeError, match=re.escape(hint)), agent.override(**{name: value}):
        pass  # pragma: no cover
    with pytest.raises(TypeError, match=re.escape(hint)):
        Agent.from_env({"LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "k"}, **{name: value})


# -- Concurrency ----------------------------------------------------------------------------


def test_concurrency_is_frozen_and_validated() -> None:
    given = {"bash": 2}
    conc = Concurrency(max_concurrency=3, tool_concurrency=given, concurrency_limits={"db": 1})
    given["bash"] = 99  # the caller's dict is copied
    assert conc.tool_concurrency == {"bash": 2}
    with pytest.raises(TypeError):
        conc.tool_concurrency["bash"] = 5  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        conc.max_concurrency = 4  # type: ignore[misc]
    assert Concurrency(concurrency_limits={"open": math.inf}).concurrency_limits["open"] == math.inf
    for bad in (
        {"max_concurrency": 0},
        {"max_concurrency": True},
        {"tool_threads": 0},
        {"tool_threads": 1.5},
        {"tool_concurrency": {"bash": 0}},
        {"tool_concurrency": {"": 1}},
        {"concurrency_limits": {"db": -1}},
        {"concurrency_limits": [("db", 1)]},
    ):
        with pytest.raises(ConfigurationError):
            Concurrency(**bad)
    with pytest.raises(ConfigurationError, match="must be a Concurrency"):
        Agent(ScriptedProvider(), concurrency={"max_concurrency": 2})  # type: ignore[arg-type]


def tracked(name: str) -> tuple[Any, dict[str, int]]:
    state = {"active": 0, "peak": 0}

    async def fn(n: int) -> str:
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        for _ in range(3):
            await anyio.sleep(0)
        state["active"] -= 1
        return str(n)

    return tool(fn, name=name, description=name, concurrent_safe=True), state


async def test_the_caps_of_a_concurrency_hold_in_a_run() -> None:
    a, a_state = tracked("a")
    b, b_state = tracked("b")
    calls = [call(name, n=i) for i in range(6) for name in ("a", "b")]
    provider = ScriptedProvider([reply(tool_calls=calls), "done"])
    conc = Concurrency(max_concurrency=3, tool_concurrency={"a": 1})
    agent = Agent(provider, tools=[a, b], concurrency=conc)
    assert (agent.max_concurrency, agent.tool_concurrency, agent.concurrency) == (3, {"a": 1}, conc)
    result = await agent.run("go")
    assert result.text == "done"
    assert a_state["peak"] == 1
    assert b_state["peak"] <= 3


async def test_a_keyed_limit_of_a_concurrency_is_shared_and_named_in_the_error() -> None:
    @tool(concurrent_safe=True, concurrency_key="surface-db")
    async def query(n: int) -> str:
        """Query."""
        return str(n)

    with pytest.raises(ConfigurationError, match=re.escape("concurrency=Concurrency(")):
        Agent(ScriptedProvider(), tools=[query])
    agent = Agent(
        ScriptedProvider(),
        tools=[query],
        concurrency=Concurrency(concurrency_limits={"surface-db": 1}),
    )
    assert agent.limiters.keys == {"surface-db": 1}


# -- ContextPolicy --------------------------------------------------------------------------


def test_context_policy_is_frozen_and_validated() -> None:
    policy = ContextPolicy(context_window=50_000, compact_threshold=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.compact_threshold = 0.9  # type: ignore[misc]
    assert ContextPolicy(max_tool_result_chars=None).max_tool_result_chars is None
    for bad in (
        {"compact_threshold": 0},
        {"compact_threshold": 1.5},
        {"context_window": 0},
        {"max_tool_result_chars": 0},
    ):
        with pytest.raises(ConfigurationError):
            ContextPolicy(**bad)
    agent = Agent(ScriptedProvider(), context=policy)
    assert (agent.context_window, agent.compact_threshold) == (50_000, 0.5)
    assert agent.max_tool_result_chars == 100_000
    with pytest.raises(ConfigurationError, match="must be a ContextPolicy"):
        Agent(ScriptedProvider(), context=0.5)  # type: ignore[arg-type]


async def test_the_tool_result_cap_of_a_context_policy_is_applied() -> None:
    @tool
    def dump() -> str:
        """Dump a lot."""
        return "y" * 3000

    provider = ScriptedProvider([reply(tool_calls=[call("dump")]), "ok"])
    agent = Agent(provider, tools=[dump], context=ContextPolicy(max_tool_result_chars=500))
    result = await agent.run("go")
    (part,) = [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert part.content.startswith("y" * 500)
    assert "2500 more characters not shown (limit 500)" in part.content


# -- Delegation -----------------------------------------------------------------------------


def test_delegation_carries_max_depth_and_tools() -> None:
    with pytest.raises(ConfigurationError, match="max_depth"):
        Delegation(max_depth=-1)
    assert Delegation(tools=[dump_tool()]).tools is not None
    none = Agent(ScriptedProvider(), delegation=Delegation(max_depth=0))
    assert "delegate" not in none.tools and none.max_depth == 0
    agent = Agent(ScriptedProvider(), delegation=True)
    assert agent.max_depth == 1 and "delegate" in agent.tools
    with pytest.raises(ConfigurationError, match="Delegation"):
        Agent(ScriptedProvider(), delegation="yes")  # type: ignore[arg-type]


def dump_tool() -> Any:
    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return f"found {q}"

    return lookup


async def test_max_depth_of_a_delegation_bounds_the_nesting() -> None:
    def respond(request: ModelRequest) -> Any:
        done = any(isinstance(p, ToolResultPart) for m in request.messages for p in m.content)
        if done:
            return "report"
        if any(t.name == "delegate" for t in request.tools):
            return reply(tool_calls=[call("delegate", task="dig")])
        return "leaf"

    for depth in (1, 2, 3):
        provider = ScriptedProvider(respond)
        lookup = dump_tool()
        agent = Agent(provider, delegation=Delegation(tools=[lookup], max_depth=depth))
        with anyio.fail_after(10):
            result = await agent.run("go")
        assert result.text == "report"
        with_delegate = [r for r in provider.requests if "delegate" in {t.name for t in r.tools}]
        levels = {r.messages[0].text for r in provider.requests}
        assert len(with_delegate) == 2 * depth  # each level delegates, then reports
        assert levels == {"go", "dig"}
        leaves = [r for r in provider.requests if "delegate" not in {t.name for t in r.tools}]
        assert len(leaves) == 1  # the deepest sub-agent cannot delegate: it answers
        assert {t.name for t in leaves[0].tools} == {"lookup"}


# -- sampling in ModelSettings --------------------------------------------------------------


async def test_thinking_budget_and_ceiling_ride_in_the_settings() -> None:
    provider = ScriptedProvider(lambda request: "ok", supported_settings={"temperature"})
    settings = ModelSettings(thinking_budget=1024, max_tokens_ceiling=8192, max_tokens=512)
    agent = Agent(provider, model_settings=settings)  # loop settings are never "unsupported"
    assert (agent.thinking_budget, agent.max_tokens_ceiling, agent.max_tokens) == (1024, 8192, 512)
    await agent.run("one")
    await agent.run("two", model_settings=ModelSettings(thinking_budget=4096))
    first, second = provider.requests
    assert (first.thinking_budget, second.thinking_budget) == (1024, 4096)
    assert second.settings is not None and second.settings.max_tokens_ceiling == 8192


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    with FakeLLMServer(chars_per_delta=8) as srv:
        yield srv
    assert not srv.errors, srv.errors


async def test_thinking_budget_reaches_anthropic_on_the_wire(server: FakeLLMServer) -> None:
    provider = AnthropicProvider(
        "claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.anthropic_base_url
    )
    try:
        agent = Agent(provider, model_settings=ModelSettings(thinking_budget=2048, max_tokens=4096))
        server.add("one")
        await agent.run("go")
        server.add("two")
        await agent.run("go", model_settings=ModelSettings(thinking_budget=3000))
    finally:
        await provider.aclose()
    first, second = (r.body for r in server.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 3000}
    for body in (first, second):
        assert "max_tokens_ceiling" not in body and "thinking_budget" not in body


# -- hosted tools in tools= -----------------------------------------------------------------


def test_hosted_tools_go_in_tools_beside_the_others() -> None:
    provider = ScriptedProvider(hosted_tools=frozenset({"web_search"}))
    search = HostedTool("web_search")
    agent = Agent(provider, tools=[search, dump_tool()])
    assert agent.hosted_tools == (search,) and list(agent.tools) == ["lookup"]
    with pytest.raises(ConfigurationError, match="does not support hosted tool"):
        Agent(ScriptedProvider(), tools=[search])


# -- with_options / override ----------------------------------------------------------------


def test_with_options_keeps_the_groups() -> None:
    lookup = dump_tool()
    conc = Concurrency(max_concurrency=2, concurrency_limits={"surface-keep": 1})
    policy = ContextPolicy(context_window=10_000, max_tool_result_chars=200)
    delegation = Delegation(tools=[lookup], max_depth=2, system="Help.")
    agent = Agent(
        ScriptedProvider(hosted_tools=frozenset({"web_search"})),
        tools=[HostedTool("web_search")],
        concurrency=conc,
        context=policy,
        delegation=delegation,
        model_settings=ModelSettings(thinking_budget=1024),
    )
    for copy in (agent.with_options(name="copy"), agent.with_options()):
        assert copy.concurrency is conc and copy.context is policy
        assert copy.limiters is agent.limiters
        assert copy.delegation is delegation and copy.max_depth == 2
        assert copy.tools["delegate"]._tools == (lookup,)  # type: ignore[attr-defined]
        assert copy.hosted_tools == agent.hosted_tools and copy.thinking_budget == 1024
    with agent.override(context=ContextPolicy(max_tool_result_chars=50)) as replaced:
        assert replaced.max_tool_result_chars == 50 and replaced.concurrency is conc
    more = agent.with_options(concurrency=Concurrency(tool_threads=4))
    assert more.limiters is not agent.limiters and more.limiters.threads == 4
    assert more.limiters.keys == {"surface-keep": 1}  # the keys the pool held
