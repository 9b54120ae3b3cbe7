"""web_fetch and http_request against hostile URLs and hostile servers (issue #10).

Only loopback servers are used. Addresses that are not loopback are only ever refused: they are
tried through a test double (a MockTransport client, or a network backend that records and
fails), so nothing is sent anywhere even if the guard were broken.
"""

from __future__ import annotations

import datetime
import gzip
import http.server
import ipaddress
import ssl
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore2
import httpx2
import pytest

from fanloop.errors import ToolError
from fanloop.tools import DEFAULT_TOOLS, HttpRequestTool, WebFetchTool
from fanloop.tools._guarded import _GuardedBackend, _GuardedTransport, _resolve
from fanloop.tools._netguard import parse_ip_host
from fanloop.tools.web import BlockedAddressError, NetworkPolicy, guarded_transport, html_to_text
from heartbeat import Stopwatch, heartbeat

LOCAL = ["127.0.0.1/32"]

# -- loopback servers -----------------------------------------------------------------------

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Site:
    """A loopback HTTP server whose routes are set by each test; it records every request."""

    url: str = ""
    routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], Reply]] = field(
        default_factory=dict
    )
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def route(self, path: str, status: int = 200, body: bytes = b"", **headers: str) -> None:
        self.routes[path] = lambda _: (status, headers, body)


@contextmanager
def _serve(
    site: Site, host: str, wrap: ssl.SSLContext | None = None, protocol: str = "HTTP/1.0"
) -> Iterator[Site]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = protocol  # HTTP/1.1 keeps connections alive

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _any(self) -> None:
            site.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            path = self.path.split("?")[0]
            handler = site.routes.get(path)
            status, headers, body = handler(self) if handler else (404, {}, b"no route")
            headers = {"Content-Type": "text/plain", **headers}
            self.send_response(status, headers.pop("reason", None))
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

    try:
        server = http.server.ThreadingHTTPServer((host, 0), Handler)
    except OSError as exc:
        pytest.skip(f"cannot listen on {host}: {exc}")
    server.daemon_threads = True
    if wrap is not None:
        server.socket = wrap.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    site.url = f"{'https' if wrap else 'http'}://{host}:{server.server_address[1]}"
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def site() -> Iterator[Site]:
    """A server on 127.0.0.1."""
    with _serve(Site(), "127.0.0.1") as served:
        yield served


@pytest.fixture
def other() -> Iterator[Site]:
    """A second server on 127.0.0.2 (loopback too, but not in ``LOCAL``)."""
    with _serve(Site(), "127.0.0.2") as served:
        yield served


def _port(site: Site) -> int:
    return int(site.url.rsplit(":", 1)[1])


