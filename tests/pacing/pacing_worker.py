"""A worker process for the pacing tests and benchmark: many concurrent runs against a fake
model server, optionally behind a RedisPacing shared with the other workers.

Usage: ``python pacing_worker.py CONFIG_JSON``. It prints ``ready``, waits for a line on stdin
(so that every worker starts at once), runs, and prints one JSON line with what happened.
With ``hold`` in the config it instead takes one concurrency slot, prints ``holding`` and
waits forever (to be killed).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import Any

from fanloop import Agent, RetryPolicy
from fanloop.events import PacingUnavailable, PacingWait
from fanloop.pacing import RedisPacing
from fanloop.providers.openai import OpenAIProvider


async def main(config: dict[str, Any]) -> None:
    pacing = None
    if config.get("redis_key"):
        pacing = RedisPacing(
            config["redis_url"],
            key=config["redis_key"],
            requests_per_minute=config.get("rpm"),
            max_concurrency=config.get("max_concurrency"),
            cooldown_jitter=config.get("jitter", 0.5),
            lease_ttl=config.get("lease_ttl", 30.0),
        )
    headers = {"x-worker": str(config.get("worker", 0))}
    provider: Any
    if config.get("api") == "anthropic":
        from fanloop.providers.anthropic import AnthropicProvider

        provider = AnthropicProvider(
            "claude-sonnet-4-5",
            api_key="test",
            base_url=config["base_url"],
            pacing=pacing,
            default_headers=headers,
        )
    else:  # the OpenAI SDK imports three times faster: the workers start sooner
        provider = OpenAIProvider(
            "gpt-4.1",
            api_key="test",
            base_url=config["base_url"],
            pacing=pacing,
            default_headers=headers,
        )
    agent = Agent(provider, retry=RetryPolicy(max_retries=config.get("retries", 3)))
    if config.get("hold"):
        assert pacing is not None
        acquisition = pacing.acquisition(0)
        while await acquisition.step() is not None:
            pass
        print("holding", flush=True)
        await asyncio.Event().wait()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    waits: Counter[str] = Counter()
    errors: Counter[str] = Counter()

    async def one(i: int) -> bool:
        try:
            async with agent.stream(f"task {i}") as run:
                async for event in run:
                    if isinstance(event, PacingWait):
                        waits[event.reason] += 1
                    elif isinstance(event, PacingUnavailable):
                        waits["unavailable"] += 1
        except Exception as exc:
            errors[type(exc).__name__] += 1
            return False
        return run.result.termination_reason == "completed"

    loop = asyncio.get_running_loop()
    started = loop.time()
    done = await asyncio.gather(*(one(i) for i in range(config["runs"])))
    elapsed = loop.time() - started
    await provider.aclose()
    if pacing is not None:
        await pacing.aclose()
    print(
        json.dumps(
            {
                "completed": sum(done),
                "failed": len(done) - sum(done),
                "errors": dict(errors),
                "waits": dict(waits),
                "elapsed": elapsed,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
