"""The Vercel AI UI message stream checked by the ``ai`` package itself, under Node.

Each test serves a :class:`~fanloop.ui.VercelAIApp` with uvicorn on 127.0.0.1 and reads it with
``node/vercel_check.cjs``: every chunk goes through the SDK's ``uiMessageChunkSchema``
(``parseJsonEventStream``) and the stream is folded into a ``UIMessage`` by
``readUIMessageStream``, which refuses a stream that breaks its rules (a delta before its
start, an output for an unknown call). SDK v6 is the package ``ai``, v5 is ``ai-v5``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _vercel_support import read_with_ai, user
from ui_helpers import serve

from fanloop import Agent, tool
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply
from fanloop.ui import VercelAIApp

SDKS = [pytest.param(6, "ai", id="v6"), pytest.param(5, "ai-v5", id="v5")]


@tool(dangerous=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def valid(report: dict[str, Any]) -> dict[str, Any]:
    """The report's UIMessage, once the SDK accepted every chunk and the stream's order."""
    assert report["status"] == 200, report
    assert report["header"] == "v1"
    assert report["done"], "the stream did not end with data: [DONE]"
    assert report["invalid"] == [], report["invalid"]
    assert report["errors"] == [], report["errors"]
    message: dict[str, Any] = report["message"]
    assert message["role"] == "assistant"
    return message


def parts(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


@pytest.mark.parametrize(("version", "pkg"), SDKS)
def test_text_reasoning_and_tools_over_the_real_wire(
    node_modules: Path, version: int, pkg: str
) -> None:
    """A real OpenAI-wire model (the fake server) streams reasoning, text and a tool call."""
    turns = [
        reply("Let me look that up.", tool_calls=[call("lookup", _id="c1", key="k")]),
        reply("It is the value of k."),
    ]
    with FakeLLMServer(turns, chars_per_delta=4) as model:
        provider = OpenAIProvider("gpt-test", api_key="k", base_url=model.openai_base_url)
        app = VercelAIApp(Agent(provider, tools=[lookup]), version=version)
        with serve(app) as url:
            report = read_with_ai(
                node_modules, url, {"id": "n1", "messages": [user("k?")]}, pkg=pkg
            )
    message = valid(report)
    texts = [p["text"] for p in parts(message, "text")]
    assert texts == ["Let me look that up.", "It is the value of k."]
    (lookup_part,) = parts(message, "tool-lookup")
    assert lookup_part["state"] == "output-available"
    assert lookup_part["input"] == {"key": "k"} and lookup_part["output"] == "value of k"
    assert len(parts(message, "step-start")) == 2
    assert message["metadata"]["terminationReason"] == "completed"
    assert message["metadata"]["usage"]["inputTokens"] > 0
    types = {c["type"] for c in report["chunks"]}
    assert {"tool-input-start", "tool-input-delta", "tool-input-available"} <= types


@pytest.mark.parametrize(("version", "pkg"), SDKS)
def test_reasoning_parts(node_modules: Path, version: int, pkg: str) -> None:
    provider = ScriptedProvider([reply("Four.", thinking="two and two make four")])
    app = VercelAIApp(Agent(provider), version=version)
    with serve(app) as url:
        report = read_with_ai(node_modules, url, {"id": "n2", "messages": [user("2+2")]}, pkg=pkg)
    message = valid(report)
    assert [p["text"] for p in parts(message, "reasoning")] == ["two and two make four"]
    assert [p["text"] for p in parts(message, "text")] == ["Four."]


@pytest.mark.parametrize("approve", [True, False])
def test_v6_approval_round_trip_as_use_chat_sends_it(
    node_modules: Path, tmp_path: Path, approve: bool
) -> None:
    """The first stream asks (the part ends ``approval-requested``); the client answers in the
    part and sends the messages back, to another app sharing the store; the second stream
    continues the same message to ``output-available`` or ``output-denied``."""
    store = tmp_path / "chats.db"
    provider = ScriptedProvider(
        [reply("Deleting.", tool_calls=[call("delete_file", _id="d1", path="/x")])]
    )
    first = VercelAIApp(Agent(provider, tools=[delete_file]), store=SQLiteStore(store))
    request = user("delete /x")
    with serve(first) as url:
        report = read_with_ai(node_modules, url, {"id": "n3", "messages": [request]})
    message = valid(report)
    (part,) = parts(message, "tool-delete_file")
    assert part["state"] == "approval-requested" and part["approval"]["id"] == "d1"
    assert parts(message, "data-approval-request")[0]["data"]["preview"]

    # what addToolApprovalResponse({id, approved, reason}) does to the part
    part["state"] = "approval-responded"
    part["approval"] = {"id": "d1", "approved": approve}
    if not approve:
        part["approval"]["reason"] = "keep it"
    second = VercelAIApp(
        Agent(ScriptedProvider(["Done." if approve else "Kept it."]), tools=[delete_file]),
        store=SQLiteStore(store),
    )
    body = {"id": "n3", "messages": [request, message]}
    with serve(second) as url:
        report = read_with_ai(node_modules, url, body, message=message)
    after = valid(report)
    assert after["id"] == message["id"]
    (part,) = parts(after, "tool-delete_file")
    if approve:
        assert part["state"] == "output-available" and part["output"] == "deleted /x"
        assert parts(after, "text")[-1]["text"] == "Done."
    else:
        assert part["state"] == "output-denied"
        assert part["approval"] == {"id": "d1", "approved": False, "reason": "keep it"}
        assert parts(after, "text")[-1]["text"] == "Kept it."
    answered = parts(after, "data-approval-request")[0]["data"]
    assert answered["approved"] is approve


def test_v5_approval_through_a_data_part_and_the_body(node_modules: Path) -> None:
    """v5 has no approval chunks: the call is asked in a data part, answered by the body's
    ``approvals``; a declined call ends ``output-error`` with the reason."""
    provider = ScriptedProvider(
        [reply(tool_calls=[call("delete_file", _id="d5", path="/etc")]), "Left /etc alone."]
    )
    app = VercelAIApp(Agent(provider, tools=[delete_file]), version=5)
    request = user("delete /etc")
    with serve(app) as url:
        report = read_with_ai(node_modules, url, {"id": "n5", "messages": [request]}, pkg="ai-v5")
        message = valid(report)
        (part,) = parts(message, "tool-delete_file")
        assert part["state"] == "input-available"
        assert parts(message, "data-approval-request")[0]["data"]["toolCallId"] == "d5"
        body = {"id": "n5", "messages": [request, message], "approvals": {"d5": "system files"}}
        report = read_with_ai(node_modules, url, body, pkg="ai-v5", message=message)
    after = valid(report)
    (part,) = parts(after, "tool-delete_file")
    assert part["state"] == "output-error" and "system files" in part["errorText"]
    assert parts(after, "text")[-1]["text"] == "Left /etc alone."


@pytest.mark.parametrize(("version", "pkg"), SDKS)
def test_sub_agents_as_data_parts(node_modules: Path, version: int, pkg: str) -> None:
    researcher = Agent(
        ScriptedProvider([reply("searching", tool_calls=[call("lookup", key="q")]), "found"]),
        name="researcher",
        tools=[lookup],
    )
    lead = Agent(
        ScriptedProvider([reply(tool_calls=[call("research", _id="r1", task="t")]), "Done."]),
        name="lead",
        tools=[researcher.as_tool("research")],
    )
    app = VercelAIApp(lead, version=version)
    with serve(app) as url:
        report = read_with_ai(node_modules, url, {"id": "n6", "messages": [user("go")]}, pkg=pkg)
    message = valid(report)
    (agent_part,) = parts(message, "data-agent")  # updated in place by its id
    assert agent_part["data"]["status"] == "completed"
    assert agent_part["data"]["parentCallId"] == "r1"
    assert agent_part["data"]["output"] == "found"
    assert not parts(message, "data-agent-event")  # transient: seen live, not kept
    transient = [c for c in report["chunks"] if c["type"] == "data-agent-event"]
    assert any(c["data"]["kind"] == "tool_started" for c in transient)
    assert [p["text"] for p in parts(message, "text")] == ["Done."]


def test_a_failed_run_ends_with_an_error_chunk(node_modules: Path) -> None:
    with FakeLLMServer([]) as model:  # no scripted turn: the server answers 400
        provider = OpenAIProvider("gpt-test", api_key="k", base_url=model.openai_base_url)
        app = VercelAIApp(Agent(provider))
        with serve(app) as url:
            report = read_with_ai(node_modules, url, {"id": "n7", "messages": [user("hi")]})
    assert report["invalid"] == [] and report["done"]
    assert len(report["errors"]) == 1 and "BadRequest" in report["errors"][0]
    assert report["chunks"][-1] == {
        "type": "finish",
        "finishReason": "error",
        "messageMetadata": report["chunks"][-1]["messageMetadata"],
    }
