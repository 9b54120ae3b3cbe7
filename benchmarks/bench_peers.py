"""Peer comparison: fanloop, pydantic-ai, the OpenAI Agents SDK and Strands on the same workloads.

Run: ``nox -s bench_peers``, or by hand from fanloop's environment::

    python benchmarks/bench_peers.py --peers-python /tmp/peers-venv/bin/python [--quick]

where the peers' environment holds ``benchmarks/peers/requirements.txt`` (never fanloop's own:
strands pins ``anthropic<1``, fanloop needs 2.x). Writes ``benchmarks/results/peers.md``.

Every framework runs in a child process of its own environment, against one FakeLLMServer
(OpenAI Chat Completions, 127.0.0.1, its own process), and every figure is a ratio to the
hand-written SDK-direct loop on ``AsyncOpenAI.create()`` measured in the same child process,
alternating with the framework, on the same ``openai`` version. Workloads:

1. per turn of a 50-turn tool conversation (one no-op tool call per turn, no latency);
2. N concurrent 3-turn runs with 100 ms model latency: runs/s and errors;
3. one turn fanning out 8 parallel calls of an async tool sleeping 100 ms: wall time of the run.

Defaults that would change the comparison are turned off (see ``docs/performance.md``):
pydantic-ai ``request_limit=None``; openai-agents ``max_turns`` high and tracing off; strands
one ``Agent`` per concurrent run, ``NullConversationManager`` (its sliding window of 40
messages would cut the 50-turn conversation), no printing callback, no retry strategy, and the
shared ``AsyncOpenAI`` client injected (by default it opens a new client per request). Every
side has retries off and shares the SDK client's connection pool (fanloop its own pool).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL = "gpt-4.1"
TOOL_TURNS = 2  # + the answer: 3 model calls per concurrent run
FAN_OUT = 8
TOOL_SLEEP = 0.1
SIDES = ("fanloop", "pydantic-ai", "openai-agents", "strands")
KINDS: collections.Counter[str] = collections.Counter()

Runner = Callable[[str], Awaitable[tuple[int, str]]]

# ---------------------------------------------------------------------------------------------
# The tools, in each framework's terms
# ---------------------------------------------------------------------------------------------


async def noop() -> str:
    """Do nothing."""
    return "ok"


async def sleeper(n: int) -> str:
    """Sleep 100 ms, then return n."""
    await asyncio.sleep(TOOL_SLEEP)
    return str(n)


SLEEPER_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "sleeper",
            "description": "Sleep 100 ms, then return n.",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
    }
]


def _make_runner(side: str, client: Any, url: str, fan: bool) -> tuple[Runner, bool, Any]:
    """A function running one conversation on ``side``: returns (model calls, answer).

    Also returns whether the side makes streamed requests, and an async closer (or None).
    """
    fn = sleeper if fan else noop
    if side.startswith("fanloop"):
        from fanloop import Agent, Limits, RetryPolicy, tool
        from fanloop.providers.openai import OpenAIProvider

        provider = OpenAIProvider(MODEL, api_key="bench", base_url=f"{url}/v1")
        streaming = side == "fanloop"
        model: Any = provider
        if not streaming:  # seen without its stream(): the agent makes non-streamed calls

            class CompleteOnly:
                def __init__(self, p: Any) -> None:
                    self.name, self.model, self.complete = p.name, p.model, p.complete

            model = CompleteOnly(provider)
        agent = Agent(
            model,
            tools=[tool(concurrent_safe=fan)(fn)],
            limits=Limits(max_turns=None),
            retry=RetryPolicy(max_retries=0),
        )

        async def run_fanloop(prompt: str) -> tuple[int, str]:
            result = await agent.run(prompt)
            return result.turns, result.text or ""

        return run_fanloop, streaming, provider.aclose

    if side == "pydantic-ai":
        import pydantic_ai
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider as PydanticOpenAIProvider

        pa_agent = pydantic_ai.Agent(
            OpenAIChatModel(MODEL, provider=PydanticOpenAIProvider(openai_client=client)),
            tools=[fn],
        )
        limits = pydantic_ai.UsageLimits(request_limit=None)  # default 50 stops the 50-turn loop

        async def run_pydantic(prompt: str) -> tuple[int, str]:
            result = await pa_agent.run(prompt, usage_limits=limits)
            usage = result.usage() if callable(result.usage) else result.usage
            return usage.requests, str(result.output)

        return run_pydantic, False, None

    if side == "openai-agents":
        import agents

        agents.set_tracing_disabled(True)
        oa_agent: Any = agents.Agent(
            name="bench",
            model=agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            tools=[agents.function_tool(fn)],
        )
        config = agents.RunConfig(tracing_disabled=True)

        async def run_agents(prompt: str) -> tuple[int, str]:
            result = await agents.Runner.run(
                oa_agent, prompt, max_turns=1_000_000, run_config=config
            )
            return len(result.raw_responses), str(result.final_output)

        return run_agents, False, None

    if side == "strands":
        import strands
        from strands.agent.conversation_manager import NullConversationManager
        from strands.models.openai import OpenAIModel

        s_model = OpenAIModel(client=client, model_id=MODEL)
        s_tool = strands.tool(fn)

        async def run_strands(prompt: str) -> tuple[int, str]:
            s_agent = strands.Agent(  # one per run: the conversation lives on the Agent
                model=s_model,
                tools=[s_tool],
                callback_handler=None,
                conversation_manager=NullConversationManager(),
                retry_strategy=None,
            )
            result = await s_agent.invoke_async(prompt)
            return result.metrics.cycle_count, str(result).strip()

        return run_strands, True, None

    raise ValueError(f"unknown side {side!r}")


async def _sdk_fan_loop(client: Any, prompt: str, *, streaming: bool) -> tuple[int, str]:
    """SDK-direct for the fan-out workload: the calls of a turn run with ``asyncio.gather``."""
    del streaming  # one turn of tool calls: the non-streamed loop is the floor on both sides
    messages: list[Any] = [{"role": "user", "content": prompt}]
    turns = 0
    while True:
        turns += 1
        completion = await client.chat.completions.create(
            model=MODEL, max_completion_tokens=4096, messages=messages, tools=SLEEPER_TOOLS
        )
        message = completion.choices[0].message
        calls = [c.to_dict() for c in message.tool_calls or ()]
        if not calls:
            return turns, message.content or ""
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        results = await asyncio.gather(
            *(sleeper(**json.loads(c["function"]["arguments"] or "{}")) for c in calls)
        )
        for c, r in zip(calls, results, strict=True):
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": r})


def _sdk_runner(client: Any, streaming: bool, fan: bool) -> Runner:
    from _baseline import openai_loop

    loop: Any = _sdk_fan_loop if fan else openai_loop

    async def run_sdk(prompt: str) -> tuple[int, str]:
        result: tuple[int, str] = await loop(client, prompt, streaming=streaming)
        return result

    return run_sdk


# ---------------------------------------------------------------------------------------------
# The child: one side and its SDK-direct baseline in one process
# ---------------------------------------------------------------------------------------------


def _kind(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]} <- {exc.__cause__!r}"[:300]


async def _timed(fn: Runner, expected: int, errors: list[int]) -> float:
    started = time.perf_counter()
    try:
        turns, text = await fn("go")
        if turns != expected or not text:
            errors[0] += 1
            KINDS[
                f"wrong result: {turns} model calls (expected {expected}), text {text[:40]!r}"
            ] += 1
    except Exception as exc:
        errors[0] += 1
        KINDS[_kind(exc)] += 1
    return time.perf_counter() - started


async def child_per_turn(side: str, url: str, turns: int, repeats: int) -> dict[str, Any]:
    """Median per-turn ms of a ``turns``-call tool conversation, side and SDK-direct alternating."""
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0)
    ours, streaming, close = _make_runner(side, client, url, fan=False)
    base = _sdk_runner(client, streaming, fan=False)
    errors = [0]
    expected = turns + 1
    await _timed(ours, expected, errors)
    await _timed(base, expected, errors)  # warm up both
    a, b = [], []
    for _ in range(repeats):
        a.append(await _timed(ours, expected, errors))
        b.append(await _timed(base, expected, errors))
    if close:
        await close()
    await client.close()
    return {
        "ours": statistics.median(a) / expected * 1e3,
        "sdk": statistics.median(b) / expected * 1e3,
        "errors": errors[0],
        "streaming": streaming,
    }


async def child_concurrent(side: str, url: str, n: int, repeats: int) -> dict[str, Any]:
    """Runs/s of ``n`` concurrent 3-turn runs, side and SDK-direct alternating."""
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0)
    ours, streaming, close = _make_runner(side, client, url, fan=False)
    base = _sdk_runner(client, streaming, fan=False)
    expected = TOOL_TURNS + 1

    async def batch(fn: Runner, errors: list[int]) -> float:
        started = time.perf_counter()
        await asyncio.gather(*(_timed(fn, expected, errors) for _ in range(n)))
        return n / (time.perf_counter() - started)

    warm = [0]
    await asyncio.gather(*(_timed(f, expected, warm) for f in (ours, base) for _ in range(10)))
    err_ours, err_base = [0], [0]
    a, b = [], []
    for _ in range(repeats):
        a.append(await batch(ours, err_ours))
        b.append(await batch(base, err_base))
    if close:
        await close()
    await client.close()
    return {
        "ours": statistics.median(a),
        "sdk": statistics.median(b),
        "errors": err_ours[0],
        "errors_sdk": err_base[0],
        "runs": n * repeats,
        "streaming": streaming,
    }


async def child_fan_out(side: str, url: str, repeats: int) -> dict[str, Any]:
    """Wall time of a run whose first turn fans out 8 calls of a 100 ms async tool."""
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=f"{url}/v1", max_retries=0)
    ours, streaming, close = _make_runner(side, client, url, fan=True)
    base = _sdk_runner(client, streaming, fan=True)
    errors = [0]
    await _timed(ours, 2, errors)
    await _timed(base, 2, errors)
    a, b = [], []
    for _ in range(repeats):
        a.append(await _timed(ours, 2, errors))
        b.append(await _timed(base, 2, errors))
    if close:
        await close()
    await client.close()
    return {
        "ours": statistics.median(a),
        "sdk": statistics.median(b),
        "errors": errors[0],
        "streaming": streaming,
    }


def child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("side")
    parser.add_argument("workload", choices=["per-turn", "concurrent", "fan-out"])
    parser.add_argument("--url", required=True)
    parser.add_argument("-n", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    assert args.url.startswith("http://127.0.0.1:"), "loopback only"
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.workload == "per-turn":
        out = asyncio.run(child_per_turn(args.side, args.url, args.n, args.repeats))
    elif args.workload == "concurrent":
        out = asyncio.run(child_concurrent(args.side, args.url, args.n, args.repeats))
    else:
        out = asyncio.run(child_fan_out(args.side, args.url, args.repeats))
    out["kinds"] = dict(KINDS.most_common(3))
    print(json.dumps(out))


# ---------------------------------------------------------------------------------------------
# The fan-out server and the driver (fanloop's environment)
# ---------------------------------------------------------------------------------------------


def fan_server() -> None:
    """Serve the fan-out conversation until stdin closes (prints the port first)."""
    from fanloop.testing import FakeLLMServer, call, reply

    fan = reply(tool_calls=[call("sleeper", _id=f"call_{i}", n=i) for i in range(FAN_OUT)])

    def responder(body: dict[str, Any]) -> Any:
        done = any(m["role"] == "tool" for m in body["messages"])
        return reply("All done, here is the answer.") if done else fan

    with FakeLLMServer(responder=responder, record=False) as server:
        print(server.port, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def serve_fan_out() -> Iterator[str]:
    argv = [sys.executable, __file__, "fan-server"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def measure(python: str, side: str, workload: str, url: str, **opts: int) -> dict[str, Any]:
    """Run one side's child process; returns its JSON (or an ``error`` entry)."""
    argv = [python, __file__, "child", side, workload, f"--url={url}"]
    argv += [f"--{k}={v}" if len(k) > 1 else f"-{k}={v}" for k, v in opts.items()]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OTEL_SDK_DISABLED"] = "true"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 900 s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    for kind in result.get("kinds", {}):
        print(f"    {side} {workload}: {kind}", flush=True)
    return result


