"""Process A of the cross-process approval test (run as a script, not collected).

``python _approval_child.py DB SESSION BASE_URL EFFECTS`` runs an agent on the fake server with
a session in the SQLite file DB; its ``confirm`` defers every dangerous call, so the run ends
with ``awaiting_approval``. It prints the pending call ids, one per line, and exits.

Its tools append what they do to EFFECTS; ``send`` waits while the file ``EFFECTS.hold``
exists (so a test can kill a process inside the call).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from fanloop import DEFER, Agent, tool
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import SQLiteStore


def tools(effects: Path) -> list:  # type: ignore[type-arg]
    @tool
    def lookup(name: str) -> str:
        """Look a name up."""
        with effects.open("a") as f:
            f.write(f"lookup {name}\n")
        return f"{name} is in the directory"

    hold = effects.with_name(effects.name + ".hold")

    @tool(dangerous=True)
    def send(to: str, amount: int) -> str:
        """Send money."""
        with effects.open("a") as f:
            f.write(f"send {amount} {to}\n")
        while hold.exists():  # a test kills the process here
            time.sleep(0.01)
        return f"sent {amount} to {to}"

    return [lookup, send]


async def main(db: str, session_id: str, base_url: str, effects: str) -> None:
    store = SQLiteStore(db)
    session = await store.open(session_id)
    async with OpenAIProvider("gpt-4.1", api_key="test", base_url=base_url) as provider:
        agent = Agent(provider, tools=tools(Path(effects)), confirm=lambda name, preview: DEFER)
        result = await agent.run("pay bob", session=session)
    assert result.termination_reason == "awaiting_approval", result
    for pending in result.pending_approvals:
        print(pending.call_id, flush=True)
    await store.aclose()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
