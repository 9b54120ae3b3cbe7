"""The OpenAI Responses API provider (``POST {base_url}/responses``).

::

    from fanloop.providers.openai import OpenAIResponsesProvider

    provider = OpenAIResponsesProvider("gpt-5", reasoning_effort="low")  # OPENAI_API_KEY

The lean path of the Chat Completions provider (prebuilt JSON, the ``aiohttp`` / ``httpx2``
transports, fanloop's SSE decoder; the SDK only through ``client=``), on the newer wire.

Stateless by default (``store: false``, ``include: ["reasoning.encrypted_content"]``): the
assistant turns it returns carry the response's output items, exactly as the server sent
them, in ``origin``; the next request sends them back unchanged and in order, so each
encrypted reasoning item goes back right before the call or message it preceded (the API
refuses a reasoning item without its following item). Items fanloop has no part for (hosted
tool calls, compaction, types newer than this code) are kept the same way. A tool-call id the
loop had to replace (a server reusing ``call_0`` on every turn) is rewritten in the items too,
so the reasoning still goes back; a turn whose parts were changed any other way is translated
from its parts instead, without its reasoning items.

Reasoning summaries (and ``reasoning_text`` content, as some compatible servers send) become
:class:`~fanloop.messages.ThinkingPart` text and stream as thinking deltas.

Text enters as valid Unicode (``docs/security.md``): a surrogate pair that a server splits
between two deltas of one block (a content part, a summary part, a call's arguments) is
joined, so the streamed deltas add up to the final turn; any other lone surrogate, in a delta
or anywhere else, becomes U+FFFD.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import httpx2

from .._unicode import Joiner, may_escape_surrogates, scrub_json, vouch
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
    ToolResultPart,
    _build,
    media_base64,
)
from ._citations import fit, progress, responses_citation, responses_wire
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
from ._options import (
    RESPONSES_SETTINGS,
    responses_fields,
    responses_reasoning,
    responses_text_format,
    settings_extra,
)
from ._types import HostedTool, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from ._wire import (
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
    import openai

    from ..pacing import Pacer
    from ._azure import AzureTokenProvider

__all__ = ["OpenAIResponsesProvider"]

API = "responses"
"""``Origin.api`` of the turns this provider returns."""

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
ReasoningSummary = Literal["auto", "concise", "detailed"]
Verbosity = Literal["low", "medium", "high"]

_HOSTED = frozenset(
    {"web_search", "file_search", "code_interpreter", "image_generation", "mcp", "shell"}
)
_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}
_MAY_BE_EMPTY = frozenset({StopReason.MAX_TOKENS, StopReason.REFUSAL})
# Background mode's first answers (a tuple: a hostile status may be unhashable).
_UNFINISHED = ("queued", "in_progress")
_MAX_INDEX = 2**31 - 1
_STATELESS_INCLUDE = ["reasoning.encrypted_content"]


class OpenAIResponsesProvider(HTTPProvider):
    """A model behind OpenAI's Responses API (``POST {base_url}/responses``).

    Args:
        model: the model name, e.g. ``"gpt-5"``.
        api_key: the API key (``Authorization: Bearer``); when ``None``, ``OPENAI_API_KEY``.
        base_url: the API root *including* ``/v1`` (when ``None``, ``OPENAI_BASE_URL``, else
            ``https://api.openai.com/v1``).
        http_client: an ``httpx2.AsyncClient`` to use as the connection pool (never closed by
            this provider; use it from one event loop).
        client: an ``openai.AsyncOpenAI`` to send requests through instead (its retries off);
            leave out ``api_key``, ``base_url`` and ``http_client`` then.
        timeout: seconds (or an ``httpx2.Timeout``) for each request.
        name: the provider name reported in responses.
        store: ``False`` (the default): nothing is kept on OpenAI's side; reasoning comes back
            encrypted (``include: ["reasoning.encrypted_content"]``) and is sent back with the
            conversation. ``True``: the server stores responses (``store: true``) and the
            conversation is sent on from the last stored response (``previous_response_id``)
            with only the items added since.
        reasoning_effort: ``reasoning.effort`` for reasoning models (not sent when ``None``;
            a request with ``thinking_budget`` asks for a matching effort).
        reasoning_summary: ``reasoning.summary`` (``"auto"``, ``"concise"``, ``"detailed"``):
            summaries of the model's reasoning, as thinking. Sent only with an effort (or a
            ``thinking_budget``), then ``"auto"`` when ``None``.
        verbosity: ``text.verbosity`` (GPT-5 models).
        service_tier: ``service_tier`` (``"auto"``, ``"default"``, ``"flex"``, ``"priority"``).
        prompt_cache_key: ``prompt_cache_key``: requests sharing it share a prompt cache.
        default_headers: extra headers for every request (``OPENAI_ORG_ID``,
            ``OPENAI_PROJECT_ID`` and ``OPENAI_CUSTOM_HEADERS`` are read too, as by the SDK).
        extra_body: fields merged into every request body.
        max_response_bytes: the largest response body, streamed or not (default 64 MiB).
        max_frame_bytes: the largest stream event (default 16 MiB).
        max_blocks: the most output items, and the most content parts of one item, in a
            response (default 1024).
        pacing: a :class:`~fanloop.pacing.Pacing` or :class:`~fanloop.pacing.RedisPacing`.
        transport: ``"aiohttp"``, ``"httpx"`` or ``"auto"`` (as for
            :class:`~fanloop.providers.openai.OpenAIProvider`).

    Everything the server sends is checked: a malformed or out-of-range value is
    :class:`~fanloop.errors.ResponseInvalid`, a response over a cap is a ``ResponseInvalid``
    that is not retried. ``response.failed`` and ``error`` events are typed
    :class:`~fanloop.errors.ProviderError` s, classified (and retried) by their error code.

    Attributes:
        name: ``"openai"`` unless set.
        model: the model name.
        hosted_tools: the :class:`~fanloop.providers.HostedTool` kinds it declares:
            ``web_search``, ``file_search``, ``code_interpreter``, ``image_generation``,
            ``mcp``, ``shell`` (their options go into the tool object as they are).
        native_output: ``True``: a typed answer goes out as ``text.format`` (a strict JSON
            schema when the schema can be made strict).
        supported_settings: every :class:`~fanloop.ModelSettings` field but ``stop`` and
            ``seed``, which the Responses API does not have.
    """

    _path: ClassVar[str] = "/responses"
    _api: ClassVar[str] = API
    hosted_tools: frozenset[str] = _HOSTED
    native_output: bool = True
    supported_settings: frozenset[str] = RESPONSES_SETTINGS

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
        store: bool = False,
        reasoning_effort: ReasoningEffort | None = None,
        reasoning_summary: ReasoningSummary | None = None,
        verbosity: Verbosity | None = None,
        service_tier: str | None = None,
        prompt_cache_key: str | None = None,
        default_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        pacing: Pacer | None = None,
        transport: Transport = "auto",
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIResponsesProvider needs a model name")
        limits = WireLimits(max_response_bytes, max_frame_bytes, max_blocks)
        self.name = name
        self.model = model
        self.store = bool(store)
        self._head = _fixed_fields(
            store=self.store,
            effort=reasoning_effort,
            summary=reasoning_summary,
            verbosity=verbosity,
            service_tier=service_tier,
            prompt_cache_key=prompt_cache_key,
        )
        self._effort = reasoning_effort
        self._summary = reasoning_summary
        self._extra_body = dict(extra_body or {})
        endpoint: Endpoint
        if client is not None:
            import openai as sdk_module

            endpoint, source = from_sdk_client(
                client,
                sdk_module.AsyncOpenAI,
                errors=openai_sdk_errors(),
                path=self._path,
                key=lambda sdk: sdk.api_key,
                variables=("OPENAI_API_KEY",),
                owner="OpenAIResponsesProvider",
                api_key=api_key,
                base_url=base_url,
                http_client=http_client,
                timeout=timeout,
                default_headers=default_headers,
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
                path=self._path,
                owner="OpenAIResponsesProvider",
            )
        super().__init__(endpoint, key_source=source, limits=limits, pacing=pacing)
        self._messages: MessageCache[Message] = MessageCache(self._render_message)
        self._tools = ToolsCache()
        # The parts each turn this provider made was given, by its origin (while it lives): a
        # turn sent back with those very parts is replayed without parsing its items again.
        self._made: dict[int, tuple[weakref.ref[Origin], tuple[Part, ...]]] = {}

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
                ``/openai/responses``), or ``"v1"`` / ``"preview"`` for Azure's
                v1 API (``/openai/v1/...``); else ``OPENAI_API_VERSION``, else ``"v1"``.
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

    # -- encoding ---------------------------------------------------------------------------

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        head: dict[str, Any] = {"model": self.model, "max_output_tokens": request.max_tokens}
        head.update(self._head)
        if stream:
            head["stream"] = True
        if request.system:
            head["instructions"] = request.system
        if request.temperature is not None:
            head["temperature"] = request.temperature
        if request.stop_sequences:
            raise ConfigurationError(
                f"{self.name} (the Responses API) has no stop sequences: leave out stop="
            )
        if request.thinking_budget and "reasoning" not in head:
            head["reasoning"] = {
                "effort": _effort(request.thinking_budget),
                "summary": self._summary or "auto",
            }
        if request.settings is not None:
            head.update(responses_fields(request, self.name))
            if (reasoning := responses_reasoning(request.settings, head)) is not None:
                head.update(reasoning)
        if request.output is not None:
            text_field = dict(head.get("text") or {})
            text_field["format"] = responses_text_format(request.output)
            head["text"] = text_field
        if self._extra_body:
            head.update(self._extra_body)
        if request.extra:
            head.update(request.extra)
        if (extra := settings_extra(request)) is not None:
            head.update(extra)
        if "input" in head or "messages" in head:
            raise ConfigurationError("'input' cannot be set through extra fields")
        if head.get("background"):
            raise ConfigurationError(
                f"{self.name}: background mode (background=True) is not supported; "
                "leave it out, the provider waits for each answer"
            )
        messages = request.messages
        if self.store and "previous_response_id" not in head:
            messages = self._since_stored(messages, head)
        extra_tools = head.pop("tools", None)
        pieces = [dumps(head)[:-1]]
        if request.tools or request.hosted_tools or extra_tools:
            tools = self._tools.get(
                request.tools,
                request.hosted_tools,
                lambda: dumps(_tool_list(request.tools, request.hosted_tools)),
            )
            if extra_tools:
                tools = tools[:-1] + ("," if tools != "[]" else "") + dumps(extra_tools)[1:]
            pieces.append(',"tools":')
            pieces.append(tools)
        pieces.append(',"input":[')
        add_joined(pieces, self._messages.texts(messages, joined_memo(request)))
        pieces.append("]}")
        return "".join(pieces).encode()

    def _since_stored(
        self, messages: tuple[Message, ...], head: dict[str, Any]
    ) -> tuple[Message, ...]:
        """With ``store=True``: the messages after the last turn the server stored, which
        becomes ``previous_response_id`` (all of them when there is none)."""
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            origin = message.origin
            if message.role != "assistant":
                continue
            if (
                origin is not None
                and origin.api == API
                and origin.provider == self.name
                and isinstance(origin.raw, dict)
                and type(origin.raw.get("id")) is str
                and origin.raw.get("stored") is True
                and _replayable(origin.raw.get("output"), message)
            ):
                head["previous_response_id"] = origin.raw["id"]
                return messages[index + 1 :]
            break  # a turn the server did not store: send the whole conversation
        return messages

    def _render_message(self, message: Message) -> str:
        """One message as input items joined by commas (may be ``""``)."""
        if message.role == "assistant":
            raw = self._replayed(message)
            if raw is not None:
                try:
                    return ",".join(dumps(item) for item in raw)
                except (RecursionError, ValueError):  # nested too deep to encode again
                    pass
            return _render_assistant(message)
        out: list[str] = []
        texts: list[str] = []
        content: list[str] = []  # pieces of the user message's content list
        for part in message.content:
            if part.kind == "tool_result":
                out.append("".join(_result_pieces(part)))
            elif part.kind == "text":
                texts.append(part.text)
                content += (dumps({"type": "input_text", "text": part.text}), ",")
            elif part.kind == "image" or part.kind == "document":
                content += _media_pieces(part)
                content.append(",")
        if len(texts) == 1 and len(content) == 2:
            out.append(dumps({"role": "user", "content": texts[0]}))
        elif content:
            content[-1] = "]}"
            out.append('{"role":"user","content":[' + "".join(content))
        return ",".join(out)

    def _replayed(self, message: Message) -> list[Any] | None:
        """The output items of a turn this provider received, unless the turn was changed."""
        origin = message.origin
        if origin is None or origin.api != API or origin.provider != self.name:
            return None
        raw = origin.raw
        items = raw.get("output") if isinstance(raw, dict) else None
        made = self._made.get(id(origin))
        if made is not None and made[0]() is origin and made[1] is message.content:
            return items if isinstance(items, list) else None  # the turn as it came
        return items if _replayable(items, message) else None

    def _remember(self, origin: Origin, parts: tuple[Part, ...]) -> None:
        """Note the parts of a turn this provider made (see :meth:`_replayed`)."""
        key = id(origin)
        made = self._made

        def forget(_ref: weakref.ref[Origin], key: int = key) -> None:
            made.pop(key, None)

        made[key] = (weakref.ref(origin, forget), parts)

    # -- decoding ---------------------------------------------------------------------------

    def _decode(self, data: Any, request_id: str | None) -> ModelResponse:
        if type(data) is not dict:
            raise Malformed("the response is not a JSON object")
        status = data.get("status")
        if status == "failed" or (data.get("error") and status is None):
            raise stream_error(_failure(data), provider=self.name, request_id=request_id)
        output = data.get("output")
        if output is None:
            output = []
        elif type(output) is not list:
            raise Malformed("output is not a list")
        return _response(self, _clean_items(output, self.limits.max_blocks, []), data, request_id)

    def _parser(self, request_id: str | None) -> _StreamParser:
        return _StreamParser(self, request_id)


def _fixed_fields(
    *,
    store: bool,
    effort: str | None,
    summary: str | None,
    verbosity: str | None,
    service_tier: str | None,
    prompt_cache_key: str | None,
) -> dict[str, Any]:
    """The body fields every request of a provider carries, worked out once."""
    head: dict[str, Any] = {"store": store}
    if not store:
        head["include"] = _STATELESS_INCLUDE
    if effort is not None:
        head["reasoning"] = {"effort": effort, "summary": summary or "auto"}
    elif summary is not None:
        head["reasoning"] = {"summary": summary}
    if verbosity is not None:
        head["text"] = {"verbosity": verbosity}
    if service_tier is not None:
        head["service_tier"] = service_tier
    if prompt_cache_key is not None:
        head["prompt_cache_key"] = prompt_cache_key
    return head


def _effort(budget: int) -> str:
    """The reasoning effort closest to a thinking budget in tokens."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def _tool_list(tools: tuple[ToolSpec, ...], hosted: tuple[HostedTool, ...]) -> list[Any]:
    out: list[dict[str, Any]] = []
    for spec in tools:
        tool: dict[str, Any] = {"type": "function", "name": spec.name}
        if spec.description:
            tool["description"] = spec.description
        tool["parameters"] = spec.parameters
        tool["strict"] = False
        out.append(tool)
    for item in hosted:
        if item.kind not in _HOSTED:
            raise ConfigurationError(
                f"the Responses API has no hosted tool {item.kind!r}; "
                f"it has {', '.join(sorted(_HOSTED))}"
            )
        out.append({**item.options, "type": item.kind})
    return out


