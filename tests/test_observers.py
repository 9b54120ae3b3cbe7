"""Observers (docs/observers.md): the LoopObserver callbacks, NullObserver, ConsoleObserver,
MultiObserver, GuardedObserver and guarded(), exactly as the seed specifies them."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from fanloop import (
    Agent,
    ConsoleObserver,
    ConversationContext,
    ConversationSummary,
    GuardedObserver,
    Limits,
    LoopObserver,
    MultiObserver,
    NullObserver,
    RetryPolicy,
    TerminationReason,
    guarded,
    tool,
)
from fanloop.errors import AuthenticationError, Overloaded
from fanloop.events import RunStarted
from fanloop.messages import ToolCallPart, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, Usage
from fanloop.testing import ScriptedProvider, call, reply

FAST = RetryPolicy(max_retries=3, base_delay=0, jitter=False)


@pytest.fixture(autouse=True)
def _unconfigured_structlog() -> Iterator[None]:
    """capture_logs() leaves structlog "configured" (it calls configure()); start clean."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@tool
async def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


class Recorder(NullObserver):
    """Records every callback, in order, as ``(name, args)``."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...]]] | None = None, tag: str = "") -> None:
        self.log: list[tuple[str, tuple[Any, ...]]] = [] if log is None else log
        self.tag = tag

    def _add(self, name: str, *args: Any) -> None:
        self.log.append((f"{self.tag}{name}", args))

    @contextmanager
    def _conv(self) -> Iterator[None]:
        self._add("enter")
        try:
            yield
        finally:
            self._add("exit")

    def conversation(self) -> AbstractContextManager[None]:
        return self._conv()

    def on_request(self, request: ModelRequest) -> None:
        self._add("on_request", request)

    def on_response(self, response: ModelResponse) -> None:
        self._add("on_response", response)

    def on_retry(self, attempt: int, error: Exception) -> None:
        self._add("on_retry", attempt, error)

    def on_tool_start(self, call: ToolCallPart) -> None:
        self._add("on_tool_start", call)

    def on_tool_end(self, call: ToolCallPart, result: ToolResultPart) -> None:
        self._add("on_tool_end", call, result)

    def on_conversation_start(self, context: ConversationContext) -> None:
        self._add("on_conversation_start", context)

    def on_conversation_end(self, summary: ConversationSummary) -> None:
        self._add("on_conversation_end", summary)

    def on_budget_warning(self, kind: str, used: float, limit: float) -> None:
        self._add("on_budget_warning", kind, used, limit)

    def on_stall(self, tool_name: str, count: int) -> None:
        self._add("on_stall", tool_name, count)

    def on_model_error(self, error: Exception) -> None:
        self._add("on_model_error", error)

    def on_text_delta(self, text: str) -> None:
        self._add("on_text_delta", text)

    def names(self, *, deltas: bool = False) -> list[str]:
        return [n for n, _ in self.log if deltas or not n.endswith("on_text_delta")]

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [a for n, a in self.log if n == name]


def failing_then(n: int, answer: Any, error: type[Exception] = Overloaded) -> Any:
    """A responder that raises ``error`` ``n`` times, then answers with ``answer``."""
    state = {"calls": 0}

    def respond(request: ModelRequest) -> Any:
        state["calls"] += 1
        if state["calls"] <= n:
            return error(f"attempt {state['calls']} failed")
        return answer

    return respond


# -- the seed's example -------------------------------------------------------------------


class ResponseCounter(NullObserver):
    def __init__(self) -> None:
        self.count = 0

    def on_response(self, response: ModelResponse) -> None:
        self.count += 1


async def test_response_counter_from_the_seed_counts_one_response() -> None:
    observer = ResponseCounter()
    agent = Agent(ScriptedProvider(["7"]), tools=[], observer=observer)
    result = await agent.run("How many days are in a week? Reply with one digit.")
    assert result.text == "7"
    assert observer.count == 1


async def test_response_counter_counts_each_successful_model_call_not_failed_attempts() -> None:
    observer = ResponseCounter()
    provider = ScriptedProvider(
        [
            Overloaded("busy"),
            reply(tool_calls=[call("add", a=1, b=2)]),
            Overloaded("busy again"),
            "3",
        ]
    )
    result = await Agent(provider, tools=[add], observer=observer, retry=FAST).run("1+2?")
    assert result.text == "3"
    assert len(provider.requests) == 4
    assert observer.count == 2


# -- every callback, with its arguments, in order -----------------------------------------


async def test_callbacks_fire_in_order_around_a_tool_round() -> None:
    rec = Recorder()
    tool_call = call("add", a=2, b=3)
    provider = ScriptedProvider([reply("Adding.", tool_calls=[tool_call]), "It is 5."])
    result = await Agent(provider, tools=[add], observer=rec).run("2+3?")
    assert result.text == "It is 5."
    assert rec.names() == [
        "enter",
        "on_conversation_start",
        "on_request",
        "on_response",
        "on_tool_start",
        "on_tool_end",
        "on_request",
        "on_response",
        "on_conversation_end",
        "exit",
    ]
    # on_request gets the very request the provider is about to see
    assert [a[0] for a in rec.args("on_request")] == provider.requests
    first_response = rec.args("on_response")[0][0]
    assert isinstance(first_response, ModelResponse)
    assert first_response.tool_calls == (tool_call,)
    ((started,),) = rec.args("on_tool_start")
    assert started == tool_call
    ((ended, result_part),) = rec.args("on_tool_end")
    assert ended == tool_call
    assert result_part == ToolResultPart(call_id=tool_call.id, content="5")


async def test_on_request_fires_before_every_attempt_and_on_retry_names_the_failed_one() -> None:
    rec = Recorder()
    provider = ScriptedProvider(failing_then(2, "finally"))
    result = await Agent(provider, observer=rec, retry=FAST).run("hi")
    assert result.text == "finally"
    assert [n for n in rec.names() if n.startswith("on_re")] == [
        "on_request",
        "on_retry",
        "on_request",
        "on_retry",
        "on_request",
        "on_response",
    ]
    retries = rec.args("on_retry")
    assert [attempt for attempt, _ in retries] == [1, 2]
    assert all(isinstance(err, Overloaded) for _, err in retries)
    assert [str(err) for _, err in retries] == ["attempt 1 failed", "attempt 2 failed"]
    assert len(rec.args("on_request")) == len(provider.requests) == 3
    assert rec.args("on_model_error") == []


async def test_on_tool_start_and_end_fire_for_an_unknown_tool() -> None:
    rec = Recorder()
    ghost = call("no_such_tool", x=1)
    provider = ScriptedProvider([reply(tool_calls=[ghost]), "sorry"])
    await Agent(provider, tools=[add], observer=rec).run("go")
    assert rec.args("on_tool_start") == [(ghost,)]
    ((ended, part),) = rec.args("on_tool_end")
    assert ended == ghost
    assert part.is_error
    assert part.call_id == ghost.id
    assert "no_such_tool" in part.content


async def test_on_tool_end_receives_error_results() -> None:
    rec = Recorder()
    boom = call("explode")
    provider = ScriptedProvider([reply(tool_calls=[boom]), "it failed"])
    result = await Agent(provider, tools=[explode], observer=rec).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    ((ended, part),) = rec.args("on_tool_end")
    assert ended == boom
    assert part.is_error
    assert "kaboom" in part.content


async def test_on_conversation_start_once_with_the_context() -> None:
    rec = Recorder()
    limits = Limits(max_turns=7)
    provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=1)]), "2"])
    agent = Agent(provider, tools=[add], observer=rec, limits=limits, name="calc")
    result = await agent.run("1+1")
    starts = rec.args("on_conversation_start")
    assert len(starts) == 1
    (context,) = starts[0]
    assert isinstance(context, ConversationContext)
    assert context.run_id == result.run_id
    assert context.agent_name == "calc"
    assert context.provider == "scripted"
    assert context.model == "scripted-model"
    assert context.limits is limits
    assert context.session_id is None


async def test_on_conversation_end_once_with_the_summary_on_success() -> None:
    rec = Recorder()
    provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=1)]), "2"])
    result = await Agent(provider, tools=[add], observer=rec).run("1+1")
    ends = rec.args("on_conversation_end")
    assert len(ends) == 1
    (summary,) = ends[0]
    assert isinstance(summary, ConversationSummary)
    assert summary.run_id == result.run_id
    assert summary.termination_reason is TerminationReason.COMPLETED
    assert summary.turns == 2
    assert summary.tool_calls == 1
    assert summary.usage == result.usage
    assert summary.usage.output_tokens > 0
    assert summary.elapsed >= 0
    assert summary.error is None
    # inside conversation(): after the last event, before the context closes
    assert rec.names()[-2:] == ["on_conversation_end", "exit"]


async def test_on_conversation_end_and_on_model_error_on_a_permanent_provider_error() -> None:
    rec = Recorder()
    provider = ScriptedProvider([AuthenticationError("bad key", status_code=401)])
    with pytest.raises(AuthenticationError) as info:
        await Agent(provider, observer=rec, retry=FAST).run("hi")
    # not retryable: on_model_error without any on_retry
    assert rec.args("on_retry") == []
    assert rec.args("on_model_error") == [(info.value,)]
    (summary,) = (a[0] for a in rec.args("on_conversation_end"))
    assert summary.termination_reason is TerminationReason.PROVIDER_ERROR
    assert summary.error is info.value
    assert rec.names()[-3:] == ["on_model_error", "on_conversation_end", "exit"]
    assert info.value.partial is not None
    assert info.value.partial.run_id == summary.run_id


async def test_on_model_error_after_the_last_retry() -> None:
    rec = Recorder()
    provider = ScriptedProvider(lambda req: Overloaded("busy"))
    policy = RetryPolicy(max_retries=2, base_delay=0, jitter=False)
    with pytest.raises(Overloaded) as info:
        await Agent(provider, observer=rec, retry=policy).run("hi")
    assert [a[0] for a in rec.args("on_retry")] == [1, 2]
    assert rec.args("on_model_error") == [(info.value,)]
    assert len(rec.args("on_request")) == 3
    assert info.value.attempts == 3
    (summary,) = (a[0] for a in rec.args("on_conversation_end"))
    assert summary.termination_reason is TerminationReason.PROVIDER_ERROR


async def test_on_conversation_end_on_cancellation() -> None:
    rec = Recorder()
    waiting = anyio.Event()

    async def hang(request: ModelRequest) -> Any:
        waiting.set()
        await anyio.sleep_forever()

    agent = Agent(ScriptedProvider(hang), observer=rec)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "hi")
            await waiting.wait()
            tg.cancel_scope.cancel()
    ends = rec.args("on_conversation_end")
    assert len(ends) == 1
    (summary,) = ends[0]
    assert summary.termination_reason is TerminationReason.CANCELLED
    assert isinstance(summary.error, anyio.get_cancelled_exc_class())
    assert rec.names()[-2:] == ["on_conversation_end", "exit"]


async def test_on_budget_warning_for_turns_and_tokens() -> None:
    rec = Recorder()
    turn = reply(tool_calls=[call("add", a=1, b=2)], usage=Usage(input_tokens=5, output_tokens=30))
    provider = ScriptedProvider([turn, turn, turn, "done"])
    limits = Limits(max_turns=5, max_output_tokens=100, warn_at=0.5)
    result = await Agent(provider, tools=[add], observer=rec, limits=limits).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    warnings = rec.args("on_budget_warning")
    # output tokens 30, 60 (>= 50: warn), turns 3 (>= 2.5: warn), each once
    assert ("output_tokens", 60.0, 100.0) in warnings
    assert ("turns", 3, 5) in warnings
    assert len(warnings) == 2


async def test_on_stall_when_the_same_call_repeats_to_the_threshold() -> None:
    rec = Recorder()
    same = [reply(tool_calls=[call("add", a=1, b=1)]) for _ in range(3)]
    provider = ScriptedProvider([*same, "stuck"])
    await Agent(provider, tools=[add], observer=rec, limits=Limits(stall_threshold=3)).run("go")
    assert rec.args("on_stall") == [("add", 3)]


async def test_on_text_delta_fires_per_streamed_chunk() -> None:
    rec = Recorder()
    text = "The quick brown fox jumps."
    provider = ScriptedProvider([text], chunk_size=4)
    result = await Agent(provider, observer=rec).run("hi")
    chunks = [a[0] for a in rec.args("on_text_delta")]
    assert len(chunks) == 7
    assert all(len(c) <= 4 for c in chunks)
    assert "".join(chunks) == result.text == text
    # the deltas come between the request and the response
    names = rec.names(deltas=True)
    first, last = names.index("on_request"), names.index("on_response")
    assert set(names[first + 1 : last]) == {"on_text_delta"}


async def test_observers_are_called_when_streaming_too() -> None:
    rec = Recorder()
    agent = Agent(ScriptedProvider(["hello"]), observer=rec)
    async with agent.stream("hi") as run:
        async for _ in run:
            pass
    assert run.result.text == "hello"
    assert rec.names() == [
        "enter",
        "on_conversation_start",
        "on_request",
        "on_response",
        "on_conversation_end",
        "exit",
    ]


# -- optional callbacks --------------------------------------------------------------------


class Minimal:
    """A plain class with only the required part of the protocol."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def conversation(self) -> AbstractContextManager[None]:
        return nullcontext()

    def on_request(self, request: ModelRequest) -> None:
        self.seen.append("on_request")

    def on_response(self, response: ModelResponse) -> None:
        self.seen.append("on_response")

    def on_retry(self, attempt: int, error: Exception) -> None:
        self.seen.append("on_retry")

    def on_tool_start(self, call: ToolCallPart) -> None:
        self.seen.append("on_tool_start")

    def on_tool_end(self, call: ToolCallPart, result: ToolResultPart) -> None:
        self.seen.append("on_tool_end")


