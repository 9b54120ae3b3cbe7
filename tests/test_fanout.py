"""The tool-batch rules of docs/fanout.md, one test (or a few) per rule."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from fanloop import Agent, Concurrency, RunContext, Tool, ToolResult, tool
from fanloop.errors import ToolError
from fanloop.messages import INVALID_ARGUMENTS_KEY, ToolCallPart, ToolResultPart
from fanloop.testing import ScriptedProvider, call, reply
from helpers import collect


def batch(*calls: ToolCallPart) -> ScriptedProvider:
    """A model that asks for ``calls`` in one turn, then answers "done"."""
    return ScriptedProvider([reply(tool_calls=list(calls)), "done"])


def results_of(result: Any) -> list[ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]


# -- rule 1: unknown tools, bad JSON, invalid arguments ------------------------------------


async def test_unknown_tool_becomes_an_error_result_naming_the_available_tools() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    result = await Agent(batch(call("nope")), tools=[ping]).run("go")
    [res] = results_of(result)
    assert res.is_error
    assert "Unknown tool 'nope'" in res.content
    assert "ping" in res.content
    assert result.text == "done"


async def test_invalid_arguments_are_explained_to_the_model() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    result = await Agent(batch(call("add", a="x")), tools=[add]).run("go")
    [res] = results_of(result)
    assert res.is_error
    assert "'add'" in res.content
    assert "a:" in res.content and "b:" in res.content  # both problems named
    assert result.termination_reason == "completed"


async def test_malformed_json_arguments_never_crash_the_run() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    bad = ToolCallPart(id="c1", name="echo", arguments={INVALID_ARGUMENTS_KEY: '{"text": "hi'})
    result = await Agent(batch(bad), tools=[echo]).run("go")
    [res] = results_of(result)
    assert res.is_error
    assert "not a valid JSON object" in res.content
    assert '{"text": "hi' in res.content


async def test_hand_written_tool_schema_is_checked() -> None:
    class Shout(Tool):
        name = "shout"
        parameters = {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }

        async def run(self, text: str) -> ToolResult:
            return ToolResult(text.upper())

    provider = batch(call("shout", text=3), call("shout", loud=True), call("shout", text="hey"))
    result = await Agent(provider, tools=[Shout()]).run("go")
    bad_type, unknown, good = results_of(result)
    assert bad_type.is_error and "text: 3 is not of type 'string'" in bad_type.content
    assert unknown.is_error and "'text' is a required property" in unknown.content
    assert "'loud' was unexpected" in unknown.content
    assert good == ToolResultPart(call_id=good.call_id, content="HEY")


# -- rule 2: concurrency, same-name serialisation ------------------------------------------


async def test_different_tools_run_concurrently() -> None:
    """Each tool can only finish once the other has started: they must overlap."""
    a_started, b_started = anyio.Event(), anyio.Event()

    @tool
    async def a() -> str:
        """A."""
        a_started.set()
        with anyio.fail_after(5):
            await b_started.wait()
        return "a"

    @tool
    async def b() -> str:
        """B."""
        b_started.set()
        with anyio.fail_after(5):
            await a_started.wait()
        return "b"

    result = await Agent(batch(call("a"), call("b")), tools=[a, b]).run("go")
    assert [r.content for r in results_of(result)] == ["a", "b"]


async def test_same_tool_calls_never_overlap_and_keep_model_order() -> None:
    active = 0
    peak = 0
    order: list[int] = []

    @tool
    async def step(n: int) -> str:
        """Step."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await anyio.sleep(0)  # give any sibling a chance to overlap
        await anyio.sleep(0)
        order.append(n)
        active -= 1
        return str(n)

    calls = [call("step", n=i) for i in range(5)]
    result = await Agent(batch(*calls), tools=[step]).run("go")
    assert peak == 1
    assert order == [0, 1, 2, 3, 4]
    assert [r.content for r in results_of(result)] == ["0", "1", "2", "3", "4"]


async def test_concurrent_safe_tool_calls_overlap() -> None:
    arrived = 0
    all_in = anyio.Event()

    @tool(concurrent_safe=True)
    async def gather_point(n: int) -> str:
        """Wait until all three calls are in."""
        nonlocal arrived
        arrived += 1
        if arrived == 3:
            all_in.set()
        with anyio.fail_after(5):
            await all_in.wait()
        return str(n)

    calls = [call("gather_point", n=i) for i in range(3)]
    result = await Agent(batch(*calls), tools=[gather_point]).run("go")
    assert [r.content for r in results_of(result)] == ["0", "1", "2"]


