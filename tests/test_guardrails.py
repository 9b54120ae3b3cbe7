"""Guardrails (docs/guardrails.md): input guardrails run beside the first model call and cut it
off when they trip; no tool starts before they pass; output guardrails check the final answer;
a trip ends the run with ``guardrail_tripped`` and a typed :class:`GuardrailTrip`.

Nothing here sleeps to wait for a state: each test waits on an ``anyio.Event`` (or the fake
server's own condition), and the clocks only bound the whole test generously."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from fanloop import (
    Agent,
    GuardrailResult,
    GuardrailTrip,
    Hooks,
    InputGuardrail,
    NullObserver,
    OutputGuardrail,
    RunContext,
    TerminationReason,
    input_guardrail,
    output_guardrail,
    tool,
)
from fanloop.errors import ConfigurationError
from fanloop.events import Event, GuardrailTripped
from fanloop.testing import ScriptedProvider, call, reply

PASS = GuardrailResult(tripped=False)


async def events_of(agent: Agent[Any, Any], prompt: str, **options: Any) -> tuple[Any, list[Event]]:
    seen: list[Event] = []
    async with agent.stream(prompt, **options) as run:
        async for event in run:
            seen.append(event)
    return run.result, seen


# -- input guardrails -------------------------------------------------------------------------


async def test_a_tripped_input_guardrail_ends_the_run_with_a_typed_trip() -> None:
    @input_guardrail
    def no_homework(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        return GuardrailResult(
            tripped="homework" in prompt, info={"topic": "math"}, message="homework help"
        )

    agent = Agent(ScriptedProvider(["It is 4.", "Paris."]), guardrails=[no_homework])
    with anyio.fail_after(30):
        result, events = await events_of(agent, "Do my math homework: 2+2?")

    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert result.guardrail == GuardrailTrip(
        name="no_homework", kind="input", message="homework help", info={"topic": "math"}
    )
    assert result.detail == "input guardrail 'no_homework' tripped: homework help"
    assert result.text == ""
    [tripped] = [e for e in events if isinstance(e, GuardrailTripped)]
    assert tripped.trip == result.guardrail
    assert events[-1].kind == "run_finished"
    with pytest.raises(Exception, match="guardrail_tripped"):
        result.raise_if_incomplete()

    ok = await agent.run("What is the capital of France?")
    assert ok.termination_reason is TerminationReason.completed
    assert ok.guardrail is None


async def test_a_passing_guardrail_does_not_hold_the_first_model_call_back() -> None:
    """The guardrail finishes only once the model call has started: if the run waited for the
    guardrail before calling the model, this test could never finish."""
    request_sent = anyio.Event()
    finished: list[str] = []

    @input_guardrail
    async def slow_check(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        await request_sent.wait()
        finished.append("guardrail")
        return PASS

    async def answer(request: Any) -> str:
        request_sent.set()
        finished.append("model")
        return "Paris."

    agent = Agent(ScriptedProvider([answer]), guardrails=[slow_check])
    with anyio.fail_after(30):
        result, events = await events_of(agent, "Capital of France?")
    assert result.termination_reason is TerminationReason.completed
    assert result.text == "Paris."
    assert finished == ["model", "guardrail"]
    kinds = [e.kind for e in events]
    assert kinds.index("request_started") < kinds.index("run_finished")


async def test_the_answer_waits_for_the_input_guardrails_and_a_late_trip_wins() -> None:
    """The model answers before the guardrail decides: the answer is not given."""
    answered = anyio.Event()

    @input_guardrail
    async def late(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        await answered.wait()
        return GuardrailResult(tripped=True, message="too late, but still no")

    def answer(request: Any) -> str:
        answered.set()
        return "Here is the forbidden answer."

    agent = Agent(ScriptedProvider([answer]), guardrails=[late])
    with anyio.fail_after(30):
        result = await agent.run("something forbidden")
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert result.text == ""
    assert result.guardrail is not None and result.guardrail.name == "late"


async def test_a_trip_cancels_the_model_call_in_flight() -> None:
    model_called = anyio.Event()
    cut_off = anyio.Event()

    async def never_answers(request: Any) -> str:
        model_called.set()
        try:
            await anyio.sleep_forever()
        finally:
            cut_off.set()
        raise AssertionError("unreachable")

    @input_guardrail
    async def trips_once_the_model_is_asked(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        await model_called.wait()
        return GuardrailResult(tripped=True)

    agent = Agent(ScriptedProvider([never_answers]), guardrails=[trips_once_the_model_is_asked])
    with anyio.fail_after(30):
        result = await agent.run("hello")
    assert cut_off.is_set()
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert result.detail == "input guardrail 'trips_once_the_model_is_asked' tripped"


async def test_no_tool_starts_before_the_input_guardrails_pass() -> None:
    ran: list[str] = []
    asked_for_tool = anyio.Event()

    @tool
    def launch_missiles() -> str:
        """A side effect that must not happen on a tripped prompt."""
        ran.append("launch")
        return "launched"

    @input_guardrail
    async def slow_tripwire(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        await asked_for_tool.wait()  # the model has asked for the tool by now
        return GuardrailResult(tripped=True, message="dangerous")

    def wants_tool(request: Any) -> Any:
        asked_for_tool.set()
        return reply(tool_calls=[call("launch_missiles")])

    agent = Agent(
        ScriptedProvider([wants_tool, "done"]), tools=[launch_missiles], guardrails=[slow_tripwire]
    )
    with anyio.fail_after(30):
        result, events = await events_of(agent, "launch")
    assert ran == []
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert not any(e.kind == "tool_started" for e in events)
    # the conversation stays well formed: the call got a (cancelled) result
    last = result.messages[-1]
    assert [r.call_id for r in last.tool_results_parts] == [
        c.id for c in result.messages[-2].tool_calls
    ]


async def test_tools_run_once_a_slow_guardrail_passes() -> None:
    ran: list[str] = []
    asked_for_tool = anyio.Event()
    passed = threading.Event()

    @tool
    def lookup() -> str:
        """Look something up."""
        assert passed.is_set(), "the tool started before the guardrail passed"
        ran.append("lookup")
        return "42"

    @input_guardrail
    async def slow_pass(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        await asked_for_tool.wait()
        passed.set()
        return PASS

    def wants_tool(request: Any) -> Any:
        asked_for_tool.set()
        return reply(tool_calls=[call("lookup")])

    agent = Agent(
        ScriptedProvider([wants_tool, "It is 42."]), tools=[lookup], guardrails=[slow_pass]
    )
    with anyio.fail_after(30):
        result = await agent.run("what is it?")
    assert result.termination_reason is TerminationReason.completed
    assert ran == ["lookup"]


async def test_a_blocking_guardrail_runs_before_the_model_call() -> None:
    provider = ScriptedProvider(["never sent"])

    @input_guardrail(run_in_parallel=False, name="policy")
    def check(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        return GuardrailResult(tripped=True, message="blocked")

    assert isinstance(check, InputGuardrail) and not check.run_in_parallel
    result = await Agent(provider, guardrails=[check]).run("hi")
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert result.guardrail is not None and result.guardrail.name == "policy"
    assert provider.requests == []  # no model call was made


async def test_guardrails_see_the_context_and_the_prompt_text() -> None:
    seen: list[tuple[Any, str, str]] = []

    async def record(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        seen.append((ctx.deps, ctx.run_id, prompt))
        return PASS

    guard = input_guardrail(record, name="recorder")
    assert guard.name == "recorder"
    result = await Agent(ScriptedProvider(["ok"]), guardrails=[guard]).run(
        "hello there", deps={"user": "ada"}
    )
    assert seen == [({"user": "ada"}, result.run_id, "hello there")]

    # a run given no prompt has none to check
    seen.clear()
    agent = Agent(ScriptedProvider(["again"]), guardrails=[guard])
    await agent.run(messages=result.messages)
    assert seen == []


async def test_a_guardrail_that_raises_is_a_bug_that_propagates() -> None:
    class Broken(Exception):
        pass

    @input_guardrail
    def broken(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        raise Broken("bug")

    with anyio.fail_after(30), pytest.raises(Broken):
        await Agent(ScriptedProvider(["hi"]), guardrails=[broken]).run("hello")


@pytest.mark.parametrize("returned", [True, False, None, "tripped"])
async def test_a_wrong_return_type_is_a_clear_error(returned: Any) -> None:
    @input_guardrail
    def sloppy(ctx: RunContext[Any], prompt: str) -> Any:
        return returned

    with anyio.fail_after(30), pytest.raises(ConfigurationError, match="'sloppy' returned") as err:
        await Agent(ScriptedProvider(["hi"]), guardrails=[sloppy]).run("hello")
    if isinstance(returned, bool):
        assert "GuardrailResult(tripped=True)" in str(err.value)


def test_bad_guardrails_are_refused_when_the_agent_is_made() -> None:
    def plain(ctx: Any, prompt: str) -> GuardrailResult:
        return PASS

    with pytest.raises(ConfigurationError, match="@input_guardrail or @output_guardrail"):
        Agent(ScriptedProvider(), guardrails=[plain])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match=r"guardrails=\[...\]"):
        Agent(ScriptedProvider(), guardrails=input_guardrail(plain))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="must take 2 positional arguments"):
        input_guardrail(lambda prompt: PASS)
    with pytest.raises(ConfigurationError, match=r"ctx, output\[, text\]"):
        output_guardrail(lambda a, b, c, d: PASS)


def test_the_agents_sdk_spelling_is_refused_with_ours() -> None:
    for name in ("input_guardrails", "output_guardrails"):
        with pytest.raises(TypeError, match=r"guardrails=\[\.\.\.\]"):
            Agent(ScriptedProvider(), **{name: []})


async def test_the_first_of_several_trips_stops_the_others() -> None:
    stopped = anyio.Event()

    @input_guardrail
    async def waits_forever(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()
        raise AssertionError("unreachable")

    @input_guardrail
    def trips(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        return GuardrailResult(tripped=True)

    agent = Agent(ScriptedProvider(["hi"]), guardrails=[waits_forever, trips])
    with anyio.fail_after(30):
        result = await agent.run("hello")
    assert stopped.is_set()
    assert result.guardrail is not None and result.guardrail.name == "trips"


# -- output guardrails ------------------------------------------------------------------------


class Answer(BaseModel):
    city: str
    population: int


async def test_a_tripped_output_guardrail_withholds_the_answer() -> None:
    seen: list[tuple[Any, str]] = []

    @output_guardrail
    async def no_secrets(ctx: RunContext[Any], output: Answer, text: str) -> GuardrailResult:
        seen.append((output, text))
        return GuardrailResult(tripped=output.city == "Atlantis", message="a secret city")

    agent = Agent(
        ScriptedProvider(['{"city": "Atlantis", "population": 7}'], native_output=True),
        output_type=Answer,
        guardrails=[no_secrets],
    )
    with anyio.fail_after(30):
        result, events = await events_of(agent, "Where?")
    assert seen == [(Answer(city="Atlantis", population=7), '{"city":"Atlantis","population":7}')]
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert result.output is None
    assert result.text == ""
    assert result.guardrail == GuardrailTrip(
        name="no_secrets", kind="output", message="a secret city"
    )
    assert result.detail == "output guardrail 'no_secrets' tripped: a secret city"
    assert any(isinstance(e, GuardrailTripped) for e in events)
    # the rejected answer stays in the conversation, for inspection
    assert "Atlantis" in result.messages[-1].text


async def test_a_passing_output_guardrail_keeps_the_answer() -> None:
    @output_guardrail
    def short(ctx: RunContext[Any], output: str) -> GuardrailResult:
        return GuardrailResult(tripped=len(output) > 100)

    assert isinstance(short, OutputGuardrail)
    result = await Agent(ScriptedProvider(["Short."]), guardrails=[short]).run("hi")
    assert result.termination_reason is TerminationReason.completed
    assert result.output == "Short."


async def test_output_guardrails_check_only_a_completed_answer() -> None:
    from fanloop import Limits

    checked: list[str] = []

    @output_guardrail
    def record(ctx: RunContext[Any], output: str) -> GuardrailResult:
        checked.append(output)
        return GuardrailResult(tripped=True)

    provider = ScriptedProvider([reply(tool_calls=[call("nothing")]), "never"])
    agent = Agent(provider, guardrails=[record], limits=Limits(max_turns=1))
    result = await agent.run("hi")
    assert result.termination_reason is TerminationReason.max_turns
    assert checked == []


# -- callbacks, sub-agents, options -----------------------------------------------------------


async def test_observers_and_hooks_hear_of_the_trip() -> None:
    heard: list[tuple[str, GuardrailTrip]] = []

    class Watch(NullObserver):
        def on_guardrail_tripped(self, trip: GuardrailTrip) -> None:
            heard.append(("observer", trip))

    async def hook(trip: GuardrailTrip) -> None:
        heard.append(("hook", trip))

    @output_guardrail
    def never(ctx: RunContext[Any], output: str) -> GuardrailResult:
        return GuardrailResult(tripped=True, message="no")

    agent = Agent(
        ScriptedProvider(["hi"]),
        guardrails=[never],
        observer=Watch(),
        hooks=Hooks(on_guardrail_tripped=hook),
    )
    result = await agent.run("hello")
    assert [who for who, _ in heard] == ["observer", "hook"]
    assert all(trip == result.guardrail for _, trip in heard)


async def test_a_sub_agents_guardrail_stops_the_sub_agent_not_the_parent() -> None:
    @input_guardrail
    def no_secrets(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        return GuardrailResult(tripped="secret" in prompt, message="asked for a secret")

    child = Agent(ScriptedProvider(["never said"]), name="researcher", guardrails=[no_secrets])
    parent_provider = ScriptedProvider(
        [reply(tool_calls=[call("researcher", task="find the secret")]), "I could not."]
    )
    parent = Agent(parent_provider, tools=[child.as_tool()])
    with anyio.fail_after(30):
        result, events = await events_of(parent, "go")

    assert result.termination_reason is TerminationReason.completed
    assert result.text == "I could not."
    [outcome] = result.messages[-2].tool_results_parts
    assert outcome.content.startswith("The sub-agent stopped early (guardrail_tripped: ")
    assert "'no_secrets' tripped: asked for a secret" in outcome.content
    [tripped] = [e for e in events if isinstance(e, GuardrailTripped)]
    assert tripped.agent_path[-1].startswith("researcher")


async def test_with_options_and_override_keep_the_guardrails() -> None:
    @input_guardrail
    def always(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        return GuardrailResult(tripped=True)

    agent = Agent(ScriptedProvider(["a"]), guardrails=(g for g in [always]))
    assert agent.guardrails == (always,)
    copy = agent.with_options(name="copy", provider=ScriptedProvider(["b"]))
    assert copy.guardrails == (always,)
    assert (await copy.run("x")).termination_reason is TerminationReason.guardrail_tripped
    with agent.override(provider=ScriptedProvider(["c"])):
        result = await agent.run("x")
    assert result.termination_reason is TerminationReason.guardrail_tripped
    assert agent.with_options(guardrails=[]).guardrails == ()


def test_the_trip_survives_json() -> None:
    from fanloop import RunResult

    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    trip = GuardrailTrip(name="g", kind="input", message="m", info={"score": 0.9, "o": Opaque()})
    result = RunResult(termination_reason=TerminationReason.GUARDRAIL_TRIPPED, guardrail=trip)
    data = result.model_dump(mode="json")
    assert data["guardrail"] == {
        "name": "g",
        "kind": "input",
        "message": "m",
        "info": {"score": 0.9, "o": "opaque"},
    }
    back = RunResult.model_validate(data)
    assert back.guardrail is not None and back.guardrail.name == "g"
    event = GuardrailTripped(trip).to_dict()
    assert event["trip"]["info"]["o"] == "opaque"


# -- over HTTP: the request in flight is cut off ----------------------------------------------


async def test_a_trip_cuts_the_http_request_off_at_the_server() -> None:
    """A real provider against the fake server, whose answer is held back until the client
    goes away: the input guardrail trips while the request is held, and the server sees the
    client abandon it. The answer would never come, so a run that awaited it would hang."""
    import asyncio

    from fanloop.providers.anthropic import AnthropicProvider
    from fanloop.testing import FakeLLMServer

    arrived = threading.Event()

    async def held(body: dict[str, Any]) -> str:  # runs on the server's own loop
        arrived.set()
        await asyncio.Event().wait()  # until the client goes away
        raise AssertionError("unreachable")

    @input_guardrail
    async def trips_when_the_request_is_held(ctx: RunContext[Any], prompt: str) -> GuardrailResult:
        assert await anyio.to_thread.run_sync(arrived.wait, 30)
        return GuardrailResult(tripped=True, message="blocked")

    with FakeLLMServer([held]) as server:
        provider = AnthropicProvider(
            "claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.anthropic_base_url
        )
        async with Agent(provider, guardrails=[trips_when_the_request_is_held]) as agent:
            with anyio.fail_after(60):
                result = await agent.run("hello")
                assert await anyio.to_thread.run_sync(server.wait_aborted, 1, 30)
        assert result.termination_reason is TerminationReason.guardrail_tripped
        assert len(server.requests) == 1
        assert server.aborted == [server.requests[0].request_id]
        assert result.usage.output_tokens == 0


def test_a_trip_crosses_a_durable_event_stream_and_gets_a_cli_exit_code() -> None:
    from fanloop.cli._app import RunOutcome, exit_code_for
    from fanloop.durable._codec import decode_event

    trip = GuardrailTrip(name="g", kind="output", message="m", info=[1, 2])
    event = decode_event(GuardrailTripped(trip, agent_path=("agent",)).to_dict())
    assert isinstance(event, GuardrailTripped)
    assert event.trip == trip and event.agent_path == ("agent",)

    from fanloop import RunResult

    result = RunResult(termination_reason=TerminationReason.GUARDRAIL_TRIPPED, guardrail=trip)
    assert exit_code_for(RunOutcome(result, None)) == 1  # a run that stopped early