async def test_optional_callbacks_missing_on_a_plain_class_are_skipped() -> None:
    observer = Minimal()
    assert isinstance(observer, LoopObserver)
    same = [reply(tool_calls=[call("add", a=1, b=1)]) for _ in range(3)]
    provider = ScriptedProvider([Overloaded("busy"), *same, "done"])
    limits = Limits(max_turns=4, warn_at=0.5)
    agent = Agent(provider, tools=[add], observer=observer, limits=limits, retry=FAST)
    with capture_logs() as logs:
        result = await agent.run("go")
    assert result.text == "done"
    assert "on_retry" in observer.seen
    assert observer.seen.count("on_response") == 4
    assert [e for e in logs if e["log_level"] in ("error", "warning")] == []


async def test_a_plain_class_with_some_optional_callbacks_gets_those() -> None:
    class Partial(Minimal):
        def on_text_delta(self, text: str) -> None:
            self.seen.append(f"delta:{text}")

    observer = Partial()
    await Agent(ScriptedProvider(["abcdef"], chunk_size=3), observer=observer).run("hi")
    assert [s for s in observer.seen if s.startswith("delta:")] == ["delta:abc", "delta:def"]


# -- NullObserver --------------------------------------------------------------------------


def test_null_observer_is_all_no_ops() -> None:
    null = NullObserver()
    assert isinstance(null, LoopObserver)
    with null.conversation() as value:
        assert value is None
    tc = ToolCallPart(id="c", name="t", arguments={})
    response = reply("x")
    assert null.on_request(ModelRequest(system=None, messages=(), tools=())) is None
    assert null.on_response(response) is None
    assert null.on_retry(1, Overloaded("x")) is None
    assert null.on_tool_start(tc) is None
    assert null.on_tool_end(tc, ToolResultPart(call_id="c", content="")) is None
    assert null.on_budget_warning("turns", 1, 2) is None
    assert null.on_stall("t", 3) is None
    assert null.on_model_error(Overloaded("x")) is None
    assert null.on_text_delta("x") is None


