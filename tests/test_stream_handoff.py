"""The consumer of ``agent.stream`` reads a model's streamed answer itself (the hand-over).

While a model call streams over fanloop's own ``aiohttp`` transport and the stream is the run's
only consumer, the consumer's task reads the answer directly instead of being woken by the
run's task for every delta. These tests drive that path with a real HTTP server on 127.0.0.1
whose every pause the test controls, and check what a consumer must still be able to count on:
every delta once and in order, a consumer that gives up waiting losing nothing, cancellation,
deadlines, the idle timeout, retries of a stream that breaks, and no task or connection left.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from fanloop import Agent, Limits, RetryPolicy, TerminationReason
from fanloop.errors import ResponseInvalid
from fanloop.providers._http import ResumableItems
from fanloop.providers.openai import OpenAIProvider


def _chunk(choices: list[Any], **extra: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body |= {"choices": choices, **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def delta(text: str) -> bytes:
    return _chunk([{"index": 0, "delta": {"content": text}, "finish_reason": None}])


END = (
    _chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    + _chunk([], usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
    + b"data: [DONE]\n\n"
)

Step = bytes | asyncio.Event | str  # bytes to send, an event to wait for, or "drop"


class PausingServer:
    """An OpenAI-style streaming endpoint: each request plays the next script of steps."""

    def __init__(self, *scripts: list[Step]) -> None:
        self.scripts = list(scripts)
        self.requests = 0
        self.closed = 0  # connections the client closed or dropped
        self.gone = asyncio.Event()  # set when one was
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> PausingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                script = self.scripts[min(self.requests, len(self.scripts) - 1)]
                self.requests += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for step in script:
                    if isinstance(step, asyncio.Event):
                        await writer.drain()
                        await step.wait()
                    elif step == "drop":
                        writer.transport.abort()
                        return
                    else:
                        assert isinstance(step, bytes)
                        writer.write(b"%x\r\n%s\r\n" % (len(step), step))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            self.gone.set()
            writer.close()


def agent_on(server: PausingServer, **options: Any) -> tuple[Agent[Any, Any], OpenAIProvider]:
    provider = OpenAIProvider("m", api_key="k", base_url=server.url)
    return Agent(provider, **options), provider


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.Task[Any] | None]:
    """The task that took each item from a resumable reader, in order."""
    seen: list[asyncio.Task[Any] | None] = []
    original = ResumableItems.__anext__

    async def spy(self: ResumableItems) -> Any:
        item = await original(self)
        seen.append(asyncio.current_task())
        return item

    monkeypatch.setattr(ResumableItems, "__anext__", spy)
    return seen


def reading(run: Any, task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is reading the model's stream of ``run`` right now."""
    handed = run._channel.handed
    return handed is not None and handed._reader is task


async def collect(run: Any, on: Callable[[Any], Any] | None = None) -> list[str]:
    texts: list[str] = []
    async for event in run:
        if event.kind == "text_delta":
            texts.append(event.text)
            if on is not None:
                await on(event)
    return texts


async def test_the_consumer_reads_the_answer_in_its_own_task(
    reads: list[asyncio.Task[Any] | None],
) -> None:
    gates = [asyncio.Event() for _ in range(3)]
    script: list[Step] = []
    for i, gate in enumerate(gates):
        script += [delta(str(i)), gate]
    async with PausingServer([*script, END]) as server:
        agent, provider = agent_on(server)
        async with provider, agent.stream("go") as run:
            consumer = asyncio.current_task()

            async def next_gate(event: Any) -> None:
                gates[int(event.text)].set()

            texts = await collect(run, next_gate)
    assert texts == ["0", "1", "2"]
    assert run.result.text == "012"
    # Every item after the first was read by the consumer's task itself.
    assert reads[1:] and all(task is consumer for task in reads[1:])


def _held_methods(coro: Any) -> list[str]:
    """The bound methods that the coroutines ``coro`` waits through hold (in their locals or
    on their stacks, as a ``with`` block keeps its ``__exit__``), but for those of ``anyio``
    and ``aiohttp``."""
    import gc
    import types

    held = []
    while getattr(coro, "cr_code", None) is not None:
        for value in gc.get_referents(coro):
            if isinstance(value, types.MethodType) and not value.__module__.startswith(
                ("anyio", "aiohttp")
            ):
                held.append(value.__qualname__)
        coro = coro.cr_await
    return held


