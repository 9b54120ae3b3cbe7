"""Both browser apps under hostile or unlucky conditions: a server's forced shutdown
mid-stream, a framework that drops a stream it cancelled, hostile ids, names, schemas and
state, text that tries to forge SSE frames, answers racing for one approval."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from _vercel_support import user
from ui_helpers import Ended, serve

from fanloop import Agent, tool
from fanloop.errors import RequestInvalid
from fanloop.sessions import SQLiteStore
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.ui import AGUIApp, VercelAIApp
from fanloop.ui._agui import parse_input
from fanloop.ui._vercel import parse_request


def agui_body(thread: str = "t", text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"r-{time.monotonic_ns()}",
        "messages": [{"id": f"m-{text}", "role": "user", "content": text}],
        **extra,
    }


def vercel_body(chat: str = "c", text: str = "hi") -> dict[str, Any]:
    return {"id": chat, "messages": [user(text)]}


BODIES = {"agui": agui_body, "vercel": vercel_body}


def make_app(kind: str, agent: Agent, **options: Any) -> Any:
    return AGUIApp(agent, **options) if kind == "agui" else VercelAIApp(agent, **options)


class Stalled:
    """An ASGI wrapper whose client stops reading after a few frames (its ``send`` waits for
    ever, as uvicorn's does on a full socket); it keeps what the app raised."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stuck = threading.Event()
        self.raised: list[BaseException] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        frames = 0

        async def stalled_send(message: dict[str, Any]) -> None:
            nonlocal frames
            if message["type"] == "http.response.body":
                frames += 1
                if frames > 3:
                    self.stuck.set()
                    await anyio.sleep_forever()
            await send(message)

        try:
            await self.app(scope, receive, stalled_send)
        except BaseException as exc:
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                self.raised.append(exc)
            raise


@pytest.mark.parametrize("kind", ["agui", "vercel"])
def test_a_forced_shutdown_mid_stream_cancels_the_run_cleanly(kind: str) -> None:
    """uvicorn's forced shutdown cancels the request's task in the middle of a ``send``: the
    run ends ``cancelled`` and no cancel scope is left by the wrong task."""
    ended = Ended()
    agent = Agent(ScriptedProvider(["word " * 20_000], chunk_size=5), observer=ended)
    app = Stalled(make_app(kind, agent))
    body = json.dumps(BODIES[kind]()).encode()
    with serve(app, timeout_graceful_shutdown=0.5) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert app.stuck.wait(30), "the stream never started"
    # leaving serve() shut the server down while the request's task waited in send
    sock.close()
    assert ended.done.wait(30), "the run did not end"
    assert ended.reasons == ["cancelled"]
    assert app.raised == []


@pytest.mark.parametrize("kind", ["agui", "vercel"])
async def test_a_stream_a_framework_drops_is_closed_from_any_task(kind: str) -> None:
    """Starlette's ``StreamingResponse`` cancels its iteration and drops the iterator; Python
    then closes it from a task of its own. The run still ends, and no scope is exited by the
    wrong task."""
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    try:
        ended = Ended()
        agent = Agent(ScriptedProvider(["word " * 20_000], chunk_size=5), observer=ended)
        app = make_app(kind, agent)
        held = [app.events(agui_body()) if kind == "agui" else app.sse(vercel_body())]
        read_two = anyio.Event()

        async def respond() -> None:  # what StreamingResponse.stream_response does
            await anext(held[0])
            await anext(held[0])
            read_two.set()
            await anyio.sleep_forever()  # a send waiting on the socket

        async with anyio.create_task_group() as tg:
            tg.start_soon(respond)
            await read_two.wait()
            tg.cancel_scope.cancel()  # the client left: the framework cancels, and drops it
        held.clear()
        gc.collect()
        assert await anyio.to_thread.run_sync(ended.done.wait, 30), "the run did not end"
        await asyncio.sleep(0)  # let a finalizer's task report
        assert ended.reasons == ["cancelled"]
        assert problems == []
    finally:
        loop.set_exception_handler(None)


def deep(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"threadId": "t\n"}, "bad_id"),  # a trailing newline passed an anchored ``$``
        ({"tools": [{"name": "lookup\n"}]}, "bad_tool"),
        ({"tools": [{"name": "a.b"}]}, "bad_tool"),  # model APIs refuse '.'
        ({"tools": [{"name": "t", "parameters": deep(200)}]}, "too_large"),
        (
            {"tools": [{"name": "t", "parameters": {"description": "x" * 40_000}}]},
            "too_large",
        ),
        ({"state": deep(200)}, "too_large"),
        ({"state": {"big": "x" * 300_000}}, "too_large"),
    ],
)
def test_agui_hostile_ids_names_schemas_and_state_are_refused(
    extra: dict[str, Any], code: str
) -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_input({**agui_body(), **extra})
    assert caught.value.code == code