async def test_a_run_with_a_null_observer_behaves_like_one_without() -> None:
    script = [reply(tool_calls=[call("add", a=1, b=2)]), "3"]
    plain = await Agent(ScriptedProvider(script), tools=[add]).run("1+2")
    observed = await Agent(ScriptedProvider(script), tools=[add], observer=NullObserver()).run(
        "1+2"
    )
    assert observed.text == plain.text == "3"
    assert observed.messages == plain.messages


# -- ConsoleObserver -----------------------------------------------------------------------


async def test_console_observer_prints_answers_tool_activity_and_retries() -> None:
    out = io.StringIO()
    provider = ScriptedProvider(
        [
            Overloaded("too busy"),
            reply(tool_calls=[call("add", a=1, b=2)]),
            reply(tool_calls=[call("explode")]),
            "The answer is 3.",
        ]
    )
    agent = Agent(provider, tools=[add, explode], observer=ConsoleObserver(file=out), retry=FAST)
    await agent.run("1+2")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("!! attempt 1 failed: Overloaded: too busy")
    assert "add(a=1, b=2)" in lines[1]
    assert "add" in lines[2] and "ok" in lines[2] and "3" in lines[2]
    assert "explode" in lines[3]
    assert "error" in lines[4] and "kaboom" in lines[4]
    assert lines[5] == "The answer is 3."
    # a response with only tool calls (blank text) prints no answer line
    assert len(lines) == 6


