"""The command line on a pseudo-terminal: streaming, the approval prompt, Ctrl-C, chat."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from cli_helpers import PROVIDER

from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer, call, reply

STORY = "Once upon a time, " + "a loop fanned out its calls and waited for them all. " * 12


def load_messages(work: Path, session_id: str) -> tuple:  # type: ignore[type-arg]
    async def read() -> tuple:  # type: ignore[type-arg]
        store = SQLiteStore(work / ".fanloop" / "sessions.db")
        try:
            return (await store.load(session_id)).messages
        finally:
            await store.aclose()

    return anyio.run(read)


def test_text_streams_in_as_it_arrives(server: FakeLLMServer, terminal, work: Path) -> None:  # type: ignore[no-untyped-def]
    story = STORY[:240]
    server.delta_delay = 0.03
    server.add(story)
    t = terminal("run", *PROVIDER, "--root", str(work), "Tell me a story")
    t.expect("Once upon")
    assert story[-30:] not in t.plain  # the first words are shown before the answer is whole
    t.expect(r"tokens in \d+ · out \d+ · cost \$")
    assert t.wait() == 0
    assert story.strip() in t.plain
    assert "\x1b[" in t.output  # a terminal gets colour


def test_no_color_on_a_terminal(
    server: FakeLLMServer, terminal, env: dict[str, str], work: Path
) -> None:  # type: ignore[no-untyped-def]
    env["NO_COLOR"] = "1"
    server.add(reply("Listing.", tool_calls=[call("list_dir", path=".")]), "Empty.")
    t = terminal("run", *PROVIDER, "--root", str(work), "ls", env=env)
    assert t.wait() == 0
    assert "✓ list_dir" in t.output
    # No colour (SGR) sequence. Line control stays: on a slow answer (a loaded machine) the
    # "thinking…" indicator shows, and clears its line with an erase, which is not colour.
    assert re.search(r"\x1b\[[0-9;]*m", t.output) is None


def test_approve_one_dangerous_call_and_decline_another(
    server: FakeLLMServer, terminal, work: Path
) -> None:  # type: ignore[no-untyped-def]
    server.add(
        reply(
            "Writing two files.",
            tool_calls=[
                call("write_file", path="approved.txt", content="yes\n"),
                call("bash", command="echo no > declined.txt"),
            ],
        ),
        "One written, one declined.",
    )
    t = terminal("run", *PROVIDER, "--root", str(work), "Write the files")
    t.expect(r"write_file wants to run:")
    t.expect(r"\+\+\+ b/approved.txt")
    t.expect(r"\[y\]es / \[n\]o / \[a\]lways for this tool: ")
    t.send("y\n")
    t.expect(r"✓ write_file")
    t.expect(r"bash wants to run:")
    t.expect(r"\$ echo no > declined.txt")
    t.expect(r"\[a\]lways for this tool: ")
    t.send("n\n")
    t.expect(r"✗ bash\(command='echo no > declined.txt'\)  declined")
    t.expect("One written, one declined.")
    assert t.wait() == 0
    assert (work / "approved.txt").read_text() == "yes\n"
    assert not (work / "declined.txt").exists()
    results = [m for m in server.requests[1].messages if m["role"] == "tool"]
    assert "Created approved.txt" in results[0]["content"]
    assert results[1]["content"].endswith("User declined to run this tool.")


def test_empty_answer_is_no_and_garbage_asks_again(
    server: FakeLLMServer, terminal, work: Path
) -> None:  # type: ignore[no-untyped-def]
    server.add(
        reply(tool_calls=[call("write_file", path="x.txt", content="x")]),
        "Not written.",
    )
    t = terminal("run", *PROVIDER, "--root", str(work), "Write x")
    t.expect(r"for this tool: ")
    t.send("maybe\n")
    t.expect("please answer y, n or a")
    t.expect(r"for this tool: ")
    t.send("\n")  # empty: no
    t.expect("declined")
    assert t.wait() == 0
    assert not (work / "x.txt").exists()


def test_always_for_this_tool(server: FakeLLMServer, terminal, work: Path) -> None:  # type: ignore[no-untyped-def]
    server.add(
        reply(
            tool_calls=[
                call("write_file", path="one.txt", content="1"),
                call("write_file", path="two.txt", content="2"),
            ]
        ),
        "Both written.",
    )
    t = terminal("run", *PROVIDER, "--root", str(work), "Write both")
    t.expect(r"for this tool: ")
    t.send("a\n")
    t.expect(r"a  \(always for write_file\)")  # the second one is not asked
    t.expect("Both written.")
    assert t.wait() == 0
    assert (work / "one.txt").read_text() == "1"
    assert (work / "two.txt").read_text() == "2"


def test_ctrl_c_mid_stream_cancels_and_the_session_keeps_the_prompt(
    server: FakeLLMServer, terminal, work: Path
) -> None:  # type: ignore[no-untyped-def]
    server.delta_delay = 0.2  # ~20 s for the whole story: only Ctrl-C ends it early
    server.add(STORY)
    t = terminal("run", *PROVIDER, "--root", str(work), "--session", "s-cancel", "Tell a story")
    t.expect("Once upon")  # the first streamed text is on the screen
    t.interrupt()
    t.expect("cancelled")
    assert t.wait(timeout=10) == 130
    assert "Traceback" not in t.plain
    assert STORY.strip() not in t.plain
    messages = load_messages(work, "s-cancel")
    assert messages[0].role == "user" and messages[0].text == "Tell a story"


def test_chat_keeps_the_conversation_and_ctrl_c_cancels_then_exits(
    server: FakeLLMServer, terminal, work: Path
) -> None:  # type: ignore[no-untyped-def]
    server.add("Nice to meet you, Ada.")
    t = terminal("chat", *PROVIDER, "--root", str(work), "--session", "c1")
    t.expect("you › ")
    t.send("My name is Ada.\n")
    t.expect("Nice to meet you, Ada.")
    t.expect("you › ")
    server.delta_delay = 0.2
    server.add(STORY)
    t.send("Tell me a story.\n")
    t.expect("Once upon")
    t.interrupt()  # the first Ctrl-C cancels the answer...
    t.expect("cancelled")
    t.expect("you › ")  # ...and the conversation goes on
    assert t.proc.poll() is None
    t.interrupt()  # Ctrl-C at the prompt exits
    assert t.wait(timeout=10) == 130
    assert "Traceback" not in t.plain
    assert server.requests[1].messages[1:4] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "Tell me a story."},
    ]
    roles = [m.role for m in load_messages(work, "c1")]
    assert roles == ["user", "assistant", "user"]


def test_chat_exits_on_ctrl_d_and_slash_exit(server: FakeLLMServer, terminal, work: Path) -> None:  # type: ignore[no-untyped-def]
    t = terminal("chat", *PROVIDER, "--root", str(work))
    t.expect("you › ")
    t.send("\x04")  # Ctrl-D on an empty line: end of input
    assert t.wait() == 0
    t2 = terminal("chat", *PROVIDER, "--root", str(work))
    t2.expect("you › ")
    t2.send("/exit\n")
    assert t2.wait() == 0
    assert server.requests == []


def test_ctrl_c_at_the_approval_prompt_cancels_without_running(
    server: FakeLLMServer, terminal, work: Path
) -> None:  # type: ignore[no-untyped-def]
    server.add(reply(tool_calls=[call("bash", command="touch never.txt")]))
    t = terminal("run", *PROVIDER, "--root", str(work), "--session", "s-gate", "Touch it")
    t.expect(r"for this tool: ")
    t.interrupt()
    t.expect("cancelled")
    assert t.wait(timeout=10) == 130
    assert "Traceback" not in t.plain
    assert not (work / "never.txt").exists()
    messages = load_messages(work, "s-gate")
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert messages[-1].content[0].is_error  # the call got a (cancelled) result


def test_second_ctrl_c_exits(server: FakeLLMServer, terminal, work: Path) -> None:  # type: ignore[no-untyped-def]
    server.delta_delay = 0.2
    server.add(STORY)
    t = terminal("chat", *PROVIDER, "--root", str(work))
    t.expect("you › ")
    t.send("Tell a story.\n")
    t.expect("Once upon")
    t.interrupt()
    t.expect("Ctrl-C again to quit")  # (two signals sent at once would merge into one)
    t.interrupt()
    assert t.wait(timeout=10) == 130
    assert "Traceback" not in t.plain