def test_agui_reasonable_schemas_and_state_pass() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    turn, _ = parse_input(
        {
            **agui_body(),
            "tools": [{"name": "search-web_2", "parameters": schema}],
            "state": deep(20),
        }
    )
    assert turn.client_tools[0].name == "search-web_2"


def test_vercel_chat_id_with_a_newline_is_refused() -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_request({"id": "chat\n", "messages": [user("hi")]})
    assert caught.value.code == "bad_id"


FORGED = 'a\n\ndata: {"type":"RUN_FINISHED"}\n\ndata: [DONE]\n\nevent: x\r\n'


@pytest.mark.parametrize("kind", ["agui", "vercel"])
async def test_model_text_cannot_forge_sse_frames(kind: str) -> None:
    agent = Agent(ScriptedProvider([FORGED], chunk_size=len(FORGED)))
    with serve(make_app(kind, agent)) as url:
        async with httpx2.AsyncClient(timeout=30) as client:
            response = await client.post(url, json=BODIES[kind]())
    frames = response.text.split("\n\n")
    assert frames[-1] == ""
    datas = [f.removeprefix("data: ") for f in frames[:-1]]
    assert all(f.startswith("data: ") and "\n" not in f and "\r" not in f for f in frames[:-1])
    events = [json.loads(d) for d in datas if d != "[DONE]"]
    deltas = [e["delta"] for e in events if e["type"] in ("TEXT_MESSAGE_CONTENT", "text-delta")]
    assert "".join(deltas) == FORGED
    assert datas.count("[DONE]") == (1 if kind == "vercel" else 0)
    assert sum(e["type"] in ("RUN_FINISHED", "finish") for e in events) == 1


ran: list[str] = []


@tool(dangerous=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(path)
    return f"deleted {path}"


async def test_two_processes_racing_to_answer_one_approval_run_the_call_once(
    tmp_path: Path,
) -> None:
    """Two apps (as two processes would) share a store; both get the same answer at once:
    the call runs once, and the other answer is a typed ``approval_conflict``."""
    ran.clear()
    provider = ScriptedProvider(
        [reply(tool_calls=[call("delete_file", _id="d1", path="/x")]), "done", "done"]
    )
    agent = Agent(provider, tools=[delete_file])
    db = tmp_path / "s.db"
    one, two = AGUIApp(agent, store=SQLiteStore(db)), AGUIApp(agent, store=SQLiteStore(db))
    first = [e async for e in one.events(agui_body("race", "delete /x"))]
    assert first[-1]["outcome"]["type"] == "interrupt"
    answer = {
        **agui_body("race"),
        "messages": [],
        "resume": [{"interruptId": "d1", "payload": True}],
    }
    outcomes: list[list[dict[str, Any]]] = []

    async def answer_with(app: AGUIApp) -> None:
        outcomes.append([e async for e in app.events(answer)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_with, one)
        tg.start_soon(answer_with, two)
    assert ran == ["/x"]
    ends = sorted(o[-1]["type"] for o in outcomes)
    assert ends == ["RUN_ERROR", "RUN_FINISHED"]
    error = next(o[-1] for o in outcomes if o[-1]["type"] == "RUN_ERROR")
    assert error["code"] == "approval_conflict"


def test_a_route_and_a_mount_answer_both_paths_without_a_redirect() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    chat = VercelAIApp(Agent(ScriptedProvider(["bare", "slashed"])))
    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"]), Mount("/api/chat", chat)])
    with serve(app) as url, httpx2.Client(timeout=30) as client:
        bare = client.post(url + "/api/chat", json=vercel_body("b"))
        slashed = client.post(url + "/api/chat/", json=vercel_body("s"))
    assert (bare.status_code, slashed.status_code) == (200, 200)
    assert '"delta":"bare"' in bare.text and '"delta":"slashed"' in slashed.text
