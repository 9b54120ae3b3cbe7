"""N concurrent SSE clients of the AG-UI endpoint, beside fanloop's own stream on the same run.

Every run streams one answer of ``DELTAS`` text deltas, ``GAP`` seconds apart
(``ScriptedProvider``: no model server, so the figures are the bridge's own). Sides:

- ``agui``: ``AGUIApp`` under uvicorn in a child process of its own; the N clients (raw
  HTTP/1.1 over asyncio streams, one connection each) in another child process, which reads
  every ``data:`` line and times it as it arrives. Peak RSS is the serving process's.
- ``stream``: the same N runs with ``agent.stream()`` in one process, each consumer timing
  its events (the baseline: no HTTP, no JSON).

Figures: events per second over the whole wall time, the p99 gap between two events of one
client as that client sees them, and peak RSS.

Run alone: ``python benchmarks/bench_ui.py [-n 500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, peak_rss_mib

DELTAS = 100
GAP = 0.01
CHUNK = 8
HERE = Path(__file__).resolve()


def _agent() -> Any:
    from fanloop import Agent
    from fanloop.testing import ScriptedProvider

    text = "x" * (DELTAS * CHUNK)
    return Agent(ScriptedProvider(lambda request: text, chunk_size=CHUNK, delay=GAP))


def _p99(gaps: list[float]) -> float:
    if not gaps:
        return 0.0
    gaps.sort()
    return gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]


# -- the serving process -----------------------------------------------------------------------


def server() -> None:
    """Serve AGUIApp on a free port; print ``PORT n``; ``GET /rss`` answers the peak RSS."""
    import socket

    import uvicorn

    from fanloop.ui import AGUIApp

    app = AGUIApp(_agent())

    async def routed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/rss":
            body = json.dumps({"rss_mib": peak_rss_mib()}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(
        uvicorn.Config(routed, log_level="error", lifespan="off", backlog=4096, access_log=False)
    )
    startup = uv.startup

    async def announce(sockets: Any = None) -> None:
        await startup(sockets=sockets)
        print(f"PORT {sock.getsockname()[1]}", flush=True)

    uv.startup = announce  # type: ignore[method-assign]
    uv.run(sockets=[sock])


# -- the clients -------------------------------------------------------------------------------


async def _client(port: int, i: int, gaps: list[float]) -> int:
    body = json.dumps(
        {
            "threadId": f"bench-{i}",
            "runId": f"r-{i}",
            "messages": [{"id": "m", "role": "user", "content": "go"}],
        }
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        b"POST / HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    events = 0
    last: float | None = None
    finished = False
    while not finished:
        line = await reader.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now
            events += 1
            finished = b'"RUN_FINISHED"' in line or b'"RUN_ERROR"' in line
    writer.close()
    return events if finished else -1


async def clients(port: int, n: int) -> dict[str, Any]:
    gaps: list[float] = []
    started = time.perf_counter()
    counts = await asyncio.gather(*(_client(port, i, gaps) for i in range(n)))
    wall = time.perf_counter() - started
    return {
        "events": sum(c for c in counts if c > 0),
        "errors": sum(1 for c in counts if c < 0),
        "wall": wall,
        "p99_gap": _p99(gaps),
    }


async def stream(n: int) -> dict[str, Any]:
    agent = _agent()
    gaps: list[float] = []

    async def one() -> int:
        events = 0
        last: float | None = None
        async with agent.stream("go") as run:
            async for _ in run:
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now
                events += 1
        return events

    started = time.perf_counter()
    counts = await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    return {
        "events": sum(counts),
        "errors": 0,
        "wall": wall,
        "p99_gap": _p99(gaps),
        "rss_mib": peak_rss_mib(),
    }


# -- the driver --------------------------------------------------------------------------------


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE), *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def measure(n: int) -> dict[str, dict[str, Any]]:
    """Both sides at ``n`` clients: ``{"agui": {...}, "stream": {...}}``."""
    srv = subprocess.Popen([sys.executable, str(HERE), "server"], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None
        line = srv.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the AG-UI server did not start: {line!r}")
        port = int(line.split()[1])
        agui = _child("clients", str(port), str(n))
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rss", timeout=30) as response:
            agui["rss_mib"] = json.loads(response.read())["rss_mib"]
    finally:
        srv.kill()
        srv.wait()
        if srv.stdout is not None:
            srv.stdout.close()
    return {"agui": agui, "stream": _child("stream", str(n))}


def rows(n: int) -> list[Row]:
    """The benchmark table's rows for ``n`` concurrent clients."""
    got = measure(n)
    agui, base = got["agui"], got["stream"]
    what = (
        f"AG-UI endpoint (uvicorn), {n} concurrent SSE clients, {DELTAS} deltas "
        f"{GAP * 1000:.0f} ms apart each; baseline: agent.stream() in process"
    )
    return [
        Row(what, "events/s", agui["events"] / agui["wall"], base["events"] / base["wall"], "/s"),
        Row(what, "p99 gap between events", agui["p99_gap"] * 1000, base["p99_gap"] * 1000, "ms"),
        Row(what, "peak RSS of the serving process", agui["rss_mib"], base["rss_mib"], "MiB"),
        Row(
            what,
            f"errors (of {n} clients)",
            agui["errors"],
            base["errors"],
            "",
            "0",
            agui["errors"] == 0,
        ),
    ]


def main(argv: list[str]) -> None:
    if argv and argv[0] == "server":
        server()
        return
    if argv and argv[0] == "clients":
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        print(json.dumps(asyncio.run(clients(int(argv[1]), int(argv[2])))))
        return
    if argv and argv[0] == "stream":
        print(json.dumps(asyncio.run(stream(int(argv[1])))))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=500)
    args = parser.parse_args(argv)
    from _common import table

    print(table(rows(args.n)))


if __name__ == "__main__":
    main(sys.argv[1:])
