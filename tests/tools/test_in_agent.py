"""The built-in tools inside a real agent run (scripted model): the confirm gate sees the real
previews, and the read cache follows the run's session."""

from __future__ import annotations

from pathlib import Path

from fanloop import Agent
from fanloop.messages import ToolResultPart
from fanloop.sessions import MemoryStore
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.tools import ReadCache, default_tools


def results(messages: tuple[object, ...]) -> list[ToolResultPart]:
    return [
        part
        for message in messages
        for part in getattr(message, "content", ())
        if isinstance(part, ToolResultPart)
    ]


async def test_the_confirm_gate_sees_diffs_and_commands(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("old\n")
    seen: list[tuple[str, str]] = []

    def confirm(name: str, preview: str) -> bool | str:
        seen.append((name, preview))
        return name != "bash" or "no thanks"

    model = ScriptedProvider(
        [
            reply(
                tool_calls=[
                    call("edit_file", path="a.txt", old_string="old", new_string="new"),
                    call("bash", command="rm -rf /"),
                ]
            ),
            "Done.",
        ]
    )
    agent = Agent(model, tools=default_tools(root=ws, read_cache=cache), confirm=confirm)
    result = await agent.run("Edit a.txt")
    assert seen == [
        ("edit_file", "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new\n"),
        ("bash", "$ rm -rf /"),
    ]
    edited, declined = results(result.messages)
    assert edited.content == "Edited a.txt: replaced 1 occurrence."
    assert declined.is_error
    assert "no thanks" in declined.content
    assert (ws / "a.txt").read_text() == "new\n"


async def test_the_read_cache_spans_the_runs_of_one_session(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("content\n")
    read_twice = [
        reply(tool_calls=[call("read_file", path="a.txt")]),
        reply(tool_calls=[call("read_file", path="a.txt")]),
        "Read.",
    ]
    store = MemoryStore()
    session = await store.open("s-1")
    tools = default_tools(root=ws, read_cache=cache)
    first = await Agent(ScriptedProvider(read_twice), tools=tools).run("go", session=session)
    assert results(first.new_messages)[0].content == "content\n"
    assert "unchanged since you last read it" in results(first.new_messages)[1].content
    # A later run in the same session still knows; a run without the session does not.
    again = await Agent(ScriptedProvider(read_twice[1:]), tools=tools).run("go", session=session)
    assert "unchanged" in results(again.new_messages)[0].content
    fresh = await Agent(ScriptedProvider(read_twice[1:]), tools=tools).run("go")
    assert results(fresh.new_messages)[0].content == "content\n"
