"""``fanloop demo``: an offline tour on a scripted model, no API key needed."""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio

from .. import Agent, tool
from ..providers import ModelRequest, Usage
from ..testing import ScriptedProvider, call, reply
from ._render import Style

__all__ = ["run_demo"]

CITIES = ("Lisbon", "Oslo", "Nairobi")
TOOL_SECONDS = 0.6


@tool(concurrent_safe=True)
async def weather(city: str) -> str:
    """Look up the current weather for a city (a slow network call, simulated)."""
    await anyio.sleep(TOOL_SECONDS)
    return {"Lisbon": "21°C, clear", "Oslo": "-3°C, snow", "Nairobi": "26°C, showers"}.get(
        city, "unknown"
    )


def _script(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        return reply(
            "I'll look up all three cities at once.",
            tool_calls=[call("weather", city=c) for c in CITIES],
            usage=Usage(input_tokens=412, output_tokens=58),
        )
    results = [p for p in request.messages[-1].content if p.kind == "tool_result"]
    lines = ", ".join(f"{c}: {r.content}" for c, r in zip(CITIES, results, strict=False))  # type: ignore[union-attr]
    return reply(
        f"Here is the weather right now — {lines}. Pack a coat for Oslo.",
        usage=Usage(input_tokens=530, output_tokens=41),
    )


async def _demo(fast: bool) -> int:
    out = sys.stdout
    style = Style(out)
    provider = ScriptedProvider(_script, chunk_size=6, delay=0 if fast else 0.02, model="scripted")
    agent = Agent(provider, tools=[weather], system="You are a helpful travel assistant.")
    print(style.bold("fanloop demo") + style.dim(" — a scripted model, no network, no key"))
    print(style.dim("prompt: ") + "What's the weather in Lisbon, Oslo and Nairobi?\n")
    started: dict[str, float] = {}
    durations: list[float] = []
    batch_started = 0.0
    async with agent.stream("What's the weather in Lisbon, Oslo and Nairobi?") as run:
        async for event in run:
            if event.kind == "text_delta":
                out.write(event.text)
                out.flush()
            elif event.kind == "tool_started":
                if not started:
                    batch_started = time.perf_counter()
                    out.write("\n")
                started[event.call.id] = time.perf_counter()
                args = ", ".join(f"{k}={v!r}" for k, v in event.call.arguments.items())
                print(style.cyan(f"  ⇢ {event.call.name}({args})") + style.dim("  running"))
            elif event.kind == "tool_finished":
                durations.append(event.duration)
                mark = style.red("✗") if event.result.is_error else style.green("✓")
                print(
                    f"  {mark} {event.call.name}: {event.result.content}"
                    + style.dim(f"  ({event.duration:.2f}s)")
                )
                if len(durations) == len(started):
                    wall = time.perf_counter() - batch_started
                    print(
                        style.yellow(
                            f"  {len(durations)} tool calls in {wall:.2f}s wall time "
                            f"(sum of their times: {sum(durations):.2f}s) — they ran side by side"
                        )
                    )
                    print()
    result = run.result
    u = result.usage
    print(
        "\n\n"
        + style.dim(
            f"turns {result.turns} · tools {result.tool_calls} · tokens in {u.input_tokens} "
            f"out {u.output_tokens} · {result.elapsed:.2f}s · {result.termination_reason}"
        )
    )
    return 0


def run_demo(*, fast: bool = False) -> int:
    """Run the demo; returns the exit code."""
    return anyio.run(_demo, fast)