def _media_pieces(part: ImagePart | DocumentPart) -> list[str]:
    """An ``input_image`` or ``input_file`` part as pieces of JSON text (base64 joined in
    once, never run through the encoder)."""
    if part.kind == "image":
        if part.data is None:
            return [dumps({"type": "input_image", "detail": "auto", "image_url": part.url})]
        head = dumps({"type": "input_image", "detail": "auto", "image_url": "data:"})
        return [head[:-2], part.media_type or "", ";base64,", media_base64(part), '"}']
    if part.data is None:
        return [dumps({"type": "input_file", "file_url": part.url})]
    name = part.title or "document"
    if not name.lower().endswith(".pdf"):
        name += ".pdf"
    head = dumps({"type": "input_file", "filename": name, "file_data": "data:"})
    return [head[:-2], "application/pdf;base64,", media_base64(part), '"}']


def _result_pieces(part: ToolResultPart) -> list[str]:
    """A ``function_call_output`` item; a result carrying media gets a list of parts."""
    content = part.content
    if part.is_error and not content.lower().startswith("error"):
        content = f"Error: {content}"
    if not part.parts:
        return [dumps({"type": "function_call_output", "call_id": part.call_id, "output": content})]
    head = dumps({"type": "function_call_output", "call_id": part.call_id, "output": 0})
    pieces = [head[:-2], "[", dumps({"type": "input_text", "text": content})]
    for media in part.parts:
        pieces.append(",")
        pieces += _media_pieces(media)
    pieces.append("]}")
    return pieces


