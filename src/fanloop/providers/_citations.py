"""Citations and hosted-tool progress on each wire: what a server sends, made typed and small.

Everything here reads untrusted JSON without raising and without recursion: a field of the
wrong type is left out, a long string is cut, a nested value is dropped
(:func:`~fanloop.messages.flat_citation`).
"""

from __future__ import annotations

from typing import Any

from ..events import MAX_PROGRESS_CHARS, MAX_PROGRESS_DETAIL, HostedToolProgress
from ..messages import MAX_CITATION_CHARS, MAX_CITATIONS, Citation, _build, flat_citation

__all__ = [
    "ANTHROPIC_TYPES",
    "RESPONSES_TYPES",
    "anthropic_citation",
    "anthropic_citations",
    "chat_citation",
    "fit",
    "progress",
    "responses_citation",
    "responses_wire",
]

ANTHROPIC_TYPES = frozenset(
    {
        "char_location",
        "page_location",
        "content_block_location",
        "web_search_result_location",
        "search_result_location",
    }
)
"""The citation types the Messages API takes back on a text block."""
RESPONSES_TYPES = frozenset(
    {"url_citation", "file_citation", "container_file_citation", "file_path"}
)
"""The annotation types of the Responses API's ``output_text``."""

_MAX_OFFSET = 2**31 - 1


def _str(value: Any) -> str | None:
    if type(value) is not str:
        return None
    return value if len(value) <= MAX_CITATION_CHARS else value[:MAX_CITATION_CHARS]


def _int(value: Any, shift: int = 0) -> int | None:
    if type(value) is not int or not 0 <= value <= _MAX_OFFSET - shift:
        return None
    return value + shift


def _citation(raw: dict[str, Any], kind: str, **fields: Any) -> Citation:
    values: dict[str, Any] = {
        "type": kind[:64],
        "url": None,
        "title": None,
        "cited_text": None,
        "start_index": None,
        "end_index": None,
        "document_index": None,
        "document_title": None,
        "file_id": None,
        "filename": None,
    }
    values.update(fields)
    values["raw"] = flat_citation(raw)
    return _build(Citation, values)


def anthropic_citation(raw: Any) -> Citation | None:
    """A Messages API text citation (``None`` unless a JSON object with a ``type``)."""
    if type(raw) is not dict or type(kind := raw.get("type")) is not str:
        return None
    return _citation(
        raw,
        kind,
        url=_str(raw.get("url")) or _str(raw.get("source")),
        title=_str(raw.get("title")),
        cited_text=_str(raw.get("cited_text")),
        document_index=_int(raw.get("document_index", raw.get("search_result_index"))),
        document_title=_str(raw.get("document_title")),
        file_id=_str(raw.get("file_id")),
    )


def anthropic_citations(raw: Any) -> tuple[Citation, ...]:
    """The citations of a text block's ``citations`` list (the first :data:`MAX_CITATIONS`)."""
    if type(raw) is not list:
        return ()
    out: list[Citation] = []
    for item in raw:
        if len(out) >= MAX_CITATIONS:
            break
        citation = anthropic_citation(item)
        if citation is not None:
            out.append(citation)
    return tuple(out)


def chat_citation(raw: Any) -> Citation | None:
    """A Chat Completions annotation (``{"type": "url_citation", "url_citation": {...}}``)."""
    if type(raw) is not dict or type(kind := raw.get("type")) is not str:
        return None
    inner = raw.get(kind)
    if type(inner) is not dict:
        inner = raw  # some compatible servers put the fields beside "type"
    return _citation(
        {**inner, "type": kind} if inner is not raw else raw,
        kind,
        url=_str(inner.get("url")),
        title=_str(inner.get("title")),
        cited_text=_str(inner.get("content")),
        start_index=_int(inner.get("start_index")),
        end_index=_int(inner.get("end_index")),
    )


def responses_citation(raw: Any, shift: int = 0) -> Citation | None:
    """A Responses API ``output_text`` annotation; ``shift``: where the annotated content
    part starts in the text part (its offsets are moved by it)."""
    if type(raw) is not dict or type(kind := raw.get("type")) is not str:
        return None
    start = _int(raw.get("start_index"), shift)
    if start is None:
        start = _int(raw.get("index"), shift)  # file_citation / file_path: one position
    end = _int(raw.get("end_index"), shift)
    return _citation(
        raw,
        kind,
        url=_str(raw.get("url")),
        title=_str(raw.get("title")),
        start_index=start,
        end_index=end if end is not None else start,
        file_id=_str(raw.get("file_id")),
        filename=_str(raw.get("filename")),
    )


def responses_wire(citation: Citation, shift: int = 0) -> dict[str, Any] | None:
    """``citation`` as an ``output_text`` annotation of a content part starting at ``shift``
    in the text part, or ``None`` when it is not one of the Responses API's types."""
    raw = citation.raw
    if citation.type not in RESPONSES_TYPES or raw is None:
        return None
    out = dict(raw)
    for key, value in (("start_index", citation.start_index), ("end_index", citation.end_index)):
        if key in out and value is not None:
            out[key] = value - shift
    if "index" in out and citation.start_index is not None:
        out["index"] = citation.start_index - shift
    return out


def fit(citations: tuple[Citation, ...], length: int) -> tuple[Citation, ...]:
    """``citations`` of a text of ``length`` characters, each whose ``start_index`` and
    ``end_index`` are not ``0 <= start <= end <= length`` without them: the offsets a text
    part keeps always slice its own text."""
    out: list[Citation] = []
    for citation in citations:
        start, end = citation.start_index, citation.end_index
        if (start is not None or end is not None) and not (
            start is not None and end is not None and 0 <= start <= end <= length
        ):
            citation = citation.model_copy(update={"start_index": None, "end_index": None})
        out.append(citation)
    return tuple(out)


def _small(value: Any) -> Any:
    if type(value) is str:
        return value if len(value) <= MAX_PROGRESS_CHARS else value[:MAX_PROGRESS_CHARS]
    if type(value) in (int, float, bool) or value is None:
        return value
    return None


def progress(
    tool: str, call_id: Any, status: str, source: dict[str, Any], keys: tuple[str, ...] = ()
) -> HostedToolProgress:
    """A :class:`~fanloop.events.HostedToolProgress` with the small scalar values of
    ``source`` under ``keys`` (at most :data:`~fanloop.events.MAX_PROGRESS_DETAIL`)."""
    detail: dict[str, Any] = {}
    for key in keys[:MAX_PROGRESS_DETAIL]:
        value = _small(source.get(key))
        if value is not None:
            detail[key] = value
    call = call_id if type(call_id) is str and len(call_id) <= 256 else ""
    return HostedToolProgress(tool, call, status[:64], detail)
