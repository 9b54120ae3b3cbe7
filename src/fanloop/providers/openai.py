"""The OpenAI providers: Chat Completions (:class:`OpenAIProvider`, and every
OpenAI-compatible server) and the Responses API (:class:`OpenAIResponsesProvider`, OpenAI's
own endpoint; its wire lives in ``_responses.py``).

::

    from fanloop.providers.openai import OpenAIProvider

    provider = OpenAIProvider("gpt-4.1")                        # OPENAI_API_KEY from the env
    local = OpenAIProvider.vllm("Qwen/Qwen3-8B")                # http://localhost:8000/v1
    routed = OpenAIProvider.openrouter("anthropic/claude-sonnet-4.5")  # OPENROUTER_API_KEY

Any OpenAI-compatible server works through ``base_url``. Like the Anthropic provider, it
builds the request JSON itself and posts it straight to its connection pool, with the
authentication, base URL and headers the ``openai`` SDK would use (the SDK is not imported),
or through the ``post()`` of an SDK client passed as ``client=`` (its retries off); it decodes
the SSE chunks itself, assembling tool-call fragments by their ``index``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Self

import httpx2

from .._unicode import Joiner, may_escape_surrogates, scrub, scrub_json, vouch_parsed
from ..errors import ConfigurationError, ResponseInvalid, StreamIncomplete
from ..events import (
    CitationAdded,
    StreamDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
)
from ..messages import (
    INVALID_ARGUMENTS_KEY,
    MAX_CITATIONS,
    Citation,
    DocumentPart,
    ImagePart,
    Message,
    Origin,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    _build,
    media_base64,
)
from ._citations import chat_citation, fit
from ._endpoint import from_sdk_client, openai_endpoint, openai_sdk_errors
from ._http import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    Endpoint,
    HTTPProvider,
    Transport,
    WireLimits,
    stream_error,
)
from ._options import OPENAI_SETTINGS, openai_fields, openai_response_format, settings_extra
from ._types import ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from ._wire import (
    CALL_SET,
    ORIGIN_SET,
    RESPONSE_SET,
    TEXT_SET,
    USAGE_SET,
    Malformed,
    MessageCache,
    ResponseTooLarge,
    ToolsCache,
    add_joined,
    dumps,
    joined_memo,
    new_call_id,
    parse_arguments,
    read_call_id,
    read_count,
    read_name,
    read_str,
    short,
)
from ._wire import load_frame as _load_frame

if TYPE_CHECKING:
    import openai

    from ..pacing import Pacer
    from ._azure import AzureTokenProvider

__all__ = ["OpenAIProvider", "OpenAIResponsesProvider"]

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
VLLM_BASE_URL = "http://localhost:8000/v1"
OLLAMA_BASE_URL = "http://localhost:11434/v1"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai"
SEND_REASONING: tuple[str, ...] = ("reasoning_content", "reasoning", "reasoning_details")
"""The values of ``send_reasoning=`` besides ``None``: the assistant-message field that
carries an earlier turn's reasoning back to the server."""
_REASONING_KEYS = frozenset(SEND_REASONING)
_PLACEHOLDER_KEY = "the placeholder key {key!r} (no api_key= was given)"


def _from_client(
    client: Any,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: float | httpx2.Timeout | None,
    default_headers: dict[str, str] | None,
    path: str,
) -> tuple[Endpoint, str]:
    """The endpoint of ``client`` (with fanloop's options: its retries off), and where its
    key came from."""
    import openai

    return from_sdk_client(
        client,
        openai.AsyncOpenAI,
        errors=openai_sdk_errors(),
        path=path,
        key=lambda sdk: sdk.api_key,
        variables=("OPENAI_API_KEY",),
        owner="OpenAIProvider",
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        timeout=timeout,
        default_headers=default_headers,
    )


