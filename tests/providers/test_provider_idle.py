"""A response is accepted only for a request in flight: a pooled connection that received bytes
while idle is never reused (both transports, both APIs, streamed or not).

The server is a raw HTTP/1.1 server on loopback that answers the n-th request it reads with
``answer-n`` and, on the test's word, writes a complete extra response ("STRAY") onto the
connection of the last answer while the client holds it idle in its pool, as a buggy proxy
would. Every request must get its own answer, and the server must see each request arrive,
on a new connection after a stray.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import select
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio.lowlevel
import httpcore2
import pytest
from provider_helpers import request

from fanloop.providers import ModelResponse
from fanloop.providers._http import HTTPProvider, create_pool
from fanloop.providers._idle import _Stream
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import reply
from fanloop.testing._render import (
    anthropic_events,
    anthropic_message,
    openai_chunks,
    openai_completion,
)

ROUNDS = 20
STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _socket_readable(sock: Any) -> bool:
    """Bytes (or the end) wait to be read; a closed socket counts as readable."""
    fd = sock.fileno()
    return fd < 0 or bool(select.select([fd], [], [], 0)[0])


def render(api: str, text: str, *, streaming: bool) -> bytes:
    """A complete HTTP response carrying ``text`` as the model's answer."""
    turn = reply(text)
    if streaming:
        events = anthropic_events if api == "anthropic" else openai_chunks
        body = b"".join(events(turn, "m", "req_1", 100).frames)
        kind = b"text/event-stream"
    else:
        message = anthropic_message if api == "anthropic" else openai_completion
        body = json.dumps(message(turn, "m", "req_1")).encode()
        kind = b"application/json"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (kind, len(body)) + body


class StrayServer:
    """Answers request n with ``answer-n``; :meth:`stray` writes an extra response onto the
    connection of the last answer (``glued``: every answer is followed by one at once)."""

    def __init__(
        self, api: str, *, streaming: bool, glued: bool = False, tls: ssl.SSLContext | None = None
    ) -> None:
        self.api = api
        self.tls = tls
        self.streaming = streaming
        self.glued = glued
        self.connections: list[int] = []  # the connection each request arrived on, in order
        self._open: list[_Connection] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> StrayServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), "127.0.0.1", 0, ssl=self.tls
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self._open:
            connection.transport.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def answer(self, connection: _Connection) -> None:
        text = f"answer-{len(self.connections)}"
        self.connections.append(connection.number)
        out = render(self.api, text, streaming=self.streaming)
        if self.glued:
            out += render(self.api, "STRAY", streaming=self.streaming)
        connection.transport.write(out)

    def stray(self, port: int | None = None) -> None:
        """Write a complete response onto the connection that carried the last answer, or
        onto the one from the client's ``port``."""
        if port is None:
            connection = self._open[self.connections[-1]]
        else:
            (connection,) = (c for c in self._open if c.peer_port == port)
        connection.transport.write(render(self.api, "STRAY", streaming=self.streaming))