def _render_assistant(message: Message) -> str:
    """An assistant turn from its parts: text as assistant messages, calls as
    ``function_call`` items (without item ids, so no reasoning item is required with them);
    thinking cannot be sent back without its encrypted item and is left out."""
    out: list[str] = []
    for part in message.content:
        if isinstance(part, TextPart):
            annotations = [a for c in part.citations if (a := responses_wire(c)) is not None]
            if annotations:
                text = {"type": "output_text", "text": part.text, "annotations": annotations}
                out.append(dumps({"role": "assistant", "content": [text]}))
            elif part.text:
                out.append(dumps({"role": "assistant", "content": part.text}))
        elif isinstance(part, ToolCallPart):
            raw = part.arguments.get(INVALID_ARGUMENTS_KEY)
            out.append(
                dumps(
                    {
                        "type": "function_call",
                        "call_id": part.id,
                        "name": part.name,
                        "arguments": raw if isinstance(raw, str) else dumps(part.arguments),
                    }
                )
            )
    return ",".join(out)


# -- output items ---------------------------------------------------------------------------


def _replayable(items: Any, message: Message) -> bool:
    return isinstance(items, list) and _parts(items) == message.content


def _parts(items: list[Any]) -> tuple[Part, ...]:
    """The provider-independent parts of a turn's output items, in order (items without a
    part, such as hosted tool calls, stay only in the raw items).

    Never raises: ``items`` may come back from a stored session.
    """
    parts: list[Part] = []
    for item in items:
        if type(item) is not dict:
            continue
        kind = item.get("type")
        if kind == "message":
            text = _message_text(item)
            if text:
                citations = fit(_message_citations(item), len(text))
                parts.append(
                    _build(TextPart, {"kind": "text", "text": text, "citations": citations})
                )
        elif kind == "function_call":
            arguments = item.get("arguments")
            call = {
                "kind": "tool_call",
                "id": str(item.get("call_id", "")),
                "name": str(item.get("name", "")),
                "arguments": parse_arguments(arguments if type(arguments) is str else ""),
            }
            parts.append(_build(ToolCallPart, call))
        elif kind == "reasoning":
            text = _reasoning_text(item)
            if text:
                thinking = {"kind": "thinking", "text": text, "signature": None, "redacted": None}
                parts.append(_build(ThinkingPart, thinking))
    return tuple(parts)