async def test_console_observer_prints_to_stdout_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    await Agent(ScriptedProvider(["seven"]), observer=ConsoleObserver()).run("hi")
    assert capsys.readouterr().out == "seven\n"


# -- MultiObserver -------------------------------------------------------------------------


async def test_multi_observer_calls_in_argument_order_and_nests_conversations() -> None:
    log: list[tuple[str, tuple[Any, ...]]] = []
    multi = MultiObserver(Recorder(log, "A."), Recorder(log, "B."))
    provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=2)]), "3"])
    await Agent(provider, tools=[add], observer=multi).run("go")
    names = [n for n, _ in log if not n.endswith("on_text_delta")]
    assert names[:4] == ["A.enter", "B.enter", "A.on_conversation_start", "B.on_conversation_start"]
    assert names[-4:] == ["A.on_conversation_end", "B.on_conversation_end", "B.exit", "A.exit"]
    middle = names[4:-4]
    callbacks = ["on_request", "on_response", "on_tool_start", "on_tool_end"]
    callbacks += ["on_request", "on_response"]
    assert middle == [f"{who}.{cb}" for cb in callbacks for who in "AB"]


async def test_multi_observer_one_failing_callback_does_not_stop_the_others() -> None:
    class Broken(NullObserver):
        def on_response(self, response: ModelResponse) -> None:
            raise ValueError("observer bug")

        def on_conversation_end(self, summary: ConversationSummary) -> None:
            raise ValueError("observer bug")

    after = Recorder()
    multi = MultiObserver(Broken(), after)
    with capture_logs() as logs:
        result = await Agent(ScriptedProvider(["ok"]), observer=multi).run("hi")
    assert result.text == "ok"
    assert len(after.args("on_response")) == 1
    assert len(after.args("on_conversation_end")) == 1
    assert sum(e["log_level"] == "error" for e in logs) == 2


