"""``fanloop run`` in a subprocess (no terminal): answers, tools, --yes, --json, errors."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import PROVIDER, fanloop

from fanloop.testing import FakeLLMServer, Fault, call, reply


def run(env: dict[str, str], work: Path, *args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return fanloop("run", *PROVIDER, "--root", str(work), *args, env=env, input=input)


def test_answer_usage_line_and_no_escape_codes(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("Hello from the fake model, streamed in pieces.")
    done = run(env, work, "Say hello")
    assert done.code == 0, done.err
    assert "Hello from the fake model, streamed in pieces." in done.out
    # tokens in/out, cost from the price table (gpt-4o is known), elapsed, the session
    assert "tokens in 10 · out" in done.out
    assert "cost $0.0" in done.out
    assert " · session " in done.out
    assert "\x1b" not in done.out + done.err  # not a terminal: no colour
    assert done.err == f"fanloop: created {work / '.fanloop' / 'sessions.db'} to keep the " + (
        "sessions in (--store or $FANLOOP_STORE puts them elsewhere)\n"
    )  # said once, by the run that created it
    assert server.requests[0].body["messages"][-1]["content"] == "Say hello"
    tools = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert {"read_file", "write_file", "bash", "remember"} <= tools  # memory is on by default
    assert "delegate" not in tools


def test_delegate_and_no_memory(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.add("Fine.")
    done = run(env, work, "--delegate", "--no-memory", "hi")
    assert done.code == 0, done.err
    tools = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert "delegate" in tools and "remember" not in tools


def test_timeout_ends_the_run(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.add(Fault.slow(5.0, reply("Too late.")))
    done = run(env, work, "--timeout", "0.5", "hi")
    assert done.code == 1
    assert "stopped: deadline" in done.out
    assert "Too late." not in done.out


def test_unknown_model_cost_is_na(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.add("Fine.")
    done = fanloop(
        "run", "--provider", "openai", "--model", "my-local-model", "--root", str(work), "hi",
        env=env,
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "cost n/a" in done.out


def test_prompt_from_stdin(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.add("Got it.")
    done = run(env, work, input="a prompt from a pipe\n")
    assert done.code == 0, done.err
    assert server.requests[0].body["messages"][-1]["content"] == "a prompt from a pipe\n"


def test_tool_calls_of_one_turn_run_side_by_side(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    (work / "a.txt").write_text("alpha\n")
    (work / "b.md").write_text("beta\n")
    server.add(
        reply("Looking.", tool_calls=[call("list_dir", path="."), call("glob", pattern="*.md")]),
        "There are two files.",
    )
    done = run(env, work, "What is here?")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    running = [i for i, x in enumerate(lines) if x.endswith("running")]
    finished = [i for i, x in enumerate(lines) if x.lstrip().startswith("✓")]
    assert len(running) == 2 and len(finished) == 2
    assert max(running) < min(finished)  # both started before either finished
    assert any("list_dir(path='.')" in x and x.rstrip().endswith("running") for x in lines)
    assert "⇉ 2 calls side by side:" in done.out
    assert "b.md" in server.requests[1].raw_body.decode()


def test_without_a_terminal_dangerous_tools_are_declined(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add(
        reply(tool_calls=[call("write_file", path="out.txt", content="data\n")]),
        "I could not write it.",
    )
    done = run(env, work, "Write out.txt")
    assert done.code == 0, done.err
    assert not (work / "out.txt").exists()
    assert "+++ b/out.txt" in done.out  # the preview is shown all the same
    assert "declined: no terminal to ask on" in done.out
    tool_message = server.requests[1].messages[-1]
    assert tool_message["role"] == "tool"
    assert "not run" in tool_message["content"]


def test_yes_approves_dangerous_tools(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add(
        reply(tool_calls=[call("bash", command="echo made > made.txt")]),
        "Done.",
    )
    done = run(env, work, "--yes", "Make a file")
    assert done.code == 0, done.err
    assert "$ echo made > made.txt" in done.out
    assert "approved by --yes" in done.out
    assert (work / "made.txt").read_text() == "made\n"


def test_json_lines(server: FakeLLMServer, env: dict[str, str], work: Path) -> None:
    server.add(
        reply("Checking.", tool_calls=[call("list_dir", path=".")]),
        "The directory is empty.",
    )
    done = run(env, work, "--json", "List it")
    assert done.code == 0, done.err
    events = [json.loads(line) for line in done.out.splitlines()]  # every line parses
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    text = "".join(e["text"] for e in events if e["kind"] == "text_delta")
    assert text == "Checking.The directory is empty."
    assert {"tool_started", "tool_finished", "usage_updated"} <= set(kinds)
    assert all(e["agent_path"] == ["agent"] for e in events)
    assert events[-1]["result"]["termination_reason"] == "completed"


def test_missing_api_key_names_the_variable(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    del env["OPENAI_API_KEY"]
    done = run(env, work, "hi")
    assert done.code == 2
    assert "OPENAI_API_KEY" in done.err
    assert len(done.err.strip().splitlines()) == 1
    assert "Traceback" not in done.err
    assert done.out == ""
    assert server.requests == []


def test_missing_provider_names_the_option_and_variable(env: dict[str, str], work: Path) -> None:
    done = fanloop("run", "--root", str(work), "hi", env=env)
    assert done.code == 2
    assert "LLM_PROVIDER" in done.err and "--provider" in done.err
    assert "Traceback" not in done.err


def test_provider_from_the_environment(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("From the environment.")
    env.update(LLM_PROVIDER="openai", LLM_MODEL="gpt-4o")
    done = fanloop("run", "--root", str(work), "hi", env=env)
    assert done.code == 0, done.err
    assert "From the environment." in done.out
    assert server.requests[0].body["model"] == "gpt-4o"
    assert server.requests[0].path == "/v1/responses"  # openai: the Responses API


def test_openai_chat_is_chat_completions(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add("Chatting.")
    done = fanloop(
        "run", "--provider", "openai-chat", "--model", "gpt-4.1", "--root", str(work), "hi",
        env=env,
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "Chatting." in done.out
    assert server.requests[0].path == "/v1/chat/completions"


def test_provider_error_is_one_line_on_stderr(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add(Fault.http(401, message="invalid api key"))
    done = run(env, work, "hi")
    assert done.code == 1
    assert "AuthenticationError" in done.err and "invalid api key" in done.err
    errors = [x for x in done.err.splitlines() if not x.startswith("fanloop: created ")]
    assert len(errors) == 1
    assert "Traceback" not in done.out + done.err


def test_rate_limit_is_retried_and_shown(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add(Fault.http(429, retry_after=0.1), "After the retry.")
    done = run(env, work, "hi")
    assert done.code == 0, done.err
    assert "↻ RateLimited" in done.out and "retry 1 in 0.10s" in done.out
    assert "After the retry." in done.out


def test_max_turns_stops_with_exit_code_1(
    server: FakeLLMServer, env: dict[str, str], work: Path
) -> None:
    server.add(reply("Again.", tool_calls=[call("list_dir", path=".")]))
    done = run(env, work, "--max-turns", "1", "loop")
    assert done.code == 1
    assert "stopped: max_turns" in done.out


def test_no_command_prints_usage(env: dict[str, str]) -> None:
    done = fanloop(env=env)
    assert done.code == 2
    assert "usage: fanloop" in done.err


def test_bad_option_is_a_usage_error(env: dict[str, str]) -> None:
    done = fanloop("run", "--max-turns", "0", "hi", env=env)
    assert done.code == 2
    assert "--max-turns" in done.err and "Traceback" not in done.err