def _texts(value: Any, kind: str, field: str = "text") -> list[str]:
    """The non-empty ``field`` strings of the ``kind`` parts in ``value`` (a list)."""
    out: list[str] = []
    if type(value) is list:
        for part in value:
            if type(part) is dict and part.get("type") == kind:
                text = part.get(field)
                if type(text) is str and text:
                    out.append(text)
    return out


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    out: list[str] = []
    if type(content) is list:
        for part in content:
            if type(part) is not dict:
                continue
            kind = part.get("type")
            text = part.get("text") if kind == "output_text" else None
            if kind == "refusal":
                text = part.get("refusal")
            if type(text) is str:
                out.append(text)
    return "".join(out)


def _message_citations(item: dict[str, Any]) -> tuple[Citation, ...]:
    """The annotations of a message's ``output_text`` parts, their offsets moved to count
    from the start of the message's whole text (the first :data:`MAX_CITATIONS`)."""
    content = item.get("content")
    out: list[Citation] = []
    if type(content) is not list:
        return ()
    shift = 0
    for part in content:
        if type(part) is not dict:
            continue
        kind = part.get("type")
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        annotations = part.get("annotations") if kind == "output_text" else None
        if type(annotations) is list:
            for raw in annotations:
                if len(out) >= MAX_CITATIONS:
                    return tuple(out)
                citation = responses_citation(raw, shift)
                if citation is not None:
                    out.append(citation)
        if kind in ("output_text", "refusal") and type(text) is str:
            shift += len(text)
    return tuple(out)


