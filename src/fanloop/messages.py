"""Provider-independent conversation data: messages and their parts.

Data only, no I/O. Every type is a frozen pydantic model, so messages can be shared between
runs, hashed into sets, serialised to JSON and validated back::

    >>> msg = Message.user("hello")
    >>> msg.text
    'hello'
    >>> Message.model_validate_json(msg.model_dump_json()) == msg
    True

Tool results travel to the model in a ``user`` message, in the order of the calls that asked
for them.

A user message may also carry images (:class:`ImagePart`) and PDF documents
(:class:`DocumentPart`), and so may a tool result (``ToolResultPart.parts``); both providers send
them natively. Their bytes are capped (:data:`MAX_PART_BYTES`) and serialised as base64 in JSON.
"""

from __future__ import annotations

import binascii
import weakref
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._slots import register as register_slots
from ._unicode import vouch

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "INVALID_ARGUMENTS_KEY",
    "MAX_CITATIONS",
    "MAX_CITATION_CHARS",
    "MAX_PART_BYTES",
    "MAX_RESULT_PARTS",
    "MAX_URL_CHARS",
    "Citation",
    "DocumentPart",
    "ImagePart",
    "MediaPart",
    "Message",
    "Origin",
    "Part",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
]

Role: TypeAlias = Literal["user", "assistant"]

INVALID_ARGUMENTS_KEY = "__fanloop_invalid_json__"
"""A provider that receives tool-call arguments that are not a JSON object sets
``ToolCallPart.arguments`` to ``{INVALID_ARGUMENTS_KEY: raw_text}``; the fan-out answers such a
call with an error result that quotes the text, so the model can correct itself."""

# defer_build: a model's validator is built when it first validates or dumps, not by
# ``import fanloop`` (the hot paths make parts with ``_build``, which needs none).
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)

M = TypeVar("M", bound=BaseModel)


def _build(cls: type[M], values: dict[str, Any], fields_set: set[str] | None = None) -> M:
    """Make a model from values that are already valid, skipping validation.

    For fanloop's hot paths only: ``values`` must name every field, with valid values, in
    the order the class declares them. It is about twice as fast as ``model_construct``
    (which also fills defaults). ``fields_set``: the fields counted as set
    (``model_fields_set``), a frozen class's set shared by every instance made with it;
    by default the fields ``values`` names. (``object``'s own ``__new__`` and ``__setattr__``,
    held in globals: looked up on a class each time they cost a third of the call.)
    """
    model = _new(cls)
    _setattr(model, "__dict__", values)
    fields = fields_set or _ALL_FIELDS.get(cls, _UNKNOWN)
    if fields is _UNKNOWN:
        fields = _ALL_FIELDS[cls] = _all_fields(cls)
    if fields is None:  # not frozen: a set of its own, which it may add to
        fields = set(values)
    elif fields_set is None and len(fields) != len(values):  # some fields left to defaults
        key = (cls, *values)
        fields = _SOME_FIELDS.get(key)
        if fields is None:
            if len(_SOME_FIELDS) >= 1024:
                _SOME_FIELDS.clear()
            fields = _SOME_FIELDS[key] = set(values)
    _setattr(model, "__pydantic_fields_set__", fields)
    _setattr(model, "__pydantic_extra__", None)
    _setattr(model, "__pydantic_private__", None)
    return model


_new = object.__new__  # (no fanloop message class defines its own __new__)
_setattr = object.__setattr__


_ALL_FIELDS: dict[type[BaseModel], set[str] | None] = {}
"""Per frozen class, one set of all its field names, shared by every instance :func:`_build`
makes (a set per message was a fifth of a waiting run's memory). Frozen models never add to
it; ``model_copy`` copies it before updating."""


_SOME_FIELDS: dict[tuple[Any, ...], set[str]] = {}
"""The same for a frozen class built with some of its fields (the parsers leave defaults out):
one set per class and set of names given, not one per part or response."""
_UNKNOWN: Any = object()


