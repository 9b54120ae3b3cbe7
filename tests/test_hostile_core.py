"""The loop against a hostile model and a careless host: call ids, receipts, schemas, sizes,
silent streams, a final event nobody takes, and sub-agents' reach."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from fanloop import Agent, NullObserver, RetryPolicy, TerminationReason, Tool, tool
from fanloop._resume import INTERRUPTED, receipt_matches, receipt_result
from fanloop.errors import ProviderTimeout
from fanloop.events import TextDelta
from fanloop.messages import INVALID_ARGUMENTS_KEY, Message, ToolCallPart, ToolResultPart
from fanloop.providers import ModelRequest, ModelResponse, StopReason, Usage
from fanloop.sessions import MemoryStore, SQLiteStore, arguments_hash
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.tools import read_only_tools

# -- call ids and receipts ------------------------------------------------------------------


class Ledger:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def tool(self) -> Tool:
        @tool(dangerous=True)
        def transfer(amount: int, to: str) -> str:
            """Send money."""
            self.sent.append((amount, to))
            return f"sent {amount} to {to}"

        return transfer


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_reused_call_id_never_replays_another_calls_receipt(
    tmp_path: Path, store_kind: str
) -> None:
    """An OpenAI-compatible server that omits ids made every turn's call ``call_0``."""
    ledger = Ledger()
    store = MemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "s.db")
    session = await store.open("bank")
    provider = ScriptedProvider(
        [
            reply(tool_calls=[call("transfer", _id="call_0", amount=5, to="alice")]),
            "done",
            reply(tool_calls=[call("transfer", _id="call_0", amount=900, to="bob")]),
            "done again",
        ]
    )
    agent = Agent(provider, tools=[ledger.tool()], auto_approve=True)
    await agent.run("pay alice", session=session)
    result = await agent.run("pay bob", session=session)

    assert ledger.sent == [(5, "alice"), (900, "bob")]
    assert result.termination_reason is TerminationReason.COMPLETED
    results = [p for m in session.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert [r.content for r in results] == ["sent 5 to alice", "sent 900 to bob"]
    calls = [c for m in session.messages for c in m.tool_calls]
    assert len({c.id for c in calls}) == 2
    assert [r.call_id for r in results] == [c.id for c in calls]
    receipts = await session.effects()
    assert sorted(r.call_id for r in receipts) == sorted(c.id for c in calls)


async def test_duplicate_ids_in_one_turn_are_told_apart() -> None:
    ledger = Ledger()
    provider = ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("transfer", _id="same", amount=1, to="a"),
                    call("transfer", _id="same", amount=2, to="b"),
                    call("echo", _id="same", text="hi"),
                ]
            ),
            "ok",
        ]
    )

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    session = await MemoryStore().open("dup")
    result = await Agent(provider, tools=[ledger.tool(), echo], auto_approve=True).run(
        "go", session=session
    )
    assert ledger.sent == [(1, "a"), (2, "b")]
    calls = result.messages[1].tool_calls
    assert len({c.id for c in calls}) == 3
    results = result.messages[2].content
    assert [r.call_id for r in results] == [c.id for c in calls]  # type: ignore[union-attr]
    assert [r.content for r in results] == ["sent 1 to a", "sent 2 to b", "hi"]  # type: ignore[union-attr]
    # The next request pairs every result with its own call.
    sent = provider.requests[1].messages
    assert [c.id for c in sent[1].tool_calls] == [c.id for c in calls]


async def test_empty_and_huge_ids_are_replaced() -> None:
    provider = ScriptedProvider(
        [
            reply(tool_calls=[call("echo", _id="x" * 100_000, text="a")]),
            reply(tool_calls=[ToolCallPart(id="", name="echo", arguments={"text": "b"})]),
            "ok",
        ]
    )

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    result = await Agent(provider, tools=[echo]).run("go")
    ids = [c.id for m in result.messages for c in m.tool_calls]
    assert len(ids) == 2 and all(0 < len(i) <= 128 for i in ids)


async def test_resume_does_not_replay_a_receipt_written_for_a_different_call() -> None:
    """A dead process left a turn open whose call id has another call's receipt."""
    ledger = Ledger()
    store = MemoryStore()
    session = await store.open("s")
    old = ToolCallPart(id="c1", name="transfer", arguments={"amount": 5, "to": "alice"})
    await session.begin_effect(turn=1, call=old)
    await session.commit_effect("c1", ToolResultPart(call_id="c1", content="sent 5 to alice"))
    await session.append(Message.user("pay bob"))
    await session.append(
        Message(
            role="assistant",
            content=(
                ToolCallPart(id="c1", name="transfer", arguments={"amount": 900, "to": "bob"}),
            ),
        )
    )
    provider = ScriptedProvider(["ok"])
    agent = Agent(provider, tools=[ledger.tool()], auto_approve=True)
    result = await agent.resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    answered = [p for p in session.messages[-2].content if isinstance(p, ToolResultPart)]
    assert "sent 5 to alice" not in answered[0].content
    assert answered[0].is_error


