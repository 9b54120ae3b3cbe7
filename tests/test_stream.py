"""The stream handle: ``async with agent.stream(...) as run: async for event in run``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from fanloop import Agent, Limits, RetryPolicy, RunStream, TerminationReason, tool
from fanloop.errors import AuthenticationError, Overloaded
from fanloop.events import Event, RetryScheduled, TextDelta
from fanloop.messages import TextPart
from fanloop.providers import ModelRequest, ModelResponse, StopReason, Usage
from fanloop.testing import ScriptedProvider, call, reply

FAST = RetryPolicy(max_retries=3, base_delay=0, jitter=False)


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def answer(text: str) -> ModelResponse:
    return ModelResponse(
        content=(TextPart(text=text),),
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=5, output_tokens=5),
        model="fn-model",
        provider="fn",
    )


class FnStreamProvider:
    """A streaming provider driven by an async generator function ``fn(request, attempt)``:
    whatever it yields is streamed; what it raises is raised from the stream."""

    name = "fn"
    model = "fn-model"

    def __init__(self, fn: Callable[[ModelRequest, int], AsyncIterator[Any]]) -> None:
        self.fn = fn
        self.attempts = 0

    def stream(self, request: ModelRequest) -> Any:
        self.attempts += 1
        return self._stream(request, self.attempts)

    @asynccontextmanager
    async def _stream(self, request: ModelRequest, attempt: int) -> AsyncIterator[Any]:
        yield self.fn(request, attempt)


async def consume(run: RunStream) -> list[Event]:
    return [event async for event in run]


# -- the shape of the stream ---------------------------------------------------------------


async def test_events_are_typed_and_text_deltas_add_up_to_the_answer() -> None:
    text = "Streaming is the point of this framework."
    agent = Agent(ScriptedProvider([text], chunk_size=5))
    async with agent.stream("hi") as run:
        events = await consume(run)
    deltas = [e for e in events if e.kind == "text_delta"]
    assert len(deltas) == 9
    assert all(isinstance(e, TextDelta) for e in deltas)
    assert "".join(e.text for e in deltas) == run.result.text == text
    assert events[0].kind == "run_started"
    assert events[-1].kind == "run_finished"
    assert events[-1].result == run.result  # type: ignore[union-attr]
    assert sum(e.kind in ("run_started", "run_finished") for e in events) == 2
    assert all(e.agent_path == ("agent",) and e.parent_call_id is None for e in events)


async def test_a_tool_round_streams_in_order() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=2)]), "3"])
    async with Agent(provider, tools=[add]).stream("1+2") as run:
        kinds = [e.kind for e in await consume(run)]
    want = [
        "run_started",
        "request_started",
        "tool_call_started",
        "response_completed",
        "tool_started",
        "tool_finished",
        "request_started",
        "text_delta",
        "response_completed",
        "run_finished",
    ]
    assert [k for k in kinds if k in want] == want
    assert run.result.text == "3"


async def test_every_event_has_a_json_ready_form() -> None:
    provider = ScriptedProvider(
        [Overloaded("busy"), reply("hm", tool_calls=[call("add", a=1, b=2)]), "3"]
    )
    async with Agent(provider, tools=[add], retry=FAST).stream("1+2") as run:
        events = await consume(run)
    for event in events:
        data = json.loads(json.dumps(event.to_dict()))
        assert data["kind"] == event.kind


# -- result ---------------------------------------------------------------------------------


async def test_result_raises_until_the_run_has_ended_and_is_there_after_the_block() -> None:
    agent = Agent(ScriptedProvider(["one two three"], chunk_size=3))
    async with agent.stream("hi") as run:
        with pytest.raises(RuntimeError):
            _ = run.result
        assert not run.done
        async for event in run:
            # the run may end before its buffered events are read; until then, no result
            if event.kind == "text_delta" and not run.done:
                with pytest.raises(RuntimeError):
                    _ = run.result
    assert run.done
    assert run.result.termination_reason is TerminationReason.COMPLETED
    assert run.result.text == "one two three"


async def test_a_stream_is_one_run_and_entering_it_again_says_so() -> None:
    provider = ScriptedProvider(["one", "two"])
    handle = Agent(provider).stream("hi")
    async with handle as run:
        await consume(run)
    assert run.result.text == "one"
    with pytest.raises(RuntimeError, match=r"each `agent\.stream"):
        async with handle:
            pass
    assert run.result.text == "one"  # the first run's result is kept
    assert provider.remaining == 1  # and no second run started


# -- leaving early cancels ------------------------------------------------------------------


def blocking_provider(
    started: anyio.Event, cancelled: anyio.Event, closed: list[bool]
) -> FnStreamProvider:
    async def fn(request: ModelRequest, attempt: int) -> AsyncIterator[Any]:
        try:
            yield TextDelta("partial ")
            started.set()
            await anyio.Event().wait()  # never set
            yield answer("never")
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        finally:
            closed.append(True)

    return FnStreamProvider(fn)


async def test_leaving_the_block_early_cancels_the_run() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    tasks_before = set(asyncio.all_tasks())
    with anyio.fail_after(5):
        async with agent.stream("hi") as run:
            async for event in run:
                if event.kind == "text_delta":
                    await started.wait()
                    break
    assert cancelled.is_set()
    assert closed == [True]
    assert set(asyncio.all_tasks()) == tasks_before
    assert run.result.termination_reason is TerminationReason.CANCELLED
    assert run.result.messages[0].text == "hi"


async def test_an_exception_in_the_block_cancels_the_run() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    with anyio.fail_after(5), pytest.raises(BaseException) as info:  # noqa: PT012
        async with agent.stream("hi") as run:
            await started.wait()
            raise KeyError("consumer bug")
    err = info.value
    raised = err.exceptions if isinstance(err, BaseExceptionGroup) else (err,)
    assert [type(e) for e in raised] == [KeyError]
    assert cancelled.is_set()
    assert closed == [True]
    assert run.result.termination_reason is TerminationReason.CANCELLED


async def test_an_exception_in_the_block_propagates_as_itself() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    with anyio.fail_after(5), pytest.raises(KeyError):  # noqa: PT012
        async with agent.stream("hi"):
            await started.wait()
            raise KeyError("consumer bug")


async def test_cancel_stops_the_run_and_keeps_the_partial_result() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    with anyio.fail_after(5):
        async with agent.stream("hi") as run:
            await started.wait()
            await run.cancel()
    assert cancelled.is_set()
    assert closed == [True]
    assert run.result.termination_reason is TerminationReason.CANCELLED


async def test_cancel_leaves_the_consumer_running_to_read_the_last_events() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    reached_the_end = False
    with anyio.fail_after(5):
        async with agent.stream("hi") as run:
            await started.wait()
            await run.cancel()
            rest = await consume(run)
            reached_the_end = True
    assert reached_the_end
    assert rest[-1].kind == "run_finished"
    assert run.result.termination_reason is TerminationReason.CANCELLED


async def test_cancelling_the_consumer_cancels_the_run() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            async with agent.stream("hi") as run:
                async for event in run:
                    if event.kind == "text_delta":
                        await started.wait()
                        scope.cancel()
                        await anyio.sleep_forever()
    assert cancelled.is_set()
    assert closed == [True]
    assert run.result.termination_reason is TerminationReason.CANCELLED


# -- backpressure ---------------------------------------------------------------------------


async def lead_of_producer(buffer: int, total: int = 200) -> int:
    """Stream ``total`` deltas to a slow consumer; return how far the producer got ahead."""
    produced = 0

    async def fn(request: ModelRequest, attempt: int) -> AsyncIterator[Any]:
        nonlocal produced
        for _ in range(total):
            produced += 1
            yield TextDelta("x")
        yield answer("x" * total)

    agent = Agent(FnStreamProvider(fn))
    consumed = 0
    lead = 0
    async with agent.stream("go", buffer=buffer) as run:
        async for event in run:
            if event.kind == "text_delta":
                consumed += 1
                lead = max(lead, produced - consumed)
                for _ in range(5):  # a slow consumer: give the producer every chance to run
                    await anyio.lowlevel.checkpoint()
    assert consumed == total
    assert run.result.text == "x" * total
    return lead


async def test_a_slow_consumer_slows_the_producer() -> None:
    assert await lead_of_producer(buffer=1) <= 3


async def test_a_larger_buffer_lets_the_producer_run_ahead() -> None:
    # the control for the test above: the measurement does see a producer that runs ahead
    assert await lead_of_producer(buffer=64) >= 32


# -- errors ---------------------------------------------------------------------------------


def tool_round_then_overloaded() -> ScriptedProvider:
    def respond(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return reply(tool_calls=[call("add", a=1, b=2)])
        return Overloaded("busy")

    return ScriptedProvider(respond)


async def test_a_provider_error_is_raised_after_the_last_event_with_the_partial_result() -> None:
    agent = Agent(
        tool_round_then_overloaded(), tools=[add], retry=RetryPolicy(max_retries=1, base_delay=0)
    )
    events: list[Event] = []
    async with agent.stream("go") as run:
        with pytest.raises(Overloaded) as info:  # noqa: PT012
            async for event in run:
                events.append(event)
    assert events[-1].kind == "run_finished"
    assert events[-1].error is info.value  # type: ignore[union-attr]
    kinds = [e.kind for e in events]
    assert kinds.count("retry_scheduled") == 1
    assert kinds.count("model_failed") == 1
    assert run.result.termination_reason is TerminationReason.PROVIDER_ERROR
    assert info.value.partial == run.result
    assert run.result.tool_calls == 1
    assert len(run.result.messages) == 3  # prompt, tool call, tool result: nothing lost


async def test_a_provider_error_from_the_iteration_leaves_the_block_unwrapped() -> None:
    agent = Agent(
        tool_round_then_overloaded(), tools=[add], retry=RetryPolicy(max_retries=1, base_delay=0)
    )
    with pytest.raises(Overloaded):  # noqa: PT012
        async with agent.stream("go") as run:
            async for _ in run:
                pass


async def test_a_provider_error_is_raised_on_leaving_the_block_if_never_iterated() -> None:
    agent = Agent(ScriptedProvider([AuthenticationError("bad key")]))
    with pytest.raises(AuthenticationError):  # noqa: PT012
        async with agent.stream("go") as run:
            while not run.done:
                await anyio.lowlevel.checkpoint()
    assert run.result.termination_reason is TerminationReason.PROVIDER_ERROR


async def test_a_retry_before_any_delta_does_not_ask_to_discard() -> None:
    provider = ScriptedProvider([Overloaded("busy"), "fine"])
    async with Agent(provider, retry=FAST).stream("go") as run:
        events = await consume(run)
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    assert retry.attempt == 1
    assert not retry.discard_partial


def partial_then_fail() -> FnStreamProvider:
    async def fn(request: ModelRequest, attempt: int) -> AsyncIterator[Any]:
        if attempt == 1:
            yield TextDelta("The ans")
            yield TextDelta("wer is")
            raise Overloaded("stream broke mid-answer")
        yield TextDelta("Forty-")
        yield TextDelta("two.")
        yield answer("Forty-two.")

    return FnStreamProvider(fn)


async def test_a_retry_after_streamed_deltas_asks_to_discard_them() -> None:
    async with Agent(partial_then_fail(), retry=FAST).stream("go") as run:
        events = await consume(run)
    kinds = [e.kind for e in events]
    retry_at = kinds.index("retry_scheduled")
    assert kinds[:retry_at].count("text_delta") == 2
    retry = events[retry_at]
    assert isinstance(retry, RetryScheduled)
    assert retry.attempt == 1
    assert retry.discard_partial


async def test_deltas_after_the_retry_make_up_the_answer() -> None:
    async with Agent(partial_then_fail(), retry=FAST).stream("go") as run:
        events = await consume(run)
    kinds = [e.kind for e in events]
    retry_at = kinds.index("retry_scheduled")
    after = [e.text for e in events[retry_at:] if isinstance(e, TextDelta)]
    assert "".join(after) == run.result.text == "Forty-two."


async def test_a_deadline_ends_a_streamed_run_with_a_result() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed), limits=Limits(timeout=0.2))
    with anyio.fail_after(10):
        async with agent.stream("hi") as run:
            events = await consume(run)
    assert cancelled.is_set()
    assert events[-1].kind == "run_finished"
    assert run.result.termination_reason is TerminationReason.DEADLINE


async def test_iterating_without_the_block_shows_the_right_form() -> None:
    # The first thing an Agents SDK user writes: a TypeError naming the block, never a bare
    # AssertionError (or an AttributeError under python -O), and no run is started.
    provider = ScriptedProvider(["never sent"])
    stream = Agent(provider).stream("hi")
    with pytest.raises(TypeError, match=r"async with agent\.stream\(\.\.\.\) as run"):
        async for _ in stream:
            pass
    with pytest.raises(TypeError, match="async with"):
        await stream.__anext__()
    assert provider.requests == []
    async with stream as run:  # the same handle still works the right way
        assert [e.kind async for e in run][-1] == "run_finished"
    assert run.result.text == "never sent"


# -- the buffer between the run and its consumer ---------------------------------------------


async def test_a_buffer_of_zero_hands_each_event_over_before_the_next_is_made() -> None:
    assert await lead_of_producer(buffer=0) <= 2


async def test_a_consumer_that_leaves_frees_a_producer_blocked_on_a_full_buffer() -> None:
    produced = 0

    async def fn(request: ModelRequest, attempt: int) -> AsyncIterator[Any]:
        nonlocal produced
        for _ in range(1000):
            produced += 1
            yield TextDelta("x")
        yield answer("x" * 1000)

    agent = Agent(FnStreamProvider(fn))
    async with agent.stream("go", buffer=4) as run:
        async for event in run:
            if event.kind == "text_delta":
                break  # the producer is blocked on the full buffer, or about to be
    assert run.result.termination_reason is TerminationReason.CANCELLED
    assert produced < 1000


async def test_iterating_after_the_block_is_refused() -> None:
    agent = Agent(ScriptedProvider(["hi"]))
    async with agent.stream("go") as run:
        events = await consume(run)
    assert events[-1].kind == "run_finished"
    with pytest.raises(anyio.ClosedResourceError):
        await run.__anext__()


async def test_a_consumer_task_cancelled_while_it_waits_cancels_the_run() -> None:
    started, cancelled, closed = anyio.Event(), anyio.Event(), []
    agent = Agent(blocking_provider(started, cancelled, closed))
    streams: list[RunStream] = []

    async def reader() -> None:
        async with agent.stream("hi") as run:
            streams.append(run)
            async for _ in run:
                pass

    task = asyncio.get_running_loop().create_task(reader())
    with anyio.fail_after(5):
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await cancelled.wait()
    assert closed == [True]
    assert streams[0].result.termination_reason is TerminationReason.CANCELLED