def _recording_client(calls: list[httpx2.Request]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        return httpx2.Response(200, text="reached")

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


class _NoConnect(httpcore2.AsyncNetworkBackend):
    """A network backend that records connection attempts and never connects."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
        self.calls.append(host)
        raise httpcore2.ConnectError("the test double never connects")


def _client_on(backend: _GuardedBackend) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=_GuardedTransport(backend, httpx2.create_ssl_context()), trust_env=False
    )


# -- 1. parsing hostile HTML never holds the event loop -------------------------------------

_PAGES: dict[str, Callable[[int], str]] = {
    "unclosed <a": lambda n: "<a" * (n // 2),
    "tags": lambda n: "<a>" * (n // 3),
    "unclosed comments": lambda n: "<!--" * (n // 4),
    "cdata": lambda n: "<![CDATA[" * (n // 9),
    "charref flood": lambda n: "<p>" + "&#" * (n // 2),
    "long charref": lambda n: "<p>&#" + "9" * n,
    "named refs": lambda n: "<p>" + "&amp" * (n // 4),
    "nested": lambda n: "<div><li>" * (n // 9),
    "huge attribute": lambda n: '<a href="' + "x" * n + '">link</a>',
    "unclosed attribute": lambda n: '<a title="' + "x>" * (n // 2),
    "bare <": lambda n: "< " * (n // 2),
    "unclosed script": lambda n: "<script>" + "</scrip" * (n // 7),
}


@pytest.mark.parametrize("kind", list(_PAGES))
async def test_hostile_html_keeps_the_loop_running(site: Site, kind: str) -> None:
    page = _PAGES[kind](1_000_000).encode()
    site.route("/p", body=page, **{"Content-Type": "text/html"})
    tool = WebFetchTool(allowed_networks=LOCAL, max_bytes=1_100_000, timeout=30)
    started = time.monotonic()
    async with heartbeat() as beat:
        result = await tool.run(url=f"{site.url}/p")
    assert beat.max_stall < 0.1, beat
    assert time.monotonic() - started < 10
    assert result.content.startswith(f"200 OK {site.url}/p")


async def test_slow_parse_times_out_within_the_budget(site: Site) -> None:
    site.route("/p", body=b"<li>x" * 400_000, **{"Content-Type": "text/html"})
    tool = WebFetchTool(allowed_networks=LOCAL, max_bytes=2_000_000, timeout=0.3)
    async with heartbeat() as beat:
        watch = Stopwatch()
        with pytest.raises(ToolError, match=r"timed out after 0\.3 s"):
            await tool.run(url=f"{site.url}/p")
    # The whole parse takes over 1 s of CPU here; the call ends at its 0.3 s timeout.
    assert watch.own < 0.8, watch
    assert beat.max_stall < 0.1, beat


def test_html_to_text_survives_hostile_character_references() -> None:
    text, _ = html_to_text("<p>a &#" + "9" * 5000 + "; b &#x110000; &#0; &#128; &ampx</p>")
    assert text == "a \ufffd b \ufffd \ufffd \u20ac &x"


def test_html_to_text_keeps_markup_inside_quotes_and_scripts_out() -> None:
    html = (
        "<html><head><title>T &amp; U</title><body><p title='a>b'>one</p>"
        "<script>if (a<b) document.write('<p>no</p>')</script><textarea><b>x</b></textarea>"
    )
    assert html_to_text(html) == ("one\n<b>x</b>", "T & U")


# -- 2. addresses: refused by default, on what is actually connected ------------------------

_LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.0.0.2",
    "127.1",
    "2130706433",
    "0x7f000001",
    "0x7f.0.0.1",
    "0x7f.1",
    "017700000001",
    "127.0.0.1.",
    "0",
    "0.0.0.0",
    "[::1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "localhost",
    "LOCALHOST.",
    "api.localhost",
]


@pytest.mark.parametrize("host", _LOOPBACK_SPELLINGS)
@pytest.mark.parametrize("tool_class", [WebFetchTool, HttpRequestTool])
async def test_loopback_is_refused_by_default_before_connecting(
    site: Site, host: str, tool_class: type[WebFetchTool | HttpRequestTool]
) -> None:
    url = f"http://{host}:{_port(site)}/"
    with pytest.raises(ToolError, match="Refused to connect") as caught:
        await tool_class().run(method="GET", url=url)
    assert "public internet addresses only" in str(caught.value)
    assert site.seen == []


async def test_the_default_tool_instances_are_guarded(site: Site) -> None:
    tools = {t.name: t for t in DEFAULT_TOOLS}
    with pytest.raises(ToolError, match="Refused"):
        await tools["web_fetch"].run(url=f"{site.url}/")
    with pytest.raises(ToolError, match="Refused"):
        await tools["http_request"].run(method="POST", url=f"{site.url}/", body={"x": 1})
    assert site.seen == []


_PRIVATE = [
    "10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "169.254.169.254", "2852039166",
    "0xa9.0xfe.0xa9.0xfe", "0xa9fea9fe", "169.254.43518", "0.0.0.0", "224.0.0.1",
    "239.255.255.250", "240.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.1", "192.0.0.8",
    "[fc00::1]", "[fd12:3456::1]", "[fe80::1]", "[fe80::1%25eth0]", "[ff02::1]", "[::]",
    "[::ffff:10.0.0.1]", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "[::127.0.0.1]",
    "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::1]", "[2001:db8::1]", "[2001::1]", "[fec0::1]",
]  # fmt: skip


@pytest.mark.parametrize("host", _PRIVATE)
async def test_private_literals_are_refused_even_with_a_caller_client(host: str) -> None:
    calls: list[httpx2.Request] = []
    async with _recording_client(calls) as client:
        for tool in (WebFetchTool(client=client), HttpRequestTool(client=client)):
            with pytest.raises(ToolError, match="Refused to connect"):
                await tool.run(method="GET", url=f"http://{host}/latest/meta-data/")
    assert calls == []


@pytest.mark.parametrize("host", _PRIVATE)
async def test_private_literals_are_refused_by_the_transport(host: str) -> None:
    inner = _NoConnect()
    async with _client_on(_GuardedBackend(NetworkPolicy(), inner=inner)) as client:
        with pytest.raises(BlockedAddressError):
            await client.get(f"http://{host}/")
    assert inner.calls == []


async def test_names_are_checked_on_every_resolved_address() -> None:
    answers = {
        "metadata.test": ["169.254.169.254"],
        "mixed.test": ["10.0.0.7", "fd00::7"],
        "mapped.test": ["::ffff:127.0.0.1"],
    }

    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]

    inner = _NoConnect()
    async with _client_on(_GuardedBackend(NetworkPolicy(), inner=inner, resolve=resolve)) as c:
        tool = WebFetchTool(client=c)
        for name in answers:
            with pytest.raises(ToolError, match=rf"Refused to connect to {name} \("):
                await tool.run(url=f"http://{name}/")
    assert inner.calls == []


async def test_a_name_is_resolved_once_and_the_checked_address_connected(
    site: Site, other: Site
) -> None:
    """DNS rebinding: a second look-up would answer 127.0.0.2, which is refused."""
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.2", "127.0.0.1"] if len(lookups) == 1 else ["127.0.0.2"]

    site.route("/hello", body=b"hello from 127.0.0.1")
    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), resolve=rebinding)
    async with _client_on(backend) as client:
        tool = WebFetchTool(client=client, allowed_networks=LOCAL)
        result = await tool.run(url=f"http://rebind.test:{_port(site)}/hello")
    assert result.content.endswith("hello from 127.0.0.1")
    assert lookups == ["rebind.test"]
    assert site.seen[0][1]["host"] == f"rebind.test:{_port(site)}"
    assert other.seen == []


class _LoopbackOnly(httpcore2.AsyncNetworkBackend):
    """Records every connection attempt; connects to loopback, refuses anything else unsent.

    ``redirect`` sends a connection aimed at one loopback address to another one (a NAT or a
    raced socket handing over a peer that was never checked).
    """

    def __init__(self, redirect: dict[str, tuple[str, int]] | None = None) -> None:
        self.calls: list[str] = []
        self._real = httpcore2.AnyIOBackend()
        self._redirect = redirect or {}

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
        self.calls.append(host)
        if not ipaddress.ip_address(host).is_loopback:
            raise httpcore2.ConnectError("the test double never leaves the machine")
        host, port = self._redirect.get(host, (host, port))
        return await self._real.connect_tcp(host, port, *args, **kw)


@pytest.mark.parametrize(
    "answer",
    [["10.0.0.7", "127.0.0.1"], ["169.254.169.254", "fd00::7", "127.0.0.1"]],
)
async def test_a_mixed_answer_connects_only_to_its_allowed_addresses(
    site: Site, answer: list[str]
) -> None:
    """One allowed and one refused address: the refused one is never tried, even first."""

    async def resolve(host: str, port: int) -> list[str]:
        return answer

    site.route("/", body=b"allowed")
    inner = _LoopbackOnly()
    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), inner=inner, resolve=resolve)
    async with _client_on(backend) as client:
        response = await client.get(f"http://mixed.test:{_port(site)}/")
    assert response.text == "allowed"
    assert inner.calls == ["127.0.0.1"]


async def test_a_connection_to_another_peer_than_the_checked_one_is_refused(
    site: Site, other: Site
) -> None:
    """The socket's peer is compared with the checked address, so a hand-over is caught."""

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    site.route("/", body=b"checked")
    other.route("/", body=b"never checked")
    inner = _LoopbackOnly(redirect={"127.0.0.1": ("127.0.0.2", _port(other))})
    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), inner=inner, resolve=resolve)
    async with _client_on(backend) as client:
        with pytest.raises(BlockedAddressError, match=r"connected to .*127\.0\.0\.2.*not the"):
            await client.get(f"http://peer.test:{_port(site)}/")
    assert inner.calls == ["127.0.0.1"]
    assert other.seen == [] and site.seen == []