async def test_resume_does_not_replay_another_tools_receipt_with_the_same_arguments() -> None:
    """Same call id, same arguments, another tool: a refund's result is no transfer's."""
    ledger = Ledger()
    session = await MemoryStore().open("s")
    arguments = {"amount": 5, "to": "alice"}
    await session.begin_effect(
        turn=1, call=ToolCallPart(id="c1", name="refund", arguments=arguments)
    )
    await session.commit_effect("c1", ToolResultPart(call_id="c1", content="refunded 5 to alice"))
    await session.append(Message.user("pay alice"))
    await session.append(
        Message(
            role="assistant", content=(ToolCallPart(id="c1", name="transfer", arguments=arguments),)
        )
    )
    agent = Agent(ScriptedProvider(["ok"]), tools=[ledger.tool()], auto_approve=True)
    result = await agent.resume(session)
    assert result.termination_reason is TerminationReason.COMPLETED
    [answered] = [p for p in session.messages[-2].content if isinstance(p, ToolResultPart)]
    assert answered.content == INTERRUPTED and answered.is_error
    assert ledger.sent == []


async def test_a_receipt_matches_only_its_own_call() -> None:
    call_ = ToolCallPart(id="c1", name="transfer", arguments={"amount": 5, "to": "alice"})

    def receipt(**changes: Any) -> SimpleNamespace:
        fields = {
            "call_id": "c1",
            "tool": "transfer",
            "arguments_hash": arguments_hash(call_.arguments),
        }
        return SimpleNamespace(**{**fields, **changes})

    assert await receipt_matches(call_, receipt())
    assert not await receipt_matches(call_, receipt(call_id="c2"))
    assert not await receipt_matches(call_, receipt(tool="refund"))
    assert not await receipt_matches(
        call_, receipt(arguments_hash=arguments_hash({"amount": 6, "to": "alice"}))
    )
    unhashable = ToolCallPart.model_construct(id="c1", name="transfer", arguments={"x": object()})
    assert not await receipt_matches(unhashable, receipt())


def test_only_a_committed_receipt_with_its_result_is_replayed() -> None:
    """Receipts are read back from a store: a state the API never writes replays nothing."""
    call_ = ToolCallPart(id="c1", name="transfer", arguments={})
    part = ToolResultPart(call_id="c1", content="sent")
    for status, result in [
        ("committed", part),
        ("started", part),
        ("committed", None),
        ("weird", part),
        ("resolved_applied", None),
        ("resolved_not_applied", None),
    ]:
        replayed = receipt_result(call_, SimpleNamespace(status=status, result=result))
        if status == "committed" and result is not None:
            assert replayed is part
        elif status.startswith("resolved"):
            assert replayed is not None and replayed.call_id == "c1"
            assert replayed.is_error is (status == "resolved_not_applied")
        else:
            assert replayed is None, (status, result)


# -- argument schemas ------------------------------------------------------------------------


class Shipping(Tool):
    name = "ship"
    description = "Ship a parcel."
    parameters = {
        "type": "object",
        "properties": {
            "speed": {"type": "string", "enum": ["slow", "fast"]},
            "weight": {"type": "number", "minimum": 0.1},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["speed", "weight", "address"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, **kwargs: Any) -> str:
        self.runs += 1
        return "shipped"


GOOD = {"speed": "fast", "weight": 1.5, "address": {"city": "Oslo", "zip": "0150"}}


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({**GOOD, "speed": "teleport"}, "speed"),
        ({**GOOD, "weight": -3}, "weight"),
        ({**GOOD, "weight": True}, "weight"),
        ({**GOOD, "address": {"city": "Oslo"}}, "address"),
        ({**GOOD, "address": {"city": 5, "zip": "1"}}, "address.city"),
        ({**GOOD, "tags": ["a", "b", "c", "d"]}, "tags"),
        ({**GOOD, "tags": ["a", 1]}, "tags.1"),
        ({**GOOD, "extra": 1}, "extra"),
    ],
)
async def test_tool_subclass_arguments_are_checked_against_the_whole_schema(
    bad: dict[str, Any], expected: str
) -> None:
    ship = Shipping()
    provider = ScriptedProvider([reply(tool_calls=[call("ship", **bad)]), "ok"])
    result = await Agent(provider, tools=[ship]).run("go")
    part = result.messages[2].content[0]
    assert isinstance(part, ToolResultPart)
    assert part.is_error and expected in part.content, part.content
    assert ship.runs == 0