async def test_sync_tools_run_in_worker_threads_side_by_side() -> None:
    barrier = threading.Barrier(8, timeout=10)

    @tool(concurrent_safe=True)
    def blocking(n: int) -> str:
        """Blocks until 8 threads are waiting together."""
        barrier.wait()
        return str(threading.get_ident())

    calls = [call("blocking", n=i) for i in range(8)]
    result = await Agent(batch(*calls), tools=[blocking]).run("go")
    names = [r.content for r in results_of(result)]
    assert not any(r.is_error for r in results_of(result))
    assert len(set(names)) == 8
    assert str(threading.main_thread().ident) not in names


# -- rule 3 and 4: the dangerous barrier and the confirm gate --------------------------------


async def test_dangerous_call_waits_for_earlier_calls_and_holds_back_later_ones() -> None:
    log: list[str] = []
    release_first = anyio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        log.append("slow:start")
        with anyio.fail_after(5):
            await release_first.wait()
        log.append("slow:end")
        return "slow"

    @tool
    async def other() -> str:
        """Other: releases slow, so it must run alongside it."""
        log.append("other")
        release_first.set()
        return "other"

    @tool(dangerous=True)
    async def danger() -> str:
        """Danger."""
        log.append("danger")
        return "danger"

    @tool
    async def after() -> str:
        """After."""
        log.append("after")
        return "after"

    def confirm(name: str, preview: str) -> bool:
        log.append(f"confirm:{name}")
        return True

    provider = batch(call("slow"), call("other"), call("danger"), call("after"))
    result = await Agent(provider, tools=[slow, other, danger, after], confirm=confirm).run("go")
    assert log.index("slow:end") < log.index("confirm:danger") < log.index("danger")
    assert log.index("danger") < log.index("after")
    assert [r.content for r in results_of(result)] == ["slow", "other", "danger", "after"]


async def test_dangerous_calls_run_serially_each_behind_the_gate() -> None:
    log: list[str] = []

    @tool(dangerous=True)
    async def rm(path: str) -> str:
        """Remove."""
        log.append(f"run:{path}")
        await anyio.sleep(0)
        log.append(f"done:{path}")
        return path

    async def confirm(name: str, preview: str) -> bool:
        log.append(f"ask:{preview}")
        return True

    provider = batch(call("rm", path="a"), call("rm", path="b"))
    await Agent(provider, tools=[rm], confirm=confirm).run("go")
    assert log == [
        "ask:rm(path='a')",
        "run:a",
        "done:a",
        "ask:rm(path='b')",
        "run:b",
        "done:b",
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (False, "User declined to run this tool."),
        ("Not on a Friday.", "Not on a Friday."),
        (None, "User declined to run this tool."),  # only True approves
        ("yes", "yes"),  # a string is a reason for declining, even this one
    ],
)
async def test_confirm_declines(answer: Any, expected: str) -> None:
    ran = False

    @tool(dangerous=True)
    def deploy() -> str:
        """Deploy."""
        nonlocal ran
        ran = True
        return "deployed"

    result = await Agent(batch(call("deploy")), tools=[deploy], confirm=lambda n, p: answer).run(
        "go"
    )
    [res] = results_of(result)
    assert not ran
    assert res.content == expected
    assert res.is_error


async def test_async_confirm_approves_and_sees_the_preview() -> None:
    seen: list[tuple[str, str]] = []

    def preview(path: str) -> str:
        return f"--- {path}\n+++ {path}"

    @tool(dangerous=True, preview=preview)
    async def write(path: str) -> str:
        """Write."""
        return f"wrote {path}"

    async def confirm(name: str, text: str) -> bool:
        seen.append((name, text))
        return True

    result = await Agent(batch(call("write", path="x.txt")), tools=[write], confirm=confirm).run(
        "go"
    )
    assert seen == [("write", "--- x.txt\n+++ x.txt")]
    assert results_of(result)[0].content == "wrote x.txt"


async def test_dangerous_tools_are_declined_without_a_confirm_handler() -> None:
    @tool(dangerous=True)
    def wipe() -> str:
        """Wipe."""
        raise AssertionError("must not run")

    result = await Agent(batch(call("wipe")), tools=[wipe]).run("go")
    [res] = results_of(result)
    assert res.is_error
    assert "no confirmation handler is configured" in res.content