class _NoPeer(httpcore2.AsyncNetworkStream):
    """A connected stream that cannot say who its peer is."""

    def __init__(self) -> None:
        self.closed = False

    def get_extra_info(self, info: str) -> Any:
        return None

    async def aclose(self) -> None:
        self.closed = True


async def test_a_stream_without_a_peer_address_is_refused_and_closed() -> None:
    stream = _NoPeer()

    class Backend(httpcore2.AsyncNetworkBackend):
        async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
            return stream

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    backend = _GuardedBackend(
        NetworkPolicy(allowed_networks=LOCAL), inner=Backend(), resolve=resolve
    )
    with pytest.raises(BlockedAddressError, match=r"not the checked 127\.0\.0\.1"):
        await backend.connect_tcp("nopeer.test", 80)
    assert stream.closed


async def test_guarded_transport_refuses_names_that_resolve_to_loopback(site: Site) -> None:
    async with httpx2.AsyncClient(transport=guarded_transport()) as client:
        with pytest.raises(BlockedAddressError, match="loopback"):
            await client.get(f"http://localhost:{_port(site)}/")
        tool = WebFetchTool(client=client, allowed_networks=LOCAL)  # URL allowed, socket not
        with pytest.raises(ToolError, match=r"Refused to connect to 127\.0\.0\.1:"):
            await tool.run(url=f"{site.url}/")
    assert site.seen == []


