"""``fanloop web``: the server a user starts, over real HTTP; its demo model; its guard."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx2
import pytest
from web_process import WebServer, web_env

from fanloop import Agent, Delegation
from fanloop.cli._app import CommandError
from fanloop.cli._demo import FACTS_TASK, RISKS_TASK, ChatScript, chat_tools
from fanloop.cli._web import check_binding, is_loopback, load_agent
from fanloop.events import ApprovalRequested, TextDelta, ToolFinished
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer
from fanloop.tools import WriteFileTool

TOKEN = "a-token-of-enough-length-42"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    out = tmp_path / "home"
    out.mkdir()
    return out


def test_the_demo_serves_the_page_its_files_and_a_favicon(home: Path) -> None:
    with WebServer("--demo", env=web_env(home)) as web:
        assert web.base.startswith("http://127.0.0.1:")
        with httpx2.Client(base_url=web.base, trust_env=False, timeout=10) as client:
            page = client.get("/")
            assert page.status_code == 200
            assert "<textarea" in page.text and 'src="/app.js"' in page.text
            assert "default-src 'none'" in page.headers["content-security-policy"]
            assert page.headers["x-frame-options"] == "DENY"
            for name, kind in (("/app.js", "javascript"), ("/app.css", "css")):
                response = client.get(name)
                assert response.status_code == 200 and kind in response.headers["content-type"]
            for icon in ("/favicon.ico", "/favicon.svg"):
                response = client.get(icon)
                assert response.status_code == 200
                assert response.headers["content-type"] == "image/svg+xml"
            info = client.get("/api/info").json()
            assert info["demo"] is True and info["model"] == "gpt-4o"
            assert client.get("/api/sessions").json() == []
            assert client.get("/api/sessions/nope").status_code == 404
            assert client.get("/api/sessions/" + "x" * 500).status_code == 404
            assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
        code = web.stop(signal.SIGINT)
    assert code == 0, web.stderr
    assert "stopped" in web.rest
    assert "Traceback" not in web.stderr


def test_both_protocols_are_served_and_sessions_are_shared(home: Path) -> None:
    with (
        WebServer("--demo", "--fast", env=web_env(home)) as web,  # no pauses: nothing to watch
        httpx2.Client(base_url=web.base, trust_env=False, timeout=30) as client,
    ):
        assert client.get("/api/info").json()["endpoints"] == {"ag_ui": True, "vercel": True}
        made = client.post("/api/sessions", json={"title": "  my   first\nchat  "})
        assert made.status_code == 201
        sid = made.json()["id"]
        agui = {
            "threadId": sid,
            "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": "hello there"}],
        }
        with client.stream("POST", "/ag-ui", json=agui) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            events = [
                json.loads(line[5:]) for line in answer.iter_lines() if line.startswith("data:")
            ]
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        chat = {
            "id": sid,
            "messages": [{"id": "u2", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        }
        with client.stream("POST", "/api/chat", json=chat) as answer:
            assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
            lines = [line for line in answer.iter_lines() if line.startswith("data:")]
        assert lines[-1] == "data: [DONE]"
        listed = client.get("/api/sessions").json()
        assert [(s["id"], s["title"], s["message_count"]) for s in listed] == [
            (sid, "my first chat", 4)
        ]
        session = client.get(f"/api/sessions/{sid}").json()
        assert [m["role"] for m in session["messages"]] == ["user", "assistant"] * 2
        spend = session["spend"]  # a session the page made keeps an account
        assert spend["runs"] == 2 and spend["usage"]["input_tokens"] == 480
        assert spend["cost_usd"] > 0
        # a thread another client started has no title: its first prompt stands in
        agui["threadId"], agui["runId"] = "from-elsewhere", "r2"
        with client.stream("POST", "/ag-ui", json=agui) as answer:
            answer.read()
        titles = {s["id"]: s["title"] for s in client.get("/api/sessions").json()}
        assert titles["from-elsewhere"] == "hello there"


def test_a_new_session_wants_json(home: Path) -> None:
    with (
        WebServer("--demo", env=web_env(home)) as web,
        httpx2.Client(base_url=web.base, trust_env=False, timeout=10) as client,
    ):
        form = client.post("/api/sessions", data={"title": "x"})
        assert form.status_code == 415  # a cross-site form cannot make one
        huge = client.post("/api/sessions", json={"title": "x" * 20_000})
        assert huge.status_code == 201
        listed = client.get("/api/sessions").json()
        assert listed[0]["title"] is None  # an oversized body is not read as a title


def test_ctrl_c_while_a_run_streams_stops_it_cleanly(home: Path) -> None:
    web = WebServer("--demo", env=web_env(home))  # not --fast: the run must still stream
    try:
        body = {
            "threadId": "t-stop",
            "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": "plan a long trip"}],
        }
        with (
            httpx2.Client(base_url=web.base, trust_env=False, timeout=30) as client,
            client.stream("POST", "/ag-ui", json=body) as answer,
        ):
            lines = answer.iter_lines()
            assert "RUN_STARTED" in next(line for line in lines if line.startswith("data:"))
            web.proc.send_signal(signal.SIGINT)
            rest: list[str] = []
            with contextlib.suppress(httpx2.RemoteProtocolError):
                rest.extend(lines)  # the server ends the stream as it stops
        assert not any("RUN_FINISHED" in line and "success" in line for line in rest)
    finally:
        code = web.stop(timeout=20)
    assert code == 0, web.stderr
    assert "Traceback" not in web.stderr


def test_sigterm_stops_it_too(home: Path) -> None:
    web = WebServer("--demo", env=web_env(home))
    assert web.stop(signal.SIGTERM) == 0, web.stderr


def test_on_loopback_another_host_name_or_origin_is_refused(home: Path) -> None:
    with WebServer("--demo", env=web_env(home)) as web:
        port = web.base.rsplit(":", 1)[1].strip("/")
        with httpx2.Client(base_url=web.base, trust_env=False, timeout=10) as client:
            # a DNS-rebinding page reaches 127.0.0.1 under its own name
            assert client.get("/api/info", headers={"Host": f"evil.test:{port}"}).status_code == 403
            assert client.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200
            cross = client.get("/api/sessions", headers={"Origin": "http://evil.test"})
            assert cross.status_code == 403
            same = client.get("/api/sessions", headers={"Origin": web.base.rstrip("/")})
            assert same.status_code == 200


def test_another_host_needs_a_token(home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fanloop", "web", "--demo", "--host", "0.0.0.0"],
        env=web_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--token" in done.stderr
    assert not done.stdout  # it never listened


@pytest.mark.parametrize("flag", ["--json", "--defer"])
def test_options_without_meaning_on_the_page_are_refused(flag: str, home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fanloop", "web", "--demo", flag],
        env=web_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and flag in done.stderr


def test_fast_is_only_for_the_demo(home: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fanloop", "web", "--fast"],
        env=web_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "--fast is for --demo" in done.stderr
    assert not done.stdout  # it never listened


def test_with_a_token_every_request_carries_it(home: Path) -> None:
    with WebServer("--demo", "--token", TOKEN, env=web_env(home)) as web:
        assert web.url.endswith(f"/?token={TOKEN}")
        with httpx2.Client(base_url=web.base, trust_env=False, timeout=10) as client:
            assert client.get("/").status_code == 401
            assert client.get("/api/sessions").status_code == 401
            wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
            assert client.get("/api/sessions", headers=wrong).status_code == 401
            right = {"Authorization": f"Bearer {TOKEN}"}
            assert client.get("/api/sessions", headers=right).status_code == 200
            assert client.get("/?token=nope").status_code == 401
            first = client.get(f"/?token={TOKEN}")
            assert first.status_code == 303 and first.headers["location"] == "/"
            cookie = first.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert client.get("/").status_code == 200  # the client kept the cookie
            assert client.get("/api/info").status_code == 200


def test_the_token_comes_from_the_environment_and_must_be_long_enough() -> None:
    class Args:
        host = "0.0.0.0"
        token = None

    assert check_binding(Args(), {"FANLOOP_WEB_TOKEN": TOKEN}) == TOKEN
    with pytest.raises(CommandError) as short:
        check_binding(Args(), {"FANLOOP_WEB_TOKEN": "short"})
    assert short.value.code == 2
    with pytest.raises(CommandError):
        check_binding(Args(), {})
    Args.host = "127.0.0.1"
    assert check_binding(Args(), {}) is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.10", False),
        ("::", False),
        ("example.com", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_load_agent_takes_an_agent_or_a_function_of_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_web_agents.py").write_text(
        textwrap.dedent(
            """
            from fanloop import Agent
            from fanloop.testing import ScriptedProvider

            support = Agent(ScriptedProvider(["hi"]), system="support")

            def make():
                return Agent(ScriptedProvider(["hello"]), system="made")

            not_an_agent = 42
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_agent("my_web_agents:support"), Agent)
    assert load_agent("my_web_agents:make").system == "made"
    for bad in ("my_web_agents", "my_web_agents:missing", "no_such_module_x:a", ":a"):
        with pytest.raises(CommandError) as raised:
            load_agent(bad)
        assert raised.value.code == 2
    with pytest.raises(CommandError, match="not a fanloop Agent"):
        load_agent("my_web_agents:not_an_agent")


