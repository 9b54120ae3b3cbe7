"""Agent features wired to other modules: memory, skills, hosted tools, model strings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fanloop import Agent
from fanloop.errors import ConfigurationError
from fanloop.providers import HostedTool
from fanloop.testing import ScriptedProvider, call, reply


async def test_memory_is_opt_in_and_read_at_each_run(tmp_path: Path) -> None:
    plain = Agent(ScriptedProvider(["x"]), workspace=str(tmp_path))
    assert "remember" not in plain.tools

    provider = ScriptedProvider(
        [reply(tool_calls=[call("remember", note="Always answer in French.")]), "ok", "oui"]
    )
    agent = Agent(provider, system="Base.", memory=True, workspace=str(tmp_path))
    await agent.run("remember that I like French")
    assert (tmp_path / ".fanloop" / "memory.md").read_text().count("Always answer in French.") == 1
    await agent.run("hello")
    assert "Always answer in French." not in (provider.requests[0].system or "")
    assert provider.requests[-1].system is not None
    assert provider.requests[-1].system.startswith("Base.")
    assert "Always answer in French." in provider.requests[-1].system


async def test_skills_are_listed_and_readable(tmp_path: Path) -> None:
    skill = tmp_path / ".fanloop" / "skills" / "release"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: release\ndescription: How to cut a release.\n---\n# Release\nTag it.\n"
    )
    provider = ScriptedProvider([reply(tool_calls=[call("read_skill", name="release")]), "done"])
    agent = Agent(provider, skills=True, workspace=str(tmp_path))
    result = await agent.run("ship it")
    assert "release" in (provider.requests[0].system or "")
    assert "How to cut a release." in (provider.requests[0].system or "")
    assert "Tag it." in result.messages[2].content[0].content  # type: ignore[union-attr]


def test_hosted_tools_need_provider_support() -> None:
    with pytest.raises(ConfigurationError, match="does not support hosted tool 'web_search'"):
        Agent(ScriptedProvider([]), tools=[HostedTool("web_search")])
    ok = Agent(
        ScriptedProvider([], hosted_tools=frozenset({"web_search"})),
        tools=[HostedTool("web_search")],
    )
    assert ok.hosted_tools[0].kind == "web_search"


def test_model_strings_are_resolved_and_checked() -> None:
    with pytest.raises(ConfigurationError, match="must look like"):
        Agent("claude")
    with pytest.raises(ConfigurationError, match="unknown provider"):
        Agent("acme:model-1")


def test_import_fanloop_does_not_import_the_sdks() -> None:
    import subprocess

    code = (
        "import sys, fanloop, fanloop.providers, fanloop.testing, fanloop.tools;"
        "bad = [m for m in ('anthropic', 'openai', 'mcp', 'opentelemetry') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_surface_is_pinned() -> None:
    import fanloop

    assert sorted(fanloop.__all__) == fanloop.__all__
    for name in fanloop.__all__:
        assert getattr(fanloop, name) is not None
    assert {
        "Agent",
        "RunResult",
        "TerminationReason",
        "Limits",
        "RetryPolicy",
        "Tool",
        "ToolResult",
        "tool",
        "LoopObserver",
        "NullObserver",
        "MultiObserver",
        "GuardedObserver",
        "ConsoleObserver",
        "guarded",
        "Hooks",
    } <= set(fanloop.__all__)
    from fanloop.errors import FanloopError, Overloaded, ProviderError, ProviderTimeout, RateLimited  # noqa: F401
    from fanloop.messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart  # noqa: F401
    from fanloop.providers import ModelRequest, ModelResponse, Provider, StopReason, Usage, from_env  # noqa: F401
    from fanloop.testing import FakeLLMServer, ScriptedProvider  # noqa: F401
    from fanloop.tools import DEFAULT_TOOLS, READ_ONLY_TOOLS  # noqa: F401


async def test_an_agent_closes_only_the_provider_it_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fanloop.testing import FakeLLMServer

    class Closable:
        name = "c"
        model = "m"
        closed = False

        async def complete(self, request: object) -> object:
            raise AssertionError

        async def aclose(self) -> None:
            self.closed = True

    borrowed = Closable()
    async with Agent(borrowed):
        pass
    assert not borrowed.closed

    with FakeLLMServer() as server:
        server.add("hi")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        async with Agent("anthropic:claude-haiku-4-5") as agent:
            assert (await agent.run("hello")).text == "hi"
            provider = agent.provider
            assert not provider._closed
        assert provider._closed


def test_run_sync_keeps_a_real_providers_pool_usable_between_calls() -> None:
    """A script's shape (docs/providers.md): ``with Agent.from_env(...) as agent: run_sync``."""
    from fanloop.testing import FakeLLMServer

    with FakeLLMServer() as server:
        server.add("7")
        server.add("two")
        environ = {
            "LLM_PROVIDER": "openai",
            "LLM_MODEL": "gpt-4o",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": server.openai_base_url,
        }
        with Agent.from_env(environ, tools=[]) as agent:
            assert agent.run_sync("How many days are in a week?").text == "7"
            assert agent.run_sync("b").text == "two"  # same pool, same loop: still usable
            provider = agent.provider
        assert provider._closed