async def test_allow_options_open_exactly_what_they_name(site: Site, other: Site) -> None:
    site.route("/", body=b"one")
    other.route("/", body=b"two")
    assert (await WebFetchTool(allowed_networks=LOCAL).run(url=f"{site.url}/")).content.endswith(
        "one"
    )
    with pytest.raises(ToolError, match="Refused"):
        await WebFetchTool(allowed_networks=LOCAL).run(url=f"{other.url}/")
    assert other.seen == []
    everything = WebFetchTool(allow_private=True)
    assert (await everything.run(url=f"{other.url}/")).content.endswith("two")
    by_name = WebFetchTool(allowed_hosts=["localhost"])
    assert (await by_name.run(url=f"http://localhost:{_port(site)}/")).content.endswith("one")
    shared = NetworkPolicy(allowed_networks=["127.0.0.0/8"])
    assert (await HttpRequestTool(network=shared).run(method="GET", url=f"{other.url}/")).content
    with pytest.raises(ValueError, match="either network="):
        WebFetchTool(network=shared, allow_private=True)
    with pytest.raises(TypeError):
        NetworkPolicy(allowed_networks="127.0.0.1/32")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    ["http://user:pw@example.test/", "http://token@example.test/", "gopher://example.test/"],
)
async def test_credentials_and_other_schemes_are_refused(url: str) -> None:
    calls: list[httpx2.Request] = []
    async with _recording_client(calls) as client:
        with pytest.raises(ToolError, match="Invalid URL"):
            await WebFetchTool(client=client).run(url=url)
    assert calls == []


def test_policy_verdicts() -> None:
    policy = NetworkPolicy()
    ip = ipaddress.ip_address
    for public in ("93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"):
        assert policy.allows(ip(public)), public
    assert policy.allows(ip("64:ff9b::808:808"))  # NAT64 of a public address
    assert not policy.allows(ip("64:ff9b::7f00:1"))
    local = NetworkPolicy(allowed_networks=LOCAL)
    assert local.allows(ip("127.0.0.1")) and local.allows(ip("::ffff:127.0.0.1"))
    assert not local.allows(ip("127.0.0.2")) and not local.allows(ip("::1"))
    assert parse_ip_host("0177.0.0.1") == ip("127.0.0.1")
    assert parse_ip_host("1.2.3.4.5") is None and parse_ip_host("256.1.1.1") is None
    assert parse_ip_host("example.com") is None and parse_ip_host("08") is None
    assert parse_ip_host("0") == ip("0.0.0.0") and parse_ip_host("[fe80::1%25eth0]") is not None


# -- redirects: every hop checked, capped, and credentials kept at home ---------------------

_REFUSED_LOOPBACK_TARGETS = [
    "http://127.0.0.2:{other}/",
    "http://2130706434:{other}/",
    "http://[::1]:{other}/",
    "http://[::ffff:127.0.0.2]:{other}/",
    "http://0:{other}/",
]


@pytest.mark.parametrize("target", _REFUSED_LOOPBACK_TARGETS)
@pytest.mark.parametrize("code", [301, 302, 307, 308])
async def test_redirects_to_refused_addresses_are_refused(
    site: Site, other: Site, target: str, code: int
) -> None:
    site.route("/go", code, Location=target.format(other=_port(other)))
    tool = HttpRequestTool(allowed_networks=LOCAL)
    with pytest.raises(ToolError, match=r"Redirected from .*Refused to connect"):
        await tool.run(method="POST", url=f"{site.url}/go", body={"a": 1})
    assert len(site.seen) == 1
    assert other.seen == []


@pytest.mark.parametrize(
    "target",
    ["http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/", "http://10.1.2.3:8080/"],
)
async def test_redirects_to_private_networks_are_refused_with_any_client(target: str) -> None:
    """Through a test double: nothing may reach a non-loopback address, even on failure."""
    calls: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        return httpx2.Response(302, headers={"Location": target})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
        for tool in (WebFetchTool(client=client), HttpRequestTool(client=client)):
            with pytest.raises(ToolError, match=r"Redirected from .*Refused to connect"):
                await tool.run(method="GET", url="https://public.example/go")
    assert [str(c.url) for c in calls] == ["https://public.example/go"] * 2


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "gopher://127.0.0.1/", "http://u:p@127.0.0.1/"]
)
async def test_redirects_to_other_schemes_or_credentials_are_refused(
    site: Site, target: str
) -> None:
    site.route("/go", 302, Location=target)
    with pytest.raises(ToolError, match=r"Redirected from .*Invalid URL"):
        await WebFetchTool(allowed_networks=LOCAL).run(url=f"{site.url}/go")
    assert len(site.seen) == 1


async def test_redirects_are_capped(site: Site) -> None:
    site.route("/loop", 302, Location="/loop")
    with pytest.raises(ToolError, match="too many redirects"):
        await WebFetchTool(allowed_networks=LOCAL, max_redirects=3).run(url=f"{site.url}/loop")
    assert len(site.seen) == 4


