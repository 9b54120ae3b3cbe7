"""Hooks (docs/observers.md): every callback, its arguments and when it fires, as plain
functions and as ``async def`` functions; a hook that raises is logged and the run goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from fanloop import (
    Agent,
    ContextPolicy,
    Hooks,
    RetryPolicy,
    TerminationReason,
    Tool,
    ToolResult,
    tool,
)
from fanloop.errors import Overloaded, RateLimited
from fanloop.providers import Usage
from fanloop.testing import ScriptedProvider, call, reply

Log = list[tuple[Any, ...]]


@pytest.fixture(autouse=True)
def _unconfigured_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def hook(mode: str, log: Log, returns: Any = None) -> Callable[..., Any]:
    """A hook that records its arguments; ``async def`` in async mode (it records only if
    awaited, after a checkpoint)."""
    if mode == "sync":

        def sync_hook(*args: Any) -> Any:
            log.append(args)
            return returns

        return sync_hook

    async def async_hook(*args: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        log.append(args)
        return returns

    return async_hook


def failing(mode: str, name: str) -> Callable[..., Any]:
    if mode == "sync":

        def sync_hook(*args: Any) -> Any:
            raise RuntimeError(f"{name} hook broke")

        return sync_hook

    async def async_hook(*args: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError(f"{name} hook broke")

    return async_hook


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@tool
async def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


class Remove(Tool):
    name = "remove"
    description = "Delete a file."
    parameters = {"type": "object", "properties": {"path": {"type": "string"}}}
    dangerous = True

    def __init__(self) -> None:
        self.ran: list[str] = []

    def preview(self, **kwargs: Any) -> str:
        return f"$ rm {kwargs['path']}"

    async def run(self, path: str) -> ToolResult:
        self.ran.append(path)
        return ToolResult(f"removed {path}")


def tool_round(*calls: Any, then: str = "done") -> ScriptedProvider:
    return ScriptedProvider([reply(tool_calls=list(calls)), then])


# -- each hook, sync and async -------------------------------------------------------------


async def test_on_request_gets_message_and_tool_counts_before_each_call(mode: str) -> None:
    log: Log = []
    seen_by_provider: list[int] = []

    def respond(request: Any) -> Any:
        seen_by_provider.append(len(log))  # how many on_request calls came before this one
        if len(request.messages) == 1:
            return reply(tool_calls=[call("add", a=1, b=2)])
        return "3"

    agent = Agent(
        ScriptedProvider(respond), tools=[add, explode], hooks=Hooks(on_request=hook(mode, log))
    )
    await agent.run("1+2")
    assert log == [(1, 2), (3, 2)]
    assert seen_by_provider == [1, 2]


async def test_on_request_fires_before_each_retry_too(mode: str) -> None:
    log: Log = []
    provider = ScriptedProvider([Overloaded("busy"), "ok"])
    retry = RetryPolicy(base_delay=0, jitter=False)
    await Agent(provider, hooks=Hooks(on_request=hook(mode, log)), retry=retry).run("hi")
    assert log == [(1, 0), (1, 0)]


async def test_on_tool_call_gets_name_and_arguments_before_the_tool_runs(mode: str) -> None:
    log: Log = []
    seen_when_running: Log = []

    @tool
    async def probe(x: int) -> str:
        """Probe."""
        seen_when_running.extend(log)
        return "ok"

    provider = tool_round(call("probe", x=7), call("missing", y=1))
    await Agent(provider, tools=[probe], hooks=Hooks(on_tool_call=hook(mode, log))).run("go")
    assert sorted(log) == [("missing", {"y": 1}), ("probe", {"x": 7})]
    assert ("probe", {"x": 7}) in seen_when_running


async def test_on_tool_result_gets_name_text_and_error_flag(mode: str) -> None:
    log: Log = []
    provider = tool_round(call("add", a=2, b=2), call("explode"), call("missing"))
    hooks = Hooks(on_tool_result=hook(mode, log))
    await Agent(provider, tools=[add, explode], hooks=hooks).run("go")
    by_name = {entry[0]: entry for entry in log}
    assert len(log) == 3
    assert by_name["add"] == ("add", "4", False)
    assert by_name["explode"][2] is True and "kaboom" in by_name["explode"][1]
    assert by_name["missing"][2] is True and "missing" in by_name["missing"][1]


async def test_on_tool_result_fires_for_a_declined_dangerous_call(mode: str) -> None:
    log: Log = []
    remove = Remove()
    hooks = Hooks(on_tool_result=hook(mode, log), confirm=hook(mode, [], returns=False))
    await Agent(tool_round(call("remove", path="a.txt")), tools=[remove], hooks=hooks).run("go")
    assert remove.ran == []
    assert log == [("remove", "User declined to run this tool.", True)]


async def test_on_tool_result_fires_when_no_confirm_is_configured(mode: str) -> None:
    log: Log = []
    remove = Remove()
    provider = tool_round(call("remove", path="a.txt"))
    await Agent(provider, tools=[remove], hooks=Hooks(on_tool_result=hook(mode, log))).run("go")
    assert remove.ran == []
    ((name, text, is_error),) = log
    assert name == "remove"
    assert is_error
    assert "confirm" in text


async def test_on_text_delta_gets_every_chunk(mode: str) -> None:
    log: Log = []
    provider = ScriptedProvider(["Hello, streaming world!"], chunk_size=5)
    result = await Agent(provider, hooks=Hooks(on_text_delta=hook(mode, log))).run("hi")
    assert log == [
        ("Hello",),
        (", str",),
        ("eamin",),
        ("g wor",),
        ("ld!",),
    ]
    assert "".join(a[0] for a in log) == result.text


async def test_hooks_confirm_is_used_when_the_agent_has_none(mode: str) -> None:
    asked: Log = []
    remove = Remove()
    hooks = Hooks(confirm=hook(mode, asked, returns=True))
    result = await Agent(tool_round(call("remove", path="x.py")), tools=[remove], hooks=hooks).run(
        "go"
    )
    assert asked == [("remove", "$ rm x.py")]
    assert remove.ran == ["x.py"]
    assert result.messages[2].content[0].content == "removed x.py"  # type: ignore[union-attr]


async def test_hooks_confirm_string_declines_with_that_reason(mode: str) -> None:
    remove = Remove()
    hooks = Hooks(confirm=hook(mode, [], returns="not on a Friday"))
    result = await Agent(tool_round(call("remove", path="x.py")), tools=[remove], hooks=hooks).run(
        "go"
    )
    assert remove.ran == []
    part = result.messages[2].content[0]
    assert part.content == "not on a Friday"  # type: ignore[union-attr]
    assert part.is_error  # type: ignore[union-attr]


async def test_the_agents_own_confirm_wins_over_the_hooks_confirm(mode: str) -> None:
    hook_asked: Log = []
    agent_asked: Log = []
    remove = Remove()
    agent = Agent(
        tool_round(call("remove", path="x.py")),
        tools=[remove],
        hooks=Hooks(confirm=hook(mode, hook_asked, returns=False)),
        confirm=hook(mode, agent_asked, returns=True),
    )
    await agent.run("go")
    assert hook_asked == []
    assert agent_asked == [("remove", "$ rm x.py")]
    assert remove.ran == ["x.py"]


async def test_on_usage_gets_turn_usage_running_total_and_elapsed(mode: str) -> None:
    log: Log = []
    first = Usage(input_tokens=10, output_tokens=5)
    second = Usage(input_tokens=20, output_tokens=7)
    provider = ScriptedProvider(
        [reply(tool_calls=[call("add", a=1, b=1)], usage=first), reply("2", usage=second)]
    )
    result = await Agent(provider, tools=[add], hooks=Hooks(on_usage=hook(mode, log))).run("go")
    assert [(turn, total) for turn, total, _ in log] == [(first, first), (second, first + second)]
    elapsed = [e for _, _, e in log]
    assert 0 <= elapsed[0] <= elapsed[1] <= result.elapsed
    assert result.usage == first + second


async def test_on_context_gets_used_and_limit_after_every_call(mode: str) -> None:
    log: Log = []
    provider = ScriptedProvider(
        [
            reply(
                tool_calls=[call("add", a=1, b=1)], usage=Usage(input_tokens=100, output_tokens=10)
            ),
            reply("2", usage=Usage(input_tokens=150, output_tokens=20)),
        ]
    )
    agent = Agent(
        provider,
        tools=[add],
        context=ContextPolicy(context_window=1000),
        hooks=Hooks(on_context=hook(mode, log)),
    )
    await agent.run("go")
    assert log == [(110, 1000), (170, 1000)]


async def test_on_retry_gets_attempt_delay_and_error(mode: str) -> None:
    log: Log = []
    first, second = Overloaded("busy"), RateLimited("slow down", retry_after=0.03)
    provider = ScriptedProvider([first, second, "ok"])
    retry = RetryPolicy(base_delay=0.01, jitter=False)
    result = await Agent(provider, hooks=Hooks(on_retry=hook(mode, log)), retry=retry).run("hi")
    assert result.text == "ok"
    assert log == [(1, 0.01, first), (2, 0.03, second)]


async def test_on_message_fires_once_per_appended_message(mode: str) -> None:
    log: Log = []
    provider = tool_round(call("add", a=1, b=2), then="3")
    result = await Agent(provider, tools=[add], hooks=Hooks(on_message=hook(mode, log))).run("1+2")
    assert log == [(), (), (), ()]  # user, assistant, tool results, answer: no arguments
    assert len(result.new_messages) == 4


async def test_on_message_fires_as_each_message_is_appended(mode: str) -> None:
    log: Log = []
    before_call: list[int] = []

    def respond(request: Any) -> Any:
        before_call.append(len(log))
        if len(request.messages) == 1:
            return reply(tool_calls=[call("add", a=1, b=2)])
        return "3"

    hooks = Hooks(on_message=hook(mode, log))
    await Agent(ScriptedProvider(respond), tools=[add], hooks=hooks).run("1+2")
    # the prompt was announced before the first call; assistant + results before the second
    assert before_call == [1, 3]
    assert len(log) == 4


async def test_on_message_fires_for_every_message_even_with_earlier_history(mode: str) -> None:
    log: Log = []
    agent = Agent(ScriptedProvider(["one", "two"]), hooks=Hooks(on_message=hook(mode, log)))
    first = await agent.run("a")
    await agent.run("b", messages=first.messages)
    assert len(log) == 4  # the history handed in is not re-announced


# -- a raising hook is logged and the run completes -----------------------------------------

_HOOK_NAMES = (
    "on_request",
    "on_tool_call",
    "on_tool_result",
    "on_text_delta",
    "on_usage",
    "on_context",
    "on_retry",
    "on_message",
)


async def test_raising_hooks_are_logged_and_the_run_completes(mode: str) -> None:
    hooks = Hooks(**{name: failing(mode, name) for name in _HOOK_NAMES})
    provider = ScriptedProvider(
        [Overloaded("busy"), reply("Adding.", tool_calls=[call("add", a=1, b=2)]), "3"]
    )
    agent = Agent(provider, tools=[add], hooks=hooks, retry=RetryPolicy(base_delay=0))
    with capture_logs() as logs:
        result = await agent.run("1+2")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "3"
    failed = [e for e in logs if e["event"] == "callback_failed"]
    assert {e["callback"] for e in failed} == set(_HOOK_NAMES)
    assert all(e["log_level"] == "error" and e.get("exc_info") for e in failed)


async def test_a_raising_confirm_declines_and_the_run_completes(mode: str) -> None:
    remove = Remove()
    hooks = Hooks(confirm=failing(mode, "confirm"))
    agent = Agent(tool_round(call("remove", path="x")), tools=[remove], hooks=hooks)
    with capture_logs() as logs:
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert remove.ran == []
    part = result.messages[2].content[0]
    assert part.is_error  # type: ignore[union-attr]
    assert any(e["event"] == "confirm_failed" for e in logs)


async def test_hooks_and_an_observer_both_receive_events() -> None:
    from fanloop import NullObserver

    seen: list[str] = []

    class Obs(NullObserver):
        def on_text_delta(self, text: str) -> None:
            seen.append(f"observer:{text}")

    hooks = Hooks(on_text_delta=lambda chunk: seen.append(f"hook:{chunk}"))
    await Agent(ScriptedProvider(["ab"], chunk_size=1), observer=Obs(), hooks=hooks).run("hi")
    assert seen == ["observer:a", "hook:a", "observer:b", "hook:b"]


async def test_with_options_new_hooks_bring_their_own_confirm() -> None:
    remove = Remove()
    agent = Agent(
        tool_round(call("remove", path="x")),
        tools=[remove],
        hooks=Hooks(confirm=lambda name, preview: False),
    )
    approving = agent.with_options(hooks=Hooks(confirm=lambda name, preview: True))
    await approving.run("go")
    assert remove.ran == ["x"]
