"""Persisting never holds the event loop (docs/sessions.md): a model answer of tens of MiB is
stored, reloaded, and kept as a tool-effect receipt while a heartbeat task keeps ticking.

The answer comes from FakeLLMServer (in a process of its own) through a real run, on every
store. Measured on a 2-core machine under load, the longest gap is 20-40 ms; before, storing
such an answer froze every other task for 0.3-1.2 s (the JSON was written and read in one
call on the loop, or in a worker thread that held the interpreter lock for the whole call).
Reading a receipt back from PostgreSQL held it for 0.1 s more before its result was copied
out in pieces, as messages are.

The bound is 100 ms beyond the machine's own noise floor, measured in the same test: the
longest gap while a worker thread runs plain Python (which lets go of the interpreter lock
every 5 ms). On a quiet machine that floor is a few milliseconds; on a loaded one the OS alone
keeps the loop's thread waiting for tens of milliseconds (it preempts the thread that holds the
lock), whatever the code does. The load changes within seconds (other test runs start and
stop), so the floor is measured right after each step, for half as long as that step took (in
all, about as long as the slowest step, as one window at the end was before), and each step is
held to the worst floor seen around it: the one just before it and the one just after.
A step's heartbeat also has every thread's stack written in any gap over the bound
(``dump_after``): a failure names the call that held the loop.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator

import anyio.to_thread
import pytest
from sessions_helpers import huge_text

from fanloop import Agent
from fanloop.messages import ToolCallPart, ToolResultPart
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.sessions import SessionStore
from heartbeat import Heartbeat, heartbeat

Reopen = Callable[[], Awaitable[SessionStore]]

CHARS = 24 * 1024 * 1024
"""The answer's length: 24 Mi characters, about 26 MiB of JSON (some of them non-ASCII)."""
GAP = 0.1


async def noise_floor(seconds: float) -> Heartbeat:
    """The heartbeat while a worker thread keeps the interpreter busy with plain Python."""

    def busy() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    async with heartbeat() as beat:
        await anyio.to_thread.run_sync(busy)
    return beat


@pytest.fixture
def server(child_command: Callable[..., list[str]]) -> Iterator[str]:
    """The base URL of a FakeLLMServer that answers "warm", then the huge answer. It runs in
    a process of its own, as a provider does: in this one, its thread would contend with the
    loop for the interpreter lock, a stall that is the test's own making."""
    argv = child_command("llm", str(CHARS), str(256 * 1024))
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def test_a_huge_answer_is_stored_and_read_back_while_the_loop_keeps_ticking(
    store: SessionStore, reopen: Reopen, server: str
) -> None:
    text = huge_text(CHARS)
    provider = AnthropicProvider("m", api_key="k", base_url=server)
    agent = Agent(provider)
    session = await store.open("huge")
    floors: list[Heartbeat] = []  # the noise floor after each step
    try:
        # First use (connections, imports, the worker threads) out of the measure.
        await agent.run("hi", session=session)
        await (await reopen()).load("huge")
        await session.effect("none")

        started = time.monotonic()
        async with heartbeat(dump_after=GAP) as appending:
            result = await agent.run("go", session=session)
        floors.append(await noise_floor((time.monotonic() - started) / 2))
        assert result.text == text

        started = time.monotonic()
        async with heartbeat(dump_after=GAP) as loading:
            again = await (await reopen()).load("huge")
        floors.append(await noise_floor((time.monotonic() - started) / 2))
        assert again.messages == session.messages

        call = ToolCallPart(id="k1", name="dump", arguments={"path": "out.txt"})
        started = time.monotonic()
        async with heartbeat(dump_after=GAP) as committing:
            await session.begin_effect(turn=1, call=call)
            done = await session.commit_effect("k1", ToolResultPart(call_id="k1", content=text))
        floors.append(await noise_floor((time.monotonic() - started) / 2))
        fresh = await reopen()
        started = time.monotonic()
        async with heartbeat(dump_after=GAP) as reading:
            stored = await fresh.get_receipt("huge", "k1")
        floors.append(await noise_floor((time.monotonic() - started) / 2))
        assert stored == done
    finally:
        await provider.aclose()
    beats = {
        "append": appending,
        "load": loading,
        "commit": committing,
        "read receipt": reading,
    }
    for i, (name, beat) in enumerate(beats.items()):
        floor = max(floors[max(i - 1, 0) : i + 1], key=lambda f: f.max_stall)
        # (a string: pytest shortens the repr of anything else, and the stacks are at its end)
        assert beat.max_stall < GAP + floor.max_stall, (
            f"{name}: {beat!r}\nfloor {floor!r}\n{floors}"
        )