async def test_caller_headers_do_not_follow_a_redirect_to_another_origin(
    site: Site, other: Site
) -> None:
    site.route("/same", 307, Location="/final")
    site.route("/away", 307, Location=f"{other.url}/final")
    site.route("/final", body=b"ok")
    other.route("/final", body=b"ok")
    tool = HttpRequestTool(allowed_networks=["127.0.0.0/8"])
    secret = {"Authorization": "Bearer s3cret", "X-Api-Key": "k3y", "Accept": "text/plain"}
    await tool.run(method="POST", url=f"{site.url}/same", headers=secret, body={"a": 1})
    assert site.seen[-1][1]["x-api-key"] == "k3y"
    await tool.run(method="POST", url=f"{site.url}/away", headers=secret, body={"a": 1})
    path, headers = other.seen[-1]
    assert path == "/final"
    assert "authorization" not in headers and "x-api-key" not in headers
    assert headers["accept"] == "text/plain"


# -- 3. every size capped --------------------------------------------------------------------


def _bomb(size: int, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = b"a" * 1_000_000
    return b"".join(packer.compress(block) for _ in range(size // len(block))) + packer.flush()


@pytest.mark.parametrize(("coding", "wbits"), [("gzip", 31), ("deflate", 15), ("deflate", -15)])
async def test_compression_bombs_are_cut_at_max_bytes_decoded(
    site: Site, coding: str, wbits: int
) -> None:
    site.route("/bomb", body=_bomb(64_000_000, wbits), **{"Content-Encoding": coding})
    for tool in (
        WebFetchTool(allowed_networks=LOCAL, max_bytes=1_000_000, max_chars=100),
        HttpRequestTool(allowed_networks=LOCAL, max_bytes=1_000_000, max_chars=100),
    ):
        tracemalloc.start()
        try:
            result = await tool.run(method="GET", url=f"{site.url}/bomb")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16_000_000, peak
        assert "[response cut at 1,000,000 bytes]" in result.content or "showing 100" in (
            result.content
        )


async def test_gzip_bodies_decode_and_broken_ones_fail_cleanly(site: Site) -> None:
    site.route("/gz", body=gzip.compress(b"zipped text"), **{"Content-Encoding": "gzip"})
    site.route("/bad", body=b"not gzip at all", **{"Content-Encoding": "gzip"})
    tool = WebFetchTool(allowed_networks=LOCAL)
    assert (await tool.run(url=f"{site.url}/gz")).content.endswith("zipped text")
    with pytest.raises(ToolError, match="failed"):
        await tool.run(url=f"{site.url}/bad")


async def test_oversized_response_headers_are_refused(site: Site) -> None:
    site.route("/h", body=b"x", **{"X-Big": "y" * 200_000})
    with pytest.raises(ToolError, match="failed"):
        await HttpRequestTool(allowed_networks=LOCAL).run(method="GET", url=f"{site.url}/h")


async def test_title_reason_and_url_shown_are_capped(site: Site) -> None:
    page = b"<title>" + b"T" * 500_000 + b"</title><p>body</p>"
    site.route("/t", body=page, reason="R" * 20_000, **{"Content-Type": "text/html"})
    result = await WebFetchTool(allowed_networks=LOCAL).run(url=f"{site.url}/t")
    head, _, text = result.content.partition("\n\n")
    assert text == "body"
    assert len(head) < 1_000


async def test_hostile_json_and_charsets_render_safely(site: Site) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    site.route("/deep", body=deep, **{"Content-Type": "application/json"})
    site.route("/puny", body=b"abc-" * 100_000, **{"Content-Type": "text/plain; charset=punycode"})
    tool = HttpRequestTool(allowed_networks=LOCAL, max_chars=200)
    async with heartbeat() as beat:
        result = await tool.run(method="GET", url=f"{site.url}/deep")
        assert "\n\n[[[[" in result.content
        fetched = await WebFetchTool(allowed_networks=LOCAL, max_chars=50).run(
            url=f"{site.url}/puny"
        )
        assert "abc-abc-" in fetched.content
    assert beat.max_stall < 0.1, beat


# -- TLS still verifies the host name on a pinned connection ---------------------------------


def _tls_pair(name: str) -> tuple[bytes, bytes, bytes]:
    """A CA certificate, and a certificate and key for ``name`` signed by it (all PEM)."""
    x509 = pytest.importorskip("cryptography.x509", reason="cryptography is not installed")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = cert("test CA", ca_key, "test CA", ca_key, True)
    leaf = cert(name, key, "test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca_cert.public_bytes(pem), leaf.public_bytes(pem), key_pem


async def test_tls_verifies_and_names_the_host_while_connecting_to_the_checked_address(
    site: Site, tmp_path: Any
) -> None:
    ca, leaf, key = _tls_pair("pinned.test")
    (tmp_path / "leaf.pem").write_bytes(leaf + key)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "leaf.pem")
    names: list[str | None] = []
    server_side.sni_callback = lambda sock, name, ctx: names.append(name)
    site.route("/hello", body=b"hello over TLS")
    tls = Site(routes=site.routes)
    with _serve(tls, "127.0.0.1", wrap=server_side) as served:

        async def resolve(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

        backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), resolve=resolve)
        client_side = ssl.create_default_context(cadata=ca.decode())
        async with httpx2.AsyncClient(transport=_GuardedTransport(backend, client_side)) as c:
            tool = WebFetchTool(client=c, allowed_networks=LOCAL)
            result = await tool.run(url=f"https://pinned.test:{_port(served)}/hello")
            assert result.content.endswith("hello over TLS")
            with pytest.raises(ToolError, match="failed"):  # the certificate names pinned.test
                await tool.run(url=f"https://127.0.0.1:{_port(served)}/hello")
    assert names[0] == "pinned.test"
    assert len(tls.seen) == 1


async def test_guarded_transport_verifies_tls_by_default(site: Site, tmp_path: Any) -> None:
    """A certificate from an unknown CA is refused; trusting that CA (``verify=``) works."""
    ca, leaf, key = _tls_pair("localhost")
    (tmp_path / "leaf.pem").write_bytes(leaf + key)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "leaf.pem")
    site.route("/hello", body=b"hello over TLS")
    tls = Site(routes=site.routes)
    policy = NetworkPolicy(allowed_hosts=["localhost"])
    with _serve(tls, "127.0.0.1", wrap=server_side) as served:
        url = f"https://localhost:{_port(served)}/hello"
        async with httpx2.AsyncClient(transport=guarded_transport(policy)) as client:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(url)
        trusting = ssl.create_default_context(cadata=ca.decode())
        transport = guarded_transport(policy, verify=trusting)
        async with httpx2.AsyncClient(transport=transport) as client:
            assert (await client.get(url)).text == "hello over TLS"
    assert len(tls.seen) == 1


async def test_the_system_resolver_is_asked_for_the_host_itself() -> None:
    assert await _resolve("127.0.0.2", 80) == ["127.0.0.2"]
    assert "127.0.0.1" in await _resolve("localhost", 443)


async def test_a_zoned_peer_address_is_the_checked_one() -> None:
    """A link-local address carries its zone; both sides are compared without it."""
    opened: list[str] = []

    class Peer(httpcore2.AsyncNetworkStream):
        def get_extra_info(self, info: str) -> Any:
            return ("fe80::1%eth0", 80, 0, 2) if info == "server_addr" else None

        async def aclose(self) -> None:
            pass

    class Backend(httpcore2.AsyncNetworkBackend):  # never connects anywhere
        async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
            opened.append(host)
            return Peer()

    async def resolve(host: str, port: int) -> list[str]:
        return ["fe80::1%eth0"]

    backend = _GuardedBackend(NetworkPolicy(allow_private=True), inner=Backend(), resolve=resolve)
    assert isinstance(await backend.connect_tcp("zoned.test", 80), Peer)
    assert opened == ["fe80::1%eth0"]


async def test_refusals_name_the_host_and_the_address() -> None:
    with pytest.raises(BlockedAddressError) as by_name:
        NetworkPolicy().check_url(httpx2.URL("http://api.localhost/"))
    assert (by_name.value.host, by_name.value.address) == (
        "api.localhost",
        ipaddress.ip_address("127.0.0.1"),
    )
    backend = _GuardedBackend(NetworkPolicy(), inner=_NoConnect())
    with pytest.raises(BlockedAddressError) as unix:
        await backend.connect_unix_socket("/run/docker.sock")
    assert (unix.value.host, unix.value.address) == ("/run/docker.sock", None)
    assert str(unix.value) == "Refused: Unix sockets are not reachable."
    await backend.sleep(0.001)


async def test_a_peer_refusal_names_the_host_and_the_checked_address() -> None:
    class Elsewhere(httpcore2.AsyncNetworkStream):
        def get_extra_info(self, info: str) -> Any:
            return ("127.0.0.9", 80) if info == "server_addr" else None

        async def aclose(self) -> None:
            pass

    class Backend(httpcore2.AsyncNetworkBackend):
        async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
            return Elsewhere()

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    policy = NetworkPolicy(allowed_networks=LOCAL)
    backend = _GuardedBackend(policy, inner=Backend(), resolve=resolve)
    with pytest.raises(BlockedAddressError) as caught:
        await backend.connect_tcp("peer.test", 80)
    assert (caught.value.host, caught.value.address) == (
        "peer.test",
        ipaddress.ip_address("127.0.0.1"),
    )
    assert str(caught.value) == (
        "Refused peer.test: connected to ('127.0.0.9', 80), not the checked 127.0.0.1."
    )


async def test_kept_alive_connections_are_reused(site: Site) -> None:
    """Each response gives its connection back to the pool: three requests, one connection."""
    site.route("/", body=b"again")
    inner = _LoopbackOnly()
    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), inner=inner)
    with _serve(Site(routes=site.routes), "127.0.0.1", protocol="HTTP/1.1") as kept:
        async with _client_on(backend) as client:
            for _ in range(3):
                assert (await client.get(f"{kept.url}/")).text == "again"
    assert inner.calls == ["127.0.0.1"]
    assert len(kept.seen) == 3


