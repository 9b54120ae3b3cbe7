"""AGUIApp over real HTTP (uvicorn on 127.0.0.1): requests, approvals across processes,
disconnects, slow clients, many clients. The protocol's own checks are in
``test_agui_conformance.py``."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from _agui_child import build
from ui_helpers import Ended, serve

from fanloop import Agent, Hooks, tool
from fanloop.errors import RequestInvalid
from fanloop.providers import ModelRequest
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply
from fanloop.ui import AGUIApp, agui_events

HERE = Path(__file__).parent


def run_input(thread: str = "t", text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"r-{time.monotonic_ns()}",
        "messages": [{"id": f"m-{text}", "role": "user", "content": text}],
        **extra,
    }


async def post(url: str, body: Any) -> list[dict[str, Any]]:
    async with (
        httpx2.AsyncClient(timeout=60) as client,
        client.stream("POST", url, json=body) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return [
            json.loads(line[6:])
            async for line in response.aiter_lines()
            if line.startswith("data: ")
        ]


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 12 C"


async def test_tool_calls_stream_with_their_arguments_and_results() -> None:
    provider = ScriptedProvider(
        [reply(tool_calls=[call("lookup", city="Oslo"), call("lookup", city="Rome")]), "Cold."],
        chunk_size=4,
    )
    with serve(AGUIApp(Agent(provider, tools=[lookup]))) as url:
        events = await post(url, run_input())
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert [e["toolCallName"] for e in starts] == ["lookup", "lookup"]
    for start in starts:
        args = "".join(
            e["delta"]
            for e in events
            if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == start["toolCallId"]
        )
        assert json.loads(args)["city"] in ("Oslo", "Rome")
    results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert sorted(results.values()) == ["Oslo: 12 C", "Rome: 12 C"]
    ends = [i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_END"]
    first_result = next(i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_RESULT")
    assert len(ends) == 2 and max(ends) < first_result
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == "Cold."


async def test_thinking_arrives_as_reasoning_events() -> None:
    provider = ScriptedProvider([reply("Four.", thinking="two plus two")])
    with serve(AGUIApp(Agent(provider))) as url:
        events = await post(url, run_input())
    kinds = [e["type"] for e in events]
    assert kinds.index("REASONING_START") < kinds.index("REASONING_MESSAGE_CONTENT")
    assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")
    thought = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert thought == "two plus two"


@pytest.fixture
def child_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A second process serving AGUIApp on the same SQLite store: (its URL, the db path)."""
    db = str(tmp_path / "sessions.db")
    process = subprocess.Popen(
        [sys.executable, str(HERE / "_agui_child.py"), db],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until it listens, or EOF
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}", db
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


async def test_an_approval_is_answered_in_another_process(child_server: tuple[str, str]) -> None:
    other, db = child_server
    with serve(build(db)) as here:
        first = await post(here, run_input("job-7", "delete a.txt"))
        (interrupt,) = first[-1]["outcome"]["interrupts"]
        answer = run_input(
            "job-7",
            "delete a.txt",
            resume=[
                {
                    "interruptId": interrupt["id"],
                    "status": "resolved",
                    "payload": {"approved": True},
                }
            ],
        )
        second = await post(other, answer)  # the other process runs the parked call
        result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
        assert result == {**result, "toolCallId": interrupt["id"], "content": "deleted a.txt"}
        text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "Done: deleted a.txt"
        # the same answer again, here: it has run; nothing runs twice
        again = await post(here, answer)
    assert again[-1]["type"] == "RUN_ERROR"
    assert again[-1]["code"] == "approval_conflict"


async def test_a_thread_that_waits_offers_its_interrupt_again() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("delete_file", path="x")])])
    from _agui_child import delete_file

    with serve(AGUIApp(Agent(provider, tools=[delete_file]))) as url:
        first = await post(url, run_input("w", "delete x"))
        again = await post(url, run_input("w", "something else"))
        wrong = await post(
            url,
            run_input("w", resume=[{"interruptId": "nope", "status": "resolved", "payload": True}]),
        )
    assert again[-1]["outcome"] == first[-1]["outcome"]
    assert len(provider.requests) == 1  # no model call for the repeat
    assert wrong[-1]["type"] == "RUN_ERROR" and wrong[-1]["code"] == "approval_invalid"