def _all_fields(cls: type[BaseModel]) -> set[str] | None:
    return set(cls.model_fields) if cls.model_config.get("frozen") else None


MAX_CITATIONS = 256
"""The most citations one text part keeps; a provider keeps the first ones a server sends."""
MAX_CITATION_CHARS = 8192
"""The longest string field of a :class:`Citation` (a server's longer value is cut)."""
_MAX_CITATION_KEYS = 32
_MAX_OFFSET = 2**31 - 1


class Citation(BaseModel):
    """A source the model cited for the text part it is kept on (``TextPart.citations``).

    ``type`` is the provider's own kind: Anthropic's ``char_location``, ``page_location``,
    ``content_block_location``, ``web_search_result_location``, ``search_result_location``;
    OpenAI's ``url_citation``, ``file_citation``, ``container_file_citation``, ``file_path``.
    The other fields are filled where the provider gives them. ``start_index`` and
    ``end_index`` are offsets into the text part's text (OpenAI's annotations); an Anthropic
    citation supports its whole text block, and its place in the cited document (characters,
    pages, blocks) is in ``raw``. ``raw`` is the provider's own object, sent back with the
    turn when the conversation goes to the same API.

    ::

        for citation in result.citations:
            print(citation.type, citation.url or citation.document_title, citation.cited_text)
    """

    model_config = _FROZEN
    type: str = Field(max_length=64)
    url: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    title: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    cited_text: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    start_index: int | None = Field(default=None, ge=0, le=_MAX_OFFSET)
    end_index: int | None = Field(default=None, ge=0, le=_MAX_OFFSET)
    document_index: int | None = Field(default=None, ge=0, le=_MAX_OFFSET)
    document_title: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    file_id: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    filename: str | None = Field(default=None, max_length=MAX_CITATION_CHARS)
    raw: dict[str, Any] | None = None

    @field_validator("raw")
    @classmethod
    def _flat(cls, raw: dict[str, Any] | None) -> dict[str, Any] | None:
        if raw is not None and flat_citation(raw) is not raw:
            raise ValueError(
                f"a citation's raw object holds at most {_MAX_CITATION_KEYS} fields of "
                f"strings (at most {MAX_CITATION_CHARS} characters), numbers, booleans or null"
            )
        return raw


_SCALARS = (str, int, float, bool, type(None))


