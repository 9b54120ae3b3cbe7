"""A fanloop run in a child process, for the crash tests: it prints READY at the chosen moment
and then blocks until it is killed.

Usage: python crash_child.py DB SESSION_ID MARKER_DIR SCENARIO
  mid-tool      the dangerous tool has started (its receipt is ``started``)
  after-commit  the dangerous tool committed; a later call of the same batch blocks
  between-turns the tool results are appended; the next model request blocks
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from fanloop import Agent, tool
from fanloop.providers import ModelRequest
from fanloop.sessions import SQLiteStore
from fanloop.testing import ScriptedProvider, call, reply

db, session_id, marker_dir, scenario = sys.argv[1:5]
markers = Path(marker_dir)


def ready() -> None:
    print("READY", flush=True)


@tool(dangerous=True)
async def charge(amount: int) -> str:
    """Charge the customer's card."""
    with (markers / "charges").open("a") as f:
        f.write(f"{amount}\n")
    if scenario == "mid-tool":
        ready()
        await anyio.sleep_forever()
    return f"charged {amount}"


@tool
async def wait_here() -> str:
    """Block (after-commit scenario)."""
    ready()
    await anyio.sleep_forever()
    return "never"


async def model(request: ModelRequest) -> object:
    if len(request.messages) == 1:
        calls = [call("charge", _id="c1", amount=42)]
        if scenario == "after-commit":
            calls.append(call("wait_here", _id="c2"))
        return reply("Charging.", tool_calls=calls)
    if scenario == "between-turns":
        ready()
        await anyio.sleep_forever()
    return "Charged."


async def main() -> None:
    store = SQLiteStore(db)
    session = await store.open(session_id)
    agent = Agent(ScriptedProvider(model), tools=[charge, wait_here], auto_approve=True)
    await agent.run("Charge 42", session=session)


anyio.run(main)
