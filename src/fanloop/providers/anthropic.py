"""The Anthropic Messages API provider, on the official ``anthropic`` SDK.

::

    from fanloop.providers.anthropic import AnthropicProvider

    provider = AnthropicProvider("claude-sonnet-5")           # ANTHROPIC_API_KEY from the env
    async with provider:                                        # closes the pool it created
        response = await provider.complete(request)

The provider builds the request JSON itself, sends it through ``AsyncAnthropic.post()`` (the
SDK keeps authentication, base URL, headers and its error classes; its retries are off, fanloop
owns them) and decodes the SSE stream without building a model per event. The assistant turns
it returns carry their exact wire blocks in ``origin``, so thinking signatures, redacted
thinking and server-tool blocks are replayed byte for byte in the next request.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anthropic
import httpx2

from ..errors import ConfigurationError, ResponseInvalid, StreamIncomplete
from ..events import StreamDelta, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStarted
from ..messages import Message, Origin, Part, TextPart, ThinkingPart, ToolCallPart
from ._http import HTTPProvider, SDKErrors, default_pool, stream_error
from ._types import HostedTool, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from ._wire import MessageCache, ToolsCache, dumps, parse_arguments
from ._wire import loads as _loads

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


_ERRORS = SDKErrors(
    status=anthropic.APIStatusError,
    timeout=anthropic.APITimeoutError,
    connection=anthropic.APIConnectionError,
    base=anthropic.AnthropicError,
)


class AnthropicProvider(HTTPProvider):
    """A model behind the Anthropic Messages API (``POST /v1/messages``).

    Args:
        model: the model name, e.g. ``"claude-sonnet-5"``.
        api_key: the API key; the SDK reads ``ANTHROPIC_API_KEY`` when it is ``None``.
        base_url: the API root without ``/v1`` (the SDK reads ``ANTHROPIC_BASE_URL`` when
            ``None``).
        http_client: an ``httpx2.AsyncClient`` to use as the connection pool. It may be shared
            between providers and is never closed by this provider. Without one the provider
            creates its own pool (1000 connections) and closes it in :meth:`aclose`.
        timeout: seconds (or an ``httpx2.Timeout``) for each request; the default waits up to
            600 s for data and 5 s to connect.
        default_headers: extra headers for every request (e.g. ``anthropic-beta``).
        extra_body: fields merged into every request body.

    Attributes:
        name: ``"anthropic"``.
        model: the model name.
        hosted_tools: the :class:`~fanloop.providers.HostedTool` kinds this provider can
            declare: ``web_search``, ``web_fetch`` and ``code_execution``.
    """

    _path: ClassVar[str] = "/v1/messages"
    _api: ClassVar[str] = "messages"
    hosted_tools: frozenset[str] = frozenset(_HOSTED_TYPES)

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        timeout: float | httpx2.Timeout | None = None,
        default_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("AnthropicProvider needs a model name")
        self.name = "anthropic"
        self.model = model
        self._extra_body = dict(extra_body or {})
        owns_client = http_client is None
        options: dict[str, Any] = {}
        if timeout is not None:
            options["timeout"] = timeout
        if http_client is None:
            http_client = default_pool(anthropic.DefaultAsyncHttpxClient, timeout)
        try:
            client = anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                open_telemetry=False,
                default_headers=default_headers,
                http_client=http_client,
                **options,
            )
        except (anthropic.AnthropicError, TypeError) as exc:
            raise ConfigurationError(f"cannot configure the Anthropic client: {exc}") from None
        super().__init__(client, owns_client=owns_client, errors=_ERRORS)
        self._messages: MessageCache[Message] = MessageCache(self._render_message)
        self._tools = ToolsCache()

    # -- encoding ---------------------------------------------------------------------------

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        head: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens}
        if request.system:
            head["system"] = request.system
        if request.temperature is not None:
            head["temperature"] = request.temperature
        if request.stop_sequences:
            head["stop_sequences"] = list(request.stop_sequences)
        if request.thinking_budget:
            head["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
        if stream:
            head["stream"] = True
        if self._extra_body:
            head.update(self._extra_body)
        if request.extra:
            head.update(request.extra)
        if "messages" in head:
            raise ConfigurationError("'messages' cannot be set through extra fields")
        extra_tools = head.pop("tools", None)
        pieces = [dumps(head)[:-1]]
        if request.tools or request.hosted_tools or extra_tools:
            tools = self._tools.get(
                request.tools,
                request.hosted_tools,
                lambda: dumps(_tool_list(request.tools, request.hosted_tools, self.hosted_tools)),
            )
            if extra_tools:
                tools = tools[:-1] + ("," if tools != "[]" else "") + dumps(extra_tools)[1:]
            pieces.append(',"tools":')
            pieces.append(tools)
        pieces.append(',"messages":[')
        get = self._messages.get
        pieces.append(",".join([get(m) for m in request.messages]))
        pieces.append("]}")
        return "".join(pieces).encode()

    def _render_message(self, message: Message) -> str:
        origin = message.origin
        if (
            origin is not None
            and message.role == "assistant"
            and origin.api == "messages"
            and origin.provider == "anthropic"
            and isinstance(origin.raw, list)
            and _parts(origin.raw) == message.content
        ):
            # The exact wire blocks (signatures, server-tool blocks, citations), unless the
            # message was changed after it was received (e.g. paused turns joined).
            return dumps({"role": "assistant", "content": origin.raw})
        content: list[dict[str, Any]] = []
        for part in message.content:
            if part.kind == "text":
                if part.text:
                    content.append({"type": "text", "text": part.text})
            elif part.kind == "tool_result":
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": part.call_id,
                    "content": part.content,
                }
                if part.is_error:
                    block["is_error"] = True
                content.append(block)
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
        return dumps({"role": message.role, "content": content})

    # -- decoding ---------------------------------------------------------------------------

    def _decode(self, data: Any, request_id: str | None) -> ModelResponse:
        if not isinstance(data, dict) or data.get("type") == "error":
            raise stream_error(data, provider=self.name, request_id=request_id)
        return _response(
            self,
            list(data.get("content") or ()),
            data.get("stop_reason"),
            data.get("stop_details"),
            data.get("usage") or {},
            data.get("id"),
            data.get("model"),
            request_id,
        )

    def _parser(self, request_id: str | None) -> _StreamParser:
        return _StreamParser(self, request_id)


def _tool_list(
    tools: tuple[ToolSpec, ...], hosted: tuple[HostedTool, ...], supported: frozenset[str]
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
    return out


def _parts(blocks: list[dict[str, Any]]) -> tuple[Part, ...]:
    """The provider-independent parts of a turn's wire blocks (server-tool blocks stay raw)."""
    parts: list[Part] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart.model_construct(text=block.get("text", "")))
        elif kind == "tool_use":
            arguments = block.get("input")
            parts.append(
                ToolCallPart.model_construct(
                    id=block["id"],
                    name=block["name"],
                    arguments=arguments if isinstance(arguments, dict) else {},
                )
            )
        elif kind == "thinking":
            parts.append(
                ThinkingPart.model_construct(
                    text=block.get("thinking", ""), signature=block.get("signature")
                )
            )
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart.model_construct(text="", redacted=block.get("data", "")))
    return tuple(parts)


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage.model_construct(
        input_tokens=raw.get("input_tokens") or 0,
        output_tokens=raw.get("output_tokens") or 0,
        cache_read_tokens=raw.get("cache_read_input_tokens") or 0,
        cache_write_tokens=raw.get("cache_creation_input_tokens") or 0,
    )


