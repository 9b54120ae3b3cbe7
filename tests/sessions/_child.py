"""A separate process for the crash and multi-process tests (run as a script, not collected).

Modes (first argument), each working on the store named by the second: a SQLite file, or
``postgresql://...#SCHEMA`` for a PostgresStore on that schema:

``crash DB SESSION``
    Append a conversation, commit one effect, begin another, print ``ready`` and wait to be
    killed.
``stream DB SESSION``
    Append messages ``m0``, ``m1``... forever, printing each index once ``append`` returned.
``writer DB PREFIX SESSIONS MESSAGES``
    Print ``ready``, wait for ``go`` on stdin, then append MESSAGES messages to each of
    SESSIONS sessions at once (one task per session), and print ``done``.
``llm CHARS CHUNK``
    Run a FakeLLMServer that answers "warm", then ``huge_text(CHARS)`` in deltas of CHUNK
    characters; print its port and serve until stdin closes.
"""

from __future__ import annotations

import sys

import anyio
import anyio.to_thread
from sessions_helpers import huge_text, open_store

from fanloop.messages import Message, ToolCallPart, ToolResultPart
from fanloop.testing import FakeLLMServer, reply

COMMITTED = ToolCallPart(id="call_a", name="write_file", arguments={"path": "a", "text": "1"})
OPEN = ToolCallPart(id="call_b", name="send_email", arguments={"to": "kim@example.com"})


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def crash(db: str, session_id: str) -> None:
    store = open_store(db)
    session = await store.open(session_id)
    await session.append(Message.user("write a file, then mail kim"))
    await session.append(Message.assistant("writing", COMMITTED))
    await session.begin_effect(turn=1, call=COMMITTED)
    result = ToolResultPart(call_id=COMMITTED.id, content="wrote 1 byte")
    await session.commit_effect(COMMITTED.id, result)
    await session.append(Message.tool_results([result]))
    await session.append(Message.assistant("mailing", OPEN))
    await session.begin_effect(turn=2, call=OPEN)
    say("ready")
    await anyio.sleep_forever()  # "inside the tool": the parent kills us here


async def stream(db: str, session_id: str) -> None:
    session = await open_store(db).open(session_id)
    i = 0
    while True:
        say(str(await session.append(Message.user(f"m{i}"))))
        i += 1


async def writer(db: str, prefix: str, sessions: int, messages: int) -> None:
    store = open_store(db)
    say("ready")
    assert (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "go"

    async def run(name: str) -> None:
        session = await store.open(name)
        for i in range(messages):
            await session.append(Message.user(f"{name}:{i}"))

    async with anyio.create_task_group() as tg:
        for s in range(sessions):
            tg.start_soon(run, f"{prefix}-{s}")
    await store.aclose()
    say("done")


def serve_llm(chars: int, chunk: int) -> None:
    with FakeLLMServer(chars_per_delta=chunk) as server:
        server.add(reply("warm"), reply(huge_text(chars)))
        say(str(server.port))
        sys.stdin.read()  # until the test closes our stdin


def main(argv: list[str]) -> None:
    mode, db, *rest = argv
    if mode == "llm":
        serve_llm(int(db), int(rest[0]))
    elif mode == "crash":
        anyio.run(crash, db, rest[0])
    elif mode == "stream":
        anyio.run(stream, db, rest[0])
    elif mode == "writer":
        anyio.run(writer, db, rest[0], int(rest[1]), int(rest[2]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
