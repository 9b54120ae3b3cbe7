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
from typing import TYPE_CHECKING, Any, ClassVar

import httpx2

from .._unicode import Joiner, may_escape_surrogates, scrub, scrub_json
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
    media_base64,
)
from ._citations import chat_citation
from ._endpoint import from_sdk_client, openai_endpoint, openai_sdk_errors
from ._http import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    HTTPProvider,
    Transport,
    WireLimits,
    stream_error,
)
from ._options import OPENAI_SETTINGS, openai_fields, openai_response_format, settings_extra
from ._types import ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from ._wire import (
    Malformed,
    MessageCache,
    ResponseTooLarge,
    ToolsCache,
    dumps,
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
_PLACEHOLDER_KEY = "the placeholder key {key!r} (no api_key= was given)"


def _from_client(
    client: Any,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: float | httpx2.Timeout | None,
    default_headers: dict[str, str] | None,
) -> tuple[Any, str]:
    """``client`` with fanloop's options (its retries off), and where its key came from."""
    import openai

    return from_sdk_client(
        client,
        openai.AsyncOpenAI,
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
        extra_body: fields merged into every request body.
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
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIProvider needs a model name")
        limits = WireLimits(max_response_bytes, max_frame_bytes, max_blocks)
        self.name = name
        self.model = model
        self._max_tokens_field = max_tokens_field
        self._include_usage = include_usage
        self._extra_body = dict(extra_body or {})
        if client is not None:
            sdk, source = _from_client(
                client, api_key, base_url, http_client, timeout, default_headers
            )
            super().__init__(
                sdk, sdk_errors=openai_sdk_errors(), key_source=source, limits=limits, pacing=pacing
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
        """A model served by Ollama's OpenAI-compatible endpoint."""
        options.setdefault("name", "ollama")
        options.setdefault("max_tokens_field", "max_tokens")
        provider = cls(model, api_key=api_key or "ollama", base_url=base_url, **options)
        if api_key is None:
            provider._key_source = _PLACEHOLDER_KEY.format(key="ollama")
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
        extra_tools = head.pop("tools", None)
        pieces = [dumps(head)[:-1]]
        if request.tools or extra_tools:
            tools = self._tools.get(request.tools, (), lambda: dumps(_tool_list(request.tools)))
            if extra_tools:
                tools = tools[:-1] + ("," if tools != "[]" else "") + dumps(extra_tools)[1:]
            pieces.append(',"tools":')
            pieces.append(tools)
        pieces.append(',"messages":[')
        comma = False
        if request.system:
            pieces.append(dumps({"role": "system", "content": request.system}))
            comma = True
        get = self._messages.get
        for message in request.messages:
            text = get(message)
            if text:
                if comma:
                    pieces.append(",")
                pieces.append(text)  # joined once with the rest: no copy per message
                comma = True
        pieces.append("]}")
        return "".join(pieces).encode()

    def _render_message(self, message: Message) -> str:
        """One message as wire JSON; may be several wire messages joined by commas, or ""."""
        origin = message.origin
        if (
            origin is not None
            and message.role == "assistant"
            and origin.api == "chat.completions"
            and origin.provider == self.name
            and isinstance(origin.raw, dict)
            and _raw_matches(origin.raw, message)
        ):
            return dumps(origin.raw)
        if message.role == "assistant":
            return _render_assistant(message)
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
        choice = choices[0]
        message = choice.get("message") or {}
        tool_calls = message.get("tool_calls") or ()
        if len(tool_calls) > self.limits.max_blocks:
            raise _too_many(self.limits.max_blocks)
        calls = []
        for call in tool_calls:
            function = call.get("function") or {}
            calls.append(
                (
                    read_call_id(call.get("id")),
                    read_name(function.get("name"), "tool call name"),
                    _arguments(function.get("arguments")),
                )
            )
        return _response(
            self,
            _reasoning(message),
            _content(message.get("content")),
            read_str(message.get("refusal"), "refusal"),
            calls,
            choice.get("finish_reason"),
            data.get("usage"),
            data.get("id"),
            data.get("model"),
            request_id,
            citations=_annotations(message.get("annotations"), []),
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


def _render_assistant(message: Message) -> str:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ToolCallPart):
            arguments = part.arguments
            raw = arguments.get(INVALID_ARGUMENTS_KEY)
            calls.append(
                {
                    "id": part.id,
                    "type": "function",
                    "function": {
                        "name": part.name,
                        "arguments": raw if isinstance(raw, str) else dumps(arguments),
                    },
                }
            )
    if not texts and not calls:
        return ""  # e.g. a turn of thinking only: nothing Chat Completions can take back
    wire: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        wire["tool_calls"] = calls
    return dumps(wire)


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
    return Usage.model_construct(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=read_count(raw.get("completion_tokens"), "usage.completion_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


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


def _annotations(raw: Any, seen: list[Any]) -> tuple[Citation, ...]:
    """The new citations among a message's (or delta's) ``annotations``; ``seen`` holds
    those already read, so a server that repeats them in later chunks adds each once (at
    most :data:`~fanloop.messages.MAX_CITATIONS` in all)."""
    if type(raw) is not list:
        return ()
    out = []
    for item in raw:
        if len(seen) >= MAX_CITATIONS:
            break
        if item in seen:
            continue
        citation = chat_citation(item)
        if citation is not None:
            seen.append(item)
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
    reasoning: str,
    text: str,
    refusal: str,
    calls: list[tuple[str, str, str]],
    finish: Any,
    usage: Any,
    response_id: Any,
    model: Any,
    request_id: str | None,
    *,
    citations: tuple[Citation, ...] = (),
) -> ModelResponse:
    parts: list[Part] = []
    if reasoning:
        parts.append(ThinkingPart.model_construct(text=reasoning, signature=None, redacted=None))
    if text or refusal:
        parts.append(TextPart.model_construct(text=text + refusal, citations=citations))
    for call_id, name, arguments in calls:
        parts.append(
            ToolCallPart.model_construct(
                id=call_id, name=name, arguments=parse_arguments(arguments)
            )
        )
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
        raw["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    model = short(model) or provider.model
    return ModelResponse.model_construct(
        content=tuple(parts),
        stop_reason=stop,
        usage=_usage(usage),
        model=model,
        provider=provider.name,
        raw_stop_reason=finish,
        origin=Origin.model_construct(
            provider=provider.name, api="chat.completions", model=model, raw=raw
        ),
        stop_details=stop_details,
        response_id=short(response_id),
    )


class _Call:
    __slots__ = ("chunks", "id", "joiner", "name", "started")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.chunks: list[str] = []
        self.joiner = Joiner()
        self.started = False


_MAX_INDEX = 2**31 - 1


class _StreamParser:
    """Decodes the chunk stream of one Chat Completions response."""

    __slots__ = (
        "_calls",
        "_citations",
        "_cited",
        "_finish",
        "_held",
        "_id",
        "_joiners",
        "_last",
        "_max_calls",
        "_model",
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
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        # Text, reasoning and refusal pieces made valid Unicode as they come (a high surrogate
        # ending one piece waits for the low half that may start the next: _unicode.Joiner).
        self._joiners = (Joiner(), Joiner(), Joiner())
        self._held = False  # whether any joiner holds something back
        self._calls: dict[int, _Call] = {}
        self._cited: list[Any] = []  # the annotations read (a server may repeat them)
        self._citations: list[Citation] = []
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
        finish = choice.get("finish_reason")
        if finish:
            self._finish = finish
        delta = choice.get("delta")
        if not delta:
            return None
        content = delta.get("content")
        tool_calls = delta.get("tool_calls")
        if (
            content
            and not tool_calls
            and type(content) is str
            and not (odd or self._held)
            and "annotations" not in delta
        ):
            self._text.append(content)
            return TextDelta(content)
        out: list[StreamDelta] = []
        joiners = self._joiners
        if content:
            content = _content(content)
            if odd or joiners[0].held:
                content = self._join(0, content)
            self._text.append(content)
            out.append(TextDelta(content))
        reasoning = _reasoning(delta)
        if reasoning:
            if odd or joiners[1].held:
                reasoning = self._join(1, reasoning)
            self._reasoning.append(reasoning)
            out.append(ThinkingDelta(reasoning))
        refusal = delta.get("refusal")
        if refusal:
            refusal = read_str(refusal, "refusal")
            if odd or joiners[2].held:
                refusal = self._join(2, refusal)
            self._refusal.append(refusal)
        if tool_calls:
            self._tool_calls(tool_calls, out, odd)
        annotations = delta.get("annotations")
        if annotations:
            for citation in _annotations(
                scrub_json(annotations) if odd else annotations, self._cited
            ):
                self._citations.append(citation)
                out.append(CitationAdded(citation))
        return tuple(out)

    def _join(self, which: int, text: str) -> str:
        joiner = self._joiners[which]
        text = joiner.push(text)
        if joiner.held:
            self._held = True
        return text

    def _flush(self) -> tuple[StreamDelta, ...]:
        """The deltas of what the joiners still hold once the stream ends (U+FFFD each)."""
        self._held = False
        out: list[StreamDelta] = []
        text, reasoning, refusal = self._joiners
        if rest := text.flush():
            self._text.append(rest)
            out.append(TextDelta(rest))
        if rest := reasoning.flush():
            self._reasoning.append(rest)
            out.append(ThinkingDelta(rest))
        if rest := refusal.flush():
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
            (call.id or new_call_id(), call.name, "".join(call.chunks))
            for _, call in sorted(self._calls.items())
        ]
        return _response(
            self._provider,
            "".join(self._reasoning),
            "".join(self._text),
            "".join(self._refusal),
            calls,
            self._finish,
            self._usage,
            self._id,
            self._model,
            self._request_id,
            citations=tuple(self._citations),
        )


from ._responses import OpenAIResponsesProvider  # noqa: E402  (its wire is its own module)