def _response(
    provider: AnthropicProvider,
    blocks: list[dict[str, Any]],
    raw_stop: str | None,
    stop_details: Any,
    usage: dict[str, Any],
    response_id: str | None,
    model: str | None,
    request_id: str | None,
) -> ModelResponse:
    stop = _STOP_REASONS.get(raw_stop, StopReason.UNKNOWN) if raw_stop else StopReason.UNKNOWN
    if not blocks and stop not in _MAY_BE_EMPTY:
        raise ResponseInvalid(
            f"the model returned an empty turn (stop_reason {raw_stop!r})",
            provider=provider.name,
            request_id=request_id,
        )
    model = model or provider.model
    return ModelResponse.model_construct(
        content=_parts(blocks),
        stop_reason=stop,
        usage=_usage(usage),
        model=model,
        provider=provider.name,
        raw_stop_reason=raw_stop,
        origin=Origin.model_construct(
            provider="anthropic", api="messages", model=model, raw=blocks
        ),
        stop_details=stop_details if isinstance(stop_details, dict) else None,
        response_id=response_id,
    )


class _Block:
    """One content block being streamed."""

    __slots__ = ("chunks", "index", "signature", "start", "type")

    def __init__(self, index: int, start: dict[str, Any]) -> None:
        self.index = index
        self.start = start
        self.type: str = start.get("type", "")
        self.chunks: list[str] = []
        self.signature: str | None = None

    def finish(self) -> dict[str, Any]:
        """The block's complete wire form."""
        kind = self.type
        if kind == "text":
            text = "".join(self.chunks) if self.chunks else self.start.get("text", "")
            block: dict[str, Any] = {"type": "text", "text": text}
            citations = self.start.get("citations")
            if citations:
                block["citations"] = citations
            return block
        if kind == "thinking":
            return {
                "type": "thinking",
                "thinking": "".join(self.chunks) if self.chunks else self.start.get("thinking", ""),
                "signature": (
                    self.signature if self.signature is not None else self.start.get("signature")
                ),
            }
        if kind in ("tool_use", "server_tool_use"):
            block = dict(self.start)
            if self.chunks:
                block["input"] = parse_arguments("".join(self.chunks))
            elif not isinstance(block.get("input"), dict):
                block["input"] = {}
            return block
        return self.start