def _refusal(item: dict[str, Any]) -> str:
    return "".join(_texts(item.get("content"), "refusal", "refusal"))


def _reasoning_text(item: dict[str, Any]) -> str:
    summary = _texts(item.get("summary"), "summary_text")
    if summary:
        return "\n\n".join(summary)
    return "".join(_texts(item.get("content"), "reasoning_text"))


def _clean_items(items: list[Any], limit: int, announced: list[str]) -> list[dict[str, Any]]:
    """The output items of a response, checked (and normalised) in place.

    Messages, reasoning and function calls must have fields of the right types; a call's id
    is replaced when unusable (by the one its stream announced, when there was one) and its
    name cut to length. Other item types are kept as they are, for replay.
    """
    if len(items) > limit:
        raise _too_many(f"{len(items):,} output items", limit)
    calls = 0
    for item in items:
        if type(item) is not dict:
            raise Malformed("an output item is not a JSON object")
        kind = item.get("type")
        if type(kind) is not str:
            raise Malformed("an output item has no type")
        if kind == "message":
            _check_parts(item, "content", limit, ("output_text", "refusal"))
        elif kind == "reasoning":
            _check_parts(item, "summary", limit, ("summary_text",))
            if item.get("content") is not None:
                _check_parts(item, "content", limit, ("reasoning_text",))
            encrypted = item.get("encrypted_content")
            if encrypted is not None and type(encrypted) is not str:
                raise Malformed("encrypted_content is not a string")
        elif kind == "function_call":
            call_id = item.get("call_id")
            if calls < len(announced) and read_call_id(call_id) is not call_id:
                item["call_id"] = announced[calls]  # unusable: the one the stream announced
            else:
                item["call_id"] = read_call_id(call_id)
            calls += 1
            item["name"] = read_name(item.get("name"), "function_call name")
            arguments = item.get("arguments")
            if arguments is None:
                item["arguments"] = ""
            elif type(arguments) is dict:
                item["arguments"] = dumps(arguments)
            elif type(arguments) is not str:
                raise Malformed("function_call arguments are not a string")
    return items


def _check_parts(item: dict[str, Any], field: str, limit: int, texts: tuple[str, ...]) -> None:
    parts = item.get(field)
    if parts is None:
        return
    if type(parts) is not list:
        raise Malformed(f"{item['type']} {field} is not a list")
    if len(parts) > limit:
        raise _too_many(f"{len(parts):,} parts in one {item['type']} item", limit)
    for part in parts:
        if type(part) is not dict:
            raise Malformed(f"a {item['type']} {field} part is not a JSON object")
        kind = part.get("type")
        if kind in texts:
            key = "refusal" if kind == "refusal" else "text"
            read_str(part.get(key), f"{kind} {key}")


def _too_many(what: str, limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"the response has {what}, over the limit of {limit:,} (max_blocks)")


def _failure(data: dict[str, Any]) -> dict[str, Any]:
    """The error body of a failed response (``{"error": {...}}``)."""
    error = data.get("error")
    if type(error) is not dict:
        error = {"message": "the response failed", "code": "server_error"}
    return {"error": error}


def _usage(raw: Any) -> Usage:
    if raw is None:
        raw = {}
    elif type(raw) is not dict:
        raise Malformed("usage is not a JSON object")
    inputs = raw.get("input_tokens_details") or {}
    outputs = raw.get("output_tokens_details") or {}
    if type(inputs) is not dict or type(outputs) is not dict:
        raise Malformed("usage details are not JSON objects")
    total = read_count(raw.get("input_tokens"), "usage.input_tokens")
    cached = read_count(inputs.get("cached_tokens"), "usage.input_tokens_details.cached_tokens")
    written = read_count(
        inputs.get("cache_write_tokens"), "usage.input_tokens_details.cache_write_tokens"
    )
    output = read_count(raw.get("output_tokens"), "usage.output_tokens")
    reasoning = read_count(
        outputs.get("reasoning_tokens"), "usage.output_tokens_details.reasoning_tokens"
    )
    return _build(
        Usage,
        {
            "input_tokens": max(total - cached - written, 0),
            "output_tokens": output,
            "cache_read_tokens": cached,
            "cache_write_tokens": written,
            "reasoning_tokens": min(reasoning, output),
        },
    )


