"""Cold start (issue #15): the first request leaves without importing a vendor SDK.

A provider given no SDK client posts its JSON straight to its pool, with the key, base URL and
headers the SDK would use; an SDK client passed as ``client=`` is still the way to reach
credentials only the SDK resolves, and is used as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import anthropic._constants
import httpx2
import openai
import pytest
from provider_helpers import make_anthropic, make_openai, request

from fanloop.errors import ConfigurationError, ServerError
from fanloop.providers._endpoint import ANTHROPIC_API_VERSION
from fanloop.providers._http import MAX_ERROR_MESSAGE_CHARS
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider
from fanloop.testing import FakeLLMServer, Hostile

SDKS = ("anthropic", "openai")
CLEAN_ENV = ("LLM_", "ANTHROPIC_", "OPENAI_", "OPENROUTER_", "FANLOOP_")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN_ENV)}
    env.update(extra)
    return env


def imported_sdks(code: str, env: dict[str, str], cwd: Path) -> list[str]:
    """Run ``code`` in a fresh interpreter; the vendor SDKs it imported by the end."""
    probe = (
        f"{code}\nimport sys\nprint('SDKS=' + ','.join(m for m in {SDKS!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("SDKS="), out.stdout
    return [name for name in line[5:].split(",") if name]


def test_an_agent_from_a_model_string_sends_without_the_sdk(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.responder = lambda body: "hello"
    code = (
        "import asyncio\n"
        "from fanloop import Agent\n"
        "async def main():\n"
        "    for spec in ('anthropic:claude-x', 'openai:gpt-x', 'openai-chat:gpt-x'):\n"
        "        async with Agent(spec) as agent:\n"
        "            assert (await agent.run('hi')).text == 'hello'\n"
        "asyncio.run(main())\n"
    )
    env = child_env(
        ANTHROPIC_API_KEY="k",
        ANTHROPIC_BASE_URL=server.anthropic_base_url,
        OPENAI_API_KEY="k",
        OPENAI_BASE_URL=server.openai_base_url,
    )
    assert imported_sdks(code, env, tmp_path) == []
    assert [r.api for r in server.requests] == ["anthropic", "responses", "openai"]


@pytest.mark.parametrize("vendor", ["anthropic", "openai", "openai-chat"])
def test_fanloop_run_sends_without_the_sdk(
    server: FakeLLMServer, tmp_path: Path, vendor: str
) -> None:
    server.responder = lambda body: "hello"
    code = (
        "import sys\n"
        "from fanloop.cli import main\n"
        "sys.argv = ['fanloop', 'run', 'hi', '--no-memory']\n"
        "assert main() == 0\n"
    )
    env = child_env(
        LLM_PROVIDER=vendor,
        ANTHROPIC_API_KEY="k",
        ANTHROPIC_BASE_URL=server.anthropic_base_url,
        OPENAI_API_KEY="k",
        OPENAI_BASE_URL=server.openai_base_url,
    )
    assert imported_sdks(code, env, tmp_path) == []
    wire = {"openai": "responses", "openai-chat": "openai"}.get(vendor, vendor)
    assert [r.api for r in server.requests] == [wire]


# -- the request is the one the SDK would send ----------------------------------------------------


def test_the_anthropic_version_is_the_sdks() -> None:
    assert ANTHROPIC_API_VERSION == anthropic._constants.ANTHROPIC_API_VERSION


async def test_anthropic_headers_match_the_sdks(server: FakeLLMServer) -> None:
    server.add("direct", "sdk")
    direct = AnthropicProvider("m", api_key="sk-a", base_url=server.anthropic_base_url)
    sdk = anthropic.AsyncAnthropic(api_key="sk-a", base_url=server.anthropic_base_url)
    through_sdk = AnthropicProvider("m", client=sdk)
    for provider in (direct, through_sdk):
        async with provider:
            await provider.complete(request("hi"))
    await sdk.close()
    ours, theirs = (r.headers for r in server.requests)
    for name in ("authorization", "anthropic-version", "content-type", "accept"):
        assert ours[name] == theirs[name], name
    assert ours["x-stainless-retry-count"] == theirs["x-stainless-retry-count"] == "0"
    assert server.requests[0].raw_body == server.requests[1].raw_body


async def test_openai_headers_match_the_sdks(server: FakeLLMServer) -> None:
    server.add("direct", "sdk")
    direct = OpenAIProvider("m", api_key="sk-o", base_url=server.openai_base_url)
    sdk = openai.AsyncOpenAI(api_key="sk-o", base_url=server.openai_base_url)
    for provider in (direct, OpenAIProvider("m", client=sdk)):
        async with provider:
            await provider.complete(request("hi"))
    await sdk.close()
    ours, theirs = (r.headers for r in server.requests)
    for name in ("authorization", "content-type", "accept"):
        assert ours[name] == theirs[name], name
    assert server.requests[0].path == server.requests[1].path == "/v1/chat/completions"
    assert server.requests[0].raw_body == server.requests[1].raw_body


async def test_environment_credentials_and_headers(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Team: blue\nmalformed line\nX-Two: 2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-1")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or")
    server.responder = lambda body: "ok"
    providers: list[Any] = [
        AnthropicProvider("m", default_headers={"X-Two": "explicit"}),
        OpenAIProvider("m"),
        OpenAIProvider.openrouter("a/b", base_url=server.openai_base_url),
    ]
    for provider in providers:
        async with provider:
            await provider.complete(request("hi"))
    claude, gpt, routed = (r.headers for r in server.requests)
    assert claude["authorization"] == "Bearer tok"
    assert (claude["x-team"], claude["x-two"]) == ("blue", "explicit")
    assert gpt["authorization"] == "Bearer sk-env"
    assert (gpt["openai-organization"], gpt["openai-project"]) == ("org-1", "proj-1")
    # A preset does not hand OpenAI's organization to another server.
    assert routed["authorization"] == "Bearer sk-or"
    assert "openai-organization" not in routed and "openai-project" not in routed


@pytest.mark.parametrize(
    ("base_url", "path"),
    [
        ("http://h:1", "/v1/messages"),
        ("http://h:1/", "/v1/messages"),
        ("https://gateway.example/anthropic", "/anthropic/v1/messages"),
    ],
)
def test_base_urls_are_joined_as_the_sdk_joins_them(base_url: str, path: str) -> None:
    provider = AnthropicProvider("m", api_key="k", base_url=base_url)
    assert httpx2.URL(provider._client.url).path == path
    assert provider._client.base_url.raw_path.endswith(b"/")


@pytest.mark.parametrize("base_url", ["ftp://h/v1", "not a url", "http:///v1", "/v1"])
def test_a_base_url_that_cannot_work_is_refused_at_once(base_url: str) -> None:
    with pytest.raises(ConfigurationError, match="base_url"):
        OpenAIProvider("m", api_key="k", base_url=base_url)


def test_an_sdk_client_brings_its_own_key_url_and_pool() -> None:
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url="http://h:1")
    for conflict in ({"api_key": "k"}, {"base_url": "http://x"}, {"http_client": object()}):
        with pytest.raises(ConfigurationError, match="client= brings its own"):
            AnthropicProvider("m", client=sdk, **conflict)
    with pytest.raises(ConfigurationError, match=r"anthropic\.AsyncAnthropic"):
        AnthropicProvider("m", client=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"openai\.AsyncOpenAI"):
        OpenAIProvider("m", client=sdk)  # type: ignore[arg-type]


async def test_an_sdk_client_is_used_and_left_open(server: FakeLLMServer) -> None:
    pool = httpx2.AsyncClient()
    sdk = openai.AsyncOpenAI(api_key="k", base_url=server.openai_base_url, http_client=pool)
    provider = OpenAIProvider("m", client=sdk, timeout=7.0)
    server.add("via the sdk")
    async with provider:
        assert (await provider.complete(request("hi"))).text == "via the sdk"
    assert provider._client.sdk.max_retries == 0 and provider._client.sdk.timeout == 7.0
    assert sdk.max_retries != 0  # the caller's client is not changed
    assert not pool.is_closed
    await pool.aclose()


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
async def test_a_borrowed_pool_without_the_hook_still_cuts_error_bodies(
    server: FakeLLMServer, api: str, gzip: bool
) -> None:
    # Before, the SDK read a borrowed pool's error body whole; now the provider caps it.
    server.add(Hostile.error(500, size=64 * 1024 * 1024, gzip=gzip))
    async with httpx2.AsyncClient() as pool:
        make = make_anthropic if api == "anthropic" else make_openai
        provider = make(server, http_client=pool)
        started = time.monotonic()
        with pytest.raises(ServerError) as info:
            await provider.complete(request("hi"))
        assert time.monotonic() - started < 5
    assert len(info.value.message) <= MAX_ERROR_MESSAGE_CHARS + 40
