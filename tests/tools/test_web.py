"""web_fetch and http_request against a local HTTP server."""

from __future__ import annotations

import json

import httpx2
import pytest

from fanloop.errors import ToolError
from fanloop.tools import HttpRequestTool, WebFetchTool
from fanloop.tools.web import html_to_text
from heartbeat import Stopwatch

# The local test server is on loopback, which the tools refuse unless allowed.
LOCAL = {"allowed_networks": ["127.0.0.1/32"]}


async def test_fetch_extracts_readable_text(http_server: str) -> None:
    result = await WebFetchTool(**LOCAL).run(url=f"{http_server}/page")
    assert not result.is_error
    assert result.content == (
        f"200 OK {http_server}/page\nTitle: Test Page\n\n"
        "Welcome\n\nHello world & friends.\n\n- one\n- two"
    )
    assert "hidden" not in result.content
    assert "alert" not in result.content
    assert "color" not in result.content


async def test_fetch_text_json_and_redirects(http_server: str) -> None:
    tool = WebFetchTool(**LOCAL)
    assert (await tool.run(url=f"{http_server}/text")).content.endswith("\n\nplain text body\n")
    assert (await tool.run(url=f"{http_server}/json")).content.endswith('{"a": 1, "b": [1, 2]}')
    redirected = await tool.run(url=f"{http_server}/redirect")
    assert redirected.content.startswith(f"200 OK {http_server}/text")


async def test_fetch_error_status_is_an_error_result(http_server: str) -> None:
    result = await WebFetchTool(**LOCAL).run(url=f"{http_server}/missing")
    assert result.is_error
    assert result.content == f"404 Not Found {http_server}/missing\n\nNot here"


async def test_fetch_refuses_binary(http_server: str) -> None:
    with pytest.raises(ToolError, match="application/octet-stream content"):
        await WebFetchTool(**LOCAL).run(url=f"{http_server}/binary")


async def test_fetch_size_limits(http_server: str) -> None:
    result = await WebFetchTool(max_bytes=1000, **LOCAL).run(url=f"{http_server}/big")
    assert result.content.endswith("x\n[response cut at 1,000 bytes]")
    result = await WebFetchTool(max_chars=100, **LOCAL).run(url=f"{http_server}/big")
    assert "[page text truncated: showing 100 of 200,000 characters]" in result.content


async def test_fetch_time_limit(http_server: str) -> None:
    watch = Stopwatch()
    with pytest.raises(ToolError, match="timed out"):
        await WebFetchTool(timeout=0.3, **LOCAL).run(url=f"{http_server}/slow")
    assert watch.own < 3, watch  # the server holds the answer 10 s


@pytest.mark.parametrize("url", ["ftp://example.com/x", "not a url", "/relative", "file:///etc"])
async def test_fetch_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ToolError, match="Invalid URL"):
        await WebFetchTool(**LOCAL).run(url=url)


async def test_fetch_connection_refused() -> None:
    with pytest.raises(ToolError, match="failed"):
        await WebFetchTool(timeout=5, **LOCAL).run(url="http://127.0.0.1:9/")


async def test_fetch_with_a_shared_client(http_server: str) -> None:
    async with httpx2.AsyncClient() as client:
        tool = WebFetchTool(client=client, **LOCAL)
        assert "plain text body" in (await tool.run(url=f"{http_server}/text")).content
        assert "plain text body" in (await tool.run(url=f"{http_server}/text")).content
        assert not client.is_closed


def test_html_to_text_drops_scripts_and_styles() -> None:
    text, title = html_to_text(
        "<html><head><title>T</title><script>no()</script></head>"
        "<body><style>p{}</style><pre>a\n  b</pre><p>c  d</p></body></html>"
    )
    assert (text, title) == ("a\nb\n\nc d", "T")


async def test_http_request_sends_method_headers_and_json(http_server: str) -> None:
    result = await HttpRequestTool(**LOCAL).run(
        method="post",
        url=f"{http_server}/echo?x=1",
        headers={"X-Token": "abc"},
        body={"name": "fan", "n": [1, 2]},
    )
    assert not result.is_error
    assert result.metadata == {"status_code": 201}
    head, _, body = result.content.partition("\n\n")
    assert head.splitlines()[0] == "HTTP 201 Created"
    assert "x-echo: yes" in head
    echo = json.loads(body)
    assert echo["method"] == "POST"
    assert echo["path"] == "/echo?x=1"
    assert echo["headers"]["x-token"] == "abc"
    assert echo["headers"]["content-type"] == "application/json"
    assert echo["body"] == {"name": "fan", "n": [1, 2]}
    assert body == json.dumps(echo, indent=2)  # pretty-printed


async def test_http_request_other_methods(http_server: str) -> None:
    tool = HttpRequestTool(**LOCAL)
    deleted = await tool.run(method="DELETE", url=f"{http_server}/echo")
    assert '"method": "DELETE"' in deleted.content
    missing = await tool.run(method="GET", url=f"{http_server}/nowhere")
    assert missing.is_error
    assert missing.content.startswith("HTTP 404 Not Found")
    head = await tool.run(method="HEAD", url=f"{http_server}/text")
    assert head.content.endswith("\n\n(empty body)")
    with pytest.raises(ToolError, match="Unsupported method 'TRACE'"):
        await tool.run(method="TRACE", url=f"{http_server}/echo")
    with pytest.raises(ToolError, match="must be an object of string values"):
        await tool.run(method="GET", url=f"{http_server}/echo", headers={"n": 1})


def test_http_request_is_dangerous_with_a_full_preview() -> None:
    tool = HttpRequestTool()
    assert tool.dangerous
    assert not WebFetchTool().dangerous
    assert tool.preview(
        method="put",
        url="http://127.0.0.1/items/1",
        headers={"Authorization": "Bearer t"},
        body={"a": 1},
    ) == ('PUT http://127.0.0.1/items/1\nAuthorization: Bearer t\n\n{\n  "a": 1\n}')
    assert tool.preview(method="GET", url="http://h/") == "GET http://h/"
