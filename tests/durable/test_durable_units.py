"""The durable layer without a database: lazy DBOS, configuration errors, and the JSON forms
of what crosses a checkpoint or a process boundary (events, errors, results)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from fanloop import Agent, Delegation, RunResult, TerminationReason
from fanloop.durable import DurableAgent, RemoteError, RunRecovered
from fanloop.durable._codec import (
    decode_event,
    dump_prompt,
    dump_run_output,
    error_from_dict,
    error_to_dict,
    load_prompt,
    load_run_output,
)
from fanloop.errors import ConfigurationError, ProviderError, RateLimited, ServerError
from fanloop.events import (
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    CompactionFinished,
    CompactionStarted,
    ContextUsage,
    HandoffOccurred,
    MessageAppended,
    ModelFailed,
    ResponseCompleted,
    RetryScheduled,
    RunFinished,
    RunStarted,
    StallDetected,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageUpdated,
)
from fanloop.messages import Message, TextPart, ToolCallPart, ToolResultPart
from fanloop.providers import ModelResponse, StopReason, Usage
from fanloop.testing import ScriptedProvider


def test_the_public_names_of_the_durable_package() -> None:
    import fanloop.durable

    assert fanloop.durable.__all__ == [
        "DurableAgent",
        "DurableRun",
        "RemoteError",
        "RunRecovered",
        "read_events",
    ]


def test_importing_fanloop_and_its_durable_package_does_not_import_dbos() -> None:
    code = "import sys, fanloop, fanloop.durable; print('dbos' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_dbos_a_durable_agent_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dbos", None)  # `import dbos` now raises ImportError
    with pytest.raises(ConfigurationError, match=r"pip install 'fanloop\[durable\]'"):
        DurableAgent(Agent(ScriptedProvider(["hi"])), name="no-dbos")


def test_a_durable_agent_needs_a_plain_unique_name() -> None:
    pytest.importorskip("dbos")
    agent = Agent(ScriptedProvider(["hi"]))
    for bad in ("", "has space", "a/b", "x" * 65, "-leading"):
        with pytest.raises(ConfigurationError, match="must be 1-64"):
            DurableAgent(agent, name=bad)
    first = DurableAgent(agent, name="units-unique")
    assert first.workflow_name == "fanloop.units-unique"
    assert first.queues == ()  # no delegation, no sub-agent queue
    with pytest.raises(ConfigurationError, match="already exists"):
        DurableAgent(agent, name="units-unique")


def test_sub_agents_get_workflows_and_each_depth_a_queue_of_its_own() -> None:
    pytest.importorskip("dbos")
    model = ScriptedProvider(["hi"])
    billing = Agent(model, name="billing", delegation=True)
    agent = Agent(model, delegation=Delegation(max_depth=2), tools=[billing.as_tool("ask_billing")])
    durable = DurableAgent(agent, name="units-deep", queue="subs")
    assert durable.workflows == (
        "fanloop.units-deep",
        "fanloop.units-deep.ask_billing",
        "fanloop.units-deep.ask_billing.delegate",
        "fanloop.units-deep.delegate",
        "fanloop.units-deep.delegate.delegate",
    )
    assert durable.queues == ("subs", "subs.2")


def test_an_agent_that_contains_itself_as_a_tool_is_refused() -> None:
    pytest.importorskip("dbos")
    tools: list[Any] = []
    agent = Agent(ScriptedProvider(["hi"]), tools=tools)
    loop = agent.as_tool("again")
    agent.tools["again"] = loop  # an agent reachable from its own tools
    with pytest.raises(ConfigurationError, match="nest more than 8 levels"):
        DurableAgent(agent, name="units-cycle")


SAMPLE_CALL = ToolCallPart(id="c1", name="search", arguments={"q": "x"})
SAMPLE_RESPONSE = ModelResponse(
    content=(TextPart(text="hi"), SAMPLE_CALL),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=3, output_tokens=2),
    model="m",
    provider="p",
)
SAMPLE_RESULT: RunResult[Any] = RunResult(
    output="done",
    text="done",
    messages=(Message.user("go"), Message.assistant("done")),
    usage=Usage(input_tokens=5, output_tokens=1),
    turns=1,
    termination_reason=TerminationReason.COMPLETED,
    run_id="r1",
)
EVENTS: list[Any] = [
    TextDelta("chunk"),
    ThinkingDelta("hmm", "sig"),
    ToolCallStarted("c1", "search", 1),
    ToolCallDelta("c1", '{"q":', 1),
    RunStarted("r1", "agent", "m", "p"),
    RunFinished(SAMPLE_RESULT, None),
    ResponseCompleted(SAMPLE_RESPONSE, 2),
    UsageUpdated(Usage(input_tokens=1), Usage(input_tokens=9), 0.5),
    ContextUsage(100, 1000),
    CompactionStarted(12),
    CompactionFinished(12, 4),
    BudgetWarning("output_tokens", 80, 100),
    StallDetected("search", 3),
    ApprovalRequested(SAMPLE_CALL, "search(q='x')"),
    ApprovalResolved(SAMPLE_CALL, False, "no"),
    ToolStarted(SAMPLE_CALL),
    ToolFinished(SAMPLE_CALL, ToolResultPart(call_id="c1", content="found"), 0.25),
    MessageAppended(Message.user("go"), 0),
    HandoffOccurred("triage", "billing", "c1"),
    RunRecovered(2, True),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_events_come_back_from_their_json_as_they_were(event: Any) -> None:
    event.agent_path = ("agent", "delegate")
    event.parent_call_id = "d1"
    assert decode_event(event.to_dict()) == event


def test_errors_in_events_come_back_as_fanloop_errors_or_remote_errors() -> None:
    retry = decode_event(RetryScheduled(1, 0.5, RateLimited("slow down"), True).to_dict())
    assert isinstance(retry.error, RateLimited) and str(retry.error) == "slow down"
    failed = decode_event(ModelFailed(KeyError("boom"), 3).to_dict())
    assert isinstance(failed.error, RemoteError) and failed.error.type_name == "KeyError"
    assert decode_event({"kind": "from_a_newer_version", "x": 1}) is None


def test_provider_errors_keep_their_class_and_context_through_json() -> None:
    error = RateLimited("slow down", status_code=429, retry_after=1.5, request_id="q1")
    error.attempts = 4
    back = error_from_dict(error_to_dict(error))
    assert type(back) is RateLimited
    assert (back.status_code, back.retry_after, back.request_id, back.attempts) == (
        429,
        1.5,
        "q1",
        4,
    )
    made_permanent = error_from_dict(error_to_dict(ServerError("down", transient=False)))
    assert type(made_permanent) is ServerError and made_permanent.transient is False
    # A name fanloop does not know (or one that is not a provider error) is a ProviderError.
    for name in ("NoSuchError", "ConfigurationError"):
        odd = error_from_dict({"type": name, "message": "m"})
        assert type(odd) is ProviderError and odd.message == "m"


def test_a_run_output_comes_back_as_its_result_or_its_provider_error() -> None:
    assert load_run_output(dump_run_output(SAMPLE_RESULT, None)) == SAMPLE_RESULT
    error = RateLimited("slow", status_code=429)
    with pytest.raises(RateLimited) as caught:
        load_run_output(dump_run_output(SAMPLE_RESULT, error))
    assert caught.value.partial == SAMPLE_RESULT


def test_prompts_round_trip() -> None:
    assert load_prompt(dump_prompt("hi")) == "hi"
    assert load_prompt(dump_prompt(None)) is None
    message = Message.user("hello")
    assert load_prompt(dump_prompt(message)) == message
    parts = [TextPart(text="a"), TextPart(text="b")]
    assert load_prompt(dump_prompt(parts)) == Message(role="user", content=tuple(parts))


def test_every_event_a_provider_streams_is_a_delta_of_its_model_call() -> None:
    # Deltas carry no key: they belong to the model call that streamed them, and are kept or
    # discarded with it on recovery. Citations and hosted-tool progress are streamed too.
    from fanloop._dispatch import DELTA_KINDS
    from fanloop.durable._events import EventSink
    from fanloop.events import CitationAdded, HostedToolProgress
    from fanloop.messages import Citation

    sink = EventSink(("agent",))
    streamed = [
        TextDelta("a"),
        CitationAdded(Citation(type="url_citation", url="https://example.com"), 0),
        HostedToolProgress("web_search", "ws_1", "searching", {}),
        ToolCallStarted("c1", "add", 1),
    ]
    assert {e.kind for e in streamed} <= set(DELTA_KINDS)
    for event in streamed:
        sink.on_event(event)
    assert [d["kind"] for d in sink._queue] == [e.kind for e in streamed]
    assert all("key" not in d for d in sink._queue)