class OpenAIProvider(HTTPProvider):
    """A model behind an OpenAI Chat Completions endpoint (``POST {base_url}/chat/completions``).

    Args:
        model: the model name, e.g. ``"gpt-4.1"``.
        api_key: the API key, sent as ``Authorization: Bearer``; when ``None``,
            ``OPENAI_API_KEY`` is read.
        base_url: the API root *including* ``/v1`` (when ``None``, ``OPENAI_BASE_URL``, else
            ``https://api.openai.com/v1``); any OpenAI-compatible server.
        http_client: an ``httpx2.AsyncClient`` to use as the connection pool; shareable, never
            closed by this provider, to be used from one event loop. Without one the provider
            creates its own pools, one per event loop that uses it, and closes them in
            :meth:`aclose` or when their loop shuts down.
        client: an ``openai.AsyncOpenAI`` to send requests through instead (for credentials
            only the SDK resolves, e.g. workload identity or a key callable). Its key, base URL
            and pool are used as they are (leave out ``api_key``, ``base_url`` and
            ``http_client``); it is never closed by this provider.
        timeout: seconds (or an ``httpx2.Timeout``) for each request.
        name: the provider name reported in responses (the presets set it).
        max_tokens_field: the body field for the output budget: ``"max_completion_tokens"``
            (OpenAI) or ``"max_tokens"`` (older compatible servers).
        include_usage: ask for usage in streams (``stream_options.include_usage``).
        default_headers: extra headers for every request. The plain provider (not a preset)
            also sends ``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID`` and ``OPENAI_CUSTOM_HEADERS``
            as the SDK does.
        extra_body: fields merged into every request body. ``n`` above 1 (several choices)
            is refused here and in per-request extras: fanloop reads one choice.
        send_reasoning: how earlier assistant turns carry their reasoning back:
            ``"reasoning_content"`` (DeepSeek, Z.ai), ``"reasoning"`` (Ollama),
            ``"reasoning_details"`` (OpenRouter: the items as received, signatures and
            encrypted blocks unchanged) or ``None`` (nothing: OpenAI's own endpoint and
            servers that refuse the field). The presets set it; see ``docs/providers.md``.
        max_response_bytes: the largest response body, streamed or not (default 64 MiB).
        max_frame_bytes: the largest stream event (default 16 MiB).
        max_blocks: the most tool calls in one response (default 1024).
        pacing: a :class:`~fanloop.pacing.Pacing` or :class:`~fanloop.pacing.RedisPacing`
            budget every call waits for (see ``docs/pacing.md``).
        transport: how the provider's own pools move bytes: ``"aiohttp"`` (best with
            hundreds of requests in flight; ~70 ms to import), ``"httpx"`` (``httpx2``'s own
            pool), or ``"auto"`` (aiohttp when installed and no proxy is configured;
            ``FANLOOP_HTTP_TRANSPORT`` overrides it). Unused with ``http_client`` or
            ``client``.

    Everything the server sends is checked: a malformed or out-of-range value is
    :class:`~fanloop.errors.ResponseInvalid`, a response over a cap is a ``ResponseInvalid``
    that is not retried (see :class:`~fanloop.providers._http.WireLimits`). A tool call the
    server sent without an id gets a fresh random one (``call_…``), unique across turns.

    Attributes:
        name: ``"openai"`` unless set (``"openrouter"``, ``"vllm"``, ``"ollama"`` for presets).
        model: the model name.
        hosted_tools: empty: Chat Completions has no hosted tools.
        native_output: ``True``: a typed answer goes out as ``response_format`` with a
            ``json_schema`` (strict when the schema can be made strict).
        supported_settings: every :class:`~fanloop.ModelSettings` field.
    """

    _path: ClassVar[str] = "/chat/completions"
    _api: ClassVar[str] = "chat.completions"
    hosted_tools: frozenset[str] = frozenset()
    native_output: bool = True
    supported_settings: frozenset[str] = OPENAI_SETTINGS

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        client: openai.AsyncOpenAI | None = None,
        timeout: float | httpx2.Timeout | None = None,
        name: str = "openai",
        max_tokens_field: str = "max_completion_tokens",
        include_usage: bool = True,
        default_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        pacing: Pacer | None = None,
        transport: Transport = "auto",
        send_reasoning: str | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIProvider needs a model name")
        if send_reasoning is not None and send_reasoning not in SEND_REASONING:
            raise ConfigurationError(
                f"send_reasoning={send_reasoning!r}: expected None or one of "
                f"{', '.join(SEND_REASONING)}"
            )
        limits = WireLimits(max_response_bytes, max_frame_bytes, max_blocks)
        self.name = name
        self.model = model
        self._max_tokens_field = max_tokens_field
        self._include_usage = include_usage
        self._extra_body = dict(extra_body or {})
        _check_choices(self._extra_body, "extra_body")
        self.send_reasoning = send_reasoning
        endpoint: Endpoint
        if client is not None:
            endpoint, source = _from_client(
                client, api_key, base_url, http_client, timeout, default_headers, self._path
            )
        else:
            endpoint, source = openai_endpoint(
                api_key=api_key,
                base_url=base_url,
                http_client=http_client,
                timeout=timeout,
                default_headers=default_headers,
                name=name,
                transport=transport,
            )
        super().__init__(endpoint, key_source=source, limits=limits, pacing=pacing)
        self._messages: MessageCache[Message] = MessageCache(self._render_message)
        self._tools = ToolsCache()

    # -- presets ----------------------------------------------------------------------------

    @classmethod
    def azure(
        cls,
        deployment: str,
        *,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        api_key: str | None = None,
        azure_ad_token: str | None = None,
        azure_ad_token_provider: AzureTokenProvider | None = None,
        **options: Any,
    ) -> Self:
        """A deployment on Azure OpenAI, with the arguments of ``openai.AsyncAzureOpenAI``.

        Args:
            deployment: the deployment name (sent as the model).
            azure_endpoint: the resource, e.g. ``https://my-resource.openai.azure.com``
                (else ``AZURE_OPENAI_ENDPOINT``).
            api_version: a dated version such as ``"2024-10-21"`` (posted to
                ``/openai/deployments/{deployment}/chat/completions``), or ``"v1"`` /
                ``"preview"`` for Azure's v1 API (``/openai/v1/...``); else
                ``OPENAI_API_VERSION``, else ``"v1"``.
            api_key: sent as ``api-key`` (else ``AZURE_OPENAI_API_KEY``).
            azure_ad_token: a Microsoft Entra ID token, sent as ``Authorization: Bearer``
                (else ``AZURE_OPENAI_AD_TOKEN``, which wins over the key variable).
            azure_ad_token_provider: a callable returning a token (or an awaitable of one),
                called before every request.
            options: the provider's other options (``timeout``, ``http_client``...).

        Raises:
            ConfigurationError: no endpoint, no credential or more than one.
        """
        from ._azure import azure_provider  # only for Azure OpenAI

        return azure_provider(
            cls,
            deployment,
            azure_endpoint=azure_endpoint,
            api_version=api_version,
            api_key=api_key,
            azure_ad_token=azure_ad_token,
            azure_ad_token_provider=azure_ad_token_provider,
            options=options,
        )

    @classmethod
    def openrouter(
        cls,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = OPENROUTER_BASE_URL,
        **options: Any,
    ) -> OpenAIProvider:
        """A model routed through OpenRouter (``OPENROUTER_API_KEY`` when ``api_key`` is None).

        Model names carry their vendor: ``"anthropic/claude-sonnet-4.5"``, ``"openai/gpt-4.1"``.
        """
        key = api_key or os.environ.get("OPENROUTER_API_KEY")
        if not key:
            raise ConfigurationError(
                "OpenRouter needs an API key: pass api_key= or set OPENROUTER_API_KEY"
            )
        options.setdefault("name", "openrouter")
        options.setdefault("max_tokens_field", "max_tokens")
        options.setdefault("send_reasoning", "reasoning_details")
        provider = cls(model, api_key=key, base_url=base_url, **options)
        if api_key is None and "client" not in options:
            provider._key_source = "the key in OPENROUTER_API_KEY"
        return provider

    @classmethod
    def vllm(
        cls,
        model: str,
        *,
        base_url: str = VLLM_BASE_URL,
        api_key: str | None = None,
        **options: Any,
    ) -> OpenAIProvider:
        """A model served by vLLM's OpenAI-compatible server (no key needed by default)."""
        options.setdefault("name", "vllm")
        options.setdefault("max_tokens_field", "max_tokens")
        provider = cls(model, api_key=api_key or "EMPTY", base_url=base_url, **options)
        if api_key is None:
            provider._key_source = _PLACEHOLDER_KEY.format(key="EMPTY")
        return provider

    @classmethod
    def ollama(
        cls,
        model: str,
        *,
        base_url: str = OLLAMA_BASE_URL,
        api_key: str | None = None,
        **options: Any,
    ) -> OpenAIProvider:
        """A model served by Ollama's OpenAI-compatible endpoint (earlier turns' reasoning
        goes back in ``reasoning``, which Ollama reads as the message's thinking)."""
        options.setdefault("name", "ollama")
        options.setdefault("max_tokens_field", "max_tokens")
        options.setdefault("send_reasoning", "reasoning")
        provider = cls(model, api_key=api_key or "ollama", base_url=base_url, **options)
        if api_key is None:
            provider._key_source = _PLACEHOLDER_KEY.format(key="ollama")
        return provider

    @classmethod
    def gemini(
        cls,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = GEMINI_BASE_URL,
        **options: Any,
    ) -> OpenAIProvider:
        """A Gemini model through Google's OpenAI-compatible endpoint (``GEMINI_API_KEY``,
        else ``GOOGLE_API_KEY``, when ``api_key`` is None), e.g. ``"gemini-2.5-flash"``.

        Tool calls keep the ``extra_content`` Gemini attaches to them (its thought
        signatures) and send it back unchanged on later turns.
        """
        variable = next(
            (v for v in ("GEMINI_API_KEY", "GOOGLE_API_KEY") if os.environ.get(v)), None
        )
        key = api_key or (os.environ[variable] if variable else None)
        if not key:
            raise ConfigurationError("Gemini needs an API key: pass api_key= or set GEMINI_API_KEY")
        options.setdefault("name", "gemini")
        options.setdefault("max_tokens_field", "max_tokens")
        provider = cls(model, api_key=key, base_url=base_url, **options)
        if api_key is None and "client" not in options:
            provider._key_source = f"the key in {variable}"
        return provider

    # -- encoding ---------------------------------------------------------------------------

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        if request.hosted_tools:
            raise ConfigurationError(
                f"{self.name} (Chat Completions) does not support hosted tools: "
                f"{', '.join(t.kind for t in request.hosted_tools)}"
            )
        head: dict[str, Any] = {"model": self.model, self._max_tokens_field: request.max_tokens}
        if stream:
            head["stream"] = True
            if self._include_usage:
                head["stream_options"] = {"include_usage": True}
        if request.temperature is not None:
            head["temperature"] = request.temperature
        if request.stop_sequences:
            head["stop"] = list(request.stop_sequences)
        if request.settings is not None:
            head.update(openai_fields(request, self.name))
        if request.output is not None:
            head["response_format"] = openai_response_format(request.output)
        if self._extra_body:
            head.update(self._extra_body)
        if request.extra:
            head.update(request.extra)
        if (extra := settings_extra(request)) is not None:
            head.update(extra)
        if "messages" in head:
            raise ConfigurationError("'messages' cannot be set through extra fields")
        _check_choices(head, "the request's extra fields")
        extra_tools = head.pop("tools", None)
        pieces = [dumps(head)[:-1]]
        if request.tools or extra_tools:
            tools = self._tools.get(request.tools, (), lambda: dumps(_tool_list(request.tools)))
            if extra_tools:
                tools = tools[:-1] + ("," if tools != "[]" else "") + dumps(extra_tools)[1:]
            pieces.append(',"tools":')
            pieces.append(tools)
        pieces.append(',"messages":[')
        texts = self._messages.texts(request.messages, joined_memo(request))
        if request.system:
            texts.insert(0, dumps({"role": "system", "content": request.system}))
        add_joined(pieces, texts)
        pieces.append("]}")
        return "".join(pieces).encode()

    def _render_message(self, message: Message) -> str:
        """One message as wire JSON; may be several wire messages joined by commas, or ""."""
        if message.role == "assistant":
            origin = message.origin
            raw = (
                origin.raw
                if origin is not None
                and origin.api == "chat.completions"
                and origin.provider == self.name
                and isinstance(origin.raw, dict)
                and _raw_matches(origin.raw, message)
                else None
            )
            return _render_assistant(message, raw, self.send_reasoning)
        out: list[str] = []
        texts: list[str] = []
        # Tool messages are text only: what tool results carry beside their text goes in the
        # user message after them, introduced by the call's id; then the user's own media.
        # Pieces of JSON text of content parts (base64 is joined in once, not encoded).
        attached: list[str] = []
        media: list[str] = []
        has_media = False
        for part in message.content:
            if part.kind == "tool_result":
                content = part.content
                if part.is_error and not content.lower().startswith("error"):
                    content = f"Error: {content}"
                if part.parts:
                    n = len(part.parts)
                    content += f"\n[{n} attachment{'s' if n > 1 else ''} in the next message]"
                    note = f"Attachments from tool call {part.call_id}:"
                    attached += (dumps({"type": "text", "text": note}), ",")
                    for media_part in part.parts:
                        attached += _media_pieces(media_part)
                        attached.append(",")
                out.append(
                    dumps(
                        {
                            "role": "tool",
                            "tool_call_id": part.call_id,
                            "content": content,
                        }
                    )
                )
            elif part.kind == "text":
                texts.append(part.text)
                media += (dumps({"type": "text", "text": part.text}), ",")
            elif part.kind == "image" or part.kind == "document":
                media += _media_pieces(part)
                media.append(",")
                has_media = True
        if attached or has_media:  # a list of content parts, all joined once
            pieces: list[str] = []
            for wire in out:
                pieces += (wire, ",")
            pieces.append('{"role":"user","content":[')
            pieces += attached
            pieces += media
            pieces[-1] = "]}"  # the last part's trailing comma
            return "".join(pieces)
        if texts:
            content_value: Any = (
                texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
            )
            out.append(dumps({"role": "user", "content": content_value}))
        return ",".join(out)

    # -- decoding ---------------------------------------------------------------------------

    def _decode(self, data: Any, request_id: str | None) -> ModelResponse:
        if type(data) is not dict:
            raise Malformed("the response is not a JSON object")
        if data.get("error"):
            raise stream_error(data, provider=self.name, request_id=request_id)
        choices = data.get("choices")
        if not choices:
            raise ResponseInvalid(
                "the response has no choices", provider=self.name, request_id=request_id
            )
        if type(choices) is not list:
            raise Malformed("choices is not a list")
        choice = _choice_zero(choices)
        if choice is None:
            raise ResponseInvalid(
                "the response has no choice with index 0",
                provider=self.name,
                request_id=request_id,
            )
        message = choice.get("message") or {}
        tool_calls = message.get("tool_calls") or ()
        if len(tool_calls) > self.limits.max_blocks:
            raise _too_many(self.limits.max_blocks)
        calls = []
        for call in tool_calls:
            function = call.get("function") or {}
            extra = call.get("extra_content")
            calls.append(
                (
                    read_call_id(call.get("id")),
                    read_name(function.get("name"), "tool call name"),
                    _arguments(function.get("arguments")),
                    extra if type(extra) is dict else None,
                )
            )
        details = _details(message.get("reasoning_details"), self.limits.max_blocks)
        return _response(
            self,
            _thinking_parts(details, _reasoning(message)),
            details,
            _content(message.get("content")),
            read_str(message.get("refusal"), "refusal"),
            calls,
            choice.get("finish_reason"),
            data.get("usage"),
            data.get("id"),
            data.get("model"),
            request_id,
            citations=_annotations(message.get("annotations"), set()),
        )

    def _parser(self, request_id: str | None) -> _StreamParser:
        return _StreamParser(self, request_id)