def test_network_policy_repr() -> None:
    policy = NetworkPolicy(allowed_networks=["127.0.0.1"], allowed_hosts=["Wiki.corp.", "a"])
    assert repr(policy) == (
        "NetworkPolicy(allowed_networks=['127.0.0.1/32'], "
        "allowed_hosts=['a', 'wiki.corp'], allow_private=False)"
    )


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1.0", "1.2.3.4.5", "127.0.0.256", "127.0.65536", "127.16777216", "4294967296"],
)
def test_ip_spellings_the_resolver_refuses_are_not_addresses(host: str) -> None:
    assert parse_ip_host(host) is None


@pytest.mark.parametrize(
    ("host", "ip"),
    [
        ("0x0000000000007f.1", "127.0.0.1"),  # leading zeros do not count toward the length
        ("0000000000000177.0.0.1", "127.0.0.1"),
        ("127.0.0.255", "127.0.0.255"),
        ("127.0.65535", "127.0.255.255"),
        ("4294967295", "255.255.255.255"),
    ],
)
def test_ip_spellings_at_their_limits_are_addresses(host: str, ip: str) -> None:
    assert parse_ip_host(host) == ipaddress.ip_address(ip)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback address (the machine itself)"),
        ("::ffff:127.0.0.1", "a loopback address (the machine itself)"),
        ("0.0.0.0", "the unspecified address (the machine itself)"),
        ("169.254.169.254", "a link-local address (such as a cloud metadata endpoint)"),
        ("224.0.0.1", "a multicast address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("10.0.0.1", "a private network address"),
        ("192.88.99.1", "a reserved or special-purpose address"),  # the old 6to4 relays
    ],
)
def test_a_refusal_says_what_kind_of_address_it_is(address: str, kind: str) -> None:
    ip = ipaddress.ip_address(address)
    with pytest.raises(BlockedAddressError) as caught:
        NetworkPolicy().check_address(address, ip)
    assert (caught.value.host, caught.value.address) == (address, ip)
    assert str(caught.value) == (
        f"Refused to connect to {address}: it is {kind}, which is not allowed. This tool "
        "reaches public internet addresses only; loopback, private, link-local and other "
        "special addresses are blocked unless the host application allows them "
        "(NetworkPolicy)."
    )