async def test_valid_arguments_still_run() -> None:
    ship = Shipping()
    provider = ScriptedProvider([reply(tool_calls=[call("ship", **GOOD)]), "ok"])
    await Agent(provider, tools=[ship]).run("go")
    assert ship.runs == 1


# -- sizes of what the model sent --------------------------------------------------------------


async def test_error_results_built_from_the_models_input_are_capped() -> None:
    huge_name = "n" * 1_000_000
    huge_args = "{" * 5_000_000
    provider = ScriptedProvider(
        [
            reply(
                tool_calls=[
                    ToolCallPart(id="a", name=huge_name, arguments={}),
                    ToolCallPart(id="b", name="ship", arguments={INVALID_ARGUMENTS_KEY: huge_args}),
                    ToolCallPart(id="c", name="ship", arguments={**GOOD, "speed": "x" * 5_000_000}),
                ]
            ),
            "ok",
        ]
    )
    result = await Agent(provider, tools=[Shipping()]).run("go")
    parts = result.messages[2].content
    assert len(parts) == 3
    for part in parts:
        assert isinstance(part, ToolResultPart) and part.is_error
        assert len(part.content) < 5_000, len(part.content)


# -- a silent stream -------------------------------------------------------------------------


class SilentProvider:
    """Streams nothing: like a server that only sends keep-alive comments."""

    name = "silent"
    model = "silent-model"

    def __init__(self) -> None:
        self.attempts = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
        raise NotImplementedError

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
        self.attempts += 1

        async def events() -> AsyncIterator[Any]:
            await anyio.Event().wait()
            yield  # pragma: no cover

        yield events()


async def test_a_stream_that_sends_no_content_is_a_transient_timeout() -> None:
    provider = SilentProvider()
    policy = RetryPolicy(max_retries=2, base_delay=0, jitter=False, stream_idle_timeout=0.2)
    agent = Agent(provider, retry=policy)
    started = time.monotonic()
    with anyio.fail_after(10):
        with pytest.raises(ProviderTimeout, match="no content") as info:
            await agent.run("hello")
    assert provider.attempts == 3
    assert info.value.partial.termination_reason is TerminationReason.PROVIDER_ERROR
    assert time.monotonic() - started < 5


async def test_an_idle_timeout_leaves_no_cancellation_behind() -> None:
    """The watch cancels the reading task itself and takes that cancellation back: after a
    ProviderTimeout the task is not cancelling, and the run's next await is not cancelled."""
    import asyncio

    policy = RetryPolicy(max_retries=1, base_delay=0, jitter=False, stream_idle_timeout=0.1)
    task = asyncio.current_task()
    assert task is not None
    with anyio.fail_after(10):
        with pytest.raises(ProviderTimeout):
            await Agent(SilentProvider(), retry=policy).run("hello")
    assert task.cancelling() == 0
    await anyio.sleep(0.01)  # not cancelled


class OuterCancelProvider:
    """Its stream waits; the test's caller cancels the run's scope in the same loop step as
    the idle watch fires, the worst case for telling the two cancellations apart."""

    name = "outer"
    model = "outer-model"

    def __init__(self, outer: anyio.CancelScope) -> None:
        self.outer = outer
        self.attempts = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
        raise NotImplementedError

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
        from fanloop._model import _WATCHDOGS

        self.attempts += 1

        async def events() -> AsyncIterator[Any]:
            import asyncio

            (dog,) = [_WATCHDOGS[asyncio.get_running_loop()]]
            (watch,) = [w for w in dog.watches if w.task is asyncio.current_task()]

            def both() -> None:  # as the watchdog does it, and the caller's cancel with it
                self.outer.cancel()
                dog.watches.discard(watch)
                watch.fired = True
                watch.task.cancel()

            asyncio.get_running_loop().call_soon(both)
            await anyio.Event().wait()
            yield  # pragma: no cover

        yield events()


async def test_a_cancel_from_outside_that_lands_with_the_idle_timeout_wins() -> None:
    import asyncio

    policy = RetryPolicy(max_retries=0, stream_idle_timeout=30)
    task = asyncio.current_task()
    assert task is not None
    with anyio.fail_after(10):
        with anyio.CancelScope() as outer:  # a ProviderTimeout would escape it
            provider = OuterCancelProvider(outer)
            await Agent(provider, retry=policy).run("hello")
    assert outer.cancelled_caught
    assert provider.attempts == 1
    assert task.cancelling() == 0