async def test_a_stream_in_flight_holds_no_bound_method_it_does_not_need() -> None:
    # Thousands of streams in flight: each bound method a waiting stream holds is one more
    # object for every pass of the collector. Only the ``async with`` of the model's stream
    # keeps one (its ``__aexit__``): not the run's observer block without an observer, the
    # error mapping around each read, the frame decoder's ``feed`` or ``resumable``.
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, delta("b"), END]) as server:
        agent, provider = agent_on(server)
        async with provider, agent.stream("go") as run:
            events = aiter(run)
            while (await anext(events)).kind != "text_delta":
                pass
            reader = asyncio.ensure_future(anext(events))  # waits for "b", reading itself
            while not reading(run, reader):
                await asyncio.sleep(0)
            assert run._task is not None
            producer, consumer = run._task.get_coro(), reader.get_coro()
            held = _held_methods(producer) + _held_methods(consumer)
            items = run._channel.handed._items
            slots = [getattr(items, name) for name in type(items).__slots__]
            gate.set()
            assert (await reader).text == "b"
            texts = [event.text async for event in events if event.kind == "text_delta"]
    assert texts == []
    assert run.result.text == "ab"
    assert held == ["ProviderStream.__aexit__"], held
    assert not [value for value in slots if callable(value)]


async def test_a_consumer_that_gives_up_waiting_loses_nothing() -> None:
    # A consumer that waits for each event at most a moment (say, to send a keep-alive of its
    # own) while the model pauses mid-answer: no delta is lost or doubled, nothing retried.
    gate = asyncio.Event()
    async with PausingServer([delta("a"), delta("b"), gate, delta("c"), END]) as server:
        agent, provider = agent_on(server)
        texts: list[str] = []
        timeouts = 0
        async with provider, agent.stream("go") as run:
            events = aiter(run)
            while True:
                try:
                    event = await asyncio.wait_for(anext(events), 0.05)
                except TimeoutError:
                    timeouts += 1
                    if timeouts == 3:
                        gate.set()
                    continue
                except StopAsyncIteration:
                    break
                if event.kind == "text_delta":
                    texts.append(event.text)
                assert event.kind != "retry_scheduled"
        assert timeouts >= 3
        assert texts == ["a", "b", "c"]
        assert run.result.text == "abc"
        assert run.result.termination_reason is TerminationReason.COMPLETED
        assert server.requests == 1


async def test_an_anyio_timeout_around_one_event_loses_nothing() -> None:
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, delta("b"), END]) as server:
        agent, provider = agent_on(server)
        texts: list[str] = []
        async with provider, agent.stream("go") as run:
            events = aiter(run)
            for _ in range(2):
                with anyio.move_on_after(0.05):
                    while (event := await anext(events)).kind != "text_delta" or event.text:
                        if event.kind == "text_delta":
                            texts.append(event.text)
            gate.set()
            texts += await collect(run)
    assert texts == ["a", "b"]
    assert run.result.text == "ab"
    assert server.requests == 1


async def test_cancel_while_the_consumer_reads_ends_the_run_and_the_consumer_reads_on() -> None:
    gate = asyncio.Event()  # never set: the model pauses until the run is cancelled
    async with PausingServer([delta("a"), gate, delta("never"), END]) as server:
        agent, provider = agent_on(server)
        kinds: list[str] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                async for event in run:
                    kinds.append(event.kind)
                    if event.kind == "text_delta":
                        asyncio.get_running_loop().call_later(0.05, run._scope.cancel)
        assert kinds[-1] == "run_finished"
        assert run.result.termination_reason is TerminationReason.CANCELLED
        assert "never" not in run.result.text
        gate.set()


async def test_a_deadline_while_the_consumer_reads_ends_the_run_with_a_result() -> None:
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, END]) as server:
        agent, provider = agent_on(server, limits=Limits(timeout=0.3))
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                texts = await collect(run)
        assert texts == ["a"]
        assert run.result.termination_reason is TerminationReason.DEADLINE
        gate.set()


async def test_a_model_that_goes_quiet_while_the_consumer_reads_is_retried() -> None:
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, END], [delta("b"), END]) as server:
        policy = RetryPolicy(base_delay=0.01, stream_idle_timeout=0.2)
        agent, provider = agent_on(server, retry=policy)
        kinds: list[str] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                async for event in run:
                    kinds.append(event.kind)
        assert "retry_scheduled" in kinds
        assert run.result.text == "b"
        assert server.requests == 2
        gate.set()


