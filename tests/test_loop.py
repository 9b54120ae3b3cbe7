"""The loop of docs/loop.md: stop-reason rules, retries, limits and every termination reason."""

from __future__ import annotations

import random
import re
import statistics
import time
from typing import Any

import anyio
import pytest

import fanloop._retry
from fanloop import Agent, Limits, ModelSettings, NullObserver, RetryPolicy, TerminationReason, tool
from fanloop.errors import (
    AuthenticationError,
    BadRequest,
    ContextWindowExceeded,
    Overloaded,
    ProviderError,
    RateLimited,
    ResponseInvalid,
)
from fanloop.messages import Message, TextPart, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, StopReason, Usage
from fanloop.testing import ScriptedProvider, call, reply
from helpers import collect

FAST = RetryPolicy(max_retries=3, base_delay=0.001, max_delay=0.01, jitter=False)


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


# -- the happy path and the contract of RunResult ------------------------------------------


async def test_a_tool_round_then_an_answer() -> None:
    provider = ScriptedProvider([reply("Let me look.", tool_calls=[call("noop")]), "All good."])
    result = await Agent(provider, tools=[noop], system="You help.").run("check")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "All good."
    assert str(result) == "All good."
    assert result.turns == 2
    assert result.tool_calls == 1
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    first, second = provider.requests
    assert first.system == "You help."
    assert [t.name for t in first.tools] == ["noop"]
    assert len(second.messages) == 3
    assert isinstance(second.messages[-1].content[0], ToolResultPart)
    assert result.elapsed > 0


async def test_conversation_continues_from_earlier_messages() -> None:
    provider = ScriptedProvider(["one", "two"])
    agent = Agent(provider)
    first = await agent.run("a")
    second = await agent.run("b", messages=first.messages)
    assert [m.text for m in second.messages] == ["a", "one", "b", "two"]
    assert second.new_message_index == 2
    assert [m.text for m in second.new_messages] == ["b", "two"]


def test_seed_002_echo_client_runs_unchanged() -> None:
    """The smallest custom provider (docs/providers.md), with fanloop's names (a *sync*
    complete)."""

    class EchoClient:
        name = "echo"
        model = "echo-v1"

        def complete(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1]
            text = " ".join(part.text for part in last.content if isinstance(part, TextPart))
            return ModelResponse(
                content=(TextPart(text=f"Echo: {text}"),),
                stop_reason=StopReason.END_TURN,
                usage=Usage(),
                model=self.model,
                provider=self.name,
            )

    agent = Agent([], client=EchoClient())
    assert str(agent.run_sync("hello")) == "Echo: hello"
    assert Agent(EchoClient()).run_sync("hi").text == "Echo: hi"


def test_run_sync_refuses_to_run_inside_an_event_loop() -> None:
    agent = Agent(ScriptedProvider(["x"]))

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="await run"):
            agent.run_sync("x")

    anyio.run(inside)


def test_agent_is_immutable() -> None:
    agent = Agent(ScriptedProvider([]))
    with pytest.raises(AttributeError, match="immutable"):
        agent.system = "other"  # type: ignore[misc]
    other = agent.with_options(system="other", name="b")
    assert (other.system, other.name, agent.system) == ("other", "b", None)


async def test_one_agent_serves_many_concurrent_runs() -> None:
    def answer(request: ModelRequest) -> Any:
        prompt = request.messages[0].text
        if len(request.messages) == 1:
            return reply(tool_calls=[call("noop")])
        return f"answer to {prompt}"

    agent = Agent(ScriptedProvider(answer, delay=0.001), tools=[noop])
    results: dict[int, Any] = {}

    async def one(i: int) -> None:
        results[i] = await agent.run(f"q{i}")

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(one, i)
    assert all(results[i].text == f"answer to q{i}" for i in range(50))
    assert all(len(results[i].messages) == 4 for i in range(50))


# -- stop reasons -----------------------------------------------------------------------------


async def test_refusal_ends_the_run_with_an_honest_text_naming_the_category() -> None:
    refusal = ModelResponse(
        content=(),
        stop_reason=StopReason.REFUSAL,
        raw_stop_reason="refusal",
        stop_details={"type": "refusal", "category": "cyber", "explanation": None},
    )
    result = await Agent(ScriptedProvider([refusal])).run("write malware")
    assert result.termination_reason is TerminationReason.MODEL_REFUSAL
    assert "declined" in result.text
    assert "cyber" in result.text
    assert result.text.strip()
    assert [m.role for m in result.messages] == ["user"]  # no empty assistant message


