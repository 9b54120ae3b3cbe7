"""Logging: structlog events with run_id / agent_path bound, and silence for applications that
configured nothing (the library never configures logging)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import structlog
from structlog.contextvars import get_contextvars, merge_contextvars
from structlog.testing import capture_logs

from fanloop import Agent, Delegation, RetryPolicy, tool
from fanloop.errors import Overloaded
from fanloop.providers import ModelRequest
from fanloop.testing import ScriptedProvider, call, reply

FAST = RetryPolicy(max_retries=3, base_delay=0, jitter=False)
LEAD = "You lead."


@pytest.fixture(autouse=True)
def _clean_structlog() -> Iterator[None]:
    """Each test starts with structlog unconfigured (as an application that did nothing)."""
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@tool
async def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


def retrying_provider() -> ScriptedProvider:
    return ScriptedProvider([Overloaded("busy"), "fine"])


def lead_with_retry_after_delegation(n_delegates: int) -> Any:
    """The lead delegates ``n_delegates`` tasks, then its next call fails once and is retried."""
    calls = {"lead": 0}

    def respond(request: ModelRequest) -> Any:
        if request.system != LEAD:
            if request.messages[0].text == "child-retry" and len(request.messages) == 1:
                calls.setdefault("child", 0)
                calls["child"] += 1
                if calls["child"] == 1:
                    return Overloaded("child busy")
            return "sub-agent answer"
        calls["lead"] += 1
        if calls["lead"] == 1:
            tasks = ["child-retry", *(f"t{i}" for i in range(1, n_delegates))]
            return reply(tool_calls=[call("delegate", task=t) for t in tasks])
        if calls["lead"] == 2:
            return Overloaded("lead busy")
        return "done"

    return respond


# -- structlog ------------------------------------------------------------------------------


async def test_a_retry_logs_model_call_retry_with_run_id_and_agent_path() -> None:
    agent = Agent(retrying_provider(), retry=FAST, name="support")
    with capture_logs(processors=[merge_contextvars]) as logs:
        result = await agent.run("hi")
    (entry,) = [e for e in logs if e["event"] == "model_call_retry"]
    assert entry["run_id"] == result.run_id
    assert entry["agent_path"] == "support"
    assert entry["attempt"] == 1
    assert entry["error"] == "Overloaded"
    assert entry["delay"] == 0
    assert entry["log_level"] == "info"


async def test_a_final_failure_logs_model_call_failed_as_a_warning() -> None:
    agent = Agent(ScriptedProvider(lambda r: Overloaded("busy")), retry=RetryPolicy(max_retries=1))
    agent = agent.with_options(retry=RetryPolicy(max_retries=1, base_delay=0))
    with capture_logs(processors=[merge_contextvars]) as logs, pytest.raises(Overloaded):
        await agent.run("hi")
    (entry,) = [e for e in logs if e["event"] == "model_call_failed"]
    assert entry["log_level"] == "warning"
    assert entry["attempt"] == 2
    assert entry["run_id"]


async def test_subagent_lines_carry_their_own_run_id_and_agent_path() -> None:
    agent = Agent(
        ScriptedProvider(lead_with_retry_after_delegation(2)),
        system=LEAD,
        delegation=Delegation(tools=[]),
        retry=FAST,
    )
    with capture_logs(processors=[merge_contextvars]) as logs:
        result = await agent.run("go")
    retries = [e for e in logs if e["event"] == "model_call_retry"]
    child = [e for e in retries if e["agent_path"] == "agent/delegate-1"]
    assert len(child) == 1
    assert child[0]["run_id"] != result.run_id


async def test_the_parent_keeps_its_own_run_id_after_a_single_delegation() -> None:
    agent = Agent(
        ScriptedProvider(lead_with_retry_after_delegation(1)),
        system=LEAD,
        delegation=Delegation(tools=[]),
        retry=FAST,
    )
    with capture_logs(processors=[merge_contextvars]) as logs:
        result = await agent.run("go")
    retries = [e for e in logs if e["event"] == "model_call_retry"]
    assert len(retries) == 2  # the child's and then the lead's
    assert retries[-1]["agent_path"] == "agent"
    assert retries[-1]["run_id"] == result.run_id


async def test_a_run_leaves_no_context_bound_in_the_caller() -> None:
    structlog.contextvars.bind_contextvars(request_id="r-1")
    await Agent(ScriptedProvider(["hi"])).run("hello")
    assert get_contextvars() == {"request_id": "r-1"}


async def test_the_library_never_configures_structlog() -> None:
    agent = Agent(ScriptedProvider([reply(tool_calls=[call("explode")]), "done"]), tools=[explode])
    await agent.run("go")
    assert not structlog.is_configured()


# -- an application that configured nothing -------------------------------------------------


async def test_nothing_reaches_stdout_from_a_normal_run(capsys: pytest.CaptureFixture[str]) -> None:
    agent = Agent(
        ScriptedProvider(
            [Overloaded("busy"), reply("let me try", tool_calls=[call("explode")]), "done"]
        ),
        tools=[explode],
        retry=FAST,
    )
    result = await agent.run("go")
    assert result.text == "done"
    assert capsys.readouterr().out == ""


async def test_a_streamed_run_is_silent_too(capsys: pytest.CaptureFixture[str]) -> None:
    async with Agent(retrying_provider(), retry=FAST).stream("go") as run:
        async for _ in run:
            pass
    assert run.result.text == "fine"
    assert capsys.readouterr().out == ""


async def test_unconfigured_structlog_routes_to_stdlib_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fanloop")
    result = await Agent(retrying_provider(), retry=FAST).run("hi")
    (record,) = [r for r in caplog.records if r.getMessage().startswith("model_call_retry")]
    assert record.name == "fanloop"
    assert record.levelno == logging.INFO
    assert f"run_id={result.run_id!r}" in record.getMessage()
    assert "agent_path='agent'" in record.getMessage()


async def test_stdlib_logging_below_warning_is_filtered_by_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fanloop")
    agent = Agent(ScriptedProvider([reply(tool_calls=[call("explode")]), "done"]), tools=[explode])
    await Agent(retrying_provider(), retry=FAST).run("hi")
    await agent.run("go")
    messages = [r.getMessage() for r in caplog.records]
    # A retried call and a tool whose error went to the model are recovered: not warnings.
    assert not any(
        m.startswith(("model_call_retry", "run_finished", "tool_failed")) for m in messages
    )


async def test_nothing_reaches_stdout_after_capture_logs_was_used(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with capture_logs():
        pass
    await Agent(ScriptedProvider(["hi"])).run("hello")
    assert capsys.readouterr().out == ""


async def test_logs_in_concurrent_runs_keep_their_own_run_ids() -> None:
    failed_once: set[str] = set()

    def respond(request: ModelRequest) -> Any:
        prompt = request.messages[0].text
        if prompt != "quiet" and prompt not in failed_once:
            failed_once.add(prompt)
            return Overloaded(f"{prompt} busy")
        return "ok"

    agent = Agent(ScriptedProvider(respond), retry=FAST)
    results: dict[str, Any] = {}

    async def one(prompt: str) -> None:
        results[prompt] = await agent.run(prompt)

    with capture_logs(processors=[merge_contextvars]) as logs:
        async with anyio.create_task_group() as tg:
            for prompt in ("x", "quiet", "z"):
                tg.start_soon(one, prompt)
    retries = {e["run_id"] for e in logs if e["event"] == "model_call_retry"}
    assert retries == {results["x"].run_id, results["z"].run_id}


@pytest.mark.parametrize("level", [None, "INFO"])
def test_an_application_that_configured_nothing_sees_only_what_it_must_fix(
    tmp_path: Any, level: str | None
) -> None:
    """A confirm callback that raises (a broken safety gate) shows its traceback; a tool that
    raised, whose error the model got as its result, shows only once INFO is asked for, with
    the traceback where it failed."""
    import subprocess
    import sys

    program = tmp_path / "app.py"
    program.write_text(
        "import anyio, logging\n"
        + (f"logging.basicConfig(level=logging.{level})\n" if level else "")
        + "from fanloop import Agent, tool\n"
        "from fanloop.testing import ScriptedProvider, call, reply\n"
        "@tool\n"
        "def explode() -> str:\n"
        '    """Boom."""\n'
        '    return {}["missing"]\n'
        "@tool(dangerous=True)\n"
        "def wipe() -> str:\n"
        '    """Wipe."""\n'
        '    return "wiped"\n'
        "def confirm(name, preview):\n"
        '    raise KeyError("no such user")\n'
        "model = ScriptedProvider([reply(tool_calls=[call('explode'), call('wipe')]), 'done'])\n"
        "agent = Agent(model, tools=[explode, wipe], confirm=confirm)\n"
        "print(anyio.run(agent.run, 'go').text)\n"
    )
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60)
    assert out.stdout == "done\n"
    if level is None:
        assert "tool_failed" not in out.stderr and 'return {}["missing"]' not in out.stderr
    else:
        assert "tool_failed" in out.stderr and 'return {}["missing"]' in out.stderr
    assert "confirm_failed" in out.stderr and 'raise KeyError("no such user")' in out.stderr
    assert f'File "{program}"' in out.stderr
