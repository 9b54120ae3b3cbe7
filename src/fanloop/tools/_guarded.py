"""The connection-level half of the address guard (see :mod:`._netguard`): an httpcore2 network
backend that resolves each host once, connects only to the addresses the policy allows and
checks the peer, and the httpx2 transport on it (:func:`guarded_transport`).

In a module of its own so that the tools (and the URL checks) load without httpcore2: only a
web tool's first request needs it, and a program whose provider runs on aiohttp never does.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import contextmanager
from typing import Any

import anyio
import httpcore2
import httpx2

from ._netguard import BlockedAddressError, IPAddress, NetworkPolicy, Resolver, parse_ip_host

__all__ = ["guarded_transport"]


async def _resolve(host: str, port: int) -> list[str]:
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves each host once, keeps the allowed addresses and connects to one of those."""

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        inner: httpcore2.AsyncNetworkBackend | None = None,
        resolve: Resolver = _resolve,
    ) -> None:
        self._policy = policy
        self._inner = inner or httpcore2.AnyIOBackend()
        self._resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self._addresses(host, port)
                last: Exception | None = None
                for ip in addresses:
                    try:
                        stream = await self._inner.connect_tcp(
                            str(ip), port, None, local_address, socket_options
                        )
                    except httpcore2.ConnectError as exc:
                        last = exc
                        continue
                    await self._check_peer(stream, host, ip)
                    return stream
                raise last or httpcore2.ConnectError(f"cannot connect to {host}")
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"connecting to {host} timed out") from None

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host`` that may be connected to (refuses if there are none)."""
        literal = parse_ip_host(host)
        if literal is not None:
            found = [literal]
        else:
            try:
                found = [ipaddress.ip_address(a) for a in await self._resolve(host, port)]
            except (OSError, UnicodeError, ValueError) as exc:
                raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from None
            if not found:
                raise httpcore2.ConnectError(f"cannot resolve {host}: no addresses")
        if self._policy.allows_host(host):
            return found
        allowed = [ip for ip in found if self._policy.allows(ip)]
        if not allowed:
            self._policy.check_address(host, found[0])  # raises, naming the first
        return allowed

    async def _check_peer(
        self, stream: httpcore2.AsyncNetworkStream, host: str, ip: IPAddress
    ) -> None:
        peer = stream.get_extra_info("server_addr")
        try:
            connected = ipaddress.ip_address(str(peer[0]).partition("%")[0])
        except (TypeError, IndexError, ValueError):
            connected = None
        expected = ipaddress.ip_address(str(ip).partition("%")[0])
        if connected != expected:
            await stream.aclose()
            raise BlockedAddressError(
                host, ip, f"Refused {host}: connected to {peer!r}, not the checked {ip}."
            )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise BlockedAddressError(path, None, "Refused: Unix sockets are not reachable.")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _GuardedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport on an httpcore2 pool whose network backend is :class:`_GuardedBackend`.

    It mirrors :class:`httpx2.AsyncHTTPTransport` (HTTP/1.1, no proxies: a proxy would hide the
    real destination), which takes no network backend of its own.
    """

    def __init__(self, backend: _GuardedBackend, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=20,
            max_keepalive_connections=10,
            keepalive_expiry=5.0,
            network_backend=backend,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        core_request = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _ResponseStream(httpx2.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            with _httpx_errors():
                await self._stream.aclose()


@contextmanager
def _httpx_errors() -> Any:
    """Re-raise httpcore2 errors as the httpx2 errors of the same name (as httpx2 does)."""
    try:
        yield
    except httpcore2.ConnectionNotAvailable:  # pragma: no cover - retried inside the pool
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("httpcore2"):
            mapped = next(
                (
                    getattr(httpx2, cls.__name__)
                    for cls in type(exc).__mro__
                    if isinstance(getattr(httpx2, cls.__name__, None), type)
                    and issubclass(getattr(httpx2, cls.__name__), httpx2.TransportError)
                ),
                httpx2.TransportError,
            )
            raise mapped(str(exc)) from exc
        raise


def guarded_transport(
    policy: NetworkPolicy | None = None,
    *,
    verify: ssl.SSLContext | str | bool = True,
) -> httpx2.AsyncBaseTransport:
    """An httpx2 transport that connects only to addresses ``policy`` allows.

    Build your own client on it to keep the address guard when you pass ``client=`` to a web
    tool: ``httpx2.AsyncClient(transport=guarded_transport(policy))``. It speaks HTTP/1.1 and
    ignores proxy settings (a proxy would hide the real destination).

    Args:
        policy: the policy to enforce (default: public addresses only).
        verify: TLS verification, as for :class:`httpx2.AsyncHTTPTransport`.
    """
    backend = _GuardedBackend(policy or NetworkPolicy())
    if isinstance(verify, ssl.SSLContext):
        context = verify
    elif verify is True:
        context = default_ssl_context()
    else:
        context = httpx2.create_ssl_context(verify)
    return _GuardedTransport(backend, context)


_default_context: ssl.SSLContext | None = None
_default_lock = threading.Lock()


def default_ssl_context() -> ssl.SSLContext:
    """The verifying TLS context (``httpx2``'s default: certifi's bundle), built once per
    process: loading the bundle takes tens of milliseconds of CPU, which a web tool that made
    a client per call paid on the event loop every time. Call it from a worker thread first
    (the web tools do) to keep even the first build off the loop. A context is safe to share
    between connections and threads."""
    global _default_context
    context = _default_context
    if context is None:
        with _default_lock:
            context = _default_context
            if context is None:
                context = _default_context = httpx2.create_ssl_context(verify=True)
    return context
