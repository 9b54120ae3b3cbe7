"""One racer of the approval race tests (run as a script, not collected).

``python _approval_racer.py TARGET BASE_URL EFFECTS [LEASE]`` opens the session store TARGET (a
SQLite file, or ``postgresql://...#SCHEMA``), then answers races until its standard input
closes: for each line ``SESSION_ID CALL_ID`` it prints ``ready``, waits for a line ``go``, and
resumes that session with the call approved. It prints one JSON line per race: how its
resume ended (``completed`` with the text, ``conflict`` with whether the batch was already
answered, or ``error``). ``LEASE``, if given, replaces the approval claim's lease (seconds).

Its tools (those of ``_approval_child.py``) append what they do to EFFECTS, so the test counts
executions in a file that outlives any process; ``send`` waits while ``EFFECTS.hold`` exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from _approval_child import tools

import fanloop._approvals
from fanloop import Agent
from fanloop.errors import ApprovalConflict, FanloopError
from fanloop.providers.openai import OpenAIProvider
from fanloop.sessions import PostgresStore, SQLiteStore


def open_store(target: str) -> Any:
    if target.startswith("postgresql://"):
        dsn, _, schema = target.partition("#")
        return PostgresStore(dsn, schema=schema)
    return SQLiteStore(target)


async def main(target: str, base_url: str, effects: str, lease: str | None = None) -> None:
    if lease is not None:
        fanloop._approvals.CLAIM_LEASE = float(lease)  # type: ignore[misc]
    store = open_store(target)
    stdin = anyio.wrap_file(sys.stdin)
    async with OpenAIProvider("gpt-4.1", api_key="test", base_url=base_url) as provider:
        agent = Agent(provider, tools=tools(Path(effects)))
        while line := (await stdin.readline()).split():
            session_id, call_id = line
            session = await store.load(session_id)
            print("ready", flush=True)
            assert (await stdin.readline()).strip() == "go"
            try:
                result = await agent.resume(session, approvals={call_id: True})
            except ApprovalConflict as exc:
                out = {"outcome": "conflict", "answered": exc.answered, "answers": exc.answers}
            except FanloopError as exc:
                out = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}
            else:
                out = {"outcome": str(result.termination_reason), "text": result.text}
            print(json.dumps(out), flush=True)
    await store.aclose()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