async def test_state_is_kept_with_the_thread_and_history_seeds_a_new_one() -> None:
    provider = ScriptedProvider(lambda request: f"seen {len(request.messages)}")
    body = run_input("s", "third", state={"theme": "dark"})
    body["messages"] = [
        {"id": "1", "role": "user", "content": "first"},
        {"id": "2", "role": "assistant", "content": "an answer"},
        {"id": "3", "role": "user", "content": "third"},
    ]
    with serve(AGUIApp(Agent(provider))) as url:
        first = await post(url, body)
        reloaded = await post(url, {**body, "runId": "again", "state": None})
        fresh = await post(url, run_input("s", "fourth"))
    assert first[-1]["result"] == "seen 3"  # the client's history, then the new message
    assert not any(e["type"] == "STATE_SNAPSHOT" for e in first)
    snapshot = next(e for e in reloaded if e["type"] == "STATE_SNAPSHOT")
    assert snapshot["snapshot"] == {"theme": "dark"}
    assert not any(e["type"] == "TEXT_MESSAGE_START" for e in reloaded)  # "third" ran once
    assert fresh[-1]["result"] == "seen 5"


async def test_malformed_requests_are_refused_before_any_stream() -> None:
    app = AGUIApp(Agent(ScriptedProvider(["x"])), max_request_bytes=10_000)
    with serve(app) as url:
        async with httpx2.AsyncClient(timeout=30) as client:
            bad_json = await client.post(url, content=b"{not json")
            no_thread = await client.post(url, json={"runId": "r", "messages": []})
            too_big = await client.post(url, json=run_input(text="x" * 20_000))
            bad_tool = await client.post(url, json=run_input(tools=[{"name": "a b"}]))
            too_many = await client.post(url, json=run_input(resume=[{}] * 65))
            get = await client.get(url)
    assert (bad_json.status_code, bad_json.json()["code"]) == (400, "bad_json")
    assert (no_thread.status_code, no_thread.json()["code"]) == (400, "bad_id")
    assert (too_big.status_code, too_big.json()["code"]) == (400, "too_large")
    assert (bad_tool.status_code, bad_tool.json()["code"]) == (400, "bad_tool")
    assert (too_many.status_code, too_many.json()["code"]) == (400, "too_large")
    assert get.status_code == 405


async def test_a_client_that_disconnects_cancels_its_run() -> None:
    ended = Ended()
    long_text = "word " * 2_000  # about 800 frames at 12 characters, 20 ms apart
    with FakeLLMServer(
        [reply(long_text, tool_calls=[call("lookup", city="Oslo")]), "never asked"],
        delta_delay=0.02,
    ) as llm:
        from fanloop.providers.openai import OpenAIProvider

        provider = OpenAIProvider("gpt-4.1", base_url=llm.openai_base_url, api_key="k")
        agent = Agent(provider, tools=[lookup], observer=ended)
        with serve(AGUIApp(agent)) as url:
            async with (
                httpx2.AsyncClient(timeout=30) as client,
                client.stream("POST", url, json=run_input()) as response,
            ):
                async for line in response.aiter_lines():
                    if "TEXT_MESSAGE_CONTENT" in line:
                        break  # the page is closed mid-answer
            assert ended.done.wait(30), "the run did not end after the client left"
        assert ended.reasons == ["cancelled"]
        assert len(llm.requests) == 1  # the tool call's follow-up was never asked for


