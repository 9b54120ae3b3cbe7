"""AG-UI conformance, checked by the protocol's own code: the official ``@ag-ui/client``
``HttpAgent`` runs against a live uvicorn server serving ``AGUIApp`` (real HTTP on
127.0.0.1), verifies the event order itself, and every event is parsed with ``@ag-ui/core``'s
zod schema (``tests/ui/node/agui_client.cjs``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ui_helpers import run_node, serve

from fanloop import Agent, tool
from fanloop.providers import ModelRequest
from fanloop.testing import FakeLLMServer, ScriptedProvider, call, reply
from fanloop.ui import AGUIApp


@tool(dangerous=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def drive(node_modules: Path, app: AGUIApp, **plan: Any) -> dict[str, Any]:
    with serve(app) as url:
        out = run_node(node_modules, "agui_client.cjs", json.dumps({"url": url, **plan}))
    report: dict[str, Any] = json.loads(out)
    for run in report["runs"]:
        assert run["invalid"] == [], run["invalid"]
    return report


def types(run: dict[str, Any]) -> list[str]:
    return [e["type"] for e in run["events"]]


def test_text_streams_through_the_official_client_over_real_sdk_http(
    node_modules: Path,
) -> None:
    with FakeLLMServer(["The answer is forty-two, as everyone knows."]) as llm:
        from fanloop.providers.openai import OpenAIProvider

        provider = OpenAIProvider("gpt-4.1", base_url=llm.openai_base_url, api_key="k")
        report = drive(node_modules, AGUIApp(Agent(provider)), threadId="t", prompt="Answer?")
    (run,) = report["runs"]
    kinds = types(run)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("TEXT_MESSAGE_CONTENT") >= 2  # streamed, not one block
    assert report["messages"][-1]["content"] == "The answer is forty-two, as everyone knows."
    finished = run["events"][-1]
    assert finished["outcome"] == {"type": "success"}
    assert finished["usage"][0]["outputTokens"] > 0


def test_approval_round_trip_with_resume(node_modules: Path) -> None:
    provider = ScriptedProvider(
        [reply("Deleting it.", tool_calls=[call("delete_file", path="a.txt")]), "Done."]
    )
    app = AGUIApp(Agent(provider, tools=[delete_file]))
    report = drive(
        node_modules,
        app,
        threadId="t",
        prompt="delete a.txt",
        answers={"delete_file": True},
        reload=True,
    )
    first, second = report["runs"]
    assert first["finished"]["outcome"] == "interrupt"
    (interrupt,) = first["finished"]["interrupts"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["message"] == "delete_file(path='a.txt')"
    assert "TOOL_CALL_RESULT" not in types(first)
    result = next(e for e in second["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert result["content"] == "deleted a.txt"
    assert second["finished"]["outcome"] == "success"
    assert report["messages"][-1]["content"] == "Done."
    # a page opened again on the thread gets the conversation as a MESSAGES_SNAPSHOT
    reload = report["reload"]
    assert reload["invalid"] == []
    assert [e["type"] for e in reload["events"]] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]
    shown = [(m["role"], m.get("content")) for m in reload["messages"]]
    assert shown == [
        ("user", "delete a.txt"),
        ("assistant", "Deleting it."),
        ("tool", "deleted a.txt"),
        ("assistant", "Done."),
    ]


def test_a_declined_call_shows_its_reason(node_modules: Path) -> None:
    provider = ScriptedProvider(
        [reply(tool_calls=[call("delete_file", path="a.txt")]), "Fine, I left it."]
    )
    app = AGUIApp(Agent(provider, tools=[delete_file]))
    report = drive(
        node_modules, app, threadId="t", prompt="delete", answers={"delete_file": "keep it"}
    )
    _, second = report["runs"]
    result = next(e for e in second["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "Declined by the user: keep it"
    resolved = next(e for e in second["events"] if e["type"] == "CUSTOM")
    assert resolved["name"] == "fanloop.approval_resolved"
    assert resolved["value"]["approved"] is False
    # the model was told the reason
    seen = provider.requests[-1].messages[-1].tool_results_parts[0]
    assert seen.content == "Declined by the user: keep it" and seen.is_error


def test_client_tools_and_parallel_sub_agents(node_modules: Path) -> None:
    def respond(request: ModelRequest) -> Any:
        if "sub-agent" in (request.system or ""):
            return f"report on {request.messages[-1].text}"
        if len(request.messages) == 1:
            return reply(
                "Asking two helpers.",
                tool_calls=[call("delegate", task="look at A"), call("delegate", task="look at B")],
            )
        if len(request.messages) == 3:
            return reply(tool_calls=[call("pick_color", hint="warm")])
        return "All done: " + request.messages[-1].tool_results_parts[0].content

    app = AGUIApp(Agent(ScriptedProvider(respond), delegation=True))
    pick = {
        "name": "pick_color",
        "description": "Ask the user for a colour",
        "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
    }
    report = drive(
        node_modules,
        app,
        threadId="t",
        prompt="go",
        tools=[pick],
        clientResults={"pick_color": "red"},
    )
    first, second = report["runs"]
    started = [e for e in first["events"] if e["type"] == "SUBAGENT_STARTED"]
    assert len(started) == 2
    delegations = {e["toolCallId"] for e in first["events"] if e["type"] == "TOOL_CALL_START"}
    assert {e["parentToolCallId"] for e in started} <= delegations
    for sub in started:
        assert sub["metadata"]["fanloop"]["agentPath"][0] == "agent"
        texts = [
            e["delta"]
            for e in first["events"]
            if e["type"] == "TEXT_MESSAGE_CONTENT"
            and e.get("subagentRunId") == sub["subagentRunId"]
        ]
        assert "".join(texts).startswith("report on look at")
    pending = first["finished"]["pendingToolCallIds"]
    assert len(pending) == 1
    assert second["finished"]["outcome"] == "success"
    assert report["messages"][-1]["content"] == "All done: red"
