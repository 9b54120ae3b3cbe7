"""Handoffs (docs/handoffs.md): an agent hands the conversation to another, which finishes the
same run: same session, budget, deadline and run id; its own prompt, tools, model and output
type; events that say who is speaking; the history filtered on the way if asked."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from fanloop import (
    DEFER,
    Agent,
    ContextPolicy,
    Handoff,
    Hooks,
    Limits,
    ModelSettings,
    NullObserver,
    TerminationReason,
    handoff,
    tool,
)
from fanloop.errors import ConfigurationError
from fanloop.events import Event, HandoffOccurred
from fanloop.messages import Message, ToolResultPart
from fanloop.providers import ModelRequest, Usage
from fanloop.sessions import MemoryStore
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply


@tool
def lookup_invoice(order: str) -> str:
    """Look up the invoice of an order."""
    return f"invoice of {order}: 40 EUR"


@tool
def search_kb(query: str) -> str:
    """Search the knowledge base."""
    return f"kb: {query}"


def tool_results(request: ModelRequest) -> list[ToolResultPart]:
    last = request.messages[-1]
    return list(last.tool_results_parts) if last.role == "user" else []


def answered(request: ModelRequest, name: str) -> bool:
    """Whether the conversation holds a result of a call of ``name``."""
    ids = {c.id for m in request.messages for c in m.tool_calls if c.name == name}
    return any(p.call_id in ids for m in request.messages for p in m.tool_results_parts)


class Desk:
    """One scripted model for every agent: it answers by the request's system prompt."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        system = request.system or ""
        if system.startswith("triage"):
            return reply("Let me get billing.", tool_calls=[call("transfer_to_billing")])
        if system.startswith("billing"):
            if not answered(request, "lookup_invoice"):
                return reply(tool_calls=[call("lookup_invoice", order="A1")])
            return "Your invoice for A1 is 40 EUR."
        raise AssertionError(f"unexpected system prompt {system!r}")

    def by(self, prefix: str) -> list[ModelRequest]:
        return [r for r in self.requests if (r.system or "").startswith(prefix)]


def make_desk(**triage_options: Any) -> tuple[Desk, Agent, Agent]:
    desk = Desk()
    provider = ScriptedProvider(desk)
    billing = Agent(provider, name="billing", system="billing: you handle invoices.",
                    tools=[lookup_invoice])  # fmt: skip
    triage = Agent(provider, name="triage", system="triage: route the user.",
                   tools=[search_kb], handoffs=[billing], **triage_options)  # fmt: skip
    return desk, triage, billing


async def test_triage_hands_over_and_the_specialist_answers_with_its_own_prompt_and_tools() -> None:
    desk, triage, _ = make_desk()
    result = await triage.run("Why was I charged 40 EUR for A1?")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.text == result.output == "Your invoice for A1 is 40 EUR."
    assert result.last_agent == "billing"
    assert result.turns == 3  # the whole run: triage's round and billing's two
    first, *later = desk.requests
    assert [t.name for t in first.tools] == ["search_kb", "transfer_to_billing"]
    assert all([t.name for t in r.tools] == ["lookup_invoice"] for r in later)
    assert all(r.system == "billing: you handle invoices." for r in later)
    # the handoff call got its result, so the transcript stays valid for any provider
    transfer = next(p for m in result.messages for p in m.tool_results_parts)
    assert transfer.content == "Transferred to billing." and not transfer.is_error
    assert later[0].messages[0].text == "Why was I charged 40 EUR for A1?"  # the whole history