async def test_a_client_that_does_not_read_holds_the_run_back() -> None:
    produced = 0

    def count(_: str) -> None:
        nonlocal produced
        produced += 1

    ended = Ended()
    total = 200_000  # deltas; unread, their frames would be about 20 MB
    provider = ScriptedProvider(["abcd" * total], chunk_size=4)
    agent = Agent(provider, hooks=Hooks(on_text_delta=count), observer=ended)
    with serve(AGUIApp(agent)) as url:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(run_input()).encode()
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        try:
            sock.sendall(
                b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            sock.recv(1024)  # the response has started; now read nothing more
            seen = -1
            deadline = time.monotonic() + 30
            while produced != seen and time.monotonic() < deadline:
                seen = produced
                await anyio.sleep(0.5)  # the run stalls once every buffer is full
            assert produced == seen, "the run never stopped for the reader"
            assert produced < total // 4, f"{produced} of {total} deltas made for a stalled reader"
        finally:
            sock.close()
        assert ended.done.wait(30)
    assert ended.reasons == ["cancelled"]


async def test_agui_events_yields_sse_strings_and_stops_the_run_when_closed() -> None:
    ended = Ended()
    agent = Agent(ScriptedProvider(["one two three " * 500], chunk_size=8), observer=ended)
    events = agui_events(agent, json.dumps(run_input()))
    first = await events.__anext__()
    assert first.startswith("data: ") and first.endswith("\n\n")
    assert json.loads(first[6:])["type"] == "RUN_STARTED"
    await events.__anext__()
    await events.aclose()
    assert ended.reasons == ["cancelled"]
    with pytest.raises(RequestInvalid):
        await agui_events(agent, "{}").__anext__()


@pytest.mark.slow
async def test_five_hundred_concurrent_clients() -> None:
    def respond(request: ModelRequest) -> str:
        return "streamed answer for " + request.messages[-1].text

    app = AGUIApp(Agent(ScriptedProvider(respond, chunk_size=8)))
    n = 500
    finished: list[str] = []
    limits = httpx2.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    with serve(app, backlog=n * 2) as url:
        async with httpx2.AsyncClient(timeout=120, limits=limits) as client:

            async def one(i: int) -> None:
                async with client.stream("POST", url, json=run_input(f"c{i}", f"q{i}")) as r:
                    text = ""
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            event = json.loads(line[6:])
                            if event["type"] == "TEXT_MESSAGE_CONTENT":
                                text += event["delta"]
                            elif event["type"] == "RUN_FINISHED":
                                assert text == f"streamed answer for q{i}"
                                finished.append(event["threadId"])

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for i in range(n):
                        tg.start_soon(one, i)
    assert sorted(finished) == sorted(f"c{i}" for i in range(n))


async def test_parallel_sub_agents_interleave_each_tagged_with_its_lineage() -> None:
    def respond(request: ModelRequest) -> Any:
        if "sub-agent" in (request.system or ""):
            return "findings about " + request.messages[-1].text
        if len(request.messages) == 1:
            return reply(
                tool_calls=[call("delegate", task="north"), call("delegate", task="south")]
            )
        return "Merged."

    provider = ScriptedProvider(respond, chunk_size=2, delay=0.002)
    with serve(AGUIApp(Agent(provider, delegation=True))) as url:
        events = await post(url, run_input())
    started = {e["subagentRunId"]: e for e in events if e["type"] == "SUBAGENT_STARTED"}
    assert len(started) == 2
    calls = {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"}
    assert {s["parentToolCallId"] for s in started.values()} == calls
    texts = {
        sub: "".join(
            e["delta"]
            for e in events
            if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == sub
        )
        for sub in started
    }
    assert sorted(texts.values()) == ["findings about north", "findings about south"]
    order = [e.get("subagentRunId") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    switches = sum(1 for a, b in itertools.pairwise(order) if a != b)
    assert switches >= 3, "the two sub-agents did not stream side by side"
    finished = [e["subagentRunId"] for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert sorted(finished) == sorted(started)


async def test_a_provider_error_ends_the_stream_with_run_error() -> None:
    from fanloop.errors import AuthenticationError

    provider = ScriptedProvider([AuthenticationError("bad key", status_code=401)])
    with serve(AGUIApp(Agent(provider))) as url:
        events = await post(url, run_input())
    assert [e["type"] for e in events] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "STEP_FINISHED",
        "RUN_ERROR",
    ]
    assert events[-1]["code"] == "provider_error" and "bad key" in events[-1]["message"]


async def test_a_thread_runs_one_request_at_a_time() -> None:
    provider = ScriptedProvider(lambda request: "slow " * 200, chunk_size=5, delay=0.01)
    with serve(AGUIApp(Agent(provider))) as url:
        async with (
            httpx2.AsyncClient(timeout=60) as client,
            client.stream("POST", url, json=run_input("busy", "one")) as first,
        ):
            lines = first.aiter_lines()
            async for line in lines:
                if "TEXT_MESSAGE_CONTENT" in line:
                    break
            second = await post(url, run_input("busy", "two"))
            rest = [line async for line in lines if line.startswith("data: ")]
    assert second[-1]["type"] == "RUN_ERROR" and second[-1]["code"] == "session_busy"
    assert json.loads(rest[-1][6:])["type"] == "RUN_FINISHED"


async def test_without_ask_browser_the_agents_own_confirm_decides() -> None:
    from _agui_child import delete_file

    def confirm(name: str, preview: str) -> str:
        return f"no {name} today"

    script = [reply(tool_calls=[call("delete_file", path="x")]), "Understood."]
    agent = Agent(ScriptedProvider(script), tools=[delete_file], confirm=confirm)
    events = [e async for e in AGUIApp(agent, ask_browser=False).events(run_input())]
    assert events[-1]["outcome"] == {"type": "success"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "no delete_file today"


async def test_client_tools_wait_for_the_client_even_with_auto_approve() -> None:
    from _agui_child import delete_file

    script = [
        reply(tool_calls=[call("ask_user", q="sure?"), call("delete_file", path="x")]),
        "Both done.",
    ]
    provider = ScriptedProvider(script)
    app = AGUIApp(Agent(provider, tools=[delete_file], auto_approve=True), ask_browser=False)
    tools = [{"name": "ask_user", "description": "Ask the user", "parameters": {"type": "object"}}]
    first = [e async for e in app.events(run_input("c", "go", tools=tools))]
    assert first[-1]["outcome"]["type"] == "success"
    (pending,) = first[-1]["outcome"]["pendingToolCallIds"]
    body = run_input("c", "go", tools=tools)
    body["messages"] += [
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": pending,
                    "type": "function",
                    "function": {"name": "ask_user", "arguments": "{}"},
                }
            ],
        },
        {"id": "r", "role": "tool", "toolCallId": pending, "content": "yes"},
    ]
    second = [e async for e in app.events(body)]
    results = [e["content"] for e in second if e["type"] == "TOOL_CALL_RESULT"]
    assert results == ["deleted x"]  # the client's own result is not echoed back
    assert second[-1]["result"] == "Both done."
    sent = provider.requests[-1].messages[-1].tool_results_parts
    assert [p.content for p in sent] == ["yes", "deleted x"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("[" * 100_000 + "]" * 100_000, "bad_json"),  # nesting past the parser's recursion
        ('{"threadId": "t", "runId": "r", "messages": 5}', "bad_input"),
        ('{"threadId": "t\\u0000", "runId": "r", "messages": []}', "bad_id"),
        ('{"threadId": "t", "runId": "r", "messages": ["hi"]}', "bad_input"),
        ('{"threadId": "t", "runId": "r", "messages": [{"role": "tool"}]}', "bad_input"),
        (json.dumps({**run_input(), "tools": [{"name": "a"}, {"name": "a"}]}), "bad_tool"),
        (
            '{"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": 1}]}',
            "bad_input",
        ),
    ],
)
def test_hostile_inputs_are_typed_errors(body: str, code: str) -> None:
    app = AGUIApp(Agent(ScriptedProvider(["x"])))
    with pytest.raises(RequestInvalid) as caught:
        app.events(body)
    assert caught.value.code == code