def _tool_list(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for spec in tools:
        function: dict[str, Any] = {"name": spec.name}
        if spec.description:
            function["description"] = spec.description
        function["parameters"] = spec.parameters
        out.append({"type": "function", "function": function})
    return out


def _media_pieces(part: ImagePart | DocumentPart) -> list[str]:
    """An ``image_url`` part (a data: URL or the image's URL) or a ``file`` part (PDF data),
    as pieces of JSON text (the base64 needs no escaping)."""
    if part.kind == "image":
        if part.data is None:
            return [dumps({"type": "image_url", "image_url": {"url": part.url}})]
        head = dumps({"type": "image_url", "image_url": {"url": f"data:{part.media_type}"}})
        return [head[:-3], ";base64,", media_base64(part), '"}}']
    if part.data is None:
        raise ConfigurationError(
            "Chat Completions takes PDF documents as data only, not by URL: download the "
            "document and pass DocumentPart(data=...)"
        )
    name = part.title or "document"
    if not name.lower().endswith(".pdf"):
        name += ".pdf"
    head = dumps({"type": "file", "file": {"filename": name, "file_data": "data:"}})
    return [head[:-3], "application/pdf;base64,", media_base64(part), '"}}']


def _raw_matches(raw: dict[str, Any], message: Message) -> bool:
    """Whether ``raw`` (an assistant turn as received) still says what ``message`` says: its
    text, then its tool calls (id, name, arguments), thinking aside. Compared field by field
    (building the parts to compare cost more than the rest of the turn's encoding)."""
    parts = [p for p in message.content if not isinstance(p, ThinkingPart)]
    text = (raw.get("content") or "") + (raw.get("refusal") or "")
    if text:
        if not parts or not isinstance(parts[0], TextPart) or parts[0].text != text:
            return False
        parts = parts[1:]
    calls = raw.get("tool_calls") or ()
    if len(parts) != len(calls):
        return False
    for part, call in zip(parts, calls, strict=True):
        function = call.get("function") or {}
        if (
            not isinstance(part, ToolCallPart)
            or part.id != (call.get("id") or "")
            or part.name != (function.get("name") or "")
            or part.arguments != parse_arguments(function.get("arguments") or "")
        ):
            return False
    return True


def _render_assistant(message: Message, raw: dict[str, Any] | None, send: str | None) -> str:
    """An assistant turn as wire JSON: ``raw`` (the turn as received, when it still says what
    ``message`` says) or one made from the parts; with its reasoning in the field ``send``
    names ("" for a turn Chat Completions cannot take back)."""
    if raw is not None:
        if send is None and not _REASONING_KEYS.intersection(raw):
            return dumps(raw)
        wire = {k: v for k, v in raw.items() if k not in _REASONING_KEYS}
    else:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ToolCallPart):
                arguments = part.arguments
                invalid = arguments.get(INVALID_ARGUMENTS_KEY)
                calls.append(
                    {
                        "id": part.id,
                        "type": "function",
                        "function": {
                            "name": part.name,
                            "arguments": invalid if isinstance(invalid, str) else dumps(arguments),
                        },
                    }
                )
        if not texts and not calls:
            return ""  # e.g. a turn of thinking only: nothing Chat Completions can take back
        wire = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            wire["tool_calls"] = calls
    if send == "reasoning_details":
        details = raw.get("reasoning_details") if raw is not None else None
        if details:
            wire["reasoning_details"] = details  # as received: signatures, encrypted data
    elif send is not None:
        reasoning = "".join(
            p.text for p in message.content if isinstance(p, ThinkingPart) and p.text
        )
        if reasoning:
            wire[send] = reasoning
    return dumps(wire)