def flat_citation(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` itself when it is a small flat JSON object (every citation the providers
    document is one), else a copy keeping only its first small scalar fields.

    Never recurses into what a server sent: nested values are dropped, not walked.
    """
    if len(raw) <= _MAX_CITATION_KEYS and all(
        type(k) is str
        and type(v) in _SCALARS
        and (type(v) is not str or len(v) <= MAX_CITATION_CHARS)
        for k, v in raw.items()
    ):
        return raw
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if len(out) >= _MAX_CITATION_KEYS:
            break
        if (
            type(key) is str
            and type(value) in _SCALARS
            and (type(value) is not str or len(value) <= MAX_CITATION_CHARS)
        ):
            out[key] = value
    return out


class TextPart(BaseModel):
    """Plain text from the user or the model.

    ``citations`` holds the sources the model cited for this text (at most
    :data:`MAX_CITATIONS`), in the order they came.
    """

    model_config = _FROZEN
    kind: Literal["text"] = "text"
    text: str
    citations: tuple[Citation, ...] = Field(
        default=(), max_length=MAX_CITATIONS, exclude_if=lambda c: not c
    )


class ThinkingPart(BaseModel):
    """The model's reasoning. ``signature`` must be sent back unchanged with the turn.

    ``redacted`` holds an opaque encrypted block the provider asked to be replayed as is.
    """

    model_config = _FROZEN
    kind: Literal["thinking"] = "thinking"
    text: str
    signature: str | None = None
    redacted: str | None = None


class ToolCallPart(BaseModel):
    """The model asks for a tool to be called with ``arguments``."""

    model_config = _FROZEN
    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


MAX_PART_BYTES = 20 * 1024 * 1024
"""The most bytes one image or document may hold (20 MiB), and the most media one tool result
may carry in total. More is a ``ValueError`` (a ``pydantic.ValidationError``) that says so."""
MAX_URL_CHARS = 8192
"""The longest URL an image or document may point to."""
MAX_RESULT_PARTS = 20
"""The most images and documents one tool result may carry."""
MAX_TITLE_CHARS = 256
"""The longest document title."""

ImageMediaType: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
IMAGE_MEDIA_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types both providers accept."""

_MEDIA = ConfigDict(
    frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64", defer_build=True
)
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(data: bytes) -> str | None:
    """The image type ``data`` starts like (PNG, JPEG, GIF, WebP), or ``None``."""
    for magic, media_type in _SIGNATURES:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _size(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n and n % mib == 0 else f"{n:,} bytes"


def _check_data(data: bytes | None, what: str) -> bytes | None:
    if data is not None and len(data) > MAX_PART_BYTES:
        raise ValueError(
            f"the {what} is {_size(len(data))}, over the limit of {_size(MAX_PART_BYTES)} for "
            f"one part (fanloop.messages.MAX_PART_BYTES); resize or compress it, or split it"
        )
    return data


def _check_url(url: str | None) -> str | None:
    if url is None:
        return None
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"the URL is {len(url):,} characters, over the limit of {MAX_URL_CHARS}")
    if not url.startswith(("https://", "http://")) or not url.isprintable() or " " in url:
        raise ValueError(
            "the URL must be an http:// or https:// address without spaces or control "
            "characters (pass local files as data=)"
        )
    return url


def _from_data_url(values: Any, what: str) -> Any:
    """``url="data:<type>;base64,<payload>"`` becomes ``data=`` and ``media_type=``."""
    if not isinstance(values, dict):
        return values
    url = values.get("url")
    if not isinstance(url, str) or url[:5].lower() != "data:":
        return values
    head, sep, payload = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if not sep or encoding.lower() != "base64":
        raise ValueError(f"a data: URL for the {what} must be base64 (data:<type>;base64,...)")
    if len(payload) > (MAX_PART_BYTES + 2) // 3 * 4 + 4:
        raise ValueError(
            f"the {what} in the data: URL is about {_size(len(payload) * 3 // 4)}, over the "
            f"limit of {_size(MAX_PART_BYTES)} for one part (fanloop.messages.MAX_PART_BYTES)"
        )
    try:
        data = binascii.a2b_base64(payload.strip(), strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"the data: URL of the {what} is not valid base64: {exc}") from None
    out = {k: v for k, v in values.items() if k != "url"}
    if values.get("data") is not None:
        raise ValueError(f"give the {what} as data= or url=, not both")
    out["data"] = data
    if media_type and out.get("media_type") is None:
        out["media_type"] = media_type.lower()
    return out


class _Bytes:
    """How the bytes of a media part show in a repr: their count, never their content."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"<{self.n:,} bytes>"


class ImagePart(BaseModel):
    """An image for the model: its bytes (``data``) or an address it can be fetched from.

    ::

        ImagePart(data=Path("chart.png").read_bytes())           # media_type from the bytes
        ImagePart(data=jpeg_bytes, media_type="image/jpeg")
        ImagePart(url="https://example.com/cat.webp")

    Exactly one of ``data`` and ``url`` is given. ``media_type`` is one of
    :data:`IMAGE_MEDIA_TYPES`; with ``data`` it may be left out and is then read from the
    bytes' signature, and it must agree with the signature when the bytes have a known one.
    ``data`` holds at most :data:`MAX_PART_BYTES`; a ``url`` is ``http(s)://`` (the provider
    fetches it, not fanloop) or a ``data:`` URL (turned into ``data``). In JSON (sessions),
    ``data`` is base64.
    """

    model_config = _MEDIA
    kind: Literal["image"] = "image"
    data: bytes | None = None
    url: str | None = None
    media_type: ImageMediaType | None = None

    @model_validator(mode="before")
    @classmethod
    def _data_url(cls, values: Any) -> Any:
        return _from_data_url(values, "image")

    @field_validator("data")
    @classmethod
    def _data_size(cls, data: bytes | None) -> bytes | None:
        return _check_data(data, "image")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return _check_url(url)

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        data = self.data
        if (data is None) == (self.url is None):
            raise ValueError("an ImagePart needs exactly one of data= and url=")
        if data is not None:
            sniffed = sniff_image(data)
            if self.media_type is None:
                if sniffed is None:
                    raise ValueError(
                        "the image's type cannot be told from its bytes: pass media_type= "
                        f"(one of {', '.join(IMAGE_MEDIA_TYPES)})"
                    )
                object.__setattr__(self, "media_type", sniffed)
            elif sniffed is not None and sniffed != self.media_type:
                raise ValueError(
                    f"the image data is {sniffed}, but media_type says {self.media_type}"
                )
        return self

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, _Bytes(len(value)) if name == "data" and value is not None else value


class DocumentPart(BaseModel):
    """A PDF document for the model: its bytes (``data``) or an address to fetch it from.

    ::

        DocumentPart(data=Path("report.pdf").read_bytes(), title="Q3 report")
        DocumentPart(url="https://example.com/paper.pdf")       # Anthropic only

    Exactly one of ``data`` and ``url``; ``data`` holds at most :data:`MAX_PART_BYTES`.
    ``title`` (at most 256 characters) names the document to the model (Anthropic's ``title``,
    OpenAI's ``filename``). OpenAI Chat Completions takes documents as data only: a
    ``url`` document sent there is a :class:`~fanloop.errors.ConfigurationError`.
    """

    model_config = _MEDIA
    kind: Literal["document"] = "document"
    data: bytes | None = None
    url: str | None = None
    media_type: Literal["application/pdf"] = "application/pdf"
    title: str | None = Field(default=None, max_length=MAX_TITLE_CHARS)

    @model_validator(mode="before")
    @classmethod
    def _data_url(cls, values: Any) -> Any:
        return _from_data_url(values, "document")

    @field_validator("data")
    @classmethod
    def _data_size(cls, data: bytes | None) -> bytes | None:
        return _check_data(data, "document")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return _check_url(url)

    @model_validator(mode="after")
    def _one_source(self) -> DocumentPart:
        if (self.data is None) == (self.url is None):
            raise ValueError("a DocumentPart needs exactly one of data= and url=")
        return self

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, _Bytes(len(value)) if name == "data" and value is not None else value


MediaPart: TypeAlias = Annotated[ImagePart | DocumentPart, Field(discriminator="kind")]
"""An image or a document."""

_BASE64: dict[int, tuple[weakref.ref[Any], str]] = {}


def media_base64(part: ImagePart | DocumentPart) -> str:
    """The standard base64 text of ``part.data`` (which must be set), computed once per part
    and kept while the part lives.

    Computing it costs about 2 ms per MiB: code that makes parts in a worker thread (the MCP
    tools do) calls this there, so the providers find it ready on the event loop.
    """
    key = id(part)
    hit = _BASE64.get(key)
    if hit is not None and hit[0]() is part:
        return hit[1]
    data = part.data
    if data is None:
        raise ValueError(f"this {part.kind} part has a url, not data")
    text = binascii.b2a_base64(data, newline=False).decode("ascii")

    def forget(ref: weakref.ref[Any], key: int = key) -> None:
        entry = _BASE64.get(key)
        if entry is not None and entry[0] is ref:
            del _BASE64[key]

    _BASE64[key] = (weakref.ref(part, forget), text)
    return text


class ToolResultPart(BaseModel):
    """What a tool call produced, addressed to the call by ``call_id``.

    ``parts`` carries images and documents the tool returned beside its text (at most
    :data:`MAX_RESULT_PARTS`, holding at most :data:`MAX_PART_BYTES` together).
    """

    model_config = _FROZEN
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    content: str
    is_error: bool = False
    parts: tuple[MediaPart, ...] = ()

    @field_validator("parts")
    @classmethod
    def _parts_size(cls, parts: tuple[ImagePart | DocumentPart, ...]) -> Any:
        check_result_parts(parts)
        return parts


def check_result_parts(parts: tuple[Any, ...]) -> None:
    """Raise ``ValueError`` unless ``parts`` fit in one tool result (count and total bytes)."""
    if len(parts) > MAX_RESULT_PARTS:
        raise ValueError(
            f"a tool result carries {len(parts)} images or documents, over the limit of "
            f"{MAX_RESULT_PARTS} (fanloop.messages.MAX_RESULT_PARTS)"
        )
    total = sum(len(p.data) for p in parts if getattr(p, "data", None) is not None)
    if total > MAX_PART_BYTES:
        raise ValueError(
            f"a tool result carries {_size(total)} of images and documents, over the limit of "
            f"{_size(MAX_PART_BYTES)} (fanloop.messages.MAX_PART_BYTES)"
        )


Part: TypeAlias = Annotated[
    TextPart | ThinkingPart | ToolCallPart | ToolResultPart | ImagePart | DocumentPart,
    Field(discriminator="kind"),
]


class Origin(BaseModel):
    """The provider's own wire form of an assistant turn, for exact replay.

    A provider that sets ``ModelResponse.origin`` may, when a later request contains a message
    with a matching ``provider`` and ``api``, send ``raw`` instead of translating the parts.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)
    provider: str
    api: str
    model: str
    raw: Any = None


class Message(BaseModel):
    """One message of a conversation."""

    # Not fields: what fanloop has worked out about this very object, kept on it (a side
    # table entry per message was two more objects per message for the collector): whether
    # its text is known to be valid Unicode, and its wire text as a provider last rendered it.
    # Never copied, pickled or compared.
    __slots__ = ("__fanloop_valid__", "__fanloop_wire__")

    model_config = _FROZEN
    role: Role
    content: tuple[Part, ...]
    origin: Origin | None = None

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text part."""
        message = _build(
            cls,
            {
                "role": "user",
                "content": (_build(TextPart, {"kind": "text", "text": text, "citations": ()}),),
                "origin": None,
            },
        )
        if type(text) is str and text.isascii():  # (a constant-time test) valid as it stands
            vouch(message)
        return _unrendered(message)

    @classmethod
    def assistant(cls, *parts: TextPart | ThinkingPart | ToolCallPart | str) -> Message:
        """An assistant message; plain strings become text parts."""
        return cls(
            role="assistant",
            content=tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts),
        )

    @classmethod
    def tool_results(cls, results: Iterable[ToolResultPart]) -> Message:
        """The user message that carries tool results back to the model."""
        content = tuple(results)
        message = _build(cls, {"role": "user", "content": content, "origin": None})
        for part in content:  # ASCII text only (constant-time tests): valid as it stands
            if not (
                type(part) is ToolResultPart
                and not part.parts
                and type(part.content) is str
                and part.content.isascii()
                and type(part.call_id) is str
                and part.call_id.isascii()
            ):
                break
        else:
            vouch(message)
        return _unrendered(message)

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def citations(self) -> tuple[Citation, ...]:
        """The citations of the text parts, in order."""
        return tuple(c for p in self.content if isinstance(p, TextPart) for c in p.citations)

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The tool calls in this message, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolCallPart))

    @property
    def tool_results_parts(self) -> tuple[ToolResultPart, ...]:
        """The tool results in this message, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolResultPart))


register_slots(Message)

_set_wire = Message.__dict__["__fanloop_wire__"].__set__
_UNRENDERED = (None, "")
"""The wire memo of a message no provider has rendered yet (``providers._wire.MessageCache``
takes it for a miss, as it does an empty slot, whose read raises ``AttributeError``)."""


def _unrendered(message: Message) -> Message:
    """``message``, its wire memo filled with :data:`_UNRENDERED`: the messages a run makes are
    each rendered once, and a miss on a filled slot makes no exception (one per message)."""
    _set_wire(message, _UNRENDERED)
    return message
