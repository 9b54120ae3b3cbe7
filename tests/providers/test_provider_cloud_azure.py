"""Azure OpenAI, for both OpenAI wires: the providers' own requests
(``OpenAIProvider.azure`` / ``OpenAIResponsesProvider.azure``, on both transports) and the
SDK's client (``client=AsyncAzureOpenAI(...)``), against the fake server over real HTTP:
deployment and v1 URLs, ``api-version``, ``api-key`` or Entra ID bearer tokens, the
environment variables the SDK reads, and ``Agent("azure:DEPLOYMENT")``."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from provider_helpers import request, stream_all

from fanloop import Agent
from fanloop.errors import AuthenticationError, ConfigurationError
from fanloop.providers import resolve_provider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider
from fanloop.testing import FakeLLMServer, call, reply

VERSION = "2024-10-21"
AZURE_VARIABLES = (
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_AD_TOKEN",
    "AZURE_OPENAI_ENDPOINT",
    "OPENAI_API_VERSION",
)


@pytest.fixture(autouse=True)
def no_azure_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in AZURE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


WIRES = {
    "chat": (OpenAIProvider, "/openai/deployments/prod-4o/chat/completions", "/chat/completions"),
    "responses": (OpenAIResponsesProvider, "/openai/responses", "/responses"),
}


@pytest.mark.parametrize("wire", ["chat", "responses"])
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_a_deployment_with_a_dated_api_version_and_an_api_key(
    server: FakeLLMServer, transport: str, wire: str, streaming: bool
) -> None:
    cls, path, _ = WIRES[wire]
    server.add(reply("Hello from Azure."))
    async with cls.azure(
        "prod-4o",
        azure_endpoint=server.url,
        api_version=VERSION,
        api_key="azure-key",
        transport=transport,  # type: ignore[arg-type]
    ) as provider:
        assert provider.name == "azure"
        if streaming:
            _, response = await stream_all(provider, request("hi"))
        else:
            response = await provider.complete(request("hi"))
    assert response.text == "Hello from Azure."
    assert response.provider == "azure"
    (seen,) = server.requests
    assert seen.api == ("openai" if wire == "chat" else "responses")
    assert seen.path == path
    assert seen.query == {"api-version": VERSION}
    assert seen.headers["api-key"] == "azure-key"
    assert "authorization" not in seen.headers
    assert seen.body["model"] == "prod-4o"
    assert seen.stream is streaming


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_v1_api_and_an_entra_id_token(
    server: FakeLLMServer, transport: str, wire: str
) -> None:
    cls, _, tail = WIRES[wire]
    server.add("v1 answer")
    async with cls.azure(
        "prod-4o",
        azure_endpoint=f"{server.url}/",
        azure_ad_token="entra-token",
        transport=transport,  # type: ignore[arg-type]
    ) as provider:
        assert (await provider.complete(request("hi"))).text == "v1 answer"
    (seen,) = server.requests
    assert seen.path == f"/openai/v1{tail}"
    assert seen.query == {}
    assert seen.headers["authorization"] == "Bearer entra-token"
    assert "api-key" not in seen.headers


async def test_preview_is_the_v1_path_with_its_query(server: FakeLLMServer) -> None:
    server.add("preview answer")
    provider = OpenAIResponsesProvider.azure(
        "prod-4o", azure_endpoint=server.url, api_version="preview", api_key="k"
    )
    async with provider:
        await provider.complete(request("hi"))
    (seen,) = server.requests
    assert (seen.path, seen.query) == ("/openai/v1/responses", {"api-version": "preview"})


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_token_provider_is_asked_before_every_request(
    server: FakeLLMServer, transport: str, kind: str
) -> None:
    tokens = iter(["token-1", "token-2"])

    def sync_provider() -> str:
        return next(tokens)

    async def async_provider() -> str:
        return next(tokens)

    server.add(reply(tool_calls=[call("get_weather", _id="c1", city="Oslo")]), "Sunny.")
    async with OpenAIProvider.azure(
        "prod-4o",
        azure_endpoint=server.url,
        api_version=VERSION,
        azure_ad_token_provider=sync_provider if kind == "sync" else async_provider,
        transport=transport,  # type: ignore[arg-type]
    ) as provider:
        await provider.complete(request("hi"))
        await stream_all(provider, request("again"))
    assert [r.headers["authorization"] for r in server.requests] == [
        "Bearer token-1",
        "Bearer token-2",
    ]
    assert all("api-key" not in r.headers for r in server.requests)


async def test_a_failing_or_empty_token_provider_is_an_authentication_error(
    server: FakeLLMServer,
) -> None:
    def broken() -> str:
        raise RuntimeError("no managed identity here")

    for token_provider, match in ((broken, "no managed identity"), (lambda: "", "non-empty")):
        provider = OpenAIProvider.azure(
            "prod-4o", azure_endpoint=server.url, azure_ad_token_provider=token_provider
        )
        async with provider:
            with pytest.raises(AuthenticationError, match=match):
                await provider.complete(request("hi"))
    assert server.requests == []


async def test_the_environment_variables_the_sdk_reads(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    monkeypatch.setenv("OPENAI_API_VERSION", VERSION)
    server.add("from the environment")
    async with OpenAIProvider.azure("prod-4o") as provider:
        assert (await provider.complete(request("hi"))).text == "from the environment"
    (seen,) = server.requests
    assert seen.path == "/openai/deployments/prod-4o/chat/completions"
    assert (seen.query, seen.headers["api-key"]) == ({"api-version": VERSION}, "env-key")
    monkeypatch.setenv("AZURE_OPENAI_AD_TOKEN", "env-token")  # wins, as in the SDK
    server.add("token")
    async with OpenAIProvider.azure("prod-4o") as provider:
        await provider.complete(request("hi"))
    assert server.requests[-1].headers["authorization"] == "Bearer env-token"


async def test_a_wrong_key_names_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLMServer(["unused"], api_key="right") as server:
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "wrong")
        provider = OpenAIProvider.azure("d", azure_endpoint=server.url)
        async with provider:
            with pytest.raises(AuthenticationError, match="AZURE_OPENAI_API_KEY"):
                await provider.complete(request("hi"))
        provider = OpenAIProvider.azure("d", azure_endpoint=server.url, api_key="right")
        async with provider:
            assert (await provider.complete(request("hi"))).text == "unused"


def test_configuration_mistakes_are_named() -> None:
    with pytest.raises(ConfigurationError, match="needs a credential"):
        OpenAIProvider.azure("d", azure_endpoint="https://r.openai.azure.com")
    with pytest.raises(ConfigurationError, match="takes one of"):
        OpenAIProvider.azure(
            "d", azure_endpoint="https://r.openai.azure.com", api_key="k", azure_ad_token="t"
        )
    with pytest.raises(ConfigurationError, match="AZURE_OPENAI_ENDPOINT"):
        OpenAIResponsesProvider.azure("d", api_key="k")
    with pytest.raises(ConfigurationError, match="client="):
        OpenAIProvider.azure("d", azure_endpoint="https://x", api_key="k", base_url="https://y")
    with pytest.raises(ConfigurationError, match="deployment"):
        OpenAIProvider.azure("", azure_endpoint="https://x", api_key="k")


# -- the SDK's client -------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["chat", "responses"])
@pytest.mark.parametrize("with_deployment", [False, True], ids=["endpoint", "deployment"])
async def test_through_async_azure_openai(
    server: FakeLLMServer, wire: str, with_deployment: bool
) -> None:
    cls, path, _ = WIRES[wire]
    options: dict[str, Any] = {"azure_deployment": "prod-4o"} if with_deployment else {}
    sdk = openai.AsyncAzureOpenAI(
        azure_endpoint=server.url, api_version=VERSION, api_key="sdk-key", **options
    )
    server.add(reply("Let me look.", tool_calls=[call("get_weather", _id="c1", city="Oslo")]))
    server.add("Streamed through the SDK.")
    async with cls("prod-4o", client=sdk) as provider:
        response = await provider.complete(request("weather?"))
        _, streamed = await stream_all(provider, request("hi"))
    await sdk.close()
    assert response.tool_calls[0].arguments == {"city": "Oslo"}
    assert streamed.text == "Streamed through the SDK."
    for seen in server.requests:
        assert seen.path == path
        assert seen.query == {"api-version": VERSION}
        assert seen.headers["api-key"] == "sdk-key"
        assert seen.body["model"] == "prod-4o"
        assert seen.headers["x-stainless-retry-count"] == "0"


async def test_through_async_azure_openai_with_a_token_provider(server: FakeLLMServer) -> None:
    async def token() -> str:
        return "sdk-entra-token"

    sdk = openai.AsyncAzureOpenAI(
        azure_endpoint=server.url, api_version=VERSION, azure_ad_token_provider=token
    )
    server.add("ok")
    async with OpenAIProvider("prod-4o", client=sdk) as provider:
        await provider.complete(request("hi"))
    await sdk.close()
    assert server.requests[0].headers["authorization"] == "Bearer sdk-entra-token"


# -- the model string ------------------------------------------------------------------------


async def test_an_agent_from_an_azure_model_string(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    server.add("Hello from azure:prod-4o.")
    agent = Agent("azure:prod-4o")
    result = await agent.run("hi")
    assert result.output == "Hello from azure:prod-4o."
    assert server.requests[0].path == "/openai/v1/chat/completions"
    provider = resolve_provider("azure:prod-4o", api_version=VERSION, api_key="k")
    assert isinstance(provider, OpenAIProvider)
    assert (provider.name, provider.model) == ("azure", "prod-4o")
    await provider.aclose()