def _check_choices(body: dict[str, Any], where: str) -> None:
    """Refuse ``n`` above 1: fanloop reads the choice with index 0 only."""
    n = body.get("n")
    if n is not None and n != 1:
        raise ConfigurationError(
            f"n={n!r} in {where}: fanloop reads one choice per response (n must be 1)"
        )


def _choice_zero(choices: list[Any]) -> Any:
    """The choice with index 0 (or without an index), or None: with ``n`` above 1 a server
    sends the others too, which must not be mixed into the turn."""
    for choice in choices:
        if type(choice) is not dict:
            raise Malformed("a choice is not a JSON object")
        index = choice.get("index")
        if index is None or index == 0:
            return choice
    return None


_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}


def _detail(item: Any) -> dict[str, Any]:
    """One ``reasoning_details`` item, checked: a JSON object with a string ``type`` whose
    text, summary, data and signature are strings when present."""
    if type(item) is not dict:
        raise Malformed("a reasoning_details item is not a JSON object")
    if type(item.get("type")) is not str:
        raise Malformed("a reasoning_details item has no type")
    for key in ("text", "summary", "data", "signature"):
        value = item.get(key)
        if value is not None and type(value) is not str:
            raise Malformed(f"reasoning_details {key} is not a string")
    return item


def _details(value: Any, limit: int) -> list[dict[str, Any]]:
    """A message's ``reasoning_details`` (OpenRouter), checked; [] when absent."""
    if value is None:
        return []
    if type(value) is not list:
        raise Malformed("reasoning_details is not a list")
    if len(value) > limit:
        raise ResponseTooLarge(f"the response has over {limit:,} reasoning_details (max_blocks)")
    return [_detail(item) for item in value]


