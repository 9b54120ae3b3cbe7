"""How :class:`~fanloop.testing.FakeLLMServer` sends a scripted text part's citations on
each API: a citation whose ``raw`` is of that API's own kind is sent as it is; any other is
written in that API's form from its typed fields."""

from __future__ import annotations

from typing import Any

from ..messages import Citation
from ..providers._citations import ANTHROPIC_TYPES, responses_wire

__all__ = ["anthropic_citation", "chat_annotation", "responses_annotation"]


def anthropic_citation(citation: Citation) -> dict[str, Any]:
    """A text block citation: a web search result when it has a URL, else a place in a
    document (``char_location``)."""
    if citation.type in ANTHROPIC_TYPES and citation.raw:
        return citation.raw
    cited = citation.cited_text or ""
    if citation.url is not None:
        return {
            "type": "web_search_result_location",
            "url": citation.url,
            "title": citation.title,
            "cited_text": cited,
            "encrypted_index": "enc-fake-index",
        }
    return {
        "type": "char_location",
        "cited_text": cited,
        "document_index": citation.document_index or 0,
        "document_title": citation.document_title,
        "start_char_index": 0,
        "end_char_index": len(cited),
    }


def chat_annotation(citation: Citation, text: str) -> dict[str, Any]:
    """A Chat Completions ``url_citation`` annotation (the whole text when no offsets)."""
    start = citation.start_index or 0
    end = citation.end_index if citation.end_index is not None else len(text)
    return {
        "type": "url_citation",
        "url_citation": {
            "url": citation.url or "",
            "title": citation.title or "",
            "start_index": start,
            "end_index": end,
        },
    }


def responses_annotation(citation: Citation, text: str) -> dict[str, Any]:
    """An ``output_text`` annotation (a ``url_citation`` unless the citation is of one of
    the Responses API's own kinds)."""
    wire = responses_wire(citation)
    if wire is not None:
        return wire
    inner = chat_annotation(citation, text)["url_citation"]
    return {"type": "url_citation", **inner}