async def test_auto_approve_runs_dangerous_tools() -> None:
    @tool(dangerous=True)
    def wipe() -> str:
        """Wipe."""
        return "wiped"

    result = await Agent(batch(call("wipe")), tools=[wipe], auto_approve=True).run("go")
    assert results_of(result)[0].content == "wiped"


async def test_approval_events_carry_the_preview() -> None:
    @tool(dangerous=True)
    def wipe(target: str) -> str:
        """Wipe."""
        return "wiped"

    agent = Agent(batch(call("wipe", target="db")), tools=[wipe], confirm=lambda n, p: "no")
    _, events = await collect(agent, "go")
    [asked] = [e for e in events if e.kind == "approval_requested"]
    [answered] = [e for e in events if e.kind == "approval_resolved"]
    assert asked.preview == "wipe(target='db')"
    assert answered.approved is False and answered.reason == "no"


# -- rule 5: failures stay with their call ---------------------------------------------------


async def test_raising_and_timed_out_tools_leave_siblings_results_intact() -> None:
    @tool
    def boom() -> str:
        """Boom."""
        raise RuntimeError("kaput")

    @tool
    def refuse() -> str:
        """Refuse."""
        raise ToolError("the file is locked")

    @tool(timeout=0.05)
    async def hang() -> str:
        """Hang."""
        await anyio.sleep_forever()
        return "never"

    @tool
    def fine() -> str:
        """Fine."""
        return "fine"

    provider = batch(call("boom"), call("hang"), call("fine"), call("refuse"))
    result = await Agent(provider, tools=[boom, hang, fine, refuse]).run("go")
    boom_r, hang_r, fine_r, refuse_r = results_of(result)
    assert boom_r.is_error and "RuntimeError: kaput" in boom_r.content
    assert hang_r.is_error and "timed out after 0.05 seconds" in hang_r.content
    assert fine_r == ToolResultPart(call_id=fine_r.call_id, content="fine")
    assert refuse_r.is_error and refuse_r.content == "the file is locked"


# -- rule 6: results in call order -------------------------------------------------------------


async def test_results_come_back_in_call_order_whatever_order_they_finish_in() -> None:
    finish_order: list[str] = []
    gates = {name: anyio.Event() for name in ("first", "second", "third")}

    def make(name: str, releases: str | None) -> Any:
        async def fn() -> str:
            with anyio.fail_after(5):
                await gates[name].wait()
            finish_order.append(name)
            if releases:
                gates[releases].set()
            return name

        return tool(fn, name=name, description=name)

    tools = [make("first", None), make("second", "first"), make("third", "second")]
    gates["third"].set()  # third finishes first, then second, then first
    provider = batch(call("first"), call("second"), call("third"))
    result = await Agent(provider, tools=tools).run("go")
    assert finish_order == ["third", "second", "first"]
    assert [r.content for r in results_of(result)] == ["first", "second", "third"]
    ids = [p.id for p in result.messages[1].tool_calls]
    assert [r.call_id for r in results_of(result)] == ids


# -- rule 7: cancellation ----------------------------------------------------------------------


async def test_cancelling_the_run_cancels_every_call_and_leaves_a_result_for_each() -> None:
    started = 0
    all_started = anyio.Event()
    cancelled: list[str] = []

    @tool(concurrent_safe=True)
    async def wait(n: int) -> str:
        """Wait forever."""
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(str(n))
        return "never"

    @tool
    async def quick() -> str:
        """Quick."""
        return "quick"

    provider = batch(call("wait", n=1), call("quick"), call("wait", n=2), call("wait", n=3))
    agent = Agent(provider, tools=[wait, quick])
    caught: list[BaseException] = []

    async def run_it() -> None:
        try:
            await agent.run("go")
        except BaseException as exc:  # the cancellation, carrying the partial result
            caught.append(exc)
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_it)
        with anyio.fail_after(5):
            await all_started.wait()
        tg.cancel_scope.cancel()

    assert sorted(cancelled) == ["1", "2", "3"]
    [exc] = caught
    partial = exc.partial  # type: ignore[attr-defined]
    assert partial.termination_reason == "cancelled"
    results = results_of(partial)
    assert [r.call_id for r in results] == [c.id for c in partial.messages[1].tool_calls]
    by_content = [r.content for r in results]
    assert by_content[1] == "quick"
    assert all("cancelled" in c for i, c in enumerate(by_content) if i != 1)


# -- rule 8: concurrency caps ------------------------------------------------------------------