def _thinking_parts(details: list[dict[str, Any]], reasoning: str) -> list[Part]:
    """The thinking parts of a turn: one per ``reasoning_details`` item that maps (text with
    its signature, a summary, encrypted data as ``redacted``), else the reasoning text."""
    parts: list[Part] = []
    has_text = False
    for item in details:
        kind = item["type"]
        if kind == "reasoning.encrypted":
            data = item.get("data") or ""
            parts.append(ThinkingPart.model_construct(text="", signature=None, redacted=data))
        elif kind in _DETAIL_TEXT:
            text = item.get(_DETAIL_TEXT[kind]) or ""
            has_text = has_text or bool(text)
            parts.append(
                ThinkingPart.model_construct(
                    text=text, signature=item.get("signature"), redacted=None
                )
            )
    if reasoning and not has_text:
        parts.insert(0, ThinkingPart.model_construct(text=reasoning, signature=None, redacted=None))
    return parts


def _usage(raw: Any) -> Usage:
    if raw is None:
        raw = {}
    elif type(raw) is not dict:
        raise Malformed("usage is not a JSON object")
    details = raw.get("prompt_tokens_details") or {}
    if type(details) is not dict:
        raise Malformed("usage.prompt_tokens_details is not a JSON object")
    prompt = read_count(raw.get("prompt_tokens"), "usage.prompt_tokens")
    cached = read_count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
    written = read_count(
        details.get("cache_write_tokens"), "usage.prompt_tokens_details.cache_write_tokens"
    )
    values = {
        "input_tokens": max(prompt - cached - written, 0),
        "output_tokens": read_count(raw.get("completion_tokens"), "usage.completion_tokens"),
        "cache_read_tokens": cached,
        "cache_write_tokens": written,
        "reasoning_tokens": 0,
    }
    return _build(Usage, values, USAGE_SET)