async def test_paused_turn_is_continued_without_a_new_user_message_and_joined() -> None:
    provider = ScriptedProvider(
        [
            reply("Searching", stop_reason=StopReason.PAUSED),
            reply(" and found it.", stop_reason=StopReason.END_TURN),
        ]
    )
    result = await Agent(provider).run("find it")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert result.text == "Searching and found it."
    second = provider.requests[1]
    assert [m.role for m in second.messages] == ["user", "assistant"]
    assert second.messages[-1].text == "Searching"


async def test_truncated_tool_call_is_retried_with_a_larger_budget_and_never_run() -> None:
    ran: list[dict[str, Any]] = []

    @tool
    def write(text: str) -> str:
        """Write."""
        ran.append({"text": text})
        return "written"

    provider = ScriptedProvider(
        [
            reply(tool_calls=[call("write", text="partial")], stop_reason=StopReason.MAX_TOKENS),
            reply(tool_calls=[call("write", text="whole")]),
            "done",
        ]
    )
    agent = Agent(
        provider,
        tools=[write],
        model_settings=ModelSettings(max_tokens=100, max_tokens_ceiling=1000),
    )
    result, events = await collect(agent, "go")
    assert ran == [{"text": "whole"}]
    assert [r.max_tokens for r in provider.requests] == [100, 200, 200]
    retry = [e for e in events if e.kind == "retry_scheduled"]
    assert len(retry) == 1 and retry[0].discard_partial
    assert result.termination_reason is TerminationReason.COMPLETED


async def test_tool_call_truncated_at_the_ceiling_ends_with_max_tokens() -> None:
    truncated = reply(tool_calls=[call("noop")], stop_reason=StopReason.MAX_TOKENS)
    provider = ScriptedProvider([truncated, truncated, truncated])
    agent = Agent(
        provider, tools=[noop], model_settings=ModelSettings(max_tokens=100, max_tokens_ceiling=400)
    )
    result = await agent.run("go")
    assert result.termination_reason is TerminationReason.MAX_TOKENS
    assert [r.max_tokens for r in provider.requests] == [100, 200, 400]
    assert result.tool_calls == 0


async def test_text_cut_off_at_max_tokens_ends_the_run() -> None:
    provider = ScriptedProvider([reply("The answer is", stop_reason=StopReason.MAX_TOKENS)])
    result = await Agent(provider).run("go")
    assert result.termination_reason is TerminationReason.MAX_TOKENS
    assert result.text == "The answer is"


async def test_an_empty_response_is_invalid_and_retried() -> None:
    empty = ModelResponse(content=(), stop_reason=StopReason.END_TURN)
    provider = ScriptedProvider([empty, "fine"])
    result, events = await collect(Agent(provider, retry=FAST), "go")
    assert result.text == "fine"
    [retry] = [e for e in events if e.kind == "retry_scheduled"]
    assert isinstance(retry.error, ResponseInvalid)


# -- retries -----------------------------------------------------------------------------------


async def test_transient_errors_are_retried_with_backoff_then_succeed() -> None:
    provider = ScriptedProvider([RateLimited("slow down"), Overloaded("busy"), "ok"])
    policy = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=1, jitter=False)
    result, events = await collect(Agent(provider, retry=policy), "go")
    assert result.text == "ok"
    retries = [e for e in events if e.kind == "retry_scheduled"]
    assert [(r.attempt, r.delay) for r in retries] == [(1, 0.01), (2, 0.02)]
    assert [type(r.error) for r in retries] == [RateLimited, Overloaded]
    assert [e.attempt for e in events if e.kind == "request_started"] == [1, 2, 3]


async def test_retry_after_is_honoured_up_to_its_cap() -> None:
    provider = ScriptedProvider([RateLimited("wait", retry_after=0.2), "ok"])
    started = time.monotonic()
    result, events = await collect(Agent(provider, retry=FAST), "go")
    assert result.text == "ok"
    assert time.monotonic() - started >= 0.19
    [retry] = [e for e in events if e.kind == "retry_scheduled"]
    assert retry.delay == 0.2

    capped = RetryPolicy(max_retries=1, base_delay=0.001, max_retry_after=0.05)
    assert capped.delay(1, RateLimited("x", retry_after=3600)) == 0.05


