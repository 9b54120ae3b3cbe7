"""A FakeLLMServer in its own process, so that its CPU time and memory stay out of the figures.

``python benchmarks/_server.py --tool-turns 3 --latency 0.1`` prints the port on the first
line of stdout and serves until stdin closes. Each conversation calls ``noop`` once per turn
(on the Responses API after a reasoning item) until it holds ``--tool-turns`` tool results,
then answers with ``--answer-chars`` characters
(``--chars-per-delta`` of them per streamed delta, ``--delta-delay`` seconds apart; 0: the whole
stream in one write). ``--cpu N`` pins the server to that core. Use :func:`serve` from a
benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from fanloop.testing import FakeLLMServer, call, reply


def tool_results(body: dict[str, Any]) -> int:
    """Tool results already in a request body (Chat Completions, Anthropic or Responses)."""
    if "input" in body:  # the Responses API: function_call_output items
        return sum(1 for item in body["input"] if item.get("type") == "function_call_output")
    count = 0
    for m in body["messages"]:
        if m["role"] == "tool":
            count += 1
        elif m["role"] == "user" and isinstance(m["content"], list):
            count += sum(1 for b in m["content"] if b.get("type") == "tool_result")
    return count


def make_responder(tool_turns: int, answer: str) -> Any:
    tool_turn = [
        reply("Calling the tool.", tool_calls=[call("noop", _id=f"call_{n}")])
        for n in range(tool_turns)
    ]
    # On the Responses API each tool turn also reasons: an encrypted reasoning item that the
    # client must send back with the call it preceded.
    reasoning_turn = [
        reply(
            "Calling the tool.",
            thinking="Call noop.",
            tool_calls=[call("noop", _id=f"call_{n}")],
        )
        for n in range(tool_turns)
    ]
    final = reply(answer)

    def responder(body: dict[str, Any]) -> Any:
        done = tool_results(body)
        if done >= tool_turns:
            return final
        return reasoning_turn[done] if "input" in body else tool_turn[done]

    return responder


def holding(responder: Any, turn: int) -> Any:
    """``responder``, but the answer to a conversation's ``turn``-th request (1-based) is held
    for ten minutes: the clients wait there (``benchmarks/waiting_runs.py --turn``)."""

    async def held(body: dict[str, Any]) -> Any:
        import asyncio

        if tool_results(body) + 1 >= turn:
            await asyncio.sleep(600)
        return responder(body)

    return held


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool-turns", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--answer-chars", type=int, default=40)
    parser.add_argument("--chars-per-delta", type=int, default=12)
    parser.add_argument("--delta-delay", type=float, default=0.0)
    parser.add_argument("--cpu", type=int, default=None)
    parser.add_argument("--hold-turn", type=int, default=None)
    args = parser.parse_args()
    if args.cpu is not None:
        pin(args.cpu)
    answer = ("All done, here is the answer. " * (args.answer_chars // 30 + 1))[: args.answer_chars]
    responder = make_responder(args.tool_turns, answer)
    if args.hold_turn is not None:
        responder = holding(responder, args.hold_turn)
    with FakeLLMServer(
        responder=responder,
        latency=args.latency,
        chars_per_delta=args.chars_per_delta,
        delta_delay=args.delta_delay,
        record=False,
    ) as server:
        print(server.port, flush=True)
        sys.stdin.read()  # until the parent closes our stdin
        if server.errors:
            print(f"server errors: {server.errors[:3]}", file=sys.stderr)


def pin(cpu: int) -> bool:
    """Pin this process to core ``cpu`` (as ``taskset -c``); False where that is not possible
    (not Linux, or fewer cores)."""
    import os

    if not hasattr(os, "sched_setaffinity") or cpu not in os.sched_getaffinity(0):
        return False
    os.sched_setaffinity(0, {cpu})
    return True


@contextlib.contextmanager
def pinned_client(
    client: int = 1, server: int = 0, *, enabled: bool = True
) -> Iterator[int | None]:
    """Pin this process to core ``client`` for the block and yield ``server``, the core to
    give :func:`serve`, so that the two never share a core; yields ``None`` (and pins nothing)
    where that is not possible, or not ``enabled``. The process's cores are given back on the
    way out. Not for blocks that run side by side in threads (as a smoke run's steps do): the
    cores are the whole process's."""
    import os

    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if not enabled or before is None or server not in before or not pin(client):
        yield None
        return
    try:
        yield server
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def serve(
    *,
    tool_turns: int = 0,
    latency: float = 0.0,
    answer_chars: int = 40,
    chars_per_delta: int = 12,
    delta_delay: float = 0.0,
    cpu: int | None = None,
    hold_turn: int | None = None,
) -> Iterator[str]:
    """Run the server in a child process (pinned to core ``cpu`` when given); yields its
    ``http://127.0.0.1:PORT``."""
    argv = [
        sys.executable,
        __file__,
        f"--tool-turns={tool_turns}",
        f"--latency={latency}",
        f"--answer-chars={answer_chars}",
        f"--chars-per-delta={chars_per_delta}",
        f"--delta-delay={delta_delay}",
    ]
    if cpu is not None:
        argv.append(f"--cpu={cpu}")
    if hold_turn is not None:
        argv.append(f"--hold-turn={hold_turn}")
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            port = int(proc.stdout.readline())
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