async def test_the_handoff_tool_follows_the_tool_name_rule_and_takes_an_optional_reason() -> None:
    target = Agent(ScriptedProvider(["x"]), name="Billing Desk (EU)!")
    agent = Agent(ScriptedProvider(["x"]), handoffs=[target])
    (spec,) = [s for s in agent.tool_specs if s.name.startswith("transfer_to_")]
    assert spec.name == "transfer_to_Billing_Desk_EU_"
    assert "Billing Desk (EU)!" in spec.description
    assert spec.parameters.get("required", []) == []
    assert "reason" in spec.parameters["properties"]
    long = Agent(ScriptedProvider(["x"]), name="n" * 100)
    (named,) = Agent(ScriptedProvider(["x"]), handoffs=[long]).handoffs
    assert len(named.tool_name) == 64
    custom = handoff(target, name="to_billing", description="Billing questions.")
    assert isinstance(custom, Handoff)
    (spec,) = Agent(ScriptedProvider(["x"]), handoffs=[custom]).tool_specs
    assert (spec.name, spec.description) == ("to_billing", "Billing questions.")


def test_handoff_name_collisions_and_bad_handoffs_are_refused() -> None:
    p = ScriptedProvider(["x"])
    a, b = Agent(p, name="billing"), Agent(p, name="billing")
    with pytest.raises(ConfigurationError, match="two handoffs named 'transfer_to_billing'"):
        Agent(p, handoffs=[a, b])
    with pytest.raises(ConfigurationError, match="two tools are named"):
        Agent(p, tools=[search_kb], handoffs=[handoff(a, name="search_kb")])
    with pytest.raises(ConfigurationError, match="not a tool name"):
        handoff(a, name="transfer to billing")
    with pytest.raises(ConfigurationError, match="needs name="):
        handoff(lambda: a)
    with pytest.raises(ConfigurationError, match="list of agents"):
        Agent(p, handoffs=a)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not str"):
        Agent(p, handoffs=["billing"])  # type: ignore[list-item]


async def test_with_options_and_override_keep_the_handoffs() -> None:
    _desk, triage, _ = make_desk()
    copy = triage.with_options(name="front-desk", system="triage: again.")
    assert [h.tool_name for h in copy.handoffs] == ["transfer_to_billing"]
    assert (await copy.run("hi")).last_agent == "billing"
    with triage.override(context=ContextPolicy(compact_threshold=0.5)) as replacement:
        assert replacement.handoffs == triage.handoffs
        assert (await triage.run("hi")).last_agent == "billing"


async def test_a_session_keeps_every_message_of_both_agents_and_reloads() -> None:
    _, triage, _ = make_desk()
    async with MemoryStore() as store:
        session = await store.open("s1")
        result = await triage.run("Invoice A1?", session=session)
        assert result.last_agent == "billing"
        assert session.messages == result.messages
        again = await store.open("s1")
        await again.reload()
        assert again.messages == result.messages
        assert again.metadata["fanloop.active_agent"] == "billing"
        # a new run starts with the agent it is called on: the session forgets the old one
        result2 = await triage.run("And A2?", session=again)
        assert result2.last_agent == "billing"
        assert len(again.messages) > len(result.messages)


async def test_the_budget_spans_both_agents() -> None:
    usage = Usage(input_tokens=100, output_tokens=10)

    def model(request: ModelRequest) -> Any:
        if (request.system or "").startswith("triage"):
            return reply(tool_calls=[call("transfer_to_billing")], usage=usage)
        return reply(tool_calls=[call("lookup_invoice", order="A1")], usage=usage)

    provider = ScriptedProvider(model)
    billing = Agent(provider, name="billing", system="billing", tools=[lookup_invoice])
    triage = Agent(provider, name="triage", system="triage", handoffs=[billing],
                   limits=Limits(max_tool_calls=3))  # fmt: skip
    result = await triage.run("go")
    # one call was triage's handoff: billing had two of the three left
    assert result.termination_reason is TerminationReason.TOOL_CALL_BUDGET
    assert result.tool_calls == 3
    assert result.last_agent == "billing"
    assert result.usage.input_tokens == 100 * result.turns

    triage = triage.with_options(limits=Limits(max_total_tokens=330))
    result = await triage.run("go")
    assert result.termination_reason is TerminationReason.TOKEN_BUDGET
    assert result.usage.total_tokens <= 330

    triage = triage.with_options(limits=Limits(max_turns=3))
    result = await triage.run("go")  # turns count across the agents
    assert result.termination_reason is TerminationReason.MAX_TURNS
    assert result.turns == 3


