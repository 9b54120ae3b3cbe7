"""``fanloop demo``: offline, no key, fast, and it shows every part of the tour."""

from __future__ import annotations

import json
import time

from cli_helpers import fanloop


def test_demo_fast(env: dict[str, str]) -> None:
    del env["OPENAI_API_KEY"], env["OPENAI_BASE_URL"]  # needs neither
    started = time.monotonic()
    done = fanloop("demo", "--fast", env=env)
    elapsed = time.monotonic() - started
    assert done.code == 0, done.err
    assert elapsed < 15
    out = done.out
    assert done.err == ""
    assert "\x1b" not in out
    steps = [
        "Let me check the weather",  # text streaming in
        "⇉ 3 calls side by side",  # one turn fanning out
        "write_file wants to run:",  # the dangerous tool...
        "+++ b/plan.md",  # ...with its diff
        "auto-approved (demo mode)",
        "✓ write_file",
        "⇉ 2 calls side by side",  # two sub-agents in parallel
        "↻ RateLimited",  # the injected 429, retried
        "demo done: 4 turns · 8 tool calls",  # the summary (sub-agents' calls included)
    ]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions), out
    lines = out.splitlines()
    food = [i for i, x in enumerate(lines) if x.startswith("[delegate-") and "food" in x]
    sights = [i for i, x in enumerate(lines) if x.startswith("[delegate-") and "sights" in x]
    assert food and sights
    assert min(sights) < max(food)  # interleaved, not one after the other
    summary = next(x for x in lines if x.startswith("demo done:"))
    assert "tokens in" in summary and "out" in summary and summary.endswith("s")
    assert sum("tokens in" in x for x in lines) == 1  # one summary line, not two alike
    # the plan went to a temporary folder that is gone: the demo does not send you to it
    assert "see plan.md" not in out


def test_demo_json(env: dict[str, str]) -> None:
    done = fanloop("demo", "--fast", "--json", env=env)
    assert done.code == 0, done.err
    events = [json.loads(line) for line in done.out.splitlines()]
    kinds = {e["kind"] for e in events}
    assert {"text_delta", "retry_scheduled", "approval_requested", "tool_finished"} <= kinds
    assert any(e["parent_call_id"] for e in events)  # the sub-agents' events, with lineage
    assert "demo done:" in done.err
