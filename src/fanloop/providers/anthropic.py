"""The Anthropic Messages API provider.

::

    from fanloop.providers.anthropic import AnthropicProvider

    provider = AnthropicProvider("claude-sonnet-5")           # ANTHROPIC_API_KEY from the env
    async with provider:                                        # closes the pool it created
        response = await provider.complete(request)

The provider builds the request JSON itself and posts it straight to its connection pool, with
the authentication, base URL and headers the ``anthropic`` SDK would use, worked out once
(the SDK is not imported: that alone takes a second or more). Given an SDK client
(``client=AsyncAnthropic(...)``, e.g. for profile or workload-identity credentials), it posts
through that client's ``post()`` instead (its retries off: fanloop owns them). Either way it
decodes the SSE stream without building a model per event. The assistant turns it returns
carry their exact wire blocks in ``origin``, so thinking signatures, redacted thinking and
server-tool blocks are replayed byte for byte in the next request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import httpx2

from .._unicode import Joiner, may_escape_surrogates, scrub, scrub_json, vouch_parsed
from ..errors import ConfigurationError, ResponseInvalid, StreamIncomplete
from ..events import (
    CitationAdded,
    HostedToolProgress,
    StreamDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
)
from ..messages import (
    INVALID_ARGUMENTS_KEY,
    MAX_CITATIONS,
    DocumentPart,
    ImagePart,
    Message,
    Origin,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    _build,
    media_base64,
)
from ._citations import ANTHROPIC_TYPES, anthropic_citation, anthropic_citations, progress
from ._endpoint import SDKEndpoint, anthropic_endpoint, from_sdk_client
from ._eventstream import EventStreamDecoder
from ._http import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    Endpoint,
    FrameDecoder,
    HTTPProvider,
    SDKErrors,
    Transport,
    WireLimits,
    stream_error,
)
from ._options import (
    ANTHROPIC_SETTINGS,
    anthropic_accepts,
    anthropic_fields,
    anthropic_output_format,
    settings_extra,
)
from ._types import HostedTool, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
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
    parse_arguments,
    read_call_id,
    read_count,
    read_name,
    read_str,
    short,
)
from ._wire import load_frame as _load_frame

if TYPE_CHECKING:
    import anthropic

    from ..pacing import Pacer

__all__ = ["AnthropicProvider"]

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSED,
}

_HOSTED_TYPES: dict[str, str] = {
    "web_search": "web_search_20250305",
    "web_fetch": "web_fetch_20250910",
    "code_execution": "code_execution_20250825",
}

# Turns that may legitimately come back without any content block.
_MAY_BE_EMPTY = frozenset({StopReason.MAX_TOKENS, StopReason.REFUSAL, StopReason.PAUSED})

# Blocks whose input streams as input_json_delta; "tool_use" is the one fanloop runs.
_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})

# Prompt caching: one breakpoint each on the system prompt, the last tool and the last block
# of the conversation (three of the four the API allows).
_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_MARK = ',"cache_control":{"type":"ephemeral"}'
# Request blocks that may carry cache_control (besides non-empty text and *_tool_result).
_CACHEABLE = frozenset(
    {"image", "document", "tool_use", "tool_result", "server_tool_use", "search_result"}
)
_MAX_INDEX = 2**31 - 1


def _sdk_errors() -> SDKErrors:
    import anthropic

    return SDKErrors(
        status=anthropic.APIStatusError,
        timeout=anthropic.APITimeoutError,
        connection=anthropic.APIConnectionError,
        base=anthropic.AnthropicError,
    )


def _from_client(
    client: Any,
    api_key: str | None,
    base_url: str | None,
    http_client: httpx2.AsyncClient | None,
    timeout: float | httpx2.Timeout | None,
    default_headers: dict[str, str] | None,
    path: str,
) -> tuple[SDKEndpoint, str]:
    """The endpoint of ``client`` (with fanloop's options: its retries off), and where its
    key came from."""
    return from_sdk_client(
        client,
        _client_class(client),
        errors=_sdk_errors(),
        path=path,
        key=lambda sdk: getattr(sdk, "api_key", None) or getattr(sdk, "auth_token", None),
        variables=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        owner="AnthropicProvider",
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        timeout=timeout,
        default_headers=default_headers,
    )


def _client_class(client: Any) -> type[Any]:
    """The SDK class ``client`` is checked against: ``AsyncAnthropic``, or the client of Vertex
    AI or Bedrock (imported only when ``client`` is not an ``AsyncAnthropic``)."""
    import anthropic

    if isinstance(client, anthropic.AsyncAnthropic):
        return anthropic.AsyncAnthropic
    from anthropic.lib.bedrock import AsyncAnthropicBedrock
    from anthropic.lib.vertex import AsyncAnthropicVertex

    for platform in (AsyncAnthropicVertex, AsyncAnthropicBedrock):
        if isinstance(client, platform):
            return platform
    return anthropic.AsyncAnthropic  # the error names the usual client


class AnthropicProvider(HTTPProvider):
    """A model behind the Anthropic Messages API (``POST /v1/messages``).

    Args:
        model: the model name, e.g. ``"claude-sonnet-5"``.
        api_key: the API key; when ``None``, ``ANTHROPIC_API_KEY`` (else
            ``ANTHROPIC_AUTH_TOKEN``) is read. Sent as ``Authorization: Bearer``, as the SDK does.
        base_url: the API root without ``/v1`` (when ``None``, ``ANTHROPIC_BASE_URL``, else
            ``https://api.anthropic.com``).
        http_client: an ``httpx2.AsyncClient`` to use as the connection pool. It may be shared
            between providers and is never closed by this provider; use it from one event loop.
            Without one the provider creates its own pools (1000 connections each), one per
            event loop that uses it, and closes them in :meth:`aclose` or when their loop
            shuts down.
        client: an ``anthropic.AsyncAnthropic`` to send requests through instead (for
            credentials only the SDK resolves: profiles, workload identity, ``credentials=``),
            or the SDK's ``AsyncAnthropicVertex`` or ``AsyncAnthropicBedrock`` for Claude on
            Google Vertex AI or Amazon Bedrock (they route, authenticate and sign each request;
            see ``docs/providers.md``). Its key, base URL and pool are used as they are (so
            ``api_key``, ``base_url`` and ``http_client`` must be left out); it is never
            closed by this provider.
        timeout: seconds (or an ``httpx2.Timeout``) for each request; the default waits up to
            600 s for data and 5 s to connect.
        default_headers: extra headers for every request (e.g. ``anthropic-beta``).
            ``ANTHROPIC_CUSTOM_HEADERS`` (``Name: value`` lines) is read too, as by the SDK.
        extra_body: fields merged into every request body.
        max_response_bytes: the largest response body, streamed or not (default 64 MiB).
        max_frame_bytes: the largest stream event (default 16 MiB).
        max_blocks: the most content blocks in one response (default 1024).
        pacing: a :class:`~fanloop.pacing.Pacing` or :class:`~fanloop.pacing.RedisPacing`
            budget every call waits for (see ``docs/pacing.md``).
        transport: how the provider's own pools move bytes: ``"aiohttp"`` (best with
            hundreds of requests in flight; ~70 ms to import), ``"httpx"`` (``httpx2``'s own
            pool), or ``"auto"`` (aiohttp when installed and no proxy is configured;
            ``FANLOOP_HTTP_TRANSPORT`` overrides it). Unused with ``http_client`` or
            ``client``.
        prompt_caching: put cache breakpoints (``cache_control``) on the system prompt, the
            last tool and the last block of the conversation, so each request reads the prefix
            the previous one wrote from the prompt cache (default ``True``; see
            ``docs/providers.md``).

    Everything the server sends is checked: a malformed or out-of-range value is
    :class:`~fanloop.errors.ResponseInvalid`, a response over a cap is a ``ResponseInvalid``
    that is not retried (see :class:`~fanloop.providers._http.WireLimits`).

    Attributes:
        name: ``"anthropic"``.
        model: the model name.
        hosted_tools: the :class:`~fanloop.providers.HostedTool` kinds this provider can
            declare: ``web_search``, ``web_fetch`` and ``code_execution``.
        native_output: ``True``: a typed answer goes out as ``output_config.format`` (a JSON
            schema), when the schema can be said there (see :meth:`accepts_output_schema`).
        supported_settings: every :class:`~fanloop.ModelSettings` field but ``seed``.
    """

    _path: ClassVar[str] = "/v1/messages"
    _api: ClassVar[str] = "messages"
    hosted_tools: frozenset[str] = frozenset(_HOSTED_TYPES)
    native_output: bool = True
    supported_settings: frozenset[str] = ANTHROPIC_SETTINGS
    _bedrock: bool = False

    @staticmethod
    def accepts_output_schema(schema: dict[str, Any]) -> bool:
        """Whether ``output_config.format`` can express ``schema``: not when part of it is
        free-form (a ``dict``, ``Any``, a tuple). The agent uses the ``final_result`` tool
        for such an output type instead."""
        return anthropic_accepts(schema)

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        timeout: float | httpx2.Timeout | None = None,
        default_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        prompt_caching: bool = True,
        pacing: Pacer | None = None,
        transport: Transport = "auto",
    ) -> None:
        if not model:
            raise ConfigurationError("AnthropicProvider needs a model name")
        limits = WireLimits(max_response_bytes, max_frame_bytes, max_blocks)
        self.name = "anthropic"
        self.model = model
        self._extra_body = dict(extra_body or {})
        endpoint: Endpoint
        if client is not None:
            endpoint, source = _from_client(
                client, api_key, base_url, http_client, timeout, default_headers, self._path
            )
            self._bedrock = type(endpoint.sdk).__module__.startswith("anthropic.lib.bedrock")
        else:
            endpoint, source = anthropic_endpoint(
                api_key=api_key,
                base_url=base_url,
                http_client=http_client,
                timeout=timeout,
                default_headers=default_headers,
                transport=transport,
            )
        super().__init__(endpoint, key_source=source, limits=limits, pacing=pacing)
        self._messages: MessageCache[Message] = MessageCache(self._render_message)
        self._tools = ToolsCache()
        self._caching = prompt_caching

    # -- encoding ---------------------------------------------------------------------------

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        head: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens}
        if request.system:
            head["system"] = (
                [{"type": "text", "text": request.system, "cache_control": _EPHEMERAL}]
                if self._caching
                else request.system
            )
        if request.temperature is not None:
            head["temperature"] = request.temperature
        if request.stop_sequences:
            head["stop_sequences"] = list(request.stop_sequences)
        if request.thinking_budget:
            head["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
        if stream:
            head["stream"] = True
        if request.settings is not None:
            head.update(anthropic_fields(request, self.name))
        if self._extra_body:
            head.update(self._extra_body)
        if request.extra:
            head.update(request.extra)
        if (extra := settings_extra(request)) is not None:
            head.update(extra)
        if request.output is not None:  # kept beside any other output_config option
            config = head.get("output_config")
            config = dict(config) if isinstance(config, dict) else {}
            config["format"] = anthropic_output_format(request.output)
            head["output_config"] = config
        if "messages" in head:
            raise ConfigurationError("'messages' cannot be set through extra fields")
        extra_tools = head.pop("tools", None)
        pieces = [dumps(head)[:-1]]
        if request.tools or request.hosted_tools or extra_tools:
            tools = self._tools.get(
                request.tools,
                request.hosted_tools,
                lambda: dumps(
                    _tool_list(
                        request.tools, request.hosted_tools, self.hosted_tools, self._caching
                    )
                ),
            )
            if extra_tools:
                tools = tools[:-1] + ("," if tools != "[]" else "") + dumps(extra_tools)[1:]
            pieces.append(',"tools":')
            pieces.append(tools)
        pieces.append(',"messages":[')
        add_joined(pieces, self._messages.texts(request.messages, joined_memo(request)))
        if request.messages and self._caching and _markable(request.messages[-1]):
            # The conversation's breakpoint: spliced into the last message's cached JSON, so
            # every message is still rendered once.
            last = pieces.pop()
            if last.endswith("}]}"):
                pieces += (last[:-3], _MARK, "}]}")
            else:
                pieces.append(last)
        pieces.append("]}")
        return "".join(pieces).encode()

    def _render_message(self, message: Message) -> str:
        raw = _replayed(message)
        if raw is not None:
            return dumps({"role": "assistant", "content": raw})
        # Blocks as dicts, or as pieces of JSON text for those carrying media (megabytes of
        # base64 are joined in once, not run through the JSON encoder or copied per level).
        content: list[dict[str, Any] | list[str]] = []
        media = False
        for part in message.content:
            if part.kind == "text":
                if part.text:
                    text_block: dict[str, Any] = {"type": "text", "text": part.text}
                    cited = [c.raw for c in part.citations if c.type in ANTHROPIC_TYPES and c.raw]
                    if cited:
                        text_block["citations"] = cited
                    content.append(text_block)
            elif part.kind == "tool_result":
                if part.parts:
                    content.append(_tool_result_pieces(part))
                    media = True
                    continue
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": part.call_id,
                    "content": part.content,
                }
                if part.is_error:
                    block["is_error"] = True
                content.append(block)
            elif part.kind == "image" or part.kind == "document":
                content.append(_media_pieces(part))
                media = True
            elif part.kind == "tool_call":
                content.append(
                    {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
                )
            elif part.kind == "thinking":
                if part.redacted is not None:
                    content.append({"type": "redacted_thinking", "data": part.redacted})
                elif part.signature:
                    content.append(
                        {"type": "thinking", "thinking": part.text, "signature": part.signature}
                    )
                # Unsigned thinking (from another provider) cannot be sent back: dropped.
        if not media:
            return dumps({"role": message.role, "content": content})
        out = ['{"role":', dumps(message.role), ',"content":[']
        for item in content:
            if isinstance(item, dict):
                out.append(dumps(item))
            else:
                out += item
            out.append(",")
        out[-1] = "]}"
        return "".join(out)

    # -- decoding ---------------------------------------------------------------------------

    def _decode(self, data: Any, request_id: str | None) -> ModelResponse:
        if type(data) is not dict:
            raise Malformed("the response is not a JSON object")
        if data.get("type") == "error":
            raise stream_error(data, provider=self.name, request_id=request_id)
        content = data.get("content")
        if content is None:
            content = []
        elif type(content) is not list:
            raise Malformed("content is not a list")
        if len(content) > self.limits.max_blocks:
            raise ResponseTooLarge(
                f"the response has {len(content):,} content blocks, over the limit of "
                f"{self.limits.max_blocks:,} (max_blocks)"
            )
        return _response(
            self,
            [_clean_block(block) for block in content],
            data.get("stop_reason"),
            data.get("stop_details"),
            data.get("usage"),
            data.get("id"),
            data.get("model"),
            request_id,
        )

    def _frames(self) -> FrameDecoder:
        """SSE, or on Bedrock the AWS event-stream framing its streams come in."""
        if self._bedrock:
            return EventStreamDecoder(self.limits.max_frame_bytes)
        return super()._frames()

    def _parser(self, request_id: str | None) -> _StreamParser:
        return _StreamParser(self, request_id)


def _tool_list(
    tools: tuple[ToolSpec, ...],
    hosted: tuple[HostedTool, ...],
    supported: frozenset[str],
    caching: bool = False,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for spec in tools:
        entry: dict[str, Any] = {"name": spec.name}
        if spec.description:
            entry["description"] = spec.description
        entry["input_schema"] = spec.parameters
        out.append(entry)
    for tool in hosted:
        if tool.kind not in supported:
            raise ConfigurationError(
                f"AnthropicProvider does not support the hosted tool {tool.kind!r}; "
                f"supported: {', '.join(sorted(supported))}"
            )
        out.append({"type": _HOSTED_TYPES[tool.kind], "name": tool.kind, **tool.options})
    if caching and out:
        out[-1]["cache_control"] = _EPHEMERAL  # the whole tool list is one cached prefix
    return out


def _media_pieces(part: ImagePart | DocumentPart) -> list[str]:
    """An image or document block as pieces of JSON text: base64 data (which needs no JSON
    escaping), or a URL the API fetches."""
    out = ['{"type":"image","source":' if part.kind == "image" else '{"type":"document","source":']
    if part.data is not None:
        out += ('{"type":"base64","media_type":', dumps(part.media_type))
        out += (',"data":"', media_base64(part), '"}')
    else:
        out.append(dumps({"type": "url", "url": part.url}))
    if part.kind == "document" and part.title:
        out += (',"title":', dumps(part.title))
    out.append("}")
    return out


def _tool_result_pieces(part: ToolResultPart) -> list[str]:
    """A tool result carrying media, as pieces of JSON text: its content is a list of a text
    block (none when the text is empty: the API refuses empty text blocks) and the media."""
    out = [dumps({"type": "tool_result", "tool_use_id": part.call_id})[:-1], ',"content":[']
    if part.content:
        out += (dumps({"type": "text", "text": part.content}), ",")
    for media in part.parts:
        out += _media_pieces(media)
        out.append(",")
    out[-1] = '],"is_error":true}' if part.is_error else "]}"
    return out


def _replayed(message: Message) -> list[Any] | None:
    """The exact wire blocks of an assistant turn this API sent (signatures, server-tool
    blocks, citations), unless the message was changed after it was received (e.g. paused
    turns joined)."""
    origin = message.origin
    if (
        origin is not None
        and message.role == "assistant"
        and origin.api == "messages"
        and origin.provider == "anthropic"
        and isinstance(origin.raw, list)
        and _parts(origin.raw) == message.content
    ):
        return origin.raw
    return None


def _markable(message: Message) -> bool:
    """Whether the last block :meth:`AnthropicProvider._render_message` writes for
    ``message`` may carry ``cache_control``."""
    raw = _replayed(message)
    if raw is not None:
        last = raw[-1] if raw else None
        if type(last) is not dict:
            return False
        kind = last.get("type")
        if kind == "text":
            return bool(last.get("text"))
        return kind in _CACHEABLE or (type(kind) is str and kind.endswith("_tool_result"))
    for part in reversed(message.content):
        if part.kind == "text":
            if part.text:
                return True
        elif part.kind == "thinking":
            if part.redacted is not None or part.signature:
                return False  # a thinking block cannot be a breakpoint
        else:
            return True  # tool results, tool calls, images, documents
    return False


def _parts(blocks: list[Any]) -> tuple[Part, ...]:
    """The provider-independent parts of a turn's wire blocks (server-tool blocks stay raw).

    Never raises: ``blocks`` may also come back from a stored session.
    """
    parts: list[Part] = []
    for block in blocks:
        if type(block) is not dict:
            continue
        kind = block.get("type")
        if kind == "text":
            text = {
                "kind": "text",
                "text": block.get("text", ""),
                "citations": anthropic_citations(block.get("citations")),
            }
            parts.append(_build(TextPart, text, TEXT_SET))
        elif kind == "tool_use":
            arguments = block.get("input")
            call = {
                "kind": "tool_call",
                "id": block.get("id", ""),
                "name": block.get("name", ""),
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
            parts.append(_build(ToolCallPart, call, CALL_SET))
        elif kind == "thinking":
            parts.append(
                ThinkingPart.model_construct(
                    text=block.get("thinking", ""), signature=block.get("signature")
                )
            )
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart.model_construct(text="", redacted=block.get("data", "")))
    return tuple(parts)


def _clean_block(block: Any) -> dict[str, Any]:
    """A finished content block from the server, checked (and normalised) in place.

    Text, thinking and tool calls must have their fields of the right types; a tool call's
    id is replaced when unusable and its name cut to length; input that is not a JSON object
    becomes invalid arguments (answered with an error result). Other block types (server
    tools, results, types newer than this code) are kept as they are, for replay.
    """
    if type(block) is not dict:
        raise Malformed("a content block is not a JSON object")
    kind = block.get("type")
    if type(kind) is not str:
        raise Malformed("a content block has no type")
    # Replayed as sent: a breakpoint the server slipped in would add to the request's four.
    block.pop("cache_control", None)
    if kind == "text":
        block["text"] = read_str(block.get("text"), "text")
        citations = block.get("citations")
        if citations is not None and type(citations) is not list:
            raise Malformed("citations is not a list")
    elif kind == "tool_use":
        block["id"] = read_call_id(block.get("id"))
        block["name"] = read_name(block.get("name"), "tool_use name")
        arguments = block.get("input")
        if arguments is None:
            block["input"] = {}
        elif type(arguments) is not dict:
            block["input"] = {INVALID_ARGUMENTS_KEY: dumps(arguments)}
    elif kind == "thinking":
        block["thinking"] = read_str(block.get("thinking"), "thinking")
        signature = block.get("signature")
        if signature is not None and type(signature) is not str:
            raise Malformed("signature is not a string")
    elif kind == "redacted_thinking":
        block["data"] = read_str(block.get("data"), "redacted_thinking data")
    return block


def _usage(raw: Any) -> Usage:
    if raw is None:
        raw = {}
    elif type(raw) is not dict:
        raise Malformed("usage is not a JSON object")
    values = {
        "input_tokens": read_count(raw.get("input_tokens"), "usage.input_tokens"),
        "output_tokens": read_count(raw.get("output_tokens"), "usage.output_tokens"),
        "cache_read_tokens": read_count(
            raw.get("cache_read_input_tokens"), "usage.cache_read_input_tokens"
        ),
        "cache_write_tokens": read_count(
            raw.get("cache_creation_input_tokens"), "usage.cache_creation_input_tokens"
        ),
        "reasoning_tokens": 0,
    }
    return _build(Usage, values, USAGE_SET)


def _stop_reason(raw: Any) -> str | None:
    if raw is None:
        return raw
    if type(raw) is str:
        return scrub(raw if len(raw) <= 256 else raw[:256])
    raise Malformed("stop_reason is not a string")


def _response(
    provider: AnthropicProvider,
    blocks: list[dict[str, Any]],
    raw_stop: Any,
    stop_details: Any,
    usage: Any,
    response_id: Any,
    model: Any,
    request_id: str | None,
) -> ModelResponse:
    raw_stop = _stop_reason(raw_stop)
    stop = _STOP_REASONS.get(raw_stop, StopReason.UNKNOWN) if raw_stop else StopReason.UNKNOWN
    if not blocks and stop not in _MAY_BE_EMPTY:
        raise ResponseInvalid(
            f"the model returned an empty turn (stop_reason {raw_stop!r})",
            provider=provider.name,
            request_id=request_id,
        )
    model = short(model) or provider.model
    origin = {"provider": "anthropic", "api": "messages", "model": model, "raw": blocks}
    values = {
        "content": _parts(blocks),
        "stop_reason": stop,
        "usage": _usage(usage),
        "model": model,
        "provider": provider.name,
        "raw_stop_reason": raw_stop,
        "origin": _build(Origin, origin, ORIGIN_SET),
        "stop_details": stop_details if type(stop_details) is dict else None,
        "response_id": short(response_id),
    }
    return _build(ModelResponse, values, RESPONSE_SET)


class _Block:
    """One content block being streamed.

    Its text, thinking or input JSON arrives in pieces, made valid Unicode as they come:
    ``joiner`` holds back a high surrogate that ends one piece for the low half that may
    start the next (see :mod:`fanloop._unicode`).
    """

    __slots__ = (
        "chunks",
        "citations",
        "encrypted",
        "id",
        "index",
        "joiner",
        "signature",
        "start",
        "stopped",
        "type",
    )

    def __init__(self, index: int, start: dict[str, Any]) -> None:
        kind = start.get("type")
        if type(kind) is not str:
            raise Malformed("content_block_start without a block type")
        self.index = index
        self.start = start
        self.type = kind
        self.chunks: list[str] = []
        self.signature: list[str] = []
        self.citations: list[Any] = []
        self.encrypted: list[str] = []  # a compaction block's encrypted_content pieces
        self.joiner = Joiner()
        self.id = ""
        self.stopped = False
        if kind == "tool_use":
            # Checked now: the id and name go out in ToolCallStarted before the block ends.
            self.id = start["id"] = read_call_id(start.get("id"))
            start["name"] = read_name(start.get("name"), "tool_use name")

    def flush(self) -> StreamDelta | None:
        """The delta for a lone high surrogate still held back when the block ends (U+FFFD),
        if there is one."""
        rest = self.joiner.flush()
        if not rest:
            return None
        self.chunks.append(rest)
        if self.type == "text":
            return TextDelta(rest)
        if self.type == "thinking":
            return ThinkingDelta(rest)
        if self.type == "tool_use":
            return ToolCallDelta(self.id, rest, self.index)
        return None

    def finish(self) -> dict[str, Any]:
        """The block's complete wire form."""
        self.flush()
        kind = self.type
        start = self.start
        if kind == "text":
            text = "".join(self.chunks) if self.chunks else start.get("text")
            block: dict[str, Any] = {"type": "text", "text": read_str(text, "text")}
            citations = start.get("citations")
            if citations is not None and type(citations) is not list:
                raise Malformed("citations is not a list")
            citations = (citations or []) + self.citations
            if citations:
                block["citations"] = citations
            return block
        if kind == "thinking":
            thinking = "".join(self.chunks) if self.chunks else start.get("thinking")
            signature = "".join(self.signature) if self.signature else start.get("signature")
            if signature is not None and type(signature) is not str:
                raise Malformed("signature is not a string")
            return {
                "type": "thinking",
                "thinking": read_str(thinking, "thinking"),
                "signature": signature,
            }
        if kind == "compaction" and (self.chunks or self.encrypted):
            # Its summary came in compaction_delta events: the block as the non-streamed
            # response has it.
            block = dict(start)
            if self.chunks:
                block["content"] = "".join(self.chunks)
            if self.encrypted:
                block["encrypted_content"] = "".join(self.encrypted)
            return _clean_block(block)
        if kind in _INPUT_BLOCKS:
            block = dict(start)
            block.pop("cache_control", None)  # see _clean_block
            if self.chunks:
                block["input"] = parse_arguments("".join(self.chunks))
            elif type(block.get("input")) is not dict:
                block["input"] = {}
            return block
        return _clean_block(start)


_SERVER_USE = frozenset({"server_tool_use", "mcp_tool_use"})


def _server_progress(block: dict[str, Any], status: str) -> HostedToolProgress:
    """The progress of a server tool: its call started (``in_progress``), its input was
    complete (``input_complete``, with the input's small values: a search's ``query``, a
    fetch's ``url``...), or its result block came (``completed``, ``failed`` for an error)."""
    kind = block.get("type")
    if kind in _SERVER_USE:
        name = block.get("name")
        tool = "mcp" if kind == "mcp_tool_use" else name if type(name) is str else ""
        call_id = block.get("id")
        source = block.get("input")
        keys: tuple[str, ...] = ("query", "url", "command", "code")
        if kind == "mcp_tool_use":
            source, keys = block, ("name", "server_name")
        return progress(tool, call_id, status, source if type(source) is dict else {}, keys)
    tool = kind[: -len("_tool_result")] if type(kind) is str else ""
    if tool.startswith("mcp"):
        tool = "mcp"
    content = block.get("content")
    error = type(content) is dict and str(content.get("type", "")).endswith("error")
    if block.get("is_error") is True:
        error = True
    source = content if error and type(content) is dict else {}
    return progress(
        tool, block.get("tool_use_id"), "failed" if error else status, source, ("error_code",)
    )


class _StreamParser:
    """Decodes the Messages API event stream of one response."""

    __slots__ = (
        "_blocks",
        "_id",
        "_max_blocks",
        "_model",
        "_odd",
        "_provider",
        "_request_id",
        "_stop",
        "_stop_details",
        "_tools",
        "_usage",
        "done",
    )

    def __init__(self, provider: AnthropicProvider, request_id: str | None) -> None:
        self._provider = provider
        self._request_id = request_id
        self._max_blocks = provider.limits.max_blocks
        self._blocks: dict[int, _Block] = {}
        self._tools: dict[str, str] = {}  # the server tools called, by call id
        self._usage: dict[str, Any] = {}
        self._stop: Any = None
        self._stop_details: Any = None
        self._id: Any = None
        self._model: Any = None
        self._odd = False  # whether any event may have held a surrogate escape
        self.done = False

    def feed(self, event: bytes, data: bytes) -> tuple[StreamDelta, ...] | StreamDelta | None:
        if event == b"ping":
            return None
        obj = _load_frame(data)
        # A surrogate escape (rare): the delta's text goes through its block's joiner, every
        # other string of the event is made valid as it is.
        odd = 92 in data and may_escape_surrogates(data)  # 92: a backslash
        if odd:
            self._odd = True
        kind = obj.get("type")  # AttributeError (malformed) unless a JSON object
        if kind == "content_block_delta":
            delta = obj["delta"]
            dtype = delta.get("type")
            block = self._blocks.get(obj["index"])
            if block is None:
                raise ResponseInvalid(
                    "content_block_delta for a block that never started",
                    provider=self._provider.name,
                    request_id=self._request_id,
                )
            if dtype == "text_delta":
                text = delta["text"]
                if type(text) is not str or block.type != "text":
                    raise Malformed("a text_delta that is not text, or not in a text block")
                if odd or block.joiner.held:
                    text = block.joiner.push(text)
                block.chunks.append(text)
                return TextDelta(text)
            if dtype == "input_json_delta":
                fragment = delta["partial_json"]
                if type(fragment) is not str or block.type not in _INPUT_BLOCKS:
                    raise Malformed("an input_json_delta that is not text, or not in a tool block")
                if odd or block.joiner.held:
                    fragment = block.joiner.push(fragment)
                block.chunks.append(fragment)
                if fragment and block.type == "tool_use":
                    return ToolCallDelta(block.id, fragment, block.index)
                return None
            if dtype == "thinking_delta":
                text = delta["thinking"]
                if type(text) is not str or block.type != "thinking":
                    raise Malformed("a thinking_delta that is not text, or not in a thinking block")
                if odd or block.joiner.held:
                    text = block.joiner.push(text)
                block.chunks.append(text)
                return ThinkingDelta(text)
            if dtype == "signature_delta":
                signature = delta["signature"]
                if type(signature) is not str or block.type != "thinking":
                    raise Malformed(
                        "a signature_delta that is not text, or not in a thinking block"
                    )
                if odd:
                    signature = scrub(signature)
                block.signature.append(signature)
                return ThinkingDelta("", signature=signature)
            if dtype == "compaction_delta":
                if block.type != "compaction":
                    raise Malformed("a compaction_delta outside a compaction block")
                for key, pieces in (
                    ("content", block.chunks),
                    ("encrypted_content", block.encrypted),
                ):
                    value = delta.get(key)
                    if value is None:
                        continue
                    if type(value) is not str:
                        raise Malformed(f"a compaction_delta {key} that is not text")
                    pieces.append(scrub(value) if odd else value)
                return None
            if dtype == "citations_delta":
                if block.type != "text":
                    raise Malformed("a citations_delta outside a text block")
                raw = scrub_json(delta.get("citation")) if odd else delta.get("citation")
                citation = anthropic_citation(raw)
                if citation is None:
                    raise Malformed("a citations_delta without a citation object")
                if len(block.citations) >= MAX_CITATIONS:
                    return None  # the text part keeps the first ones
                block.citations.append(raw)
                return CitationAdded(citation, block.index)
            return None
        if odd:
            obj = scrub_json(obj)
        if kind == "content_block_stop":
            index = obj.get("index")
            block = self._blocks.get(index) if type(index) is int else None
            if block is None:
                return None
            if block.stopped:  # a server tool's input would be joined and parsed again
                raise Malformed(f"content block {index} stopped twice")
            block.stopped = True
            if block.type in _SERVER_USE:
                rest = block.flush()
                done = _server_progress(block.finish(), "input_complete")
                return done if rest is None else (rest, done)
            return block.flush()
        if kind == "content_block_start":
            index = obj["index"]
            start = obj["content_block"]
            if type(index) is not int or not 0 <= index <= _MAX_INDEX:
                raise Malformed("content_block_start with an index that is not a small integer")
            if type(start) is not dict:
                raise Malformed("content_block_start without a content block")
            blocks = self._blocks
            if index in blocks:
                raise Malformed(f"content block {index} started twice")
            if len(blocks) >= self._max_blocks:
                raise ResponseTooLarge(
                    f"the response has over {self._max_blocks:,} content blocks (max_blocks)"
                )
            block = blocks[index] = _Block(index, start)
            if block.type == "tool_use":
                return ToolCallStarted(block.id, start["name"], index)
            if block.type in _SERVER_USE:
                started = _server_progress(start, "in_progress")
                if len(self._tools) < self._max_blocks:
                    self._tools[started.call_id] = started.tool
                return started
            if block.type.endswith("_tool_result"):
                ended = _server_progress(start, "completed")
                ended.tool = self._tools.get(ended.call_id, ended.tool)  # as its call said
                return ended
            return None
        if kind == "message_delta":
            delta = obj.get("delta") or {}
            if "stop_reason" in delta:
                self._stop = delta["stop_reason"]
            if delta.get("stop_details") is not None:
                self._stop_details = delta["stop_details"]
            usage = obj.get("usage")
            if usage:
                # Cumulative counts: overwrite what message_start said.
                self._usage.update({k: v for k, v in usage.items() if v is not None})
            return None
        if kind == "message_start":
            message = obj.get("message") or {}
            self._id = message.get("id")
            self._model = message.get("model")
            usage = message.get("usage") or {}
            if type(usage) is not dict:
                raise Malformed("usage is not a JSON object")
            self._usage = dict(usage)
            return None
        if kind == "message_stop":
            self.done = True
            held = [block.flush() for block in self._blocks.values() if block.joiner.held]
            return tuple(delta for delta in held if delta is not None) or None
        if kind == "error" or event == b"error":
            raise stream_error(
                obj, provider=self._provider.name, request_id=self._request_id, size=len(data)
            )
        return None  # content_block_stop, and event types this version does not know

    def finish(self) -> ModelResponse:
        if not self.done:
            raise StreamIncomplete(
                "the response stream ended before message_stop",
                provider=self._provider.name,
                request_id=self._request_id,
            )
        blocks = [self._blocks[i].finish() for i in sorted(self._blocks)]
        response = _response(
            self._provider,
            blocks,
            self._stop,
            self._stop_details,
            self._usage,
            self._id,
            self._model,
            self._request_id,
        )
        if not self._odd:  # valid Unicode throughout: appending it walks nothing
            vouch_parsed(response, response.model, response.provider)
        return response