def test_a_loopback_name_is_refused_as_one() -> None:
    with pytest.raises(BlockedAddressError) as caught:
        NetworkPolicy().check_url(httpx2.URL("http://localhost/"))
    assert str(caught.value).startswith(
        "Refused to connect to localhost: it is a loopback name (the machine itself), which "
        "is not allowed."
    )


@pytest.mark.parametrize(
    ("host", "ip"),
    [
        ("[::1]", "::1"),
        ("[fe80::1%25eth0]", "fe80::1%eth0"),
        ("[FE80::1%25eth0]", "fe80::1%eth0"),
        ("[fe80::1%25]", "fe80::1"),  # a zone the parser refuses is dropped, not the address
        ("[fe80::1%25a%25b]", "fe80::1"),
    ],
)
def test_ipv6_hosts_are_read_exactly(host: str, ip: str) -> None:
    assert parse_ip_host(host) == ipaddress.ip_address(ip)


@pytest.mark.parametrize("host", ["[::1", "::1]", "[]"])
def test_half_bracketed_hosts_are_not_addresses(host: str) -> None:
    assert parse_ip_host(host) is None


def test_reserved_ipv6_space_is_not_public() -> None:
    """``4000::/3`` is not allocated: ``is_global`` says yes, ``is_reserved`` says no."""
    assert not NetworkPolicy().allows(ipaddress.ip_address("4000::1"))
    assert NetworkPolicy().allows(ipaddress.ip_address("2606:4700::1111"))


def test_network_policy_options_are_read_leniently_and_checked() -> None:
    policy = NetworkPolicy(allowed_networks=["127.0.0.1/8"])  # host bits set: the /8 is meant
    assert policy.allows(ipaddress.ip_address("127.5.5.5"))
    with pytest.raises(TypeError) as caught:
        NetworkPolicy(allowed_hosts="localhost")  # type: ignore[arg-type]
    assert str(caught.value) == "allowed_networks and allowed_hosts take a list, not one string"