async def test_streamed_events_say_who_is_speaking() -> None:
    _, triage, _ = make_desk()
    events: list[Event] = []
    async with triage.stream("Invoice A1?") as run:
        async for event in run:
            events.append(event)
    kinds = [e.kind for e in events]
    at = kinds.index("handoff")
    moved = events[at]
    assert isinstance(moved, HandoffOccurred)
    assert (moved.from_agent, moved.to_agent, moved.agent_path) == (
        "triage",
        "billing",
        ("triage",),
    )
    first_call = run.result.messages[1].tool_calls[0]
    assert moved.call_id == first_call.id
    before, after = events[:at], events[at + 1 : -1]
    assert {e.agent_path for e in before} == {("triage",)}
    assert {e.agent_path for e in after} == {("triage", "billing")}
    assert any(e.kind == "text_delta" for e in after)
    assert events[-1].kind == "run_finished"
    assert events[0].run_id == run.result.run_id  # type: ignore[union-attr]


async def test_observers_and_hooks_hear_of_the_handoff() -> None:
    heard: list[tuple[str, str]] = []

    class Watcher(NullObserver):
        def on_handoff(self, from_agent: str, to_agent: str) -> None:
            heard.append((from_agent, to_agent))

    async def on_handoff(from_agent: str, to_agent: str) -> None:
        heard.append((from_agent.upper(), to_agent.upper()))

    _, triage, _ = make_desk(observer=Watcher(), hooks=Hooks(on_handoff=on_handoff))
    await triage.run("hi")
    assert heard == [("triage", "billing"), ("TRIAGE", "BILLING")]


async def test_an_input_filter_decides_the_history_the_target_sees() -> None:
    seen: list[tuple[Message, ...]] = []

    async def only_the_user(messages: tuple[Message, ...]) -> list[Message]:
        seen.append(messages)
        return [m for m in messages if m.role == "user" and m.text]

    desk = Desk()
    provider = ScriptedProvider(desk)
    billing = Agent(provider, name="billing", system="billing", tools=[lookup_invoice])
    triage = Agent(provider, name="triage", system="triage",
                   handoffs=[handoff(billing, input_filter=only_the_user)])  # fmt: skip
    async with MemoryStore() as store:
        session = await store.open("f")
        result = await triage.run("Invoice A1?", session=session)
        assert result.last_agent == "billing"
        assert len(seen) == 1 and len(seen[0]) == 3  # user, triage's call, its result
        first_billing = desk.by("billing")[0]
        assert [m.text for m in first_billing.messages] == ["Invoice A1?"]
        assert not any(m.tool_calls for m in first_billing.messages)
        assert session.messages == result.messages  # the session holds what the run holds

    def broken(messages: tuple[Message, ...]) -> Any:
        return "not messages"

    triage = triage.with_options(handoffs=[handoff(billing, input_filter=broken)])
    with pytest.raises(ConfigurationError, match="input_filter"):
        await triage.run("Invoice A1?")


async def test_a_chain_hands_on_twice_and_the_last_agent_answers() -> None:
    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if system == "a":
            return reply(tool_calls=[call("transfer_to_b")])
        if system == "b":
            return reply(tool_calls=[call("transfer_to_c", reason="c knows")])
        return "c here"

    p = ScriptedProvider(model)
    c = Agent(p, name="c", system="c")
    b = Agent(p, name="b", system="b", handoffs=[c])
    a = Agent(p, name="a", system="a", handoffs=[b])
    events: list[Event] = []
    async with a.stream("go") as run:
        async for event in run:
            events.append(event)
    assert run.result.text == "c here" and run.result.last_agent == "c"
    moves = [
        (e.from_agent, e.to_agent, e.agent_path) for e in events if isinstance(e, HandoffOccurred)
    ]
    assert moves == [("a", "b", ("a",)), ("b", "c", ("a", "b"))]
    assert next(e for e in events if e.kind == "text_delta").agent_path == ("a", "b", "c")


