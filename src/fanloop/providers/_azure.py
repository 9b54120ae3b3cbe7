"""Azure OpenAI: where a request goes and how it authenticates, as ``openai.AsyncAzureOpenAI``
does it, for the providers' own prebuilt requests (``OpenAIProvider.azure``,
``OpenAIResponsesProvider.azure``).

The URL: with a dated ``api_version`` (``"2024-10-21"``), Chat Completions go to
``{azure_endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`` and the
Responses API to ``{azure_endpoint}/openai/responses?api-version=...``; with ``"v1"`` (the
default when neither ``api_version`` nor ``OPENAI_API_VERSION`` is set) or ``"preview"``, both
go to ``{azure_endpoint}/openai/v1/...`` (``?api-version=preview`` for the latter). The
deployment is the ``model`` of the body either way.

The credentials, one of (as the SDK, in this order when none is given):
``azure_ad_token_provider`` (a callable returning a Microsoft Entra ID token, or an
awaitable of one; called before every request), ``azure_ad_token`` (else
``AZURE_OPENAI_AD_TOKEN``), sent as ``Authorization: Bearer``; ``api_key`` (else
``AZURE_OPENAI_API_KEY``), sent as ``api-key``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpx2

from ..errors import AuthenticationError, ConfigurationError, ProviderTimeout
from ._endpoint import TRACE_HEADERS, WireEndpoint, _base_headers, _endpoint, _merge
from ._http import HTTPProvider, Response, Transport, direct_transport

__all__ = ["AzureTokenProvider", "azure_provider", "build_endpoint"]

AzureTokenProvider = Callable[[], "str | Awaitable[str]"]
"""A callable returning a Microsoft Entra ID token (or an awaitable of one), e.g.
``azure.identity.get_bearer_token_provider(credential, scope)``."""

_P = TypeVar("_P", bound=HTTPProvider)

TOKEN_SECONDS = 60.0
"""The longest wait for an awaitable ``azure_ad_token_provider`` returns (shorter when the
request's read timeout is): past it the request fails with
:class:`~fanloop.errors.ProviderTimeout`, which a :class:`~fanloop.RetryPolicy` retries."""


def token_seconds(timeout: httpx2.Timeout) -> float:
    """How long a token provider may take for a request with ``timeout``."""
    read = timeout.read
    return min(TOKEN_SECONDS, read) if read is not None else TOKEN_SECONDS


@dataclasses.dataclass(slots=True)
class _TokenEndpoint(WireEndpoint):
    """A :class:`~fanloop.providers._endpoint.WireEndpoint` whose bearer token comes from a
    callable before every request."""

    token_provider: AzureTokenProvider | None = None

    def send(self, pool: httpx2.AsyncClient, body: bytes) -> Awaitable[Response]:
        return self._send_with_token(pool, body)

    async def _send_with_token(self, pool: httpx2.AsyncClient, body: bytes) -> Response:
        assert self.token_provider is not None
        limit = token_seconds(self.wire_timeout)
        try:
            token: Any = self.token_provider()
            if inspect.isawaitable(token):
                with anyio.fail_after(limit):
                    token = await token
        except TimeoutError:
            raise ProviderTimeout(
                f"azure_ad_token_provider gave no token within {limit:g} s", provider="azure"
            ) from None
        except Exception as exc:  # the credential library's own errors
            raise AuthenticationError(
                f"azure_ad_token_provider failed: {type(exc).__name__}: {str(exc)[:300]}",
                provider="azure",
            ) from exc
        if not isinstance(token, str) or not token:
            raise AuthenticationError(
                "azure_ad_token_provider did not return a non-empty string", provider="azure"
            )
        bearer = {"Authorization": f"Bearer {token}", **(TRACE_HEADERS.get() or {})}
        wire = direct_transport(pool)
        if wire is None:
            request = pool.build_request(
                "POST",
                self.url,
                content=body,
                headers={**self.headers, **bearer},
                timeout=self.timeout,
            )
            response: httpx2.Response = await pool.send(request, stream=True)
            return response
        if pool.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        return await wire.post(self.url, {**self.wire_headers, **bearer}, body, self.wire_timeout)


def _url(endpoint: str, deployment: str, api_version: str, path: str) -> str:
    root = endpoint.rstrip("/") + "/openai"
    if api_version in ("v1", "preview"):
        query = "?api-version=preview" if api_version == "preview" else ""
        return f"{root}/v1{query}"
    if path == "/chat/completions":
        # One path segment, whatever the name holds ("/", "?", "#", "%"...).
        root += f"/deployments/{quote(deployment, safe='')}"
    return f"{root}?api-version={api_version}"


def build_endpoint(
    deployment: str,
    *,
    azure_endpoint: str | None,
    api_version: str | None,
    api_key: str | None,
    azure_ad_token: str | None,
    azure_ad_token_provider: AzureTokenProvider | None,
    http_client: httpx2.AsyncClient | None,
    timeout: httpx2.Timeout | float | None,
    default_headers: Mapping[str, str] | None,
    transport: Transport,
    path: str,
    owner: str,
) -> tuple[WireEndpoint, str]:
    """The Azure OpenAI endpoint of ``deployment`` for ``path``, and where its credential
    came from (for error messages).

    Raises:
        ConfigurationError: no endpoint, no credential or more than one, or a bad URL.
    """
    given = [c is not None for c in (api_key, azure_ad_token, azure_ad_token_provider)]
    if sum(given) > 1:
        raise ConfigurationError(
            f"{owner}.azure takes one of api_key=, azure_ad_token= and azure_ad_token_provider="
        )
    source = f"the credential passed to {owner}.azure"
    if not any(given):
        if token := os.environ.get("AZURE_OPENAI_AD_TOKEN"):
            azure_ad_token, source = token, "the token in AZURE_OPENAI_AD_TOKEN"
        elif key := os.environ.get("AZURE_OPENAI_API_KEY"):
            api_key, source = key, "the key in AZURE_OPENAI_API_KEY"
        else:
            raise ConfigurationError(
                f"{owner}.azure needs a credential: pass api_key=, azure_ad_token= or "
                "azure_ad_token_provider=, or set AZURE_OPENAI_API_KEY"
            )
    endpoint = azure_endpoint or os.environ.get("AZURE_OPENAI_ENDPOINT")
    if not endpoint:
        raise ConfigurationError(
            f"{owner}.azure needs the resource's endpoint: pass azure_endpoint= or set "
            "AZURE_OPENAI_ENDPOINT (e.g. https://my-resource.openai.azure.com)"
        )
    version = api_version or os.environ.get("OPENAI_API_VERSION") or "v1"
    headers = _base_headers(azure_ad_token)  # Authorization: Bearer, for a token
    if api_key is not None:
        headers["api-key"] = api_key
    headers = _merge(headers, default_headers)
    url = _url(endpoint, deployment, version, path)
    built = _endpoint(url, path, headers, timeout, http_client, "Azure OpenAI", transport)
    if azure_ad_token_provider is None:
        return built, source
    fields = {f.name: getattr(built, f.name) for f in dataclasses.fields(WireEndpoint)}
    return _TokenEndpoint(**fields, token_provider=azure_ad_token_provider), source


def azure_provider(
    cls: type[_P],
    deployment: str,
    *,
    azure_endpoint: str | None,
    api_version: str | None,
    api_key: str | None,
    azure_ad_token: str | None,
    azure_ad_token_provider: AzureTokenProvider | None,
    options: dict[str, Any],
) -> _P:
    """A ``cls`` (an OpenAI provider) for an Azure OpenAI deployment: built as for OpenAI,
    then pointed at the deployment with Azure's URL and credentials.

    Raises:
        ConfigurationError: see :func:`build_endpoint`; or ``client=`` / ``base_url=`` given.
    """
    owner = cls.__name__
    if "client" in options or "base_url" in options:
        raise ConfigurationError(
            f"{owner}.azure builds its own endpoint: leave out client= and base_url= "
            f"(or pass client=openai.AsyncAzureOpenAI(...) to {owner}(...) itself)"
        )
    if not deployment or not isinstance(deployment, str):
        raise ConfigurationError(f"{owner}.azure needs a deployment name")
    if deployment in (".", "..") or not deployment.isprintable():
        raise ConfigurationError(f"{owner}.azure: {deployment!r} is not a deployment name")
    options.setdefault("name", "azure")
    endpoint, source = build_endpoint(
        deployment,
        azure_endpoint=azure_endpoint,
        api_version=api_version,
        api_key=api_key,
        azure_ad_token=azure_ad_token,
        azure_ad_token_provider=azure_ad_token_provider,
        http_client=options.get("http_client"),
        timeout=options.get("timeout"),
        default_headers=options.get("default_headers"),
        transport=options.get("transport", "auto"),
        path=cls._path,
        owner=owner,
    )
    # Built with a placeholder OpenAI endpoint (it opens no pool before a request), replaced.
    provider = cls(deployment, api_key="azure", base_url=str(endpoint.base_url), **options)  # type: ignore[call-arg, arg-type]
    provider._client = endpoint
    provider._key_source = source
    return provider
