"""The ``aiohttp`` pool's queue: a request that finds every connection taken waits in front of
``aiohttp``, holding nothing of it, and goes on when a connection is freed; a wait that times
out, is cancelled or is ended by the pool's close hands its turn on and leaves no slot taken.

Every request goes over real HTTP to a server in the test's own loop that holds each answer
until the test lets it go, so what is in flight at any moment is the test's to say.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest

from fanloop.providers._aiohttp import AiohttpTransport

TIMEOUT = httpx2.Timeout(30.0)


class HeldServer:
    """An HTTP/1.1 server that answers each request only when :meth:`release` says so."""

    def __init__(self) -> None:
        self.arrived: asyncio.Queue[asyncio.Event] = asyncio.Queue()
        self.in_flight = 0
        self.most_in_flight = 0
        self.connections = 0
        self.waiting_in_aiohttp: list[int] = []  # aiohttp's own queue, as each request arrived
        self.transport: AiohttpTransport | None = None
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    async def __aenter__(self) -> HeldServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def release(self) -> None:
        """Let the oldest held request be answered (waits for one to arrive)."""
        (await self.arrived.get()).set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                if self.transport is not None and self.transport._connector is not None:
                    waiters = self.transport._connector._waiters
                    self.waiting_in_aiohttp.append(sum(len(w) for w in waiters.values()))
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                go = asyncio.Event()
                self.arrived.put_nowait(go)
                await go.wait()
                self.in_flight -= 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def held() -> AsyncIterator[HeldServer]:
    async with HeldServer() as server:
        yield server


def _transport(server: HeldServer, connections: int) -> AiohttpTransport:
    transport = AiohttpTransport(limits=httpx2.Limits(max_connections=connections))
    server.transport = transport
    return transport


async def _post(
    transport: AiohttpTransport, server: HeldServer, timeout: httpx2.Timeout = TIMEOUT
) -> bytes:
    response = await transport.post(server.url, {"Content-Type": "text/plain"}, b"hi", timeout)
    try:
        return b"".join([chunk async for chunk in response.aiter_bytes()])
    finally:
        await response.aclose()


def _queued(transport: AiohttpTransport) -> int:
    """Requests waiting in the pool's queue (not counting ones whose wait ended)."""
    connector = transport._connector
    assert connector is not None
    return sum(not turn.done() for turn in connector._queue)


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0)


async def test_requests_beyond_the_pool_wait_in_its_queue_and_all_are_answered(
    held: HeldServer,
) -> None:
    transport = _transport(held, 2)
    try:
        with anyio.fail_after(20):
            posts = [asyncio.ensure_future(_post(transport, held)) for _ in range(6)]
            await _until(lambda: held.in_flight == 2 and _queued(transport) == 4)
            for _ in range(6):
                await held.release()
            assert await asyncio.gather(*posts) == [b"ok"] * 6
    finally:
        await transport.aclose()
    assert held.most_in_flight == 2
    assert held.connections == 2  # the queued requests took the kept-alive connections
    assert set(held.waiting_in_aiohttp) == {0}  # none waited inside aiohttp


async def test_a_burst_started_in_one_loop_turn_never_waits_inside_aiohttp(
    held: HeldServer,
) -> None:
    """Fifty requests started together on a pool of five: the ones that may connect count
    against the limit from the moment they are admitted, not only once connected."""
    transport = _transport(held, 5)

    async def releaser() -> None:
        for _ in range(50):
            await held.release()

    try:
        with anyio.fail_after(20):
            answers = await asyncio.gather(releaser(), *(_post(transport, held) for _ in range(50)))
    finally:
        await transport.aclose()
    assert answers[1:] == [b"ok"] * 50
    assert held.most_in_flight <= 5
    assert held.connections == 5
    assert set(held.waiting_in_aiohttp) == {0}


async def test_a_queued_request_that_waits_past_its_pool_timeout_fails_and_frees_nothing_taken(
    held: HeldServer,
) -> None:
    transport = _transport(held, 1)
    try:
        with anyio.fail_after(20):
            first = asyncio.ensure_future(_post(transport, held))
            await _until(lambda: held.in_flight == 1)
            with pytest.raises(httpx2.ConnectTimeout, match="no connection of the pool was free"):
                await _post(transport, held, httpx2.Timeout(30.0, pool=0.05))
            await held.release()
            assert await first == b"ok"
            later = asyncio.ensure_future(_post(transport, held))
            await held.release()
            assert await later == b"ok"
        connector = transport._connector
        assert connector is not None
        assert not connector._entering
        assert _queued(transport) == 0
    finally:
        await transport.aclose()


async def test_a_cancelled_wait_hands_its_turn_on(held: HeldServer) -> None:
    """A queued request cancelled while it waits, and one cancelled after it was woken but
    before it went on: neither keeps the next one waiting."""
    transport = _transport(held, 1)
    try:
        with anyio.fail_after(20):
            first = asyncio.ensure_future(_post(transport, held))
            await _until(lambda: held.in_flight == 1)
            cancelled = asyncio.ensure_future(_post(transport, held))
            woken_then_cancelled = asyncio.ensure_future(_post(transport, held))
            last = asyncio.ensure_future(_post(transport, held))
            await _until(lambda: _queued(transport) == 3)
            cancelled.cancel()
            await _until(lambda: _queued(transport) == 2)
            connector = transport._connector
            assert connector is not None
            connector._wake_later = lambda: None  # type: ignore[method-assign]
            await held.release()
            assert await first == b"ok"
            await _until(lambda: connector._waking)
            # The wake-up goes to the oldest live wait; cancel that one before it resumes.
            connector._waking = False
            connector._wake()
            woken_then_cancelled.cancel()
            await held.release()
            assert await last == b"ok"
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        with pytest.raises(asyncio.CancelledError):
            await woken_then_cancelled
        assert not connector._entering
    finally:
        await transport.aclose()


async def test_closing_the_pool_ends_the_waits_in_its_queue(held: HeldServer) -> None:
    transport = _transport(held, 1)
    with anyio.fail_after(20):
        first = asyncio.ensure_future(_post(transport, held))
        await _until(lambda: held.in_flight == 1)
        queued = asyncio.ensure_future(_post(transport, held))
        await _until(lambda: _queued(transport) == 1)
        await transport.aclose()
        with pytest.raises(httpx2.TransportError, match="closed"):
            await queued
        with pytest.raises(httpx2.TransportError):
            await first