def _too_many(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"the response has over {limit:,} tool calls (max_blocks)")


def _arguments(value: Any) -> str:
    """Tool-call arguments as JSON text (an object some servers send is encoded)."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if type(value) is dict:
        return dumps(value)
    raise Malformed("tool call arguments are not a string")


def _content(value: Any) -> str:
    """Message text: a string, or a list of text parts (as some compatible servers send)."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if type(value) is list:
        texts = []
        for part in value:
            if type(part) is str:
                texts.append(part)
            elif type(part) is dict and part.get("type") in ("text", "output_text"):
                texts.append(read_str(part.get("text"), "content text"))
            else:
                raise Malformed("content holds a part that is not text")
        return "".join(texts)
    raise Malformed("content is not a string")


def _reasoning(holder: dict[str, Any]) -> str:
    """The reasoning text of a message or delta (vLLM and DeepSeek: ``reasoning_content``;
    OpenRouter and Ollama: ``reasoning``); another type there is ignored."""
    value = holder.get("reasoning_content") or holder.get("reasoning")
    return value if type(value) is str else ""


def _annotations(raw: Any, seen: set[Any]) -> tuple[Citation, ...]:
    """The new citations among a message's (or delta's) ``annotations``; ``seen`` holds
    those already read (by their flattened fields, hashed), so a server that repeats them
    in later chunks adds each once (at most :data:`~fanloop.messages.MAX_CITATIONS` in all).
    Only the first ``4 * MAX_CITATIONS`` items of a list are read."""
    if type(raw) is not list:
        return ()
    out = []
    for item in raw[: 4 * MAX_CITATIONS]:
        if len(seen) >= MAX_CITATIONS:
            break
        citation = chat_citation(item)
        if citation is None:
            continue
        key = frozenset((citation.raw or {}).items())
        if key not in seen:
            seen.add(key)
            out.append(citation)
    return tuple(out)


def _finish(raw: Any) -> str | None:
    if raw is None:
        return raw
    if type(raw) is str:
        return scrub(raw if len(raw) <= 256 else raw[:256])
    raise Malformed("finish_reason is not a string")


def _response(
    provider: OpenAIProvider,
    thinking: list[Part],
    details: list[dict[str, Any]],
    text: str,
    refusal: str,
    calls: list[tuple[str, str, str, dict[str, Any] | None]],
    finish: Any,
    usage: Any,
    response_id: Any,
    model: Any,
    request_id: str | None,
    *,
    citations: tuple[Citation, ...] = (),
) -> ModelResponse:
    parts = thinking
    if text or refusal:
        whole = text + refusal
        text_part = {"kind": "text", "text": whole, "citations": fit(citations, len(whole))}
        parts.append(_build(TextPart, text_part, TEXT_SET))
    for call_id, name, arguments, _ in calls:
        call = {
            "kind": "tool_call",
            "id": call_id,
            "name": name,
            "arguments": parse_arguments(arguments),
        }
        parts.append(_build(ToolCallPart, call, CALL_SET))
    finish = _finish(finish)
    stop = _FINISH_REASONS.get(finish, StopReason.UNKNOWN) if finish else StopReason.UNKNOWN
    stop_details: dict[str, Any] | None = None
    if refusal:
        stop = StopReason.REFUSAL
        stop_details = {"type": "refusal", "category": None, "explanation": refusal}
    elif stop is StopReason.REFUSAL:
        stop_details = {"type": "refusal", "category": finish, "explanation": None}
    elif calls and stop is StopReason.END_TURN:
        stop = StopReason.TOOL_USE  # some compatible servers say "stop" after tool calls
    if not (text or refusal or calls) and stop not in (StopReason.MAX_TOKENS, StopReason.REFUSAL):
        raise ResponseInvalid(
            f"the model returned an empty turn (finish_reason {finish!r})",
            provider=provider.name,
            request_id=request_id,
        )
    raw: dict[str, Any] = {"role": "assistant", "content": text or None}
    if refusal:
        raw["refusal"] = refusal
    if calls:
        wire_calls: list[dict[str, Any]] = []
        for i, n, a, extra in calls:
            wire_call: dict[str, Any] = {
                "id": i,
                "type": "function",
                "function": {"name": n, "arguments": a},
            }
            if extra is not None:
                wire_call["extra_content"] = extra  # e.g. Gemini's thought signature
            wire_calls.append(wire_call)
        raw["tool_calls"] = wire_calls
    if details:
        raw["reasoning_details"] = details  # sent back as received (send_reasoning)
    model = short(model) or provider.model
    origin = {"provider": provider.name, "api": "chat.completions", "model": model, "raw": raw}
    values = {
        "content": tuple(parts),
        "stop_reason": stop,
        "usage": _usage(usage),
        "model": model,
        "provider": provider.name,
        "raw_stop_reason": finish,
        "origin": _build(Origin, origin, ORIGIN_SET),
        "stop_details": stop_details,
        "response_id": short(response_id),
    }
    return _build(ModelResponse, values, RESPONSE_SET)


class _Call:
    __slots__ = ("chunks", "extra", "id", "joiner", "name", "started")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.chunks: list[str] = []
        self.joiner = Joiner()
        self.started = False
        self.extra: dict[str, Any] | None = None


_MAX_INDEX = 2**31 - 1
_PIECES = ("text", "summary", "data")  # the reasoning_details fields streamed in pieces


