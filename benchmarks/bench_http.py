"""Workloads over loopback HTTP against a FakeLLMServer in its own process.

- per-turn time of a tool conversation (one no-op tool call per turn), streamed and not:
  a fanloop ``Agent`` on ``OpenAIProvider`` / ``AnthropicProvider`` vs the hand-written
  SDK-direct loop of ``_baseline.py``;
- one streamed answer of many deltas: deltas per second delivered to the consumer
  (``agent.stream`` events vs the SDK stream iterated directly) and time to first delta.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai

from _baseline import anthropic_loop, openai_loop
from _common import Row, median_time
from _server import serve
from fanloop import Agent, Limits, RetryPolicy, tool
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


class CompleteOnly:
    """A provider seen without its ``stream()``: the agent then makes non-streamed calls."""

    def __init__(self, provider: Any) -> None:
        self.name, self.model, self.complete = provider.name, provider.model, provider.complete


def _providers(url: str) -> tuple[Any, Any]:
    return (
        OpenAIProvider("gpt-4.1", api_key="bench", base_url=f"{url}/v1"),
        AnthropicProvider("claude-x", api_key="bench", base_url=url),
    )


def _clients(url: str) -> tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]:
    return (
        openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0),
        anthropic.AsyncAnthropic(
            api_key="bench", base_url=url, max_retries=0, open_telemetry=False
        ),
    )


async def per_turn(turns: int, repeats: int) -> list[Row]:
    """Median per-turn time of a ``turns``-call tool conversation, per API and mode."""
    rows = []
    with serve(tool_turns=turns) as url:
        (o_provider, a_provider), (o_client, a_client) = _providers(url), _clients(url)
        limits = Limits(max_turns=None)
        for api, provider, client, loop in (
            ("openai", o_provider, o_client, openai_loop),
            ("anthropic", a_provider, a_client, anthropic_loop),
        ):
            for streaming in (True, False):
                agent = Agent(
                    provider if streaming else CompleteOnly(provider),
                    tools=[noop],
                    limits=limits,
                    retry=RetryPolicy(max_retries=0),
                )

                async def ours(agent: Agent = agent) -> None:
                    result = await agent.run("go")
                    assert result.turns == turns + 1, result

                async def base(client: Any = client, loop: Any = loop, s: bool = streaming) -> None:
                    n, _ = await loop(client, "go", streaming=s)
                    assert n == turns + 1

                await ours()
                await base()  # warm up both
                t_ours = await _interleaved(ours, base, repeats)
                mode = "streamed" if streaming else "not streamed"
                rows.append(
                    Row(
                        f"{turns}-turn tool conversation, {api}, {mode}",
                        "per-turn time",
                        t_ours[0] / (turns + 1) * 1e3,
                        t_ours[1] / (turns + 1) * 1e3,
                        "ms",
                        "≤ 0.15×",
                        t_ours[0] <= 0.15 * t_ours[1],
                    )
                )
        await o_provider.aclose()
        await a_provider.aclose()
        await o_client.close()
        await a_client.close()
    return rows


async def _interleaved(
    ours: Callable[[], Awaitable[None]], base: Callable[[], Awaitable[None]], repeats: int
) -> tuple[float, float]:
    """Medians of ``repeats`` alternating calls, so drift hits both sides alike."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        a.append(await median_time(ours, 1))
        b.append(await median_time(base, 1))
    a.sort()
    b.sort()
    return a[len(a) // 2], b[len(b) // 2]


async def deltas(count: int, repeats: int) -> list[Row]:
    """One streamed answer of ``count`` one-character deltas."""
    with serve(answer_chars=count, chars_per_delta=1) as url:
        provider, _ = _providers(url)
        client, a_client = _clients(url)
        await a_client.close()
        agent = Agent(provider, retry=RetryPolicy(max_retries=0))

        async def ours() -> tuple[int, float, float]:
            n = 0
            first = 0.0
            started = time.perf_counter()
            async with agent.stream("go") as run:
                async for event in run:
                    if event.kind == "text_delta":
                        if not n:
                            first = time.perf_counter()
                        n += 1
            return n, first - started, time.perf_counter() - started

        async def base() -> tuple[int, float, float]:
            n = 0
            first = 0.0
            started = time.perf_counter()
            stream = await client.chat.completions.create(
                model="gpt-4.1",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if not n:
                        first = time.perf_counter()
                    n += 1
            return n, first - started, time.perf_counter() - started

        samples: dict[str, list[tuple[int, float, float]]] = {"ours": [], "base": []}
        await ours()
        await base()
        for _ in range(repeats):
            samples["ours"].append(await ours())
            samples["base"].append(await base())
        await provider.aclose()
        await client.close()

    def med(side: str, i: int) -> float:
        values = sorted(s[i] for s in samples[side])
        return values[len(values) // 2]

    assert all(s[0] == count for s in samples["ours"] + samples["base"]), samples
    rate_ours, rate_base = count / med("ours", 2), count / med("base", 2)
    ttfd_ours, ttfd_base = med("ours", 1) * 1e3, med("base", 1) * 1e3
    name = f"one streamed answer of {count:,} deltas (openai)"
    return [
        Row(
            name,
            "deltas/s to the consumer",
            rate_ours,
            rate_base,
            "/s",
            "≥ 8×",
            rate_ours >= 8 * rate_base,
        ),
        Row(
            name,
            "time to first delta",
            ttfd_ours,
            ttfd_base,
            "ms",
            "≤ 1.0×",
            ttfd_ours <= ttfd_base,
        ),
    ]