async def test_a_slow_consumer_is_not_taken_for_a_quiet_model() -> None:
    # The consumer holds each delta longer than the idle timeout: that is its own time.
    async with PausingServer([delta("a"), delta("b"), delta("c"), END]) as server:
        policy = RetryPolicy(base_delay=0.01, stream_idle_timeout=0.15)
        agent, provider = agent_on(server, retry=policy)

        async def slow(event: Any) -> None:
            await asyncio.sleep(0.3)

        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                texts = await collect(run, slow)
        assert texts == ["a", "b", "c"]
        assert server.requests == 1


async def test_a_stream_that_breaks_while_the_consumer_reads_is_retried() -> None:
    async with PausingServer([delta("a"), delta("b"), "drop"], [delta("x"), END]) as server:
        agent, provider = agent_on(server, retry=RetryPolicy(base_delay=0.01))
        events: list[Any] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                events = [event async for event in run]
        retries = [e for e in events if e.kind == "retry_scheduled"]
        assert len(retries) == 1 and retries[0].discard_partial
        assert run.result.text == "x"
        assert server.requests == 2


async def test_a_malformed_event_behind_a_delta_in_one_chunk_fails_as_response_invalid() -> None:
    # The delta parsed before the malformed event goes out first; the failure that follows
    # is the provider's typed error, as when the malformed event comes alone.
    async with PausingServer([delta("a") + b"data: {not json\n\n", END]) as server:
        agent, provider = agent_on(server, retry=RetryPolicy(max_retries=0))
        texts: list[str] = []
        streams: list[Any] = []

        async def consume() -> None:
            async with provider, agent.stream("go") as run:
                streams.append(run)
                async for event in run:
                    if event.kind == "text_delta":
                        texts.append(event.text)

        with anyio.fail_after(10), pytest.raises(ResponseInvalid, match="malformed") as raised:
            await consume()
        assert texts == ["a"]
        assert raised.value.provider == "openai"
        assert streams[0].result.termination_reason == TerminationReason.PROVIDER_ERROR


async def test_leaving_the_block_while_the_model_streams_cancels_the_run() -> None:
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, END]) as server:
        agent, provider = agent_on(server)
        with anyio.fail_after(10):
            async with provider:
                async with agent.stream("go") as run:
                    async for event in run:
                        if event.kind == "text_delta":
                            break
                assert run.result.termination_reason is TerminationReason.CANCELLED
                # The connection was closed, not put back in the pool mid-answer: the
                # server's rest of the answer finds it gone.
                gate.set()
                await server.gone.wait()


async def test_a_consumer_task_cancelled_while_it_reads_cancels_the_run() -> None:
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, END]) as server:
        agent, provider = agent_on(server)
        got_delta = asyncio.Event()
        streams: list[Any] = []

        async def reader() -> None:
            async with agent.stream("go") as run:
                streams.append(run)
                async for event in run:
                    if event.kind == "text_delta":
                        got_delta.set()

        async with provider:
            task = asyncio.get_running_loop().create_task(reader())
            with anyio.fail_after(10):
                await got_delta.wait()
                while not reading(streams[0], task):  # until it is back in its read
                    await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
        assert streams[0].result.termination_reason is TerminationReason.CANCELLED
        gate.set()


async def test_many_consumers_each_get_their_own_answer_whole() -> None:
    async with PausingServer([delta("a"), delta("b"), delta("c"), END]) as server:
        agent, provider = agent_on(server)

        async def one() -> list[str]:
            async with agent.stream("go") as run:
                return await collect(run)

        async with provider:
            with anyio.fail_after(20):
                answers = await asyncio.gather(*(one() for _ in range(50)))
        assert answers == [["a", "b", "c"]] * 50