def tracking_tool(name: str, *, key: str | None = None, cap: int | None = None) -> Any:
    state = {"active": 0, "peak": 0}

    async def fn(n: int) -> str:
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        for _ in range(3):
            await anyio.sleep(0)
        state["active"] -= 1
        return str(n)

    t = tool(
        fn,
        name=name,
        description=name,
        concurrent_safe=True,
        concurrency_key=key,
        max_concurrency=cap,
    )
    return t, state


async def test_keyed_limit_is_shared_across_tools() -> None:
    reader, r_state = tracking_tool("db_read", key="db")
    writer, w_state = tracking_tool("db_write", key="db")
    shared = {"active": 0, "peak": 0}

    @tool(concurrent_safe=True, concurrency_key="db")
    async def db_probe(n: int) -> str:
        """Probe."""
        shared["active"] += 1
        shared["peak"] = max(
            shared["peak"], shared["active"] + r_state["active"] + w_state["active"]
        )
        await anyio.sleep(0)
        shared["active"] -= 1
        return str(n)

    calls = [call(name, n=i) for i in range(3) for name in ("db_read", "db_write", "db_probe")]
    agent = Agent(
        batch(*calls),
        tools=[reader, writer, db_probe],
        concurrency=Concurrency(concurrency_limits={"db": 1}),
    )
    result = await agent.run("go")
    assert not any(r.is_error for r in results_of(result))
    assert r_state["peak"] == w_state["peak"] == 1
    assert shared["peak"] == 1


async def test_per_tool_and_per_agent_caps() -> None:
    capped, c_state = tracking_tool("capped", cap=2)
    free, f_state = tracking_tool("free")
    calls = [call("capped", n=i) for i in range(6)] + [call("free", n=i) for i in range(6)]
    await Agent(batch(*calls), tools=[capped, free]).run("go")
    assert c_state["peak"] == 2
    assert f_state["peak"] == 6

    capped2, c2 = tracking_tool("capped")
    free2, f2 = tracking_tool("free")
    agent = Agent(batch(*calls), tools=[capped2, free2], concurrency=Concurrency(max_concurrency=3))
    await agent.run("go")
    assert c2["peak"] + f2["peak"] <= 6
    assert max(c2["peak"], f2["peak"]) <= 3


def test_unknown_concurrency_key_is_rejected_when_the_agent_is_made() -> None:
    from fanloop.errors import ConfigurationError

    t, _ = tracking_tool("t", key="nokey")
    with pytest.raises(ConfigurationError, match="concurrency key 'nokey'"):
        Agent(batch(), tools=[t])


# -- tool context ----------------------------------------------------------------------------


async def test_function_tools_receive_the_run_context_with_deps() -> None:

    @tool
    def whoami(ctx: RunContext[dict[str, str]], greeting: str) -> str:
        """Greets the user from deps."""
        return f"{greeting}, {ctx.deps['user']} ({ctx.call.name}, depth {ctx.depth})"

    assert "ctx" not in whoami.parameters["properties"]
    result = await Agent(batch(call("whoami", greeting="hi")), tools=[whoami]).run(
        "go", deps={"user": "ada"}
    )
    assert results_of(result)[0].content == "hi, ada (whoami, depth 0)"


# -- the gate's events ---------------------------------------------------------------------


@pytest.mark.parametrize("answer", [True, False])
async def test_approval_comes_before_the_call_starts_and_a_declined_call_never_starts(
    answer: bool,
) -> None:
    @tool(dangerous=True)
    def wipe(path: str) -> str:
        """Wipe a path."""
        return "wiped"

    agent = Agent(batch(call("wipe", path="x")), tools=[wipe], confirm=lambda n, p: answer)
    _, events = await collect(agent, "go")
    kinds = [
        e.kind
        for e in events
        if e.kind in ("approval_requested", "approval_resolved", "tool_started", "tool_finished")
    ]
    expected = ["approval_requested", "approval_resolved"]
    expected += ["tool_started", "tool_finished"] if answer else ["tool_finished"]
    assert kinds == expected


async def test_a_parameter_named_title_stays_in_the_function_tools_schema() -> None:
    @tool
    def note(title: str, body: str) -> str:
        """Write a note."""
        return f"{title}: {body}"

    assert note.parameters["properties"]["title"] == {"type": "string"}
    provider = batch(call("note", title="Plan", body="walk"))
    assert results_of(await Agent(provider, tools=[note]).run("go"))[0].content == "Plan: walk"