def test_a_retry_after_of_zero_means_now() -> None:
    """Pacing hands the wait to its cooldown by setting ``retry_after`` to 0: no backoff on top."""
    policy = RetryPolicy(base_delay=2.0, max_delay=100.0, jitter=False)
    assert policy.delay(3, RateLimited("x", retry_after=0)) == 0.0
    assert policy.delay(3, RateLimited("x", retry_after=0.0)) == 0.0
    assert policy.delay(3, RateLimited("x", retry_after=-1)) == 8.0  # nonsense: the backoff
    assert policy.delay(3, RateLimited("x")) == 8.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"base_delay": -0.1}, "retry delays must be >= 0"),
        ({"max_delay": -0.1}, "retry delays must be >= 0"),
        ({"max_retry_after": -0.1}, "retry delays must be >= 0"),
        ({"stream_idle_timeout": 0}, "stream_idle_timeout must be > 0 or None"),
        ({"stream_idle_timeout": -1.0}, "stream_idle_timeout must be > 0 or None"),
        ({"stream_idle_timeout": float("nan")}, "stream_idle_timeout must be > 0 or None"),
    ],
)
def test_retry_policy_refuses_bad_values(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RetryPolicy(**options)


def test_retry_policy_accepts_its_edges() -> None:
    edges = RetryPolicy(max_retries=0, base_delay=0, max_delay=0, max_retry_after=0)
    assert edges.delay(1) == 0.0
    assert RetryPolicy(max_delay=0.5, stream_idle_timeout=None).stream_idle_timeout is None
    assert RetryPolicy(stream_idle_timeout=0.001).stream_idle_timeout == 0.001


def test_backoff_grows_exponentially_with_equal_jitter_and_a_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Equal jitter: half the backoff, plus a uniform share of the other half.

    The draws come from a seeded generator, so the spread is checked exactly: a backoff
    without jitter (every draw the full delay), "full jitter" (down to 0) or a narrower
    spread all fail.
    """
    monkeypatch.setattr(fanloop._retry, "random", random.Random(20240611))
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=True)
    for attempt, full in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)]:
        draws = [policy.delay(attempt) / full for _ in range(2000)]
        assert all(0.5 <= d <= 1.0 for d in draws), attempt
        assert min(draws) < 0.51 and max(draws) > 0.99, attempt
        assert abs(statistics.fmean(draws) - 0.75) < 0.02, attempt
        assert abs(statistics.pstdev(draws) - 0.5 / 12**0.5) < 0.01, attempt
        assert sum(d < 0.75 for d in draws) == pytest.approx(1000, abs=100), attempt
    exact = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=False)
    assert [exact.delay(n) for n in (1, 2, 3, 4, 9)] == [0.5, 1.0, 2.0, 3.0, 3.0]


async def test_errors_that_survive_retries_raise_with_the_partial_result() -> None:
    provider = ScriptedProvider(
        [reply(tool_calls=[call("noop")]), *[Overloaded("busy", status_code=529)] * 4]
    )
    with pytest.raises(Overloaded) as info:
        await Agent(provider, tools=[noop], retry=FAST).run("go")
    err = info.value
    assert err.attempts == 4
    assert err.status_code == 529
    partial = err.partial
    assert partial is not None
    assert partial.termination_reason is TerminationReason.PROVIDER_ERROR
    assert [m.role for m in partial.messages] == ["user", "assistant", "user"]
    assert partial.tool_calls == 1


@pytest.mark.parametrize("error", [BadRequest("bad", status_code=400), AuthenticationError("no")])
async def test_permanent_errors_are_not_retried(error: ProviderError) -> None:
    provider = ScriptedProvider([error, "never"])
    with pytest.raises(type(error)):
        await Agent(provider, retry=FAST).run("go")
    assert len(provider.requests) == 1


async def test_foreign_exceptions_from_custom_providers_are_translated() -> None:
    provider = ScriptedProvider([TimeoutError("slow"), ConnectionResetError("reset"), "ok"])
    result, events = await collect(Agent(provider, retry=FAST), "go")
    assert result.text == "ok"
    names = [type(e.error).__name__ for e in events if e.kind == "retry_scheduled"]
    assert names == ["ProviderTimeout", "ProviderConnectionError"]

    with pytest.raises(ProviderError, match="ValueError: nope") as info:
        await Agent(ScriptedProvider([ValueError("nope")]), retry=FAST).run("go")
    assert isinstance(info.value.__cause__, ValueError)


async def test_provider_errors_can_be_raised_with_the_documented_signature() -> None:
    err = RateLimited("slow down", retry_after=0.1)
    assert (str(err), err.retry_after, err.transient) == ("slow down", 0.1, True)
    assert not BadRequest("x").transient
    assert ContextWindowExceeded("x", status_code=400).status_code == 400


# -- limits and every other termination reason ----------------------------------------------


def looping_provider() -> ScriptedProvider:
    """A model that calls noop forever."""
    return ScriptedProvider(lambda request: reply(tool_calls=[call("noop")]))


async def test_max_turns() -> None:
    result = await Agent(looping_provider(), tools=[noop], limits=Limits(max_turns=3)).run("go")
    assert result.termination_reason is TerminationReason.MAX_TURNS
    assert result.turns == 3
    assert result.messages[-1].role == "user"  # the last tool results are in: resumable


async def test_deadline_interrupts_a_turn_in_flight() -> None:
    slow = ScriptedProvider(["never arrives"], first_delay=30)
    started = time.monotonic()
    result = await Agent(slow, limits=Limits(timeout=1)).run("go")
    assert result.termination_reason is TerminationReason.DEADLINE
    # a deadline twice as long would fail this on any machine, however loaded
    assert 1.0 <= time.monotonic() - started < 1.8
    assert [m.role for m in result.messages] == ["user"]


async def test_deadline_interrupts_a_tool_and_keeps_the_history_valid() -> None:
    @tool
    async def forever() -> str:
        """Never returns."""
        await anyio.sleep_forever()
        return "never"

    provider = ScriptedProvider([reply(tool_calls=[call("forever")])])
    started = time.monotonic()
    result = await Agent(provider, tools=[forever], limits=Limits(timeout=1)).run("go")
    assert result.termination_reason is TerminationReason.DEADLINE
    assert 1.0 <= time.monotonic() - started < 1.8
    last = result.messages[-1]
    assert last.role == "user" and last.content[0].is_error  # type: ignore[union-attr]


async def test_token_budget() -> None:
    provider = ScriptedProvider(
        lambda r: reply(tool_calls=[call("noop")], usage=Usage(input_tokens=60, output_tokens=10))
    )
    limits = Limits(max_total_tokens=150)
    result = await Agent(provider, tools=[noop], limits=limits).run("go")
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET
    # each call reserves its estimated input and its output before it is sent, so the run
    # stops before a call that could overshoot (it used to be sent: 3 rounds of 70 = 210)
    assert result.usage.total_tokens <= 150
    assert len(provider.requests) == result.usage.total_tokens // 70
    assert "token budget" in (result.detail or "")


async def test_output_budget_clamps_max_tokens_so_it_cannot_be_overshot() -> None:
    provider = ScriptedProvider(
        lambda r: reply(tool_calls=[call("noop")], usage=Usage(input_tokens=1, output_tokens=30))
    )
    result = await Agent(
        provider,
        tools=[noop],
        model_settings=ModelSettings(max_tokens=50),
        limits=Limits(max_output_tokens=100),
    ).run("go")
    assert [r.max_tokens for r in provider.requests] == [50, 50, 40, 10]
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET


async def test_cost_budget() -> None:
    provider = ScriptedProvider(
        lambda r: reply(
            tool_calls=[call("noop")], usage=Usage(input_tokens=100_000, output_tokens=1_000)
        ),
        model="claude-sonnet-4-5",
    )
    result = await Agent(provider, tools=[noop], limits=Limits(max_cost_usd=1.0)).run("go")
    assert result.termination_reason is TerminationReason.COST_BUDGET
    # $0.30 input + $0.015 output per round. The 4th call is reserved before it is sent (about
    # $0.30 of input, known from the 3rd, with $0.055 left), so it never goes out: the
    # budget is not overshot (it used to be sent, for $1.26 in all).
    assert len(provider.requests) == 3
    assert result.cost_usd == pytest.approx(3 * 0.315)
    assert result.cost_usd <= 1.0


async def test_tool_call_budget() -> None:
    provider = ScriptedProvider(lambda r: reply(tool_calls=[call("noop"), call("noop")]))
    result = await Agent(provider, tools=[noop], limits=Limits(max_tool_calls=3)).run("go")
    assert result.termination_reason is TerminationReason.TOOL_CALL_BUDGET
    assert result.tool_calls == 3
    results = [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert [r.is_error for r in results] == [False, False, False, True]


async def test_stall_is_detected_and_can_end_the_run() -> None:
    provider = looping_provider()
    result, events = await collect(
        Agent(provider, tools=[noop], limits=Limits(stall_threshold=3, stop_on_stall=True)), "go"
    )
    stalls = [e for e in events if e.kind == "stall_detected"]
    assert [(s.tool_name, s.count) for s in stalls] == [("noop", 3)]
    assert result.termination_reason is TerminationReason.STALLED

    provider2 = looping_provider()
    result2, events2 = await collect(
        Agent(provider2, tools=[noop], limits=Limits(max_turns=5, stall_threshold=3)), "go"
    )
    assert [s.count for s in events2 if s.kind == "stall_detected"] == [3, 4, 5]
    assert result2.termination_reason is TerminationReason.MAX_TURNS


async def test_budget_warnings_fire_once_at_the_share() -> None:
    result, events = await collect(
        Agent(looping_provider(), tools=[noop], limits=Limits(max_turns=5, warn_at=0.6)), "go"
    )
    warnings = [(e.budget, e.used, e.limit) for e in events if e.kind == "budget_warning"]
    assert warnings == [("turns", 3.0, 5.0)]
    assert result.termination_reason is TerminationReason.MAX_TURNS


async def test_context_window_exceeded_ends_with_context_exhausted() -> None:
    provider = ScriptedProvider([ContextWindowExceeded("prompt is too long", status_code=400)])
    result = await Agent(provider).run("go")
    assert result.termination_reason is TerminationReason.CONTEXT_EXHAUSTED
    assert [m.role for m in result.messages] == ["user"]


async def test_cancellation_propagates_with_the_partial_result() -> None:
    entered = anyio.Event()

    async def hang(request: ModelRequest) -> ModelResponse:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError

    agent = Agent(ScriptedProvider(hang))
    caught: list[BaseException] = []

    async def run_it() -> None:
        try:
            await agent.run("go")
        except BaseException as exc:
            caught.append(exc)
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_it)
        with anyio.fail_after(5):
            await entered.wait()
        tg.cancel_scope.cancel()
    [exc] = caught
    assert isinstance(exc, anyio.get_cancelled_exc_class())
    assert exc.partial.termination_reason is TerminationReason.CANCELLED  # type: ignore[attr-defined]
    assert exc.partial.messages == (Message.user("go"),)  # type: ignore[attr-defined]


async def test_a_bug_ends_the_run_as_unknown_and_propagates() -> None:
    class Bug(BaseException):
        """Not an Exception: nothing in the loop may swallow it."""

    class Buggy:
        name = "buggy"
        model = "m"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            raise Bug

    summaries: list[Any] = []

    class Watch(NullObserver):
        def on_conversation_end(self, summary: Any) -> None:
            summaries.append(summary)

    with pytest.raises(Bug):
        await Agent(Buggy(), observer=Watch()).run("go")
    [summary] = summaries
    assert summary.termination_reason is TerminationReason.UNKNOWN
    assert isinstance(summary.error, Bug)


async def test_every_termination_reason_has_its_string_value() -> None:
    assert TerminationReason.max_turns == "max_turns"
    assert {r.value for r in TerminationReason} == {
        "completed",
        "max_turns",
        "deadline",
        "token_budget",
        "cost_budget",
        "tool_call_budget",
        "model_refusal",
        "max_tokens",
        "context_exhausted",
        "stalled",
        "cancelled",
        "provider_error",
        "effect_outcome_uncertain",
        "awaiting_approval",
        "output_invalid",
        "guardrail_tripped",
        "unknown",
    }


async def test_a_paused_turn_keeps_its_wire_blocks_for_exact_replay() -> None:
    from fanloop.messages import Origin

    def raw(*blocks: str) -> Origin:
        return Origin(provider="p", api="a", model="m", raw=[{"b": b} for b in blocks])

    provider = ScriptedProvider(
        [
            reply("Searching", stop_reason=StopReason.PAUSED).model_copy(
                update={"origin": raw("server_tool_use", "text1")}
            ),
            reply(" done.").model_copy(update={"origin": raw("text2")}),
        ]
    )
    result = await Agent(provider).run("go")
    paused = provider.requests[1].messages[-1]
    assert paused.origin is not None
    assert paused.origin.raw == [{"b": "server_tool_use"}, {"b": "text1"}]
    final = result.messages[-1]
    assert final.text == "Searching done."
    assert final.origin is not None
    assert [b["b"] for b in final.origin.raw] == ["server_tool_use", "text1", "text2"]


async def test_a_paused_turn_of_a_provider_that_builds_lists_is_joined() -> None:
    """A provider may build its responses unvalidated (``model_construct``) with a list of
    parts: a paused turn still joins with the next one."""
    from fanloop.messages import TextPart
    from fanloop.providers import ModelResponse, StopReason, Usage

    class Pausing:
        name = "pausing"
        model = "m"
        calls = 0

        async def complete(self, request: Any) -> ModelResponse:
            self.calls += 1
            stop = StopReason.PAUSED if self.calls == 1 else StopReason.END_TURN
            return ModelResponse.model_construct(
                content=[TextPart(text=f"part{self.calls} ")], stop_reason=stop, usage=Usage()
            )

    result = await Agent(Pausing()).run("hi")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == "part1 part2 "
