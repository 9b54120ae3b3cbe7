"""Requests wait for a free connection before they connect (the httpx transport's gate)."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from fanloop.providers._pools import GatedTransport


class Body(httpx2.AsyncByteStream):
    """A streamed body, as a real connection gives (a body given whole is read at once)."""

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b"ok"

    async def aclose(self) -> None:
        pass


def slow_app(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, stream=Body())


def gated(limit: int, pool: float = 0.05) -> tuple[httpx2.AsyncClient, GatedTransport]:
    transport = GatedTransport(httpx2.MockTransport(slow_app), limit)
    client = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(5, pool=pool))
    return client, transport


async def test_a_full_pool_makes_the_next_request_wait_then_time_out() -> None:
    client, _ = gated(2)
    async with client:
        held = [
            await client.send(client.build_request("GET", "http://t/"), stream=True)
            for _ in range(2)
        ]
        with pytest.raises(httpx2.PoolTimeout, match="no free connection"):
            await client.get("http://t/")
        await held[0].aclose()
        assert (await client.get("http://t/")).text == "ok"  # a slot came back
        await held[1].aclose()


async def test_slots_come_back_on_close_error_and_cancel() -> None:
    def failing(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused")

    transport = GatedTransport(httpx2.MockTransport(failing), 1)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(5, pool=0.05)) as c:
        for _ in range(3):  # each failure gives its slot back, or the 2nd would time out
            with pytest.raises(httpx2.ConnectError):
                await c.get("http://t/")

    blocked = anyio.Event()

    async def hang(request: httpx2.Request) -> httpx2.Response:
        blocked.set()
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    transport = GatedTransport(httpx2.MockTransport(hang), 1)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(5, pool=0.05)) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.get, "http://t/")
            await blocked.wait()
            tg.cancel_scope.cancel()
        blocked = anyio.Event()
        async with anyio.create_task_group() as tg:  # the cancelled send gave its slot back
            tg.start_soon(c.get, "http://t/")
            await blocked.wait()
            tg.cancel_scope.cancel()


async def test_many_requests_pass_through_few_slots() -> None:
    # The last waits for four rounds of the others: on a busy machine far longer than 50 ms.
    # A slot that never came back would still time the waiters out, after 5 s.
    client, _ = gated(2, pool=5)
    done = []
    async with client:

        async def one(i: int) -> None:
            done.append((await client.get(f"http://t/{i}")).text)

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
    assert done == ["ok"] * 10