async def test_multi_observer_skips_optional_callbacks_a_member_lacks() -> None:
    minimal, rec = Minimal(), Recorder()
    await Agent(ScriptedProvider(["ab"], chunk_size=1), observer=MultiObserver(minimal, rec)).run(
        "hi"
    )
    assert [a[0] for a in rec.args("on_text_delta")] == ["a", "b"]
    assert minimal.seen == ["on_request", "on_response"]


async def test_multi_observer_conversation_error_propagates_and_closes_entered_ones() -> None:
    class Refuses(NullObserver):
        def conversation(self) -> AbstractContextManager[None]:
            raise RuntimeError("no conversation today")

    first = Recorder()
    provider = ScriptedProvider(["never"])
    agent = Agent(provider, observer=MultiObserver(first, Refuses()))
    with pytest.raises(RuntimeError, match="no conversation today"):
        await agent.run("hi")
    assert first.names() == ["enter", "exit"]
    assert provider.requests == []


class Counts(NullObserver):
    """Counts responses and tool starts; no ``on_event``, no delta callback."""

    def __init__(self) -> None:
        self.responses = 0
        self.tools = 0

    def on_response(self, response: ModelResponse) -> None:
        self.responses += 1

    def on_tool_start(self, call: ToolCallPart) -> None:
        self.tools += 1