class _StreamParser:
    """Decodes the Messages API event stream of one response."""

    __slots__ = (
        "_blocks",
        "_id",
        "_model",
        "_provider",
        "_request_id",
        "_stop",
        "_stop_details",
        "_usage",
        "done",
    )

    def __init__(self, provider: AnthropicProvider, request_id: str | None) -> None:
        self._provider = provider
        self._request_id = request_id
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._stop_details: Any = None
        self._id: str | None = None
        self._model: str | None = None
        self.done = False

    def feed(self, event: bytes, data: bytes) -> StreamDelta | None:
        if event == b"ping":
            return None
        obj = _loads(data)
        kind = obj.get("type")
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
                block.chunks.append(text)
                return TextDelta(text)
            if dtype == "input_json_delta":
                fragment = delta["partial_json"]
                block.chunks.append(fragment)
                if fragment and block.type == "tool_use":
                    return ToolCallDelta(block.start["id"], fragment, block.index)
                return None
            if dtype == "thinking_delta":
                text = delta["thinking"]
                block.chunks.append(text)
                return ThinkingDelta(text)
            if dtype == "signature_delta":
                block.signature = (block.signature or "") + delta["signature"]
                return ThinkingDelta("", signature=block.signature)
            if dtype == "citations_delta":
                block.start.setdefault("citations", []).append(delta.get("citation"))
            return None
        if kind == "content_block_start":
            index = obj["index"]
            start = obj["content_block"]
            block = _Block(index, start)
            self._blocks[index] = block
            if block.type == "tool_use":
                return ToolCallStarted(start["id"], start["name"], index)
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
            self._usage = dict(message.get("usage") or {})
            return None
        if kind == "message_stop":
            self.done = True
            return None
        if kind == "error" or event == b"error":
            raise stream_error(obj, provider=self._provider.name, request_id=self._request_id)
        return None  # content_block_stop, and event types this version does not know

    def finish(self) -> ModelResponse:
        if not self.done:
            raise StreamIncomplete(
                "the response stream ended before message_stop",
                provider=self._provider.name,
                request_id=self._request_id,
            )
        blocks = [self._blocks[i].finish() for i in sorted(self._blocks)]
        return _response(
            self._provider,
            blocks,
            self._stop,
            self._stop_details,
            self._usage,
            self._id,
            self._model,
            self._request_id,
        )
