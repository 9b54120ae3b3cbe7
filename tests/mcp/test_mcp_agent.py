"""MCP tools inside a real agent run: the loop cannot tell them from local tools."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from fanloop import Agent, TerminationReason
from fanloop.mcp import MCPServer, load_mcp_tools
from fanloop.messages import Message, ToolResultPart
from fanloop.testing import ScriptedProvider, call, reply


def results_of(messages: tuple[Message, ...]) -> dict[str, ToolResultPart]:
    return {
        part.call_id: part
        for message in messages
        for part in message.content
        if isinstance(part, ToolResultPart)
    }


async def test_agent_runs_mcp_tools_behind_the_confirm_gate(
    stdio_server: Callable[..., MCPServer],
) -> None:
    asked: list[tuple[str, str]] = []

    def confirm(name: str, preview: str) -> bool:
        asked.append((name, preview))
        return name != "echo"

    provider = ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("lookup", _id="c1", key="pi"),
                    call("add", _id="c2", a=2, b=3),
                    call("echo", _id="c3", text="no"),
                    call("fail", _id="c4", reason="boom"),
                ]
            ),
            "done",
        ]
    )
    with anyio.fail_after(30):
        async with stdio_server(include=["lookup", "add", "echo", "fail"]) as server:
            agent = Agent(provider, tools=await load_mcp_tools(server), confirm=confirm)
            result = await agent.run("go")

    assert result.termination_reason == TerminationReason.completed
    assert result.text == "done"
    # the read-only tool ran without asking; the others were shown as calls
    assert asked == [
        ("add", "add(a=2, b=3)"),
        ("echo", "echo(text='no')"),
        ("fail", "fail(reason='boom')"),
    ]
    parts = results_of(result.messages)
    assert (parts["c1"].content, parts["c1"].is_error) == ("3.14159", False)
    assert (parts["c2"].content, parts["c2"].is_error) == ("5", False)
    assert parts["c3"].is_error  # declined
    assert parts["c4"].is_error
    assert "boom" in parts["c4"].content
    sent = {spec.name: spec for spec in provider.requests[0].tools}
    assert sent["add"].parameters["required"] == ["a", "b"]


async def test_agent_survives_a_crashing_server(stdio_server: Callable[..., MCPServer]) -> None:
    provider = ScriptedProvider(
        [
            reply(tool_calls=[call("crash", _id="c1")]),
            reply(tool_calls=[call("lookup", _id="c2", key="e")]),
            "the server came back",
        ]
    )
    with anyio.fail_after(30):
        async with stdio_server(include=["crash", "lookup"]) as server:
            agent = Agent(provider, tools=await load_mcp_tools(server), auto_approve=True)
            result = await agent.run("go")

    assert result.termination_reason == TerminationReason.completed
    parts = results_of(result.messages)
    assert parts["c1"].is_error
    assert not parts["c2"].is_error  # the crashed server was started again for the next call