async def test_connection_failures_try_every_allowed_address_and_say_why() -> None:
    seen: list[tuple[str, int]] = []
    answers: dict[str, list[str]] = {"two.test": ["127.0.0.1", "127.0.0.2"], "none.test": []}

    async def resolve(host: str, port: int) -> list[str]:
        seen.append((host, port))
        if host == "nx.test":
            raise OSError("no such host")
        return answers[host]

    inner = _NoConnect()
    policy = NetworkPolicy(allowed_networks=["127.0.0.0/8"])
    backend = _GuardedBackend(policy, inner=inner, resolve=resolve)
    with pytest.raises(httpcore2.ConnectError) as refused:
        await backend.connect_tcp("two.test", 8080)
    assert str(refused.value) == "the test double never connects"  # the last real error
    assert inner.calls == ["127.0.0.1", "127.0.0.2"]
    for host, message in [
        ("nx.test", "cannot resolve nx.test: no such host"),
        ("none.test", "cannot resolve none.test: no addresses"),
    ]:
        with pytest.raises(httpcore2.ConnectError) as caught:
            await backend.connect_tcp(host, 8080)
        assert str(caught.value) == message
    assert seen == [("two.test", 8080), ("nx.test", 8080), ("none.test", 8080)]


async def test_a_resolver_that_never_answers_is_a_connect_timeout() -> None:
    async def stuck(host: str, port: int) -> list[str]:
        await anyio.Event().wait()
        raise AssertionError("unreachable")

    backend = _GuardedBackend(NetworkPolicy(), inner=_NoConnect(), resolve=stuck)
    with anyio.fail_after(5), pytest.raises(httpcore2.ConnectTimeout) as caught:
        await backend.connect_tcp("slow.test", 80, timeout=0.2)
    assert str(caught.value) == "connecting to slow.test timed out"


async def test_request_timeouts_and_response_details_pass_through(site: Site) -> None:
    """The request's timeout reaches the pool; the response keeps its reason and version."""
    hold = threading.Event()

    def hang(_: Any) -> Reply:
        hold.wait(10)
        return 200, {}, b"late"

    site.routes["/hang"] = hang
    site.route("/fine", body=b"ok", reason="Fine Thanks")
    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL))
    try:
        async with _client_on(backend) as client:
            response = await client.get(f"{site.url}/fine")
            assert (response.reason_phrase, response.http_version) == ("Fine Thanks", "HTTP/1.0")
            with anyio.fail_after(5), pytest.raises(httpx2.ReadTimeout):
                await client.get(f"{site.url}/hang", timeout=0.3)
    finally:
        hold.set()


class _Counted(httpcore2.AsyncNetworkStream):
    """A stream that tells its backend when it is closed."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream, closed: list[object]) -> None:
        self._inner, self._closed = inner, closed

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self._closed.append(self)
        await self._inner.aclose()

    async def start_tls(self, *args: Any, **kw: Any) -> httpcore2.AsyncNetworkStream:
        raise AssertionError("plain HTTP only")

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


async def test_the_guarded_pool_caps_its_connections() -> None:
    """At most 20 connections at once, and at most 10 kept alive afterwards."""
    arrived, release = threading.Event(), threading.Event()
    count = [0]
    lock = threading.Lock()

    def hold(_: Any) -> Reply:
        with lock:
            count[0] += 1
            if count[0] == 20:
                arrived.set()
        release.wait(10)
        return 200, {}, b"done"

    opened: list[str] = []
    closed: list[object] = []

    class Backend(_LoopbackOnly):
        async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
            opened.append(host)
            return _Counted(await super().connect_tcp(host, port, *args, **kw), closed)

    backend = _GuardedBackend(NetworkPolicy(allowed_networks=LOCAL), inner=Backend())
    bodies: list[str] = []
    with _serve(Site(routes={"/hold": hold}), "127.0.0.1", protocol="HTTP/1.1") as kept:
        try:
            async with _client_on(backend) as client:

                async def fetch() -> None:
                    bodies.append((await client.get(f"{kept.url}/hold", timeout=30)).text)

                async with anyio.create_task_group() as tg:
                    for _ in range(25):
                        tg.start_soon(fetch)
                    assert await anyio.to_thread.run_sync(arrived.wait, 10)
                    await anyio.wait_all_tasks_blocked()
                    assert len(opened) == 20  # the other five wait for a free connection
                    release.set()
                assert bodies == ["done"] * 25
                assert (len(opened), len(closed)) == (20, 10)  # ten idle ones kept
        finally:
            release.set()


async def test_the_tls_context_is_built_once_and_off_the_event_loop(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading the CA bundle takes tens of ms of CPU: a client per call used to pay it on the
    # event loop each time (the stalls this file's heartbeats caught under load).
    from fanloop.tools import _guarded

    built: list[str] = []
    real = httpx2.create_ssl_context

    def spy(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(_guarded, "_default_context", None, raising=False)
    monkeypatch.setattr(httpx2, "create_ssl_context", spy)
    site.route("/p", body=b"plain", **{"Content-Type": "text/plain"})
    loop_thread = threading.current_thread().name
    for tool in (WebFetchTool(allowed_networks=LOCAL), WebFetchTool(allowed_networks=LOCAL)):
        assert (await tool.run(url=f"{site.url}/p")).content.endswith("plain")
    assert len(built) == 1
    assert built[0] != loop_thread