async def test_a_handoff_loop_is_bounded() -> None:
    def model(request: ModelRequest) -> Any:
        other = "pong" if request.system == "ping" else "ping"
        return reply(tool_calls=[call(f"transfer_to_{other}")])

    p = ScriptedProvider(model)
    ping: Agent
    pong = Agent(p, name="pong", system="pong",
                 handoffs=[handoff(lambda: ping, name="transfer_to_ping")])  # fmt: skip
    ping = Agent(p, name="ping", system="ping", handoffs=[pong], limits=Limits(max_turns=None))
    result = await ping.run("go")
    assert result.termination_reason is TerminationReason.MAX_TURNS
    assert "10 handoffs" in (result.detail or "")
    assert result.turns == 11
    last = result.messages[-1].tool_results_parts[0]
    assert last.is_error and "handoffs" in last.content


async def test_two_handoffs_in_one_turn_the_first_wins_and_siblings_run() -> None:
    runs: list[str] = []

    @tool
    def note(text: str) -> str:
        """Take a note."""
        runs.append(text)
        return "noted"

    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if system == "triage":
            return reply(
                tool_calls=[
                    call("note", text="before"),
                    call("transfer_to_refunds"),
                    call("transfer_to_billing"),
                ]
            )
        return f"{system} answers"

    p = ScriptedProvider(model)
    billing = Agent(p, name="billing", system="billing")
    refunds = Agent(p, name="refunds", system="refunds")
    triage = Agent(p, name="triage", system="triage", tools=[note],
                   handoffs=[billing, refunds])  # fmt: skip
    result = await triage.run("go")
    assert (result.text, result.last_agent) == ("refunds answers", "refunds")
    assert runs == ["before"]
    parts = result.messages[2].tool_results_parts
    assert [p.is_error for p in parts] == [False, False, True]
    assert parts[1].content == "Transferred to refunds."
    assert "only the first handoff" in parts[2].content


class Invoice(BaseModel):
    order: str
    amount_eur: int


async def test_the_output_is_typed_by_the_last_agents_output_type() -> None:
    def model(request: ModelRequest) -> Any:
        if request.system == "triage":
            return reply(tool_calls=[call("transfer_to_billing")])
        return reply(tool_calls=[call("final_result", order="A1", amount_eur=40)])

    p = ScriptedProvider(model)
    billing = Agent(p, name="billing", system="billing", output_type=Invoice, output_mode="tool")
    triage = Agent(p, name="triage", system="triage", handoffs=[billing])
    result = await triage.run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert result.output == Invoice(order="A1", amount_eur=40)
    assert result.last_agent == "billing"


def test_run_sync_hands_over_too() -> None:
    _, triage, _ = make_desk()
    result = triage.run_sync("Invoice A1?")
    assert (result.last_agent, result.text) == ("billing", "Your invoice for A1 is 40 EUR.")


