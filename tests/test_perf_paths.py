"""The shortcuts of the performance work keep behaviour: one idle timer per event loop still
times out each stream on its own clock; output shapes made once per type are the right ones."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import anyio
import pydantic
import pytest

from fanloop import Agent, ModelSettings, RetryPolicy, TerminationReason, Tool
from fanloop._output import OutputSpec
from fanloop._settings import NO_SETTINGS
from fanloop.errors import ConfigurationError, ProviderTimeout, ToolError
from fanloop.events import TextDelta
from fanloop.providers import ModelRequest, ModelResponse, StopReason, Usage
from fanloop.testing import ScriptedProvider, reply


class Streams:
    """Streams ``n`` deltas ``gap`` seconds apart, then answers; ``n=None`` never sends one."""

    name = "streams"
    model = "streams-model"

    def __init__(self, n: int | None, gap: float = 0.0) -> None:
        self.n = n
        self.gap = gap

    async def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
        raise NotImplementedError

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
        async def events() -> AsyncIterator[Any]:
            if self.n is None:
                await anyio.Event().wait()
            for _ in range(self.n or 0):
                await anyio.sleep(self.gap)
                yield TextDelta("x")
            yield ModelResponse(
                content=reply("done").content,
                stop_reason=StopReason.END_TURN,
                usage=Usage(),
                model=self.model,
                provider=self.name,
            )

        yield events()


def _agent(provider: Any, idle: float) -> Agent[Any, Any]:
    return Agent(provider, retry=RetryPolicy(max_retries=0, stream_idle_timeout=idle))


async def test_streams_on_one_loop_each_time_out_on_their_own_clock() -> None:
    """A stream with a short idle timeout started after one with a long timeout is cut at
    its own deadline; the long one and a live one run on; a later silent one is cut too."""
    outcomes: dict[str, Any] = {}
    three_ended = anyio.Event()

    async def run(label: str, agent: Agent[Any, Any]) -> None:
        started = time.monotonic()
        try:
            result = await agent.run("go")
            outcomes[label] = (result.termination_reason, time.monotonic() - started)
        except ProviderTimeout:
            outcomes[label] = ("timeout", time.monotonic() - started)
        if len(outcomes) == 3:
            three_ended.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "silent, 30 s", _agent(Streams(None), 30))
            tg.start_soon(run, "live, 0.3 s", _agent(Streams(12, 0.1), 0.3))
            await anyio.sleep(0.05)
            tg.start_soon(run, "silent, 0.2 s", _agent(Streams(None), 0.2))
            await anyio.sleep(0.5)
            tg.start_soon(run, "silent again, 0.2 s", _agent(Streams(None), 0.2))
            await three_ended.wait()
            tg.cancel_scope.cancel()  # the 30 s one has made its point by still waiting
    assert outcomes["silent, 0.2 s"][0] == "timeout"
    assert outcomes["silent, 0.2 s"][1] < 5
    assert outcomes["silent again, 0.2 s"][0] == "timeout"
    assert outcomes["live, 0.3 s"][0] is TerminationReason.COMPLETED
    assert "silent, 30 s" not in outcomes


async def test_many_silent_streams_all_time_out() -> None:
    results: list[str] = []

    async def run() -> None:
        try:
            await _agent(Streams(None), 0.2).run("go")
        except ProviderTimeout:
            results.append("timeout")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(run)
    assert results == ["timeout"] * 50


def test_an_output_type_is_made_once_and_shared() -> None:
    @dataclass
    class Invoice:
        total: int

    first, second = OutputSpec(Invoice), OutputSpec(Invoice, retries=3)
    assert first.adapter is second.adapter
    assert first.parameters is second.parameters
    assert second.retries == 3
    assert first.parse_arguments({"total": 3}) == Invoice(3)


def test_equal_but_different_types_get_their_own_schema() -> None:
    """``int | str == str | int``, but the schemas list the variants in their own order."""
    left = OutputSpec(int | str).parameters["properties"]["response"]["anyOf"]
    right = OutputSpec(str | int).parameters["properties"]["response"]["anyOf"]
    assert [v["type"] for v in left] == ["integer", "string"]
    assert [v["type"] for v in right] == ["string", "integer"]


def test_types_of_the_same_name_are_not_confused() -> None:
    def make(field: str) -> type:
        return pydantic.create_model("Answer", **{field: (int, ...)})

    a, b = OutputSpec(make("x")), OutputSpec(make("y"))
    assert list(a.parameters["properties"]) == ["x"]
    assert list(b.parameters["properties"]) == ["y"]


def test_unhashable_and_unusable_output_types() -> None:
    spec = OutputSpec(Annotated[int, pydantic.Field(gt=0)])
    assert spec.parse_arguments({"response": 3}) == 3
    assert OutputSpec(Literal["a", "b"]).wrapped
    with pytest.raises(ConfigurationError, match="cannot be used"):
        OutputSpec(object())


def test_a_text_output_needs_no_adapter_until_asked() -> None:
    spec = Agent(ScriptedProvider([])).output
    assert spec.is_text and spec.name == "str"
    assert spec.dump("hi") == "hi"
    assert spec.adapter.validate_python("x") == "x"  # made on first use
    assert spec.parameters["properties"]["response"] == {"type": "string"}


def test_agents_without_settings_share_the_empty_ones() -> None:
    plain = Agent(ScriptedProvider([]))
    assert plain.model_settings is NO_SETTINGS
    assert plain.model_settings == ModelSettings()
    tuned = Agent(ScriptedProvider([]), model_settings=ModelSettings(temperature=0.5))
    assert tuned.model_settings.temperature == 0.5
    assert ModelSettings() == NO_SETTINGS  # untouched by the shortcut
    assert (
        plain.with_options(model_settings=ModelSettings(max_tokens=10)).model_settings.max_tokens
        == 10
    )


class Lookup(Tool):
    name = "lookup"
    parameters = {
        "type": "object",
        "properties": {"key": {"type": "string", "maxLength": 3}},
        "required": ["key"],
        "additionalProperties": False,
    }

    async def run(self, **kwargs: Any) -> str:  # pragma: no cover
        return "ok"


def test_instances_of_a_tool_class_share_one_checked_validator() -> None:
    first, second = Lookup(), Lookup()
    first.validate({"key": "abc"})
    second.validate({"key": "abc"})
    assert first.__dict__["_fanloop_validator"][1] is second.__dict__["_fanloop_validator"][1]
    with pytest.raises(ToolError, match="too long"):
        second.validate({"key": "abcd"})
    third = Lookup()
    third.parameters = {**Lookup.parameters, "properties": {"key": {"type": "integer"}}}
    third.validate({"key": 5})  # its own schema, its own validator
    with pytest.raises(ToolError, match="not of type 'integer'"):
        third.validate({"key": "abc"})


def test_an_invalid_schema_is_refused_for_every_instance() -> None:
    class Broken(Lookup):
        parameters = {"type": "object", "properties": {"key": {"type": "strung"}}}

    for _ in range(2):
        with pytest.raises(ConfigurationError, match="invalid parameters schema"):
            Broken().validate({"key": "a"})


async def test_on_the_aiohttp_pool_no_httpx2_request_or_response_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("aiohttp")
    import httpx2

    from fanloop.messages import Message
    from fanloop.providers.anthropic import AnthropicProvider
    from fanloop.providers.openai import OpenAIProvider
    from fanloop.testing import FakeLLMServer

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hot path built an httpx2 object")

    monkeypatch.setattr(httpx2.AsyncClient, "build_request", refuse)
    monkeypatch.setattr(httpx2.AsyncClient, "send", refuse)
    monkeypatch.setattr(httpx2.Response, "__init__", refuse)
    with FakeLLMServer(["one", "two", "three", "four"]) as server:
        for provider in (
            OpenAIProvider("m", api_key="k", base_url=server.openai_base_url, transport="aiohttp"),
            AnthropicProvider("m", api_key="k", base_url=server.url, transport="aiohttp"),
        ):
            async with provider:
                agent = Agent(provider)
                assert (await agent.run("hi")).text  # streamed
                assert (await provider.complete(ModelRequest(messages=(Message.user("hi"),)))).text


def test_built_messages_share_one_field_set_that_never_changes() -> None:
    from fanloop.messages import Message

    a, b = Message.user("a"), Message.user("b")
    assert a.model_fields_set is b.model_fields_set == {"role", "content", "origin"}
    with pytest.raises(pydantic.ValidationError):
        a.role = "assistant"  # type: ignore[misc]
    copied = a.model_copy(update={"role": "assistant"})
    assert copied.role == "assistant" and copied.model_fields_set is not a.model_fields_set
    assert b.model_fields_set == {"role", "content", "origin"}


async def test_a_waiting_run_holds_none_of_what_it_builds_on_first_use() -> None:
    """A run waiting on its model has no budget sets, no stall detector, no usage of its own
    and no anyio cancel scope for the idle watch (each an object per run in flight); they are
    built when used, and a run still counts usage, detects stalls and times out."""
    import asyncio

    from fanloop._model_types import zero_usage
    from fanloop._scope import current_run

    seen: dict[str, Any] = {}

    class Waits(Streams):
        async def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
            raise NotImplementedError

        @asynccontextmanager
        async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Any]]:
            run = current_run()
            assert run is not None
            task = asyncio.current_task()
            assert task is not None
            seen.update(
                probing=run.budget._probing,
                warned=run.budget._warned,
                stall=run.stall,
                usage=run.usage,
                budget_usage=run.budget.usage,
                cancelling=task.cancelling(),
            )
            async with super().stream(request) as events:
                yield events

    policy = RetryPolicy(max_retries=0, stream_idle_timeout=30)
    result = await Agent(Waits(2), retry=policy).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    assert seen == {
        "probing": None,
        "warned": None,
        "stall": None,
        "usage": zero_usage(),
        "budget_usage": zero_usage(),
        "cancelling": 0,
    }
    assert seen["usage"] is seen["budget_usage"]  # one shared frozen instance


async def test_a_finished_run_is_not_kept_alive_by_the_timers_it_armed() -> None:
    """Every callback the event loop schedules carries a snapshot of the context it was
    scheduled in, and a cancelled timer stays in the loop's heap until it is due (a read timeout,
    minutes away). Neither the connection's read timer nor the idle watch's may keep a finished
    run (its state, its conversation) alive through such a snapshot."""
    pytest.importorskip("aiohttp")
    import gc
    import weakref

    from fanloop._scope import current_run
    from fanloop.providers.openai import OpenAIProvider
    from fanloop.testing import FakeLLMServer, call

    runs: list[weakref.ref[Any]] = []

    async def note() -> str:
        """Note the run."""
        run = current_run()
        assert run is not None
        runs.append(weakref.ref(run))
        return "noted"

    script = [reply(tool_calls=[call("note")]), "done"] * 3
    policy = RetryPolicy(max_retries=0, stream_idle_timeout=600)
    with FakeLLMServer(script) as server:
        provider = OpenAIProvider(
            "m", api_key="k", base_url=server.openai_base_url, transport="aiohttp", timeout=600
        )
        async with provider:
            agent = Agent(provider, tools=[note], retry=policy)
            for _ in range(3):
                assert (await agent.run("go")).text == "done"
            gc.collect()
            # the pooled connection and its (cancelled) timers are still here; the runs are not
            assert len(runs) == 3
            assert [ref() for ref in runs] == [None, None, None]


def _awaiting(coro: Any) -> list[tuple[str, str]]:
    """The coroutines ``coro`` waits through, outermost first: (qualified name, file)."""
    chain = []
    while (code := getattr(coro, "cr_code", None)) is not None:
        chain.append((code.co_qualname, code.co_filename))
        coro = coro.cr_await
    return chain


async def test_a_run_waiting_for_its_response_holds_one_frame_per_layer() -> None:
    """With thousands of runs in flight, each coroutine a waiting run holds is an object the
    collector walks in every pass. Between the task and the transport a run waiting for the
    model's response holds one frame for each layer that does work after the wait: no wrapper
    that only checks ``Agent.run``'s keywords, no ``HTTPProvider._post`` under the stream's
    ``__aenter__``."""
    pytest.importorskip("aiohttp")
    import asyncio
    import os
    import threading

    import fanloop
    from fanloop.providers.openai import OpenAIProvider
    from fanloop.testing import FakeLLMServer

    arrived = threading.Event()
    release = threading.Event()

    def respond(body: dict[str, Any]) -> str:
        if seen and not arrived.is_set():  # the second run's request: held until released
            arrived.set()
            release.wait(60)  # (the server's own thread: the run's loop goes on)
        seen.append(body)
        return "done"

    seen: list[dict[str, Any]] = []

    with FakeLLMServer(responder=respond) as server:
        provider = OpenAIProvider(
            "m", api_key="k", base_url=server.openai_base_url, transport="aiohttp"
        )
        async with provider:
            agent = Agent(provider, retry=RetryPolicy(max_retries=0))
            assert (await agent.run("warm")).text == "done"  # the pool is open for this loop
            task = asyncio.ensure_future(agent.run("go"))
            try:
                await anyio.to_thread.run_sync(arrived.wait, 60)
                chain = _awaiting(task.get_coro())
            finally:
                release.set()
            assert (await task).text == "done"
    package = os.path.dirname(fanloop.__file__)
    ours = [name for name, file in chain if file.startswith(package)]
    assert ours[0] == "Agent.run"  # the task's own coroutine: no wrapper around it
    assert "HTTPProvider._post" not in ours
    assert len(ours) == len(set(ours)) <= 8, ours
    assert ours[-1] == "AiohttpTransport._send"
