"""An AG-UI server in a process of its own, on a shared SQLite session store.

``python _agui_child.py DB`` serves ``AGUIApp`` on a free port of 127.0.0.1, prints
``PORT n`` when it listens, and serves until it is killed. ``build(DB)`` makes the same app
in the test's own process: both answer a request to delete a file with a dangerous call.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from fanloop import Agent, tool
from fanloop.providers import ModelRequest
from fanloop.sessions import SQLiteStore
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.ui import AGUIApp


@tool(dangerous=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def respond(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.tool_results_parts:
        return "Done: " + last.tool_results_parts[0].content
    return reply("Deleting it.", tool_calls=[call("delete_file", path="a.txt")])


def build(db: str) -> AGUIApp:
    return AGUIApp(Agent(ScriptedProvider(respond), tools=[delete_file]), store=SQLiteStore(db))


def main() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(build(sys.argv[1]), log_level="warning"))

    startup = server.startup

    async def announce(sockets: list[socket.socket] | None = None) -> None:
        await startup(sockets=sockets)
        print(f"PORT {sock.getsockname()[1]}", flush=True)

    server.startup = announce  # type: ignore[method-assign]
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