class TrickleProvider:
    """Streams ``n`` deltas, ``gap`` seconds apart."""

    name = "trickle"
    model = "trickle-model"

    def __init__(self, n: int, gap: float) -> None:
        self.n = n
        self.gap = gap

    async def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
        raise NotImplementedError

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
        async def events() -> AsyncIterator[Any]:
            for _ in range(self.n):
                if self.gap:
                    await anyio.sleep(self.gap)
                yield TextDelta("x")
            yield ModelResponse(
                content=(reply("x" * self.n).content[0],),
                stop_reason=StopReason.END_TURN,
                usage=Usage(),
                model=self.model,
                provider=self.name,
            )

        yield events()


async def test_the_idle_timeout_is_between_events_not_for_the_whole_answer() -> None:
    policy = RetryPolicy(max_retries=0, stream_idle_timeout=0.5)
    result = await Agent(TrickleProvider(8, 0.1), retry=policy).run("go")
    assert result.text == "x" * 8


async def test_a_slow_consumer_does_not_count_as_an_idle_stream() -> None:
    policy = RetryPolicy(max_retries=0, stream_idle_timeout=0.2)
    agent = Agent(TrickleProvider(300, 0.0), retry=policy)
    seen = 0
    async with agent.stream("go") as run:
        async for event in run:
            if event.kind == "text_delta":
                seen += 1
                if seen == 1:
                    await anyio.sleep(0.6)  # the consumer stalls; the run waits on it
    assert run.result.termination_reason is TerminationReason.COMPLETED
    assert seen == 300


# -- a final event nobody takes ----------------------------------------------------------------


class StuckObserver(NullObserver):
    """Never returns from the final event."""

    def __init__(self) -> None:
        self.reached = anyio.Event()

    async def on_event(self, event: Any) -> None:
        if event.kind == "run_finished":
            self.reached.set()
            await anyio.Event().wait()


async def test_an_observer_stuck_on_run_finished_cannot_make_a_run_uncancellable() -> None:
    observer = StuckObserver()
    provider = ScriptedProvider([reply("slow", usage=Usage())], first_delay=30)
    agent = Agent(provider, observer=observer)
    started = time.monotonic()
    with anyio.fail_after(15):
        with anyio.move_on_after(0.3):
            await agent.run("go")
    assert observer.reached.is_set()
    assert time.monotonic() - started < 10


# -- sub-agents never reach further than their parent --------------------------------------------


def _delegating_script(target: str) -> Any:
    def respond(request: ModelRequest) -> Any:
        if request.system and "sub-agent" in request.system:
            if len(request.messages) == 1:
                return reply(tool_calls=[call("read_file", path=target)])
            results = request.messages[-1].content
            return reply(results[0].content)  # type: ignore[union-attr]
        if len(request.messages) == 1:
            return reply(tool_calls=[call("delegate", task="read it")])
        return reply(request.messages[-1].content[0].content)  # type: ignore[union-attr]

    return respond


@pytest.mark.parametrize("how", ["parent_tools", "workspace_only"])
async def test_delegated_subagents_stay_in_the_parents_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("inside\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "secret.txt").write_text("host secret\n")
    monkeypatch.chdir(cwd)
    tools = read_only_tools(root=ws, read_cache=False) if how == "parent_tools" else []
    agent = Agent(
        ScriptedProvider(_delegating_script("secret.txt")),
        tools=tools,
        workspace=str(ws),
        delegation=True,
    )
    result = await agent.run("go")
    assert "host secret" not in result.text
    agent = Agent(
        ScriptedProvider(_delegating_script("notes.txt")),
        tools=tools,
        workspace=str(ws),
        delegation=True,
    )
    assert "inside" in (await agent.run("go")).text


async def test_delegated_subagents_reuse_the_parents_own_read_only_tools(tmp_path: Path) -> None:
    tools = read_only_tools(root=tmp_path, read_cache=False)
    agent = Agent(ScriptedProvider(["ok"]), tools=tools, delegation=True)
    delegate = agent.tools["delegate"]
    children = delegate._tools_for_children(agent)  # type: ignore[attr-defined]
    assert {id(t) for t in children} == {id(t) for t in tools}


async def test_a_replaying_engine_can_make_the_loops_ids_deterministic() -> None:
    from fanloop._ids import counter_source, id_source

    def script() -> ScriptedProvider:
        return ScriptedProvider(
            [reply(tool_calls=[ToolCallPart(id="", name="echo", arguments={"text": "a"})]), "ok"]
        )

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    seen = []
    for _ in range(2):
        with id_source(counter_source("workflow-7")):
            result = await Agent(script(), tools=[echo]).run("go")
        seen.append((result.run_id, result.messages[1].tool_calls[0].id))
    assert seen[0] == seen[1]
    other = await Agent(script(), tools=[echo]).run("go")
    assert (other.run_id, other.messages[1].tool_calls[0].id) != seen[0]