class _Details:
    """Streamed ``reasoning_details`` items, assembled by their ``index``: the text,
    summary and data pieces joined, the other fields (signature, id, format) as last sent."""

    __slots__ = ("_by_index", "_items", "_limit", "_pieces")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: list[dict[str, Any]] = []
        self._pieces: list[dict[str, list[str]]] = []
        self._by_index: dict[int, int] = {}

    def add(self, fragments: Any) -> str:
        """Take one delta's fragments; returns the reasoning text they add."""
        if type(fragments) is not list:
            raise Malformed("reasoning_details is not a list")
        added: list[str] = []
        items = self._items
        for fragment in fragments:
            fragment = _detail(fragment)
            kind = fragment["type"]
            index = fragment.get("index")
            if index is not None and (type(index) is not int or not 0 <= index <= _MAX_INDEX):
                raise Malformed("a reasoning_details index that is not a small integer")
            at = self._by_index.get(index) if index is not None else None
            if at is None and index is None and items:
                last = items[-1]
                if last.get("index") is None and last["type"] == kind:
                    at = len(items) - 1  # an unindexed piece continues the item before
            if at is None:
                if len(items) >= self._limit:
                    raise ResponseTooLarge(
                        f"the response has over {self._limit:,} reasoning_details (max_blocks)"
                    )
                at = len(items)
                items.append({k: v for k, v in fragment.items() if k not in _PIECES})
                self._pieces.append({})
                if index is not None:
                    self._by_index[index] = at
            item, pieces = items[at], self._pieces[at]
            if item["type"] != kind:
                raise Malformed("a reasoning_details item changed its type")
            for key, value in fragment.items():
                if key in _PIECES:
                    if value:
                        pieces.setdefault(key, []).append(value)
                        if key == _DETAIL_TEXT.get(kind):
                            added.append(value)
                elif value is not None:
                    item[key] = value
        return "".join(added)

    def finish(self) -> list[dict[str, Any]]:
        out = []
        for item, pieces in zip(self._items, self._pieces, strict=True):
            for key, chunks in pieces.items():
                item[key] = "".join(chunks)
            out.append(item)
        return out