def _response(
    provider: OpenAIResponsesProvider,
    items: list[dict[str, Any]],
    data: dict[str, Any],
    request_id: str | None,
) -> ModelResponse:
    """The turn of a finished response (``data``: its JSON object, ``items``: its checked
    output)."""
    status = data.get("status")
    parts = _parts(items)
    refusal = "".join(_refusal(item) for item in items if item.get("type") == "message")
    calls = any(part.kind == "tool_call" for part in parts)
    raw_stop: str | None
    stop_details: dict[str, Any] | None = None
    if status == "incomplete":
        details = data.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        raw_stop = short(reason) or "incomplete"
        stop = _INCOMPLETE.get(raw_stop, StopReason.UNKNOWN)
        if stop is StopReason.REFUSAL:
            stop_details = {"type": "refusal", "category": raw_stop, "explanation": None}
    elif status in (None, "completed"):
        raw_stop = "completed"
        stop = StopReason.TOOL_USE if calls else StopReason.END_TURN
    elif status in _UNFINISHED:
        raise ResponseInvalid(
            f"the response is {status!r}, not finished: background mode is not supported "
            "(leave out background=True; the provider waits for each answer)",
            provider=provider.name,
            request_id=request_id,
            transient=False,  # asking again would start another background response
        )
    else:
        raise ResponseInvalid(
            f"the response is {short(status, 64) or 'in an unknown state'!r}, not finished",
            provider=provider.name,
            request_id=request_id,
        )
    if refusal and stop is not StopReason.MAX_TOKENS:
        stop = StopReason.REFUSAL
        stop_details = {"type": "refusal", "category": None, "explanation": refusal}
    if not any(p.kind != "thinking" for p in parts) and stop not in _MAY_BE_EMPTY:
        raise ResponseInvalid(
            f"the model returned an empty turn (status {short(status, 64)!r})",
            provider=provider.name,
            request_id=request_id,
        )
    model = short(data.get("model")) or provider.model
    response_id = short(data.get("id"))
    raw: dict[str, Any] = {"id": response_id, "output": items}
    if provider.store:
        raw["stored"] = data.get("store") is not False
    origin = _build(Origin, {"provider": provider.name, "api": API, "model": model, "raw": raw})
    # Every string in it came through the checked decoding (loads, or a stream's frames
    # scrubbed and its deltas joined), so the run need not walk the items again.
    vouch(origin)
    provider._remember(origin, parts)
    return _build(
        ModelResponse,
        {
            "content": parts,
            "stop_reason": stop,
            "usage": _usage(data.get("usage")),
            "model": model,
            "provider": provider.name,
            "raw_stop_reason": raw_stop,
            "origin": origin,
            "stop_details": stop_details,
            "response_id": response_id,
        },
    )


# -- streaming ------------------------------------------------------------------------------


class _Item:
    """One output item being streamed."""

    __slots__ = (
        "annotations",
        "arguments",
        "call_id",
        "chunks",
        "done",
        "ends",
        "start",
        "summary",
    )

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.call_id = ""
        self.chunks: list[str] = []
        self.annotations: list[Any] = []  # a message's, as streamed (the first ones)
        self.ends: list[int] = []  # the lengths of a message's finished text parts
        self.summary = -1  # the summary part being streamed
        self.done: dict[str, Any] | None = None
        self.arguments: _Block | None = None  # a call's, once a delta needed joining

    def finish(self) -> dict[str, Any]:
        """The item as the stream built it (when no ``output_item.done`` came)."""
        if self.done is not None:
            return self.done
        item = dict(self.start)
        kind = item.get("type")
        if kind == "function_call" and self.chunks:
            item["arguments"] = "".join(self.chunks)
        elif kind == "message" and self.chunks:
            text: dict[str, Any] = {"type": "output_text", "text": "".join(self.chunks)}
            if self.annotations:
                text["annotations"] = self.annotations
            item["content"] = [text]
        return item


class _Block:
    """Where a high surrogate ending one delta waits for the next delta of the same block,
    which may start with the low half of its pair (:class:`fanloop._unicode.Joiner`).

    One for the answer's text (a message's ``output_text`` and ``refusal`` parts, one part
    after another), one for thinking (summary parts, ``reasoning_text`` parts), one per
    function call: text and thinking deltas carry no index, so a part's held half is let go
    (as U+FFFD) when a delta of another part comes, keeping the deltas in order. ``at`` is
    the block's place: its ``output_index`` first, then the part.
    """

    __slots__ = ("at", "joiner", "kind")

    def __init__(self, kind: str, at: tuple[Any, ...] = ()) -> None:
        self.kind = kind  # "text", "thinking" or "call"
        self.at = at
        self.joiner = Joiner()


# Events that only say where the stream is (nothing a user sees, nothing to keep).
_QUIET = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.refusal.done",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
    }
)