async def test_a_call_parked_inside_the_specialist_resumes_with_the_specialist() -> None:
    effects: list[str] = []

    @tool(dangerous=True)
    def refund(order: str) -> str:
        """Refund an order."""
        effects.append(order)
        return f"refunded {order}"

    def model(request: ModelRequest) -> Any:
        if request.system == "triage":
            return reply(tool_calls=[call("transfer_to_refunds")])
        if not answered(request, "refund"):
            return reply(tool_calls=[call("refund", order="A1")])
        return "Refund done."

    p = ScriptedProvider(model)
    refunds = Agent(p, name="refunds", system="refunds", tools=[refund],
                    confirm=lambda name, preview: DEFER)  # fmt: skip
    triage = Agent(p, name="triage", system="triage", handoffs=[refunds])
    async with MemoryStore() as store:
        session = await store.open("park")
        parked = await triage.run("Refund A1", session=session)
        assert parked.termination_reason is TerminationReason.AWAITING_APPROVAL
        assert parked.last_agent == "refunds"
        (pending,) = parked.pending_approvals
        again = await store.open("park")
        await again.reload()
        resumed = await triage.resume(again, approvals={pending.call_id: True})
        assert resumed.termination_reason is TerminationReason.COMPLETED
        assert (resumed.text, resumed.last_agent) == ("Refund done.", "refunds")
        assert effects == ["A1"]


async def test_a_subagent_may_hand_off_inside_its_own_run() -> None:
    def model(request: ModelRequest) -> Any:
        system = request.system or ""
        if system == "lead":
            if not answered(request, "helpdesk"):
                return reply(tool_calls=[call("helpdesk", task="invoice A1")])
            return "lead: " + tool_results(request)[0].content
        if system == "triage":
            return reply(tool_calls=[call("transfer_to_billing")])
        return "billing says 40 EUR"

    p = ScriptedProvider(model)
    billing = Agent(p, name="billing", system="billing")
    helpdesk = Agent(p, name="helpdesk", system="triage", handoffs=[billing])
    lead = Agent(p, name="lead", system="lead", tools=[helpdesk.as_tool()])
    paths: set[tuple[str, ...]] = set()
    async with lead.stream("go") as run:
        async for event in run:
            paths.add(event.agent_path)
    assert run.result.text == "lead: billing says 40 EUR"
    assert run.result.last_agent == "lead"  # control came back from the sub-agent
    assert ("lead", "helpdesk-1", "billing") in paths


async def test_over_http_the_target_request_carries_its_own_prompt_tools_and_filtered_history() -> (
    None
):
    from fanloop.providers.anthropic import AnthropicProvider

    def drop_tool_traffic(messages: tuple[Message, ...]) -> list[Message]:
        return [m for m in messages if not m.tool_calls and not m.tool_results_parts]

    with FakeLLMServer() as server:
        server.add(
            reply("Transferring you.", tool_calls=[call("transfer_to_billing", reason="invoice")]),
            reply(tool_calls=[call("lookup_invoice", order="A1")]),
            "Your invoice for A1 is 40 EUR.",
        )
        provider = AnthropicProvider(
            "claude-sonnet-4-5", api_key="test", base_url=server.anthropic_base_url
        )
        async with provider:
            billing = Agent(provider, name="billing", system="You handle invoices.",
                            tools=[lookup_invoice])  # fmt: skip
            triage = Agent(provider, name="triage", system="You route users.",
                           tools=[search_kb],
                           handoffs=[handoff(billing, input_filter=drop_tool_traffic)])  # fmt: skip
            result = await triage.run("Invoice A1?")
        assert result.text == "Your invoice for A1 is 40 EUR."
        assert result.last_agent == "billing"
        first, second, third = (r.body for r in server.requests)

        def system(body: dict[str, Any]) -> str:
            value = body["system"]
            return value if isinstance(value, str) else "".join(b["text"] for b in value)

        assert system(first) == "You route users."
        assert sorted(t["name"] for t in first["tools"]) == ["search_kb", "transfer_to_billing"]
        assert system(second) == "You handle invoices."
        assert [t["name"] for t in second["tools"]] == ["lookup_invoice"]
        # the filter dropped the handoff call and its result: only the user's question is left
        assert len(second["messages"]) == 1
        assert second["messages"][0]["role"] == "user"
        assert "Invoice A1?" in str(second["messages"][0]["content"])
        assert len(third["messages"]) == 3  # the question, billing's call, its result