def _cell(r: dict[str, Any], unit: str, fmt: str = ".3g") -> str:
    if "error" in r:
        return f"failed: {r['error'][:80]}"
    ratio = r["ours"] / r["sdk"] if r["sdk"] else float("nan")
    return f"**{ratio:.2f}×** ({r['ours']:{fmt}} vs {r['sdk']:{fmt}} {unit})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peers-python", required=True, help="python of the peers' environment")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--sizes", default="100,1000", help="concurrent runs, comma-separated")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--output", default="peers.md", help="file under benchmarks/results")
    args = parser.parse_args()
    from _common import write
    from _server import serve

    quick = args.quick
    turns, repeats = (3, 1) if quick else (50, 5)
    sizes = [20] if quick else [int(s) for s in args.sizes.split(",")]
    sides = args.sides.split(",")

    def python(side: str) -> str:
        return sys.executable if side.startswith("fanloop") else args.peers_python

    started = time.perf_counter()

    def step(label: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {label}", flush=True)

    rows: list[tuple[str, str, dict[str, str]]] = []
    per_turn_sides = [
        s
        for s in ("fanloop", "fanloop:complete", *sides[1:])
        if s in sides or (s == "fanloop:complete" and "fanloop" in sides)
    ]
    with serve(tool_turns=turns) as url:
        cells: dict[str, str] = {}
        for side in per_turn_sides:
            step(f"per turn, {turns}-turn conversation: {side}")
            r = measure(python(side), side, "per-turn", url, n=turns, repeats=repeats)
            mode = "" if "error" in r else (" streamed" if r["streaming"] else " not streamed")
            note = "" if "error" in r or not r["errors"] else f", {r['errors']} errors"
            cells[side] = _cell(r, "ms") + mode + note
        rows.append((f"{turns}-turn tool conversation", "per-turn time", cells))
    with serve(tool_turns=TOOL_TURNS, latency=0.1) as url:
        for n in sizes:
            reps = 1 if n >= 1000 or quick else 3
            rate: dict[str, str] = {}
            errs: dict[str, str] = {}
            for side in sides:
                step(f"{n} concurrent 3-turn runs: {side}")
                r = measure(python(side), side, "concurrent", url, n=n, repeats=reps)
                rate[side] = _cell(r, "runs/s", ".4g")
                errs[side] = "" if "error" in r else f"{r['errors']} (SDK-direct {r['errors_sdk']})"
            name = f"{n:,} concurrent 3-turn runs, 100 ms latency"
            rows.append((name, "runs/s", rate))
            rows.append((name, f"errors of {n * reps:,} runs", errs))
    with serve_fan_out() as url:
        cells = {}
        for side in sides:
            step(f"fan-out: {side}")
            r = measure(python(side), side, "fan-out", url, repeats=1 if quick else 7)
            cells[side] = _cell(r, "s") + ("" if "error" in r or not r["errors"] else " errors!")
        rows.append(
            (f"one turn of {FAN_OUT} parallel calls of a 100 ms async tool", "wall time", cells)
        )
    step("done")

    columns = ["fanloop", *sides[1:]] if "fanloop" in sides else sides
    lines = [
        "| workload | metric | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for name, metric, cells in rows:
        values = []
        for c in columns:
            value = cells.get(c, "")
            if c == "fanloop" and "fanloop:complete" in cells:
                value += f"; {cells['fanloop:complete']}"
            values.append(value)
        lines.append(f"| {name} | {metric} | " + " | ".join(values) + " |")
    text = "\n".join(lines)
    versions = subprocess.run(
        [args.peers_python, "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
    ).stdout
    pinned = [
        v
        for v in versions.splitlines()
        if v.split("==")[0].lower()
        in ("pydantic-ai-slim", "openai-agents", "strands-agents", "openai", "anthropic")
    ]
    header = (
        "# fanloop and its peers\n\n"
        f"`python benchmarks/bench_peers.py{' --quick' if quick else ''}`, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}. "
        "Each cell: ratio to SDK-direct measured in the same process (framework vs "
        f"SDK-direct). Peers: {', '.join(pinned)}.\n\n"
    )
    path = write(args.output, header + text + "\n")
    print()
    print(text)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2:])
    elif sys.argv[1:2] == ["fan-server"]:
        fan_server()
    else:
        main()