# Hosted-tool progress events, by the event type before its last dot: the tool's kind and
# what goes before the status (``response.code_interpreter_call_code.delta``: "code_delta").
_PROGRESS: dict[str, tuple[str, str]] = {
    "response.web_search_call": ("web_search", ""),
    "response.file_search_call": ("file_search", ""),
    "response.code_interpreter_call": ("code_interpreter", ""),
    "response.code_interpreter_call_code": ("code_interpreter", "code_"),
    "response.image_generation_call": ("image_generation", ""),
    "response.mcp_call": ("mcp", ""),
    "response.mcp_call_arguments": ("mcp", "arguments_"),
    "response.mcp_list_tools": ("mcp", "list_tools_"),
}
# The small values a progress event may carry into HostedToolProgress.detail (not the
# base64 of a partial image: its index says enough).
_DETAIL = ("delta", "code", "arguments", "partial_image_index", "query")


class _StreamParser:
    """Decodes the event stream of one Responses API response."""

    __slots__ = (
        "_final",
        "_holding",
        "_items",
        "_max",
        "_provider",
        "_request_id",
        "_text",
        "_thinking",
        "done",
    )

    def __init__(self, provider: OpenAIResponsesProvider, request_id: str | None) -> None:
        self._provider = provider
        self._request_id = request_id
        self._max = provider.limits.max_blocks
        self._items: dict[int, _Item] = {}
        self._final: dict[str, Any] | None = None
        self._text = _Block("text")
        self._thinking = _Block("thinking")
        self._holding: dict[int, _Block] = {}  # the blocks holding half a pair back, by id
        self.done = False

    def feed(self, event: bytes, data: bytes) -> tuple[StreamDelta, ...] | StreamDelta | None:
        if data == b"[DONE]":  # not the Responses API's, but some compatible servers send it
            return None
        obj = _load_frame(data)
        # A surrogate escape (rare): a delta's text goes through its block's joiner, every
        # other string of the event is made valid as it is.
        odd = 92 in data and may_escape_surrogates(data)  # 92: a backslash
        kind = obj.get("type")  # AttributeError (malformed) unless a JSON object
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            text = obj["delta"]
            if type(text) is not str:
                raise Malformed(f"{kind} without text")
            index = self._index(obj)
            item = self._items.get(index)
            if odd or self._holding:
                return self._joined(self._text, (index, obj.get("content_index")), text, item)
            if item is not None:
                item.chunks.append(text)
            return TextDelta(text) if text else None
        if kind == "response.function_call_arguments.delta":
            fragment = obj["delta"]
            index = self._index(obj)
            item = self._items.get(index)
            if type(fragment) is not str or item is None or not item.call_id:
                raise Malformed("function_call_arguments.delta not in a started function call")
            if odd or (item.arguments is not None and item.arguments.joiner.held):
                if item.arguments is None:
                    item.arguments = _Block("call", (index,))
                return self._joined(item.arguments, (index,), fragment, item)
            item.chunks.append(fragment)
            return ToolCallDelta(item.call_id, fragment, index) if fragment else None
        if kind == "response.reasoning_summary_text.delta":
            return self._thinking_delta(obj, obj.get("summary_index"), odd)
        if kind == "response.reasoning_text.delta":
            return self._thinking_delta(obj, None, odd)
        if odd:
            obj = scrub_json(obj)
        if kind == "response.output_item.added":
            return self._added(obj)
        if kind == "response.output_item.done":
            item = self._item(obj)
            done = obj["item"]
            if type(done) is not dict:
                raise Malformed("output_item.done without an item")
            ended = self._ended(obj) if self._holding else ()
            if item is None:  # an item announced only when done
                started = self._added(obj)
                self._items[self._index(obj)].done = done
                return (*ended, started) if started is not None else ended
            item.done = done
            return ended or None
        if kind == "response.output_text.done" or kind == "response.refusal.done":
            at = obj.get("output_index")
            item = self._items.get(at) if type(at) is int else None
            text = obj.get("refusal" if kind == "response.refusal.done" else "text")
            if item is not None and type(text) is str and len(item.ends) < self._max:
                item.ends.append(len(text))
        if kind in _QUIET:
            return (self._ended(obj) or None) if self._holding else None
        if kind == "response.output_text.annotation.added":
            return self._annotation(obj)
        if kind == "response.completed" or kind == "response.incomplete":
            final = obj["response"]
            if type(final) is not dict:
                raise Malformed(f"{kind} without a response object")
            self._final = final
            self.done = True
            return tuple(self._release(*self._holding.values())) or None
        if kind == "response.failed":
            final = obj.get("response")
            raise stream_error(
                _failure(final if type(final) is dict else {}),
                provider=self._provider.name,
                request_id=self._request_id,
                size=len(data),
            )
        if kind == "error" or (kind is None and obj.get("error")):
            raise stream_error(
                obj, provider=self._provider.name, request_id=self._request_id, size=len(data)
            )
        if type(kind) is str:
            head, _, status = kind.rpartition(".")
            tool = _PROGRESS.get(head)
            if tool is not None:
                name, prefix = tool
                return progress(name, obj.get("item_id"), prefix + status, obj, _DETAIL)
        return None  # event types newer than this code

    def _annotation(self, obj: dict[str, Any]) -> CitationAdded | None:
        """A citation streamed for a message's text (kept on the item, when the final
        response has no output to take it from)."""
        index: Any = obj.get("output_index")
        item = self._items.get(index) if type(index) is int else None
        raw = obj.get("annotation")
        if item is None or len(item.annotations) >= MAX_CITATIONS:
            return None
        part = obj.get("content_index")
        shift = sum(item.ends[:part]) if type(part) is int and part > 0 else 0
        citation = responses_citation(raw, shift)
        if citation is None:
            return None
        # Kept with its offsets from the start of the item's whole text, as finish() joins
        # the parts into one.
        item.annotations.append(responses_wire(citation) or citation.raw)
        return CitationAdded(citation, index)

    def _index(self, obj: dict[str, Any]) -> int:
        index = obj["output_index"]
        if type(index) is not int or not 0 <= index <= _MAX_INDEX:
            raise Malformed("an output_index that is not a small integer")
        return index

    def _item(self, obj: dict[str, Any]) -> _Item | None:
        return self._items.get(self._index(obj))

    def _added(self, obj: dict[str, Any]) -> StreamDelta | None:
        index = self._index(obj)
        start = obj["item"]
        if type(start) is not dict:
            raise Malformed("output_item.added without an item")
        items = self._items
        if index in items:
            raise Malformed(f"output item {index} added twice")
        if len(items) >= self._max:
            raise _too_many(f"over {self._max:,} output items", self._max)
        item = items[index] = _Item(start)
        if start.get("type") != "function_call":
            return None
        item.call_id = read_call_id(start.get("call_id"))
        name = read_name(start.get("name"), "function_call name")
        if not name:
            raise Malformed("a function call without a name")
        arguments = start.get("arguments")
        if type(arguments) is str and arguments:
            item.chunks.append(arguments)
        return ToolCallStarted(item.call_id, name, index)

    def _thinking_delta(
        self, obj: dict[str, Any], summary: Any, odd: bool
    ) -> tuple[StreamDelta, ...] | StreamDelta | None:
        text = obj["delta"]
        if type(text) is not str:
            raise Malformed("a reasoning delta without text")
        index = self._index(obj)
        item = self._items.get(index)
        if not text:
            return None
        if summary is not None and item is not None:
            if type(summary) is not int or not 0 <= summary <= _MAX_INDEX:
                raise Malformed("a summary_index that is not a small integer")
            if summary != item.summary:
                first = item.summary < 0
                item.summary = summary
                if not first:  # the summaries of one item are joined by a blank line
                    text = "\n\n" + text
        if odd or self._holding:
            part = ("summary", summary) if summary is not None else obj.get("content_index")
            return self._joined(self._thinking, (index, part), text, item)
        return ThinkingDelta(text)

    # -- valid Unicode (the rare path: a surrogate escape, or half a pair held back) ---------

    def _joined(
        self, block: _Block, at: tuple[Any, ...], text: str, item: _Item | None
    ) -> tuple[StreamDelta, ...]:
        """The deltas of ``text``, a delta of the block at ``at``, made valid Unicode (after
        the U+FFFD of another part's held half, when the block was holding one)."""
        joiner = block.joiner
        out = self._release(block) if joiner.held and block.at != at else []
        block.at = at
        text = joiner.push(text)
        if joiner.held:
            self._holding[id(block)] = block
        else:
            self._holding.pop(id(block), None)
        if text:
            out.append(self._delta(block, text, item))
        return tuple(out)

    def _delta(self, block: _Block, text: str, item: _Item | None) -> StreamDelta:
        if block.kind == "thinking":
            return ThinkingDelta(text)
        if item is not None:
            item.chunks.append(text)
            if block.kind == "call":  # a call's block always has its item
                return ToolCallDelta(item.call_id, text, block.at[0])
        return TextDelta(text)

    def _release(self, *blocks: _Block) -> list[StreamDelta]:
        """The deltas of what ``blocks`` hold (U+FFFD each): their blocks ended."""
        out: list[StreamDelta] = []
        for block in blocks:
            self._holding.pop(id(block), None)
            if rest := block.joiner.flush():
                out.append(self._delta(block, rest, self._items.get(block.at[0])))
        return out

    def _ended(self, obj: dict[str, Any]) -> tuple[StreamDelta, ...]:
        """The deltas of what the blocks of the item ``obj`` names still hold: the event
        ends the item, or one of its parts (or starts the next part)."""
        index = obj.get("output_index")
        return tuple(self._release(*(b for b in self._holding.values() if b.at[0] == index)))

    def finish(self) -> ModelResponse:
        final = self._final
        if not self.done or final is None:
            raise StreamIncomplete(
                "the response stream ended before response.completed",
                provider=self._provider.name,
                request_id=self._request_id,
            )
        streamed = [self._items[i] for i in sorted(self._items)]
        output = final.get("output")
        items = output if type(output) is list and output else [i.finish() for i in streamed]
        # A call the server sent without a usable id keeps the one its deltas went out with.
        announced = [item.call_id for item in streamed if item.call_id]
        cleaned = _clean_items(items, self._max, announced)
        return _response(self._provider, cleaned, final, self._request_id)