async def test_a_request_over_the_message_cap_is_refused() -> None:
    body = run_input()
    body["messages"] = [{"id": str(i), "role": "user", "content": "x"} for i in range(2_001)]
    with pytest.raises(RequestInvalid) as caught:
        AGUIApp(Agent(ScriptedProvider(["x"]))).events(body)
    assert caught.value.code == "too_large"


async def test_images_in_a_user_message_reach_the_model() -> None:
    import base64

    from fanloop.messages import ImagePart

    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
    provider = ScriptedProvider(["A tiny image."])
    body = run_input()
    body["messages"] = [
        {
            "id": "m",
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image",
                    "source": {
                        "type": "data",
                        "value": base64.b64encode(png).decode(),
                        "mimeType": "image/png",
                    },
                },
            ],
        }
    ]
    events = [e async for e in AGUIApp(Agent(provider)).events(body)]
    assert events[-1]["result"] == "A tiny image."
    sent = provider.requests[0].messages[0].content
    assert sent[0].text == "What is this?"
    assert isinstance(sent[1], ImagePart) and sent[1].data == png
    bad = {
        **body,
        "messages": [
            {
                "id": "m",
                "role": "user",
                "content": [{"type": "image", "source": {"type": "data", "value": "not base64!"}}],
            }
        ],
    }
    with pytest.raises(RequestInvalid) as caught:
        AGUIApp(Agent(provider)).events(bad)
    assert caught.value.code == "bad_part"


async def test_a_client_result_is_taken_even_when_the_tool_is_not_declared_again() -> None:
    provider = ScriptedProvider([reply(tool_calls=[call("pick", n=1)]), "Got it."])
    app = AGUIApp(Agent(provider))
    tools = [{"name": "pick", "description": "Pick a number", "parameters": {"type": "object"}}]
    first = [e async for e in app.events(run_input("p", "go", tools=tools))]
    (pending,) = first[-1]["outcome"]["pendingToolCallIds"]
    body = run_input("p", "go")  # no tools this time
    body["messages"] += [
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {"id": pending, "type": "function", "function": {"name": "pick", "arguments": "{}"}}
            ],
        },
        {"id": "r", "role": "tool", "toolCallId": pending, "content": "7"},
    ]
    second = [e async for e in app.events(body)]
    assert not any(e["type"] == "TOOL_CALL_RESULT" for e in second)
    assert second[-1]["result"] == "Got it."
    assert provider.requests[-1].messages[-1].tool_results_parts[0].content == "7"


async def test_text_that_is_not_valid_unicode_still_streams() -> None:
    provider = ScriptedProvider(["half a pair \ud83d and é"])
    with serve(AGUIApp(Agent(provider))) as url:
        events = await post(url, run_input())
    assert events[-1]["type"] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("half a pair") and text.endswith("and é")


def test_the_public_names_are_pinned() -> None:
    import fanloop.ui

    assert sorted(fanloop.ui.__all__) == fanloop.ui.__all__
    assert {"AGUIApp", "agui_events"} <= set(fanloop.ui.__all__)
    assert RequestInvalid.__module__ == "fanloop.errors"