class _StreamParser:
    """Decodes the chunk stream of one Chat Completions response."""

    __slots__ = (
        "_calls",
        "_citations",
        "_cited",
        "_details",
        "_finish",
        "_held",
        "_id",
        "_joiners",
        "_last",
        "_max_calls",
        "_model",
        "_odd",
        "_provider",
        "_reasoning",
        "_refusal",
        "_request_id",
        "_text",
        "_usage",
        "done",
    )

    def __init__(self, provider: OpenAIProvider, request_id: str | None) -> None:
        self._provider = provider
        self._request_id = request_id
        self._max_calls = provider.limits.max_blocks
        self._text: list[str] = []
        # Made when first needed: most answers are text alone (fewer objects per stream).
        self._reasoning: list[str] | None = None
        self._refusal: list[str] | None = None
        # Text, reasoning and refusal pieces made valid Unicode as they come (a high surrogate
        # ending one piece waits for the low half that may start the next: _unicode.Joiner).
        self._joiners: tuple[Joiner, Joiner, Joiner] | None = None
        self._held = False  # whether any joiner holds something back
        self._odd = False  # whether any event may have held a surrogate escape
        self._calls: dict[int, _Call] = {}
        self._details: _Details | None = None
        self._cited: set[Any] | None = None  # the annotations read (a server may repeat them)
        self._citations: list[Citation] | None = None
        self._finish: Any = None
        self._usage: Any = None
        self._id: Any = None
        self._model: Any = None
        self._last = -1
        self.done = False

    def feed(self, event: bytes, data: bytes) -> tuple[StreamDelta, ...] | StreamDelta | None:
        if data == b"[DONE]":
            self.done = True
            return self._flush() if self._held else None
        obj = _load_frame(data)
        # A surrogate escape (rare): the pieces of text go through the joiners; the other
        # strings kept (id, model, finish reason, tool names) are made valid where read.
        odd = 92 in data and may_escape_surrogates(data)  # 92: a backslash
        if odd:
            self._odd = True
        if obj.get("error"):  # AttributeError (malformed) unless a JSON object
            raise stream_error(
                scrub_json(obj) if odd else obj,
                provider=self._provider.name,
                request_id=self._request_id,
                size=len(data),
            )
        if self._id is None:
            self._id = obj.get("id")
            self._model = obj.get("model")
        usage = obj.get("usage")
        if usage:
            self._usage = usage
        choices = obj.get("choices")
        if not choices:
            return None
        choice = choices[0]
        if len(choices) > 1 or choice.get("index") not in (0, None):
            choice = _choice_zero(choices)  # n > 1: the other choices are not this turn's
            if choice is None:
                return None
        finish = choice.get("finish_reason")
        if finish:
            self._finish = finish
        delta = choice.get("delta")
        if not delta:
            return None
        content = delta.get("content")
        tool_calls = delta.get("tool_calls")
        details = delta.get("reasoning_details")
        if (
            content
            and not tool_calls
            and not details
            and type(content) is str
            and not (odd or self._held)
            and "annotations" not in delta
        ):
            self._text.append(content)
            return TextDelta(content)
        out: list[StreamDelta] = []
        joiners = self._joiners if self._held else None  # (none hold anything otherwise)
        if content:
            content = _content(content)
            if odd or (joiners is not None and joiners[0].held):
                content = self._join(0, content)
            self._text.append(content)
            out.append(TextDelta(content))
        reasoning = _reasoning(delta)
        if details:
            if self._details is None:
                self._details = _Details(self._max_calls)
            added = self._details.add(scrub_json(details) if odd else details)
            reasoning = reasoning or added  # OpenRouter sends the text in both, or in one
        if reasoning:
            if odd or (joiners is not None and joiners[1].held):
                reasoning = self._join(1, reasoning)
            if self._reasoning is None:
                self._reasoning = []
            self._reasoning.append(reasoning)
            out.append(ThinkingDelta(reasoning))
        refusal = delta.get("refusal")
        if refusal:
            refusal = read_str(refusal, "refusal")
            if odd or (joiners is not None and joiners[2].held):
                refusal = self._join(2, refusal)
            if self._refusal is None:
                self._refusal = []
            self._refusal.append(refusal)
        if tool_calls:
            self._tool_calls(tool_calls, out, odd)
        annotations = delta.get("annotations")
        if annotations:
            if self._cited is None:
                self._cited = set()
            if self._citations is None:
                self._citations = []
            for citation in _annotations(
                scrub_json(annotations) if odd else annotations, self._cited
            ):
                self._citations.append(citation)
                out.append(CitationAdded(citation))
        return tuple(out)

    def _join(self, which: int, text: str) -> str:
        joiners = self._joiners
        if joiners is None:
            joiners = self._joiners = (Joiner(), Joiner(), Joiner())
        joiner = joiners[which]
        text = joiner.push(text)
        if joiner.held:
            self._held = True
        return text

    def _flush(self) -> tuple[StreamDelta, ...]:
        """The deltas of what the joiners still hold once the stream ends (U+FFFD each)."""
        self._held = False
        out: list[StreamDelta] = []
        if self._joiners is not None:  # (None: only a tool call's joiner held anything)
            text, reasoning, refusal = self._joiners
            if rest := text.flush():
                self._text.append(rest)
                out.append(TextDelta(rest))
            if rest := reasoning.flush():
                if self._reasoning is None:
                    self._reasoning = []
                self._reasoning.append(rest)
                out.append(ThinkingDelta(rest))
            if rest := refusal.flush():
                if self._refusal is None:
                    self._refusal = []
                self._refusal.append(rest)
        for index, call in sorted(self._calls.items()):
            if rest := call.joiner.flush():
                call.chunks.append(rest)
                if call.started:
                    out.append(ToolCallDelta(call.id, rest, index))
        return tuple(out)

    def _tool_calls(self, fragments: list[Any], out: list[StreamDelta], odd: bool) -> None:
        calls = self._calls
        for fragment in fragments:
            index = fragment.get("index")
            if index is None:
                index = self._unindexed(fragment)
            elif type(index) is not int or not 0 <= index <= _MAX_INDEX:
                raise Malformed("a tool call index that is not a small integer")
            call = calls.get(index)
            if call is None:
                if len(calls) >= self._max_calls:
                    raise _too_many(self._max_calls)
                call = calls[index] = _Call()
                self._last = max(self._last, index)
            call_id = fragment.get("id")
            if call_id and not call.started:
                call.id = read_call_id(call_id)
            extra = fragment.get("extra_content")
            if type(extra) is dict:
                call.extra = scrub_json(extra) if odd else extra
            function = fragment.get("function") or {}
            name = function.get("name")
            if name and not call.name:
                call.name = read_name(name, "tool call name")
            arguments = function.get("arguments")
            if arguments:
                if type(arguments) is not str:
                    arguments = _arguments(arguments)  # JSON text: made valid when parsed
                elif odd or call.joiner.held:
                    arguments = call.joiner.push(arguments)
                    if call.joiner.held:
                        self._held = True
                call.chunks.append(arguments)
            if call.started:
                if arguments:
                    out.append(ToolCallDelta(call.id, arguments, index))
            elif call.name:
                if not call.id:
                    call.id = new_call_id()
                call.started = True
                out.append(ToolCallStarted(call.id, call.name, index))
                if call.chunks:
                    out.append(ToolCallDelta(call.id, "".join(call.chunks), index))

    def _unindexed(self, fragment: Any) -> int:
        """The index of a fragment sent without one: a new call when it carries a new id, or
        a name while the latest call has one; else the latest call."""
        current = self._calls.get(self._last)
        call_id = fragment.get("id")
        name = (fragment.get("function") or {}).get("name")
        if (
            current is None
            or (call_id and call_id != current.id)
            or (name and current.name and not call_id)
        ):
            return self._last + 1
        return self._last

    def finish(self) -> ModelResponse:
        if not self.done:
            raise StreamIncomplete(
                "the response stream ended before [DONE]",
                provider=self._provider.name,
                request_id=self._request_id,
            )
        if self._held:
            self._flush()
        calls = [
            (call.id or new_call_id(), call.name, "".join(call.chunks), call.extra)
            for _, call in sorted(self._calls.items())
        ]
        details = self._details.finish() if self._details is not None else []
        response = _response(
            self._provider,
            _thinking_parts(details, "".join(self._reasoning or ())),
            details,
            "".join(self._text),
            "".join(self._refusal or ()),
            calls,
            self._finish,
            self._usage,
            self._id,
            self._model,
            self._request_id,
            citations=tuple(self._citations or ()),
        )
        if not self._odd:  # valid Unicode throughout: appending it walks nothing
            vouch_parsed(response, response.model, response.provider)
        return response


from ._responses import OpenAIResponsesProvider  # noqa: E402  (its wire is its own module)
