"""A newcomer's command-line issues (#14): closed pipes, the wait for the first token, batch
timing at the approval prompt, narrow terminals, wording, and what a terminal is sent."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from cli_helpers import PROVIDER, Terminal, closed_pipe, fanloop

from fanloop.cli import main
from fanloop.messages import Message
from fanloop.sessions import SQLiteStore
from fanloop.testing import FakeLLMServer, Fault, call, reply

CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def screen_lines(output: str) -> list[str]:
    """What a terminal shows: each line as it ends up after carriage returns, codes removed."""
    return [CONTROL.sub("", line.split("\r")[-1]) for line in output.split("\r\n")]


# -- a closed pipe ----------------------------------------------------------------------------


def test_closed_pipe_ends_the_demo_quietly_and_at_once(env: dict[str, str]) -> None:
    """``fanloop demo [--json] | head -1``: no traceback, exit 141, and the ~8 s tour stops."""
    for args in (("demo",), ("demo", "--json")):
        done = closed_pipe(*args, env=env)
        assert done.head[0].strip(), done.err
        assert done.err == ""  # not one BrokenPipeError traceback
        assert done.code == 141
        assert done.after_close < 4.0  # the full tour takes about 8.5 s


def test_closed_pipe_stops_a_run(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.delta_delay = 0.1
    server.add("word " * 100)  # about 10 s to stream in full
    done = closed_pipe("run", *PROVIDER, "--root", str(work), "--json", "Talk", env=env)
    # the first run's one note (the sessions file it created), and no traceback
    assert done.err.startswith("fanloop: created ") and len(done.err.splitlines()) == 1
    assert done.code == 141
    assert done.after_close < 4.0


# -- waiting for the first token --------------------------------------------------------------


def test_thinking_indicator_until_the_first_token(
    server: FakeLLMServer, terminal: Callable[..., Terminal], work: Path
) -> None:
    server.add(Fault.slow(1.0, reply("Here is the answer.")))
    t = terminal("run", *PROVIDER, "--root", str(work), "A hard question")
    t.expect("thinking…")
    t.expect("Here is the answer.")
    assert t.wait() == 0
    raw = t.output
    last_frame, text = raw.rindex("thinking…"), raw.index("Here is the answer.")
    assert last_frame < text
    assert "\r\x1b[K" in raw[last_frame:text]  # the indicator is cleared before the text
    shown = [x for x in screen_lines(raw) if not x.startswith("fanloop: created ")]  # its path
    assert all("thinking" not in line for line in shown)  # nothing left of it


def test_no_thinking_indicator_in_a_pipe_or_with_json(
    server: FakeLLMServer, terminal: Callable[..., Terminal], env: dict[str, str], work: Path
) -> None:
    server.add(Fault.slow(0.4, reply("Piped.")), Fault.slow(0.4, reply("As JSON.")))
    piped = fanloop("run", *PROVIDER, "--root", str(work), "Question", env=env)
    assert piped.code == 0 and "Piped." in piped.out
    assert "thinking…" not in piped.out + piped.err
    t = terminal("run", *PROVIDER, "--root", str(work), "--json", "Question")
    assert t.wait() == 0
    assert "As JSON." in t.output and "thinking…" not in t.output


# -- the time a person takes is not tool time -------------------------------------------------


def test_batch_wall_time_leaves_out_the_approval_prompt(
    server: FakeLLMServer, terminal: Callable[..., Terminal], work: Path
) -> None:
    server.add(
        reply(
            tool_calls=[call("list_dir", path="."), call("write_file", path="w.txt", content="w")]
        ),
        "Both done.",
    )
    t = terminal("run", *PROVIDER, "--root", str(work), "List, then write")
    t.expect(r"for this tool: ")
    time.sleep(1.5)  # the person reads the diff and thinks (this is the point of the test)
    t.send("y\n")
    shown = t.expect(r"⇉ 2 calls side by side: [0-9.]+s wall time")
    wall = float(re.findall(r"side by side: ([0-9.]+)s wall time", shown)[-1])
    # The 1.5 s at the prompt are not counted; the two calls take a few ms, and up to a few
    # hundred on a busy machine.
    assert wall < 1.2, shown
    t.expect("Both done.")
    assert t.wait() == 0


# -- a narrow terminal ------------------------------------------------------------------------


def test_tool_lines_fit_an_80_column_terminal(
    server: FakeLLMServer, terminal: Callable[..., Terminal], work: Path
) -> None:
    (work / "notes.txt").write_text("the first line of this file is long, " * 6 + "\n")
    pattern = "src/" + "a_rather_long_directory_name/" * 4 + "*.py"
    server.add(
        reply(tool_calls=[call("read_file", path="notes.txt"), call("glob", pattern=pattern)]),
        "Read.",
    )
    t = terminal("run", *PROVIDER, "--root", str(work), "Read it", columns=80)
    t.expect("Read.")
    assert t.wait() == 0
    lines = screen_lines(t.output)
    tools = [x for x in lines if x.lstrip().startswith(("⋯", "✓", "✗", "⇉"))]
    assert len(tools) == 5, lines  # two running, two finished, one side-by-side
    assert all(len(x) <= 80 for x in tools), [x for x in tools if len(x) > 80]
    assert any(x.endswith("running") and "glob(" in x for x in tools)  # the status stays
    assert any("✓ read_file(path='notes.txt')" in x and x.endswith("…") for x in tools)


# -- what a terminal is sent ------------------------------------------------------------------


def test_control_characters_from_the_model_are_shown_not_obeyed(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    """An escape sequence in a previewed command must not hide part of it."""
    hidden = "rm -rf ./precious \r\x1b[2K\x1b[1A$ echo safe"
    server.add(
        reply("Cleaning \x1b[8mup\x1b[0m.", tool_calls=[call("bash", command=hidden)]),
        "Declined.",
    )
    done = fanloop("run", *PROVIDER, "--root", str(work), "Tidy up", env=env)
    assert done.code == 0, done.err
    assert "\x1b" not in done.out and "\r" not in done.out
    assert "$ rm -rf ./precious \\x0d\\x1b[2K\\x1b[1A$ echo safe" in done.out
    assert "Cleaning \\x1b[8mup\\x1b[0m." in done.out


# -- wording ----------------------------------------------------------------------------------


def test_counts_are_pluralised(env: dict[str, str], work: Path) -> None:
    async def one_message() -> None:
        async with SQLiteStore(work / ".fanloop" / "sessions.db") as store:
            await (await store.open("one")).append(Message.user("Only a question"))

    anyio.run(one_message)
    shown = fanloop("sessions", "show", "one", "--root", str(work), env=env)
    assert shown.code == 0, shown.err
    assert "· 1 message\n" in shown.out and "1 messages" not in shown.out


def test_sessions_help_describes_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    def description(*args: str) -> str:
        with pytest.raises(SystemExit) as exited:
            main([*args, "--help"])
        assert exited.value.code == 0
        # argparse: usage, a blank line, the description, a blank line, the arguments
        head = capsys.readouterr().out.split("\n\n")
        return head[1] if not head[1].lstrip().startswith(("positional", "options")) else ""

    assert "session" in description("sessions")
    for action in ("list", "show", "pending", "approve"):
        assert description("sessions", action), action