class _Connection(asyncio.Protocol):
    """One connection of a :class:`StrayServer`: reads requests, has each answered."""

    def __init__(self, server: StrayServer) -> None:
        self.server = server
        self.number = len(server._open)
        server._open.append(self)
        self.buffer = b""
        self.quiet = True  # no byte received since the last answer

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.peer_port = transport.get_extra_info("peername")[1]

    def data_received(self, data: bytes) -> None:
        self.quiet = False
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = next(
                int(line.split(b":")[1])
                for line in self.buffer[:end].split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.server.answer(self)
            self.quiet = not self.buffer


@pytest.fixture
async def make(api: str, transport: str) -> AsyncIterator[Any]:
    made: list[HTTPProvider] = []

    def factory(url: str) -> HTTPProvider:
        provider: HTTPProvider
        if api == "anthropic":
            provider = AnthropicProvider("m", api_key="k", base_url=url, transport=transport)  # type: ignore[arg-type]
        else:
            provider = OpenAIProvider("m", api_key="k", base_url=f"{url}/v1", transport=transport)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


async def ask(provider: HTTPProvider, *, streaming: bool) -> str:
    if not streaming:
        return (await provider.complete(request("hi"))).text
    async with provider.stream(request("hi")) as events:
        async for item in events:
            if isinstance(item, ModelResponse):
                return item.text
    raise AssertionError("no final response")


@STREAMING
@pytest.mark.parametrize("turns", [0, 1, 3], ids=["at-once", "one-turn", "three-turns"])
async def test_a_stray_response_on_an_idle_connection_answers_nothing(
    api: str, make: Any, streaming: bool, turns: int
) -> None:
    # The stray waits in the socket (at once), or the client's loop has read it by the next
    # request (a few turns later); either way the next request goes out on a new connection.
    async with StrayServer(api, streaming=streaming) as server:
        provider = make(server.url)
        for n in range(ROUNDS):
            assert await ask(provider, streaming=streaming) == f"answer-{n}"
            server.stray()
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
    assert len(server.connections) == ROUNDS, "every request reached the server"
    assert len(set(server.connections)) == ROUNDS, "no connection was reused after a stray"


def _arrived(sock: Any) -> None:
    """Wait until what the server wrote is in the client's socket (loopback delivery is done
    by the kernel, not always within the server's write)."""
    assert select.select([sock], [], [], 5.0)[0], "the stray never arrived"


@STREAMING
async def test_a_stray_response_arriving_while_a_request_is_on_its_way_answers_nothing(
    api: str, transport: str, make: Any, streaming: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stray lands after the pool chose (and probed) the idle connection and before the
    # request's first byte is written: httpcore2 probed it only when it chose it, and aiohttp
    # writes the request from a task of its own, a loop turn later.
    armed: list[bool] = []

    def strike(sock: Any) -> None:
        if armed:
            armed.clear()
            server.stray(port=sock.getsockname()[1])
            _arrived(sock)

    if transport == "httpx":
        sending = httpcore2.AsyncHTTP11Connection.handle_async_request

        async def chosen(self: Any, request: Any) -> Any:
            if self.is_idle():  # a reused connection
                strike(self._network_stream.get_extra_info("socket"))
            return await sending(self, request)

        monkeypatch.setattr(httpcore2.AsyncHTTP11Connection, "handle_async_request", chosen)
    else:
        send = aiohttp.ClientRequest.send

        async def chosen(self: Any, conn: Any) -> Any:
            strike(conn.transport.get_extra_info("socket"))
            return await send(self, conn)

        monkeypatch.setattr(aiohttp.ClientRequest, "send", chosen)
    async with StrayServer(api, streaming=streaming) as server:
        provider = make(server.url)
        for n in range(ROUNDS):
            assert await ask(provider, streaming=streaming) == f"answer-{n}"
            armed.append(True)
    assert len(server.connections) == ROUNDS
    assert len(set(server.connections)) == ROUNDS, "no connection was reused after a stray"


@STREAMING
async def test_a_stray_response_right_behind_an_answer_answers_nothing(
    api: str, make: Any, streaming: bool
) -> None:
    # A proxy that sends one response twice: the copy arrives with the answer, so it sits in
    # the client's buffers (h11's, on httpx), where a probe of the socket cannot see it.
    async with StrayServer(api, streaming=streaming, glued=True) as server:
        provider = make(server.url)
        for n in range(ROUNDS):
            assert await ask(provider, streaming=streaming) == f"answer-{n}"
    assert len(server.connections) == ROUNDS
    assert len(set(server.connections)) == ROUNDS


@STREAMING
async def test_a_quiet_connection_is_reused(api: str, make: Any, streaming: bool) -> None:
    async with StrayServer(api, streaming=streaming) as server:
        provider = make(server.url)
        for n in range(ROUNDS):
            assert await ask(provider, streaming=streaming) == f"answer-{n}"
    assert server.connections == [0] * ROUNDS


async def test_the_httpx_stream_refuses_a_second_request_while_bytes_wait() -> None:
    # Bytes anyio already read off the socket (a chunk larger than the read asked for) are
    # invisible to a probe of the socket; the stream still sees them before a request starts.
    sent = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.readexactly(5)
        writer.write(b"12345")
        await writer.drain()
        sent.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = _Stream(await httpcore2.AnyIOBackend().connect_tcp("127.0.0.1", port))
    try:
        await stream.write(b"first")  # a new connection's first request is not checked
        await sent.wait()
        assert await stream.read(1) == b"1"
        assert not _socket_readable(stream.get_extra_info("socket")), "anyio read them all"
        assert stream.get_extra_info("is_readable"), "four bytes wait in anyio"
        with pytest.raises(httpcore2.ConnectionNotAvailable):
            await stream.write(b"second")
    finally:
        await stream.aclose()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


def _self_signed(tmp_path: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server TLS context for 127.0.0.1 and a client context that trusts only it."""
    x509 = pytest.importorskip("cryptography.x509", reason="cryptography is not installed")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return server, ssl.create_default_context(cadata=pem.decode())


@pytest.mark.parametrize("strays", [False, True], ids=["quiet", "strays"])
async def test_over_tls_strays_answer_nothing_and_quiet_connections_are_reused(
    transport: str, tmp_path: Any, strays: bool
) -> None:
    # The guards probe the socket under TLS too, where bytes that are not the application's
    # (a late session ticket) may wait: a quiet connection must still be reused.
    server_side, client_side = _self_signed(tmp_path)
    pool = create_pool(transport=transport, verify=client_side)  # type: ignore[arg-type]
    try:
        async with StrayServer("openai", streaming=False, tls=server_side) as server:
            provider = OpenAIProvider(
                "m", api_key="k", base_url=f"{server.url}/v1", http_client=pool
            )
            for n in range(ROUNDS):
                assert await ask(provider, streaming=False) == f"answer-{n}"
                if strays:
                    server.stray()
                    for _ in range(n % 3):
                        await anyio.lowlevel.checkpoint()
    finally:
        await pool.aclose()
    assert len(server.connections) == ROUNDS
    assert len(set(server.connections)) == (ROUNDS if strays else 1)