class Events(NullObserver):
    """Sees every event through ``on_event``."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def on_event(self, event: Any) -> None:
        self.kinds.append(event.kind)


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: MultiObserver(a, b),
        lambda a, b: MultiObserver(GuardedObserver(a), MultiObserver(b)),
        lambda a, b: GuardedObserver(MultiObserver(a, GuardedObserver(b))),
    ],
    ids=["multi", "nested", "guarded"],
)
async def test_wrappers_without_on_event_inside_do_not_make_the_loop_build_every_event(
    make: Any,
) -> None:
    from fanloop._dispatch import Emitter, build_table

    first, second = Counts(), Counts()
    observer = make(first, second)
    assert getattr(observer, "on_event", None) is None
    assert not hasattr(observer, "on_anything_else")
    emitter = Emitter(build_table(observer, None), path=("agent",))
    assert not emitter.wants_deltas
    assert not emitter.wants("usage_updated")
    assert not emitter.wants("message_appended")
    assert emitter.wants("response_completed") and emitter.wants("tool_started")
    provider = ScriptedProvider([reply(tool_calls=[call("add", a=1, b=2)]), "3"], chunk_size=1)
    await Agent(provider, tools=[add], observer=observer).run("go")
    assert (first.responses, first.tools) == (second.responses, second.tools) == (2, 1)


async def test_wrappers_expose_on_event_when_an_inner_observer_has_it() -> None:
    from fanloop._dispatch import Emitter, build_table

    counts, events = Counts(), Events()
    for observer in (
        MultiObserver(counts, events),
        GuardedObserver(MultiObserver(GuardedObserver(events), counts)),
    ):
        assert callable(observer.on_event)  # type: ignore[attr-defined]
        assert Emitter(build_table(observer, None), path=("agent",)).wants("usage_updated")
    before = len(events.kinds)
    await Agent(ScriptedProvider(["ok"]), observer=MultiObserver(counts, events)).run("hi")
    kinds = events.kinds[before:]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert "usage_updated" in kinds
    assert counts.responses == 1


def test_a_failing_on_event_inside_a_multi_observer_is_logged() -> None:
    class Broken(NullObserver):
        def on_event(self, event: Any) -> None:
            raise ValueError("observer bug")

    events = Events()
    multi = MultiObserver(Broken(), Counts(), events)
    with capture_logs() as logs:
        multi.on_event(RunStarted("r", "agent", "m"))  # type: ignore[attr-defined]
    assert events.kinds == ["run_started"]
    assert [e["log_level"] for e in logs] == ["error"]


# -- GuardedObserver and guarded() ---------------------------------------------------------


def _fail(name: str) -> Any:
    def fail(self: Any, *args: Any) -> None:
        raise RuntimeError(f"{name} broke")

    return fail


_ALL_CALLBACKS = (
    "on_request",
    "on_response",
    "on_retry",
    "on_tool_start",
    "on_tool_end",
    "on_conversation_start",
    "on_conversation_end",
    "on_budget_warning",
    "on_stall",
    "on_model_error",
    "on_text_delta",
)

# Every on_* raises.
Raising = type("Raising", (NullObserver,), {name: _fail(name) for name in _ALL_CALLBACKS})


def test_guarded_observer_logs_and_swallows_callback_errors() -> None:
    wrapped = GuardedObserver(Raising())
    tc = ToolCallPart(id="c", name="t", arguments={})
    with capture_logs() as logs:
        wrapped.on_tool_start(tc)
        wrapped.on_response(reply("x"))
        wrapped.on_retry(1, Overloaded("x"))
    assert [e["log_level"] for e in logs] == ["error"] * 3
    assert all(e.get("exc_info") for e in logs)


def test_guarded_observer_passes_arguments_through() -> None:
    rec = Recorder()
    wrapped = GuardedObserver(rec)
    tc = ToolCallPart(id="c", name="t", arguments={"a": 1})
    part = ToolResultPart(call_id="c", content="ok")
    wrapped.on_tool_end(tc, part)
    wrapped.on_stall("t", 4)
    assert rec.log == [("on_tool_end", (tc, part)), ("on_stall", ("t", 4))]


def test_guarded_observer_conversation_errors_propagate() -> None:
    class Boom(NullObserver):
        @contextmanager
        def _c(self) -> Iterator[None]:
            yield
            raise RuntimeError("closing failed")

        def conversation(self) -> AbstractContextManager[None]:
            return self._c()

    with (
        pytest.raises(RuntimeError, match="closing failed"),
        GuardedObserver(Boom()).conversation(),
    ):
        pass


def test_guarded_observer_skips_optional_callbacks_the_inner_lacks() -> None:
    wrapped = GuardedObserver(Minimal())  # type: ignore[arg-type]
    with capture_logs() as logs:
        wrapped.on_text_delta("x")
        wrapped.on_stall("t", 3)
    assert logs == []


def test_guarded_returns_null_for_none_and_leaves_guarded_and_null_alone() -> None:
    assert type(guarded(None)) is NullObserver
    null = NullObserver()
    assert guarded(null) is null
    already = GuardedObserver(Recorder())
    assert guarded(already) is already


def test_guarded_wraps_others_once() -> None:
    rec = Recorder()
    once = guarded(rec)
    assert isinstance(once, GuardedObserver)
    assert once.inner is rec
    twice = guarded(once)
    assert twice is once
    assert guarded(guarded(guarded(rec))).inner is rec  # type: ignore[attr-defined]
    # a NullObserver subclass is "another observer": it is wrapped
    counter = ResponseCounter()
    assert isinstance(guarded(counter), GuardedObserver)
    assert guarded(counter).inner is counter  # type: ignore[attr-defined]


# -- an observer never ends the run; conversation() errors do propagate -------------------


async def test_an_observer_whose_callbacks_all_raise_never_ends_the_run() -> None:
    same = [reply(tool_calls=[call("add", a=1, b=1)]) for _ in range(3)]
    provider = ScriptedProvider([Overloaded("busy"), *same, reply(tool_calls=[call("x")]), "done"])
    agent = Agent(
        provider,
        tools=[add],
        observer=Raising(),
        retry=FAST,
        limits=Limits(max_turns=6, warn_at=0.5),
    )
    with capture_logs() as logs:
        result = await agent.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "done"
    failed = {e.get("callback") for e in logs if e["event"] == "callback_failed"}
    assert failed >= {
        "on_conversation_start",
        "on_request",
        "on_response",
        "on_retry",
        "on_tool_start",
        "on_tool_end",
        "on_budget_warning",
        "on_stall",
        "on_text_delta",
        "on_conversation_end",
    }


async def test_an_exception_from_conversation_enter_propagates_out_of_run() -> None:
    class Refuses(NullObserver):
        def conversation(self) -> AbstractContextManager[None]:
            raise PermissionError("tracing backend down")

    provider = ScriptedProvider(["never"])
    with pytest.raises(PermissionError, match="tracing backend down"):
        await Agent(provider, observer=Refuses()).run("hi")
    assert provider.requests == []


async def test_an_exception_from_conversation_exit_propagates_out_of_run() -> None:
    class FailsOnClose(Recorder):
        @contextmanager
        def _conv(self) -> Iterator[None]:
            yield
            raise PermissionError("could not flush the trace")

    rec = FailsOnClose()
    provider = ScriptedProvider(["done"])
    with pytest.raises(PermissionError, match="could not flush"):
        await Agent(provider, observer=rec).run("hi")
    assert len(provider.requests) == 1
    assert len(rec.args("on_conversation_end")) == 1


async def test_a_callback_set_on_a_null_observer_instance_is_called() -> None:
    seen: list[str] = []
    observer = NullObserver()
    observer.on_response = lambda response: seen.append(response.text)  # type: ignore[method-assign]
    await Agent(ScriptedProvider(["hello"]), observer=observer).run("hi")
    assert seen == ["hello"]
