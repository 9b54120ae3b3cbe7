"""Workloads over loopback HTTP against a FakeLLMServer in its own process.

- per-turn time of a tool conversation (one no-op tool call per turn), streamed and not:
  a fanloop ``Agent`` on ``OpenAIProvider`` / ``AnthropicProvider`` /
  ``OpenAIResponsesProvider`` vs the hand-written SDK-direct loop of ``_baseline.py`` and vs
  the wire floor of ``_floor.py`` (the same loop as plain JSON over aiohttp; on the Responses
  API each tool turn carries an encrypted reasoning item, sent back with the call);
  ``python benchmarks/bench_http.py [--turns 50 --repeats 11 --api responses]``;
- one streamed answer of many deltas: deltas per second delivered to the consumer
  (``agent.stream`` events vs the SDK stream iterated directly) and time to first delta.

The server runs pinned to core 0 and this process to core 1 while they are measured
(``_server.pinned_client``), where the machine has both; not in a smoke run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai

import _common
import _floor
from _baseline import anthropic_loop, openai_loop
from _common import Row, median_time
from _server import pinned_client, serve
from fanloop import Agent, Limits, RetryPolicy, tool
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider


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


TARGETS = {"openai": 1.15, "anthropic": 1.2, "responses": 1.1}
"""The per-turn target of each API: fanloop's time at most this many times the floor's (on the
Responses API, streamed turns only)."""


SDK_TARGETS = {"openai": 0.15}
"""The per-turn target against SDK-direct: the OpenAI SDK's own per-call cost (8-17 ms a turn
here). The Anthropic SDK costs 2-3 ms a turn, which the floor ratio above already bounds."""


def _clients(url: str) -> tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]:
    return (
        openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0),
        anthropic.AsyncAnthropic(
            api_key="bench", base_url=url, max_retries=0, open_telemetry=False
        ),
    )


async def per_turn(
    turns: int, repeats: int, apis: tuple[str, ...] = ("openai", "anthropic", "responses")
) -> list[Row]:
    """Median per-turn time of a ``turns``-call tool conversation, per API and mode: fanloop
    vs SDK-direct, and fanloop vs the wire floor (plain JSON over aiohttp, ``_floor.py``)."""
    rows = []
    # The client on one core and the server on the other, as in bench_streams: unpinned, the
    # two sometimes share a core and the ratios moved by a third between runs.
    with (
        pinned_client(enabled=not _common.QUICK) as server_cpu,
        serve(tool_turns=turns, cpu=server_cpu) as url,
    ):
        (o_provider, a_provider), (o_client, a_client) = _providers(url), _clients(url)
        r_provider = OpenAIResponsesProvider("gpt-4.1", api_key="bench", base_url=f"{url}/v1")
        http = _floor.session()
        limits = Limits(max_turns=None)
        for api, provider, client, loop, floor_loop in (
            ("openai", o_provider, o_client, openai_loop, _floor.openai_loop),
            ("anthropic", a_provider, a_client, anthropic_loop, _floor.anthropic_loop),
            ("responses", r_provider, None, None, _floor.responses_loop),
        ):
            if api not in apis:
                continue
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

                async def floor(loop: Any = floor_loop, s: bool = streaming) -> None:
                    n, _ = await loop(http, url, "go", streaming=s)
                    assert n == turns + 1

                sides = (ours, floor) if loop is None else (ours, floor, base)
                for side in sides:
                    await side()  # warm up
                t_ours, t_floor, *t_base = await _interleaved(sides, repeats)
                mode = "streamed" if streaming else "not streamed"
                name = f"{turns}-turn tool conversation, {api}, {mode}"
                ms = 1e3 / (turns + 1)
                target: float | None = TARGETS[api]
                if api == "responses" and not streaming:
                    target = None
                if t_base:
                    sdk = SDK_TARGETS.get(api)
                    rows.append(
                        Row(
                            name,
                            "per-turn time vs SDK-direct",
                            t_ours * ms,
                            t_base[0] * ms,
                            "ms",
                            f"≤ {sdk}×" if sdk else "",
                            t_ours <= sdk * t_base[0] if sdk else None,
                        )
                    )
                rows += [
                    Row(
                        name,
                        "per-turn time vs the aiohttp floor",
                        t_ours * ms,
                        t_floor * ms,
                        "ms",
                        f"≤ {target}×" if target else "",
                        t_ours <= target * t_floor if target else None,
                    ),
                ]
        await http.close()
        await o_provider.aclose()
        await a_provider.aclose()
        await r_provider.aclose()
        await o_client.close()
        await a_client.close()
    return rows


async def _interleaved(
    sides: tuple[Callable[[], Awaitable[None]], ...], repeats: int
) -> list[float]:
    """Medians of ``repeats`` alternating calls of each side, so drift hits all alike."""
    samples: list[list[float]] = [[] for _ in sides]
    for _ in range(repeats):
        for side, times in zip(sides, samples, strict=True):
            times.append(await median_time(side, 1))
    return [sorted(times)[len(times) // 2] for times in samples]


async def deltas(count: int, repeats: int) -> list[Row]:
    """One streamed answer of ``count`` one-character deltas."""
    with (
        pinned_client(enabled=not _common.QUICK) as server_cpu,
        serve(answer_chars=count, chars_per_delta=1, cpu=server_cpu) as url,
    ):
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


if __name__ == "__main__":
    import argparse

    import anyio

    from _common import table

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument(
        "--api", action="append", choices=sorted(TARGETS), help="only this API (repeatable)"
    )
    args = parser.parse_args()
    apis = tuple(args.api or TARGETS)
    print(table(anyio.run(per_turn, args.turns, args.repeats, apis)))