async def test_a_deadline_covers_the_whole_run() -> None:
    gate = anyio.Event()

    @tool
    async def wait_forever() -> str:
        """Wait."""
        await gate.wait()
        return "never"

    def model(request: ModelRequest) -> Any:
        if request.system == "triage":
            return reply(tool_calls=[call("transfer_to_slow")])
        return reply(tool_calls=[call("wait_forever")])

    p = ScriptedProvider(model)
    slow = Agent(p, name="slow", system="slow", tools=[wait_forever])
    triage = Agent(p, name="triage", system="triage", handoffs=[slow],
                   limits=Limits(timeout=0.5))  # fmt: skip
    with anyio.fail_after(30):
        result = await triage.run("go")
    assert result.termination_reason is TerminationReason.DEADLINE
    assert result.last_agent == "slow"


async def test_a_browser_app_with_client_tools_keeps_the_handoffs() -> None:
    """AG-UI rebuilds the agent with the browser's tools: the handoff tools are not given
    twice (once as tools, once as handoffs)."""
    from fanloop.ui import AGUIApp

    _, triage, _ = make_desk()
    app = AGUIApp(triage, ask_browser=False)
    body = {
        "threadId": "t",
        "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "Invoice A1?"}],
        "tools": [{"name": "ask_user", "description": "Ask", "parameters": {"type": "object"}}],
    }
    events = [e async for e in app.events(body)]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == "Your invoice for A1 is 40 EUR."


async def test_the_target_uses_its_own_provider_and_model_settings() -> None:
    front = ScriptedProvider([reply(tool_calls=[call("transfer_to_expert")])])
    back = ScriptedProvider(["expert answer"])
    expert = Agent(
        back,
        name="expert",
        system="expert",
        model_settings=ModelSettings(temperature=0.1, max_tokens=321),
    )
    triage = Agent(
        front,
        name="triage",
        system="triage",
        model_settings=ModelSettings(temperature=0.9),
        handoffs=[expert],
    )
    result = await triage.run("go")
    assert (result.text, result.last_agent) == ("expert answer", "expert")
    assert len(front.requests) == 1 and len(back.requests) == 1
    (request,) = back.requests
    assert (request.temperature, request.max_tokens, request.system) == (0.1, 321, "expert")


async def test_a_handoff_beside_a_call_parked_for_approval_is_taken_once_the_batch_resumes() -> (
    None
):
    effects: list[str] = []

    @tool(dangerous=True)
    def cancel_order(order: str) -> str:
        """Cancel an order."""
        effects.append(order)
        return f"cancelled {order}"

    def model(request: ModelRequest) -> Any:
        if request.system == "triage":
            return reply(tool_calls=[call("cancel_order", order="A1"), call("transfer_to_billing")])
        return "billing: A1 is cancelled, no charge."

    p = ScriptedProvider(model)
    billing = Agent(p, name="billing", system="billing")
    triage = Agent(p, name="triage", system="triage", tools=[cancel_order], handoffs=[billing],
                   confirm=lambda name, preview: DEFER)  # fmt: skip
    async with MemoryStore() as store:
        session = await store.open("both")
        parked = await triage.run("Cancel A1 and tell billing", session=session)
        assert parked.termination_reason is TerminationReason.AWAITING_APPROVAL
        assert parked.last_agent == "triage"
        (pending,) = parked.pending_approvals
        resumed = await triage.resume(session, approvals={pending.call_id: True})
        assert resumed.termination_reason is TerminationReason.COMPLETED
        assert (resumed.last_agent, resumed.text) == (
            "billing",
            "billing: A1 is cancelled, no charge.",
        )
        assert effects == ["A1"]


async def test_an_override_of_the_target_holds_when_the_run_hands_over_to_it() -> None:
    _, triage, billing = make_desk()
    with billing.override(provider=ScriptedProvider(["from the override"])):
        result = await triage.run("Invoice A1?")
    assert (result.last_agent, result.text) == ("billing", "from the override")
