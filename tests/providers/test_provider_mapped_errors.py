"""The one error translation of the HTTP providers (``mapped_errors``) and the two endpoints it
is used with: what each kind of failure becomes, how it is chained, and that cancellation is
never translated."""

from __future__ import annotations

import asyncio

import anyio
import httpx2
import pytest

from fanloop.errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseInvalid,
)
from fanloop.providers._endpoint import SDKEndpoint, WireEndpoint
from fanloop.providers._http import Endpoint, mapped_errors
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider

_REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/messages")


def test_a_provider_error_is_filled_in_not_replaced() -> None:
    raised = RateLimited("slow down")
    with pytest.raises(RateLimited) as caught, mapped_errors("p", "req_1"):
        raise raised
    assert caught.value is raised
    assert (raised.provider, raised.request_id) == ("p", "req_1")
    known = RateLimited("slow down", provider="other", request_id="req_0")
    with pytest.raises(RateLimited), mapped_errors("p", "req_1"):
        raise known
    assert (known.provider, known.request_id) == ("other", "req_0")


def test_transport_failures_are_chained_to_their_cause() -> None:
    refused = httpx2.ConnectError("[Errno 111] Connection refused", request=_REQUEST)
    with pytest.raises(ProviderConnectionError) as caught, mapped_errors("p"):
        raise refused
    assert caught.value.message == "cannot connect to 127.0.0.1:9 (connection refused)"
    assert caught.value.__cause__ is refused and caught.value.transient
    read = httpx2.ReadTimeout("slow")
    with pytest.raises(ProviderTimeout) as timed_out, mapped_errors("p", "req_1"):
        raise read
    assert timed_out.value.message == "timed out: slow"
    assert timed_out.value.request_id == "req_1" and timed_out.value.__cause__ is read


def test_an_undecodable_body_is_invalid_only_where_a_body_is_read() -> None:
    broken = httpx2.DecodingError("bad gzip")
    with pytest.raises(ResponseInvalid) as caught, mapped_errors("p", undecodable="the body"):
        raise broken
    assert caught.value.message == "the body: bad gzip"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert caught.value.__context__ is broken  # as if raised in an except clause
    with pytest.raises(ProviderError) as plain, mapped_errors("p"):
        raise broken
    assert type(plain.value) is ProviderError and plain.value.__cause__ is broken
    redirects = httpx2.TooManyRedirects("too many")
    with pytest.raises(ProviderError) as other, mapped_errors("p"):
        raise redirects
    assert other.value.message == "too many" and other.value.__cause__ is redirects


def test_a_malformed_payload_is_invalid_only_where_one_is_decoded() -> None:
    with pytest.raises(ResponseInvalid) as caught, mapped_errors("p", "r", invalid="malformed"):
        raise KeyError("choices")
    assert caught.value.message == "malformed: 'choices'" and caught.value.request_id == "r"
    assert caught.value.__suppress_context__
    error = ValueError("not ours to translate")
    with pytest.raises(ValueError) as untouched, mapped_errors("p"):
        raise error
    assert untouched.value is error


@pytest.mark.parametrize("kind", [asyncio.CancelledError, KeyboardInterrupt, GeneratorExit])
def test_what_is_not_an_exception_passes_through(kind: type[BaseException]) -> None:
    with pytest.raises(kind), mapped_errors("p", invalid="malformed", undecodable="the body"):
        raise kind()


async def test_an_anyio_cancellation_inside_is_not_translated() -> None:
    with anyio.move_on_after(0) as scope:
        with mapped_errors("p", invalid="malformed", undecodable="the body"):
            await anyio.sleep(5)
    assert scope.cancelled_caught


async def test_both_endpoints_are_endpoints_and_only_the_wire_one_owns_a_pool() -> None:
    import anthropic

    wire = AnthropicProvider("m", api_key="k", base_url="http://127.0.0.1:9")
    sdk_client = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")
    via_sdk = AnthropicProvider("m", client=sdk_client)
    assert isinstance(wire._client, WireEndpoint) and isinstance(via_sdk._client, SDKEndpoint)
    endpoints: list[Endpoint] = [wire._client, via_sdk._client]
    assert all(callable(e.post) and callable(e.aclose) for e in endpoints)
    assert via_sdk._client.path == "/v1/messages" and not via_sdk._client.json_body
    await via_sdk.aclose()  # the client is the caller's: left open
    assert not sdk_client._client.is_closed
    await sdk_client.close()


@pytest.mark.parametrize("through", ["wire", "sdk"])
async def test_a_refused_connection_reads_the_same_through_either_endpoint(through: str) -> None:
    """Port 9 (discard) refuses on loopback: the message names host, port and reason."""
    import openai
    from provider_helpers import request

    url = "http://127.0.0.1:9/v1"
    if through == "sdk":
        sdk_client = openai.AsyncOpenAI(api_key="k", base_url=url)
        provider = OpenAIProvider("m", client=sdk_client)
    else:
        provider = OpenAIProvider("m", api_key="k", base_url=url, transport="httpx")
    async with provider:
        with pytest.raises(ProviderConnectionError) as caught:
            await provider.complete(request("hi"))
    assert caught.value.message == "cannot connect to 127.0.0.1:9 (connection refused)"
    assert caught.value.provider == "openai"
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)
    if through == "sdk":
        await sdk_client.close()