def test_a_user_agent_is_served(tmp_path: Path, home: Path) -> None:
    (tmp_path / "served_agent.py").write_text(
        "from fanloop import Agent\n"
        "from fanloop.testing import ScriptedProvider\n"
        "agent = Agent(ScriptedProvider(['hi']))\n"
    )
    store = tmp_path / "sessions.db"
    with WebServer(
        "served_agent:agent", "--store", str(store), env=web_env(home), cwd=tmp_path
    ) as web:
        assert "sessions in" in web.first_line
        with httpx2.Client(base_url=web.base, trust_env=False, timeout=10) as client:
            assert client.get("/api/info").json()["demo"] is False
            assert client.get("/api/sessions").json() == []


def test_the_options_of_fanloop_run_choose_the_model_and_the_store(
    tmp_path: Path, home: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    with FakeLLMServer(["Hello from the fake model."], chars_per_delta=5) as llm:
        env = web_env(home, OPENAI_BASE_URL=llm.openai_base_url, OPENAI_API_KEY="sk-test")
        args = ("--provider", "openai-chat", "--model", "gpt-4o", "--root", str(root))
        with (
            WebServer(*args, "--no-memory", env=env) as web,
            httpx2.Client(base_url=web.base, trust_env=False, timeout=30) as client,
        ):
            assert client.get("/api/info").json()["model"] == "gpt-4o"
            sid = client.post("/api/sessions", json={"title": "hi"}).json()["id"]
            body = {
                "threadId": sid,
                "runId": "r1",
                "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            }
            with client.stream("POST", "/ag-ui", json=body) as answer:
                text = "".join(
                    json.loads(line[5:]).get("delta", "")
                    for line in answer.iter_lines()
                    if line.startswith("data:") and "TEXT_MESSAGE_CONTENT" in line
                )
            assert text == "Hello from the fake model."
        assert llm.requests[0].body["model"] == "gpt-4o"
    assert (root / ".fanloop" / "sessions.db").exists()  # where `fanloop run` keeps them


# -- the demo model ---------------------------------------------------------------------------


async def _demo_run(
    prompt: str, answer: Any, tmp_path: Path
) -> tuple[Any, list[Any], FakeLLMServer]:
    events: list[Any] = []
    async with FakeLLMServer(responder=ChatScript(), chars_per_delta=7) as server:
        agent = Agent(
            OpenAIProvider("gpt-4o", api_key="demo", base_url=server.openai_base_url),
            tools=[WriteFileTool(root=str(tmp_path), read_cache=False)],
            confirm=lambda name, preview: answer,
            delegation=Delegation(tools=chat_tools(_FAST)),
            memory=False,
            workspace=str(tmp_path),
        )
        async with agent.stream(prompt) as run:
            async for event in run:
                events.append(event)
        await agent.aclose()
        return run.result, events, server


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [
        ("Please change the greeting", "change"),
        ("EDITING the plan now", "change"),
        ("explain the credit prefix", "text"),
        ("Compare two options", "research"),
        ("plan and write a trip", "change"),  # a change wins: it is the one with a question
    ],
)
def test_the_demo_model_reads_words_not_pieces_of_words(prompt: str, kind: str) -> None:
    body = {"messages": [{"role": "user", "content": prompt}]}
    answer = ChatScript()(body)
    names = [c.name for c in answer.tool_calls]
    expected = {"change": ["write_file"], "research": ["delegate", "delegate"], "text": []}
    assert names == expected[kind]


class _Pace:
    search = 0.01


_FAST: Any = _Pace()


async def test_the_demo_model_answers_any_prompt_with_streamed_text(tmp_path: Path) -> None:
    result, events, _ = await _demo_run("what is fanloop?", True, tmp_path)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 10  # streamed in pieces, not in one block
    assert "what is fanloop?" in result.text
    assert result.termination_reason == "completed"


async def test_asked_for_a_change_the_demo_model_waits_for_approval(tmp_path: Path) -> None:
    result, events, _ = await _demo_run("please write a note: buy milk", True, tmp_path)
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [e.call.name for e in asked] == ["write_file"]
    assert "buy milk" in (tmp_path / "notes.md").read_text()
    assert result.text.startswith("Done")


async def test_a_denied_change_is_left_alone_and_the_reason_shown(tmp_path: Path) -> None:
    result, events, _ = await _demo_run("delete the old notes", "not today", tmp_path)
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert finished and finished[0].result.is_error
    assert not (tmp_path / "notes.md").exists()
    assert "left notes.md alone" in result.text and "not today" in result.text


async def test_asked_for_a_plan_the_demo_model_runs_two_sub_agents(tmp_path: Path) -> None:
    result, events, server = await _demo_run("plan a picnic", True, tmp_path)
    paths = {e.agent_path for e in events}
    assert len(paths) == 3  # the agent, and two sub-agents each on a path of its own
    firsts = [
        next(m["content"] for m in r.body["messages"] if m["role"] == "user")
        for r in server.requests
    ]
    assert sum(str(f).startswith(FACTS_TASK) for f in firsts) >= 1
    assert sum(str(f).startswith(RISKS_TASK) for f in firsts) >= 1
    assert "Both sub-agents are back" in result.text