@pytest.mark.parametrize("end", ["eof", "drop"])
async def test_a_run_cancelled_in_the_turn_its_read_completes_ends_cleanly(
    end: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run is cancelled (its deadline, run.cancel()) in the loop turn in which the
    # consumer's read completes, before the consumer runs: the run's future is cancelled
    # before it says it took the stream back. The consumer must read on to run_finished.
    import aiohttp.streams

    hook: list[Callable[[], Any]] = []
    for name in ("feed_eof", "set_exception"):
        original = getattr(aiohttp.streams.StreamReader, name)

        def patched(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            _original(self, *args, **kwargs)
            if hook:
                hook.pop()()

        monkeypatch.setattr(aiohttp.streams.StreamReader, name, patched)
    gate = asyncio.Event()
    script: list[Step] = [delta("a"), END, gate] if end == "eof" else [delta("a"), gate, "drop"]
    async with PausingServer(script, [delta("x"), END]) as server:
        agent, provider = agent_on(server, retry=RetryPolicy(base_delay=0.01))
        kinds: list[str] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                async for event in run:
                    kinds.append(event.kind)
                    if event.kind == "text_delta" and event.text == "a":
                        hook.append(run._scope.cancel)
                        gate.set()
        assert kinds[-1] == "run_finished"
        assert run.result.termination_reason is TerminationReason.CANCELLED


async def test_a_users_own_scope_expiring_as_the_run_takes_the_stream_back() -> None:
    # The run takes the stream back and, in the same loop turn, the consumer's own
    # move_on_after expires: the scope catches its own cancellation, nothing else leaks.
    gate = asyncio.Event()
    async with PausingServer([delta("a"), gate, END]) as server:
        agent, provider = agent_on(server)
        me = asyncio.current_task()
        assert me is not None
        kinds: list[str] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                events = aiter(run)
                while True:
                    with anyio.move_on_after(60) as scope:

                        async def trigger(scope: anyio.CancelScope = scope) -> None:
                            while not reading(run, me):
                                await asyncio.sleep(0)
                            await run.cancel()
                            asyncio.get_running_loop().call_soon(scope.cancel)

                        if kinds.count("text_delta") == 1 and "<timeout>" not in kinds:
                            asyncio.get_running_loop().create_task(trigger())
                        try:
                            event = await anext(events)
                        except StopAsyncIteration:
                            break
                    if scope.cancelled_caught:
                        kinds.append("<timeout>")
                        continue
                    kinds.append(event.kind)
        assert me.cancelling() == 0
        assert kinds[-1] == "run_finished"
        assert run.result.termination_reason is TerminationReason.CANCELLED
        gate.set()


async def test_a_consumer_away_after_its_timeout_is_not_taken_for_a_quiet_model() -> None:
    # The consumer's wait times out, the server then sends the rest, and the consumer spends
    # longer than the idle timeout on its own work: the run reads on meanwhile (as a slow
    # consumer's run does), so nothing is retried or lost.
    gate = asyncio.Event()
    script: list[Step] = [delta("a"), gate, delta("b"), delta("c"), END]
    async with PausingServer(script, [delta("x"), END]) as server:
        agent, provider = agent_on(server, retry=RetryPolicy(stream_idle_timeout=0.3))
        kinds: list[str] = []
        texts: list[str] = []
        with anyio.fail_after(10):
            async with provider, agent.stream("go") as run:
                events = aiter(run)
                while True:
                    try:
                        event = await asyncio.wait_for(anext(events), 0.05)
                    except TimeoutError:
                        gate.set()
                        await asyncio.sleep(0.6)  # the consumer's own work
                        continue
                    except StopAsyncIteration:
                        break
                    kinds.append(event.kind)
                    if event.kind == "text_delta":
                        texts.append(event.text)
        assert texts == ["a", "b", "c"]
        assert "retry_scheduled" not in kinds
        assert server.requests == 1


async def test_keep_alives_after_the_end_marker_and_a_consumer_that_keeps_timing_out() -> None:
    # The answer is complete but the body stays open with keep-alives; the consumer waits at
    # most 0.2 s per event. The drain after the end marker takes one drain's time in all, not
    # one per resumed read, and the complete answer is kept.
    from fanloop.testing import FakeLLMServer, Hostile

    with FakeLLMServer([Hostile.keepalive(0.05, after="hello world"), "never"]) as server:
        provider = OpenAIProvider("m", api_key="k", base_url=server.openai_base_url)
        agent = Agent(provider, retry=RetryPolicy(base_delay=0.01, stream_idle_timeout=2.0))
        kinds: list[str] = []
        with anyio.fail_after(8):
            async with provider, agent.stream("go") as run:
                events = aiter(run)
                while True:
                    try:
                        event = await asyncio.wait_for(anext(events), 0.2)
                    except TimeoutError:
                        continue
                    except StopAsyncIteration:
                        break
                    kinds.append(event.kind)
        assert "retry_scheduled" not in kinds
        assert run.result.text == "hello world"
