"""Run by ``test_heartbeat.py``: a heartbeat on a loop the scheduler starves of CPU.

The loop runs in a thread pinned to one CPU beside a CPU burner pinned to the same CPU, at the
least priority (nice 19; on Linux niceness is per thread): it then waits for the CPU far longer
than 100 ms at a time, with no code holding it. It beats until it has seen a gap of 110 ms
(or 20 s passed: on a machine already busy the scheduler spreads its waits thinner, and its
longest hold may be no more than about 120 ms), then blocks for 0.3 s with ``time.sleep``
under the same starvation, and the figures of both heartbeats are printed as one JSON line.
The starved thread is not waited for (it would take seconds to wind its loop down at that
priority): the process ends with ``os._exit``.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time

import anyio

from heartbeat import Heartbeat, heartbeat

figures: dict[str, dict[str, float]] = {}
measured = threading.Event()


def record(name: str, beat: Heartbeat) -> None:
    figures[name] = {"max_gap": beat.max_gap, "max_stall": beat.max_stall, "beats": beat.beats}


async def measure() -> None:
    deadline = time.monotonic() + 20
    async with heartbeat() as starved:
        while starved.max_gap < 0.11 and time.monotonic() < deadline:
            await anyio.sleep(0.05)
    record("starved", starved)
    gc.freeze()  # the next heartbeat's full collection would take seconds at this priority
    async with heartbeat() as blocked:
        time.sleep(0.3)  # the loop is held: this must count, starved or not
    record("blocked", blocked)
    measured.set()


def starved_loop(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})  # this thread only
    os.nice(19)  # this thread only
    anyio.run(measure)


def main() -> None:
    anyio.run(anyio.sleep, 0)  # the backend is imported here, not in the starved thread
    gc.collect()
    gc.freeze()  # nor does the heartbeat's full collection run there (seconds, at nice 19)
    cpu = min(os.sched_getaffinity(0))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for burner in burners:
            os.sched_setaffinity(burner.pid, {cpu})
        threading.Thread(target=starved_loop, args=(cpu,), daemon=True).start()
        measured.wait(45)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print(json.dumps(figures), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
