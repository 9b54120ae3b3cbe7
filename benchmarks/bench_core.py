"""Core overhead: fanloop's loop vs a hand-written loop on the same ScriptedProvider, and the
wall time of a 32-call fan-out. Run: ``python benchmarks/bench_core.py``."""

from __future__ import annotations

import time
from typing import Any

import anyio

from _common import Row, median_time, table, write
from fanloop import Agent, Delegation, Limits, tool
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, ToolSpec
from fanloop.testing import ScriptedProvider, call, reply

TURNS = 50


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


def conversation_model() -> ScriptedProvider:
    """A model that calls noop once per turn for TURNS turns, then answers."""
    tool_turn = reply("step", tool_calls=[call("noop", _id="c")])
    final = reply("done")

    def answer(request: ModelRequest) -> ModelResponse:
        return tool_turn if len(request.messages) < 2 * TURNS else final

    return ScriptedProvider(answer, chunk_size=1000, record=False)


async def handwritten(provider: ScriptedProvider, prompt: str) -> str:
    """The minimal loop a user would write by hand on the same provider protocol."""
    specs = (ToolSpec(name=noop.name, description=noop.description, parameters=noop.parameters),)
    tools = {"noop": noop}
    messages = [Message.user(prompt)]
    while True:
        request = ModelRequest(messages=tuple(messages), tools=specs, max_tokens=4096)
        response: Any = None
        async with provider.stream(request) as events:
            async for item in events:
                if isinstance(item, ModelResponse):
                    response = item
        messages.append(response.to_message())
        if not response.tool_calls:
            return str(response.text)
        results = []
        for c in response.tool_calls:
            out = await tools[c.name].run(**c.arguments)
            results.append(ToolResultPart(call_id=c.id, content=str(out)))
        messages.append(Message.tool_results(results))


async def per_turn(repeats: int = 15) -> Row:
    provider = conversation_model()
    agent = Agent(provider, tools=[noop], limits=Limits(max_turns=None))

    async def fanloop_run() -> None:
        result = await agent.run("go")
        assert result.turns == TURNS + 1

    async def baseline_run() -> None:
        assert await handwritten(provider, "go") == "done"

    await fanloop_run()
    await baseline_run()  # warm up both
    ours = await median_time(fanloop_run, repeats) / (TURNS + 1)
    base = await median_time(baseline_run, repeats) / (TURNS + 1)
    return Row(
        "50-turn tool conversation (ScriptedProvider, streaming)",
        "per turn",
        ours * 1e6,
        base * 1e6,
        "µs",
        "≤ 1.2× hand-written loop",
    )


async def fan_out(sync: bool, repeats: int = 3) -> Row:
    if sync:

        @tool(concurrent_safe=True)
        def sleeper(n: int) -> str:
            """Sleep 0.2 s (blocking)."""
            time.sleep(0.2)
            return str(n)
    else:

        @tool(concurrent_safe=True)
        async def sleeper(n: int) -> str:
            """Sleep 0.2 s."""
            await anyio.sleep(0.2)
            return str(n)

    turn = reply(tool_calls=[call("sleeper", n=i) for i in range(32)])
    agent = Agent(
        ScriptedProvider(lambda r: turn if len(r.messages) == 1 else "done"), tools=[sleeper]
    )
    wall = await median_time(lambda: agent.run("go"), repeats)
    variant = "sync, worker threads" if sync else "async"
    return Row(
        f"one turn, 32 calls of a tool sleeping 0.2 s ({variant})",
        "wall time",
        wall,
        0.2,
        "s",
        "≤ 0.3 s",
    )


async def delegations(repeats: int = 3) -> Row:
    """8 sub-agents delegated in one turn, each calling a tool that sleeps 0.5 s."""

    @tool
    async def slow_lookup(topic: str) -> str:
        """Look a topic up (0.5 s)."""
        await anyio.sleep(0.5)
        return f"facts about {topic}"

    def model(request: ModelRequest) -> Any:
        if request.system and "sub-agent" in request.system:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("slow_lookup", topic=request.messages[0].text)])
            return "report"
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", task=f"topic {i}") for i in range(8)])
        return "all reports in"

    agent = Agent(ScriptedProvider(model), delegation=Delegation(tools=[slow_lookup]))
    wall = await median_time(lambda: agent.run("research"), repeats)
    return Row(
        "one turn delegating to 8 sub-agents whose tool sleeps 0.5 s",
        "wall time",
        wall,
        0.5,
        "s",
        "well under 1 s",
    )


async def main() -> list[Row]:
    return [
        await per_turn(),
        await fan_out(sync=False),
        await fan_out(sync=True),
        await delegations(),
    ]


if __name__ == "__main__":
    rows = anyio.run(main)
    text = table(rows)
    print(text)
    print(f"\nwritten to {write('core.md', text + chr(10))}")
