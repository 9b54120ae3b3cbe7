"""The readable text of an HTML page, in one pass whose time is linear in the page's length.

The standard :class:`html.parser.HTMLParser` rescans the rest of the buffer whenever a construct
is left open (``<a`` without ``>``, ``<!--`` without ``-->``), so a hostile page takes time
quadratic in its size. This scanner never looks at a character twice for long: every step
consumes the text it examined, and a construct left open at the end of the page ends the scan
(as the HTML standard says: an unclosed tag or comment swallows the rest of the document). The
patterns are possessive, so a failed match cannot backtrack, and the passes over long runs of
text use the ``regex`` engine with ``concurrent=True``, which lets other threads run meanwhile.

Long work is still work: a caller in a worker thread passes a :class:`~._blocking.Stop` that
is checked every few hundred steps.
"""

from __future__ import annotations

import re
from html.entities import html5

import regex

from ._blocking import Stop

__all__ = ["html_to_text"]

_DROP = frozenset(
    {"script", "style", "noscript", "template", "svg", "title", "iframe", "canvas", "noembed",
     "noframes"}
)  # fmt: skip
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "ul",
    }
)  # fmt: skip
_LINE = frozenset({"br", "dd", "dt", "li", "tr"})  # start a line, no blank line around
# Elements whose content is text up to their end tag, not markup.
_RAW = frozenset({"script", "style", "xmp", "iframe", "noembed", "noframes", "title", "textarea"})
_ENTITY_TEXT = frozenset({"title", "textarea"})  # raw, but character references are decoded
_IN_HEAD = frozenset(
    {"base", "basefont", "bgsound", "link", "meta", "noscript", "script", "style", "template",
     "title"}
)  # fmt: skip

_MARKUP = re.compile(r"<[A-Za-z!/?]")  # where markup may start; any other "<" is text
# A whole start or end tag: name, then attributes where quoted values may hold ``>``.
_TAG = re.compile(r"<(/?)([A-Za-z][^\t\n\f\r />]*+)((?:[^>\"']++|\"[^\"]*+\"|'[^']*+')*+)>")
_RAW_END = {name: re.compile(rf"</{name}(?=[\t\n\f\r />])", re.IGNORECASE) for name in _RAW}
_CHARREF = regex.compile(r"&(?:#[xX]([0-9a-fA-F]++);?|#([0-9]++);?|([A-Za-z][A-Za-z0-9]{0,31}+;?))")
_SPACE = regex.compile(r"[\s\x1c-\x1f]++")  # what str.isspace (and re's \s) call space
_LINE_BREAK = regex.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # splitlines
_BLANK_LINES = regex.compile(r"\n{3,}+")
_MAX_TITLE = 4096  # characters of the title considered
_CHECK_EVERY = 256  # steps between two stop checks


def html_to_text(html: str, stop: Stop | None = None) -> tuple[str, str]:
    """The readable text of an HTML document and its title (scripts and styles dropped).

    Runs in time linear in ``len(html)``, whatever the markup.

    Args:
        html: the document.
        stop: checked every few hundred steps when given (for a caller in a worker thread).

    Raises:
        Stopped: ``stop`` was set or its deadline passed.

    Example:
        >>> html_to_text("<title>T</title><p>Hello <b>world</b></p><script>x()</script>")
        ('Hello world', 'T')
    """
    out = _Text()
    pos, end, steps = 0, len(html), 0
    while pos < end:
        steps += 1
        if stop is not None and steps % _CHECK_EVERY == 0:
            stop.check()
        found = _MARKUP.search(html, pos)
        if found is None:
            out.data(html[pos:])
            break
        lt = found.start()
        if lt > pos:
            out.data(html[pos:lt])
        pos = _markup(html, lt, out)
    lines = _LINE_BREAK.split("".join(out.parts), concurrent=True)
    text = "\n".join([line.strip() for line in lines])
    text = _BLANK_LINES.sub("\n\n", text, concurrent=True).strip()
    return text, " ".join("".join(out.title)[:_MAX_TITLE].split())


def _markup(html: str, lt: int, out: _Text) -> int:
    """Handle the markup starting at ``html[lt]``; return the position after it."""
    tag = _TAG.match(html, lt)
    if tag is not None:
        closing, name, attrs = tag[1], tag[2].lower(), tag[3]
        if closing:
            out.end(name)
            return tag.end()
        out.start(name)
        if attrs.endswith("/"):
            out.end(name)
            return tag.end()
        if name in _RAW:
            return _raw_text(html, tag.end(), name, out)
        return tag.end()
    after = html[lt + 1 : lt + 2]
    if html.startswith("<!--", lt):
        close = html.find("-->", lt + 4)
        return len(html) if close < 0 else close + 3
    if after in ("!", "?", "/"):  # doctype, CDATA, processing instruction, bogus end tag
        close = html.find(">", lt + 2)
        return len(html) if close < 0 else close + 1
    return len(html)  # a tag left open: it swallows the rest of the document


def _raw_text(html: str, start: int, name: str, out: _Text) -> int:
    found = _RAW_END[name].search(html, start)
    stop = len(html) if found is None else found.start()
    content = html[start:stop]
    if name == "title":
        out.title.append(_unescape(content))
    elif name in _ENTITY_TEXT:
        out.data(content)
    elif name not in _DROP:
        out.data(content, decode=False)
    return stop


class _Text:
    """Collects the readable text and the title from the scanner's events."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.title: list[str] = []
        self._drop = 0
        self._head = False
        self._pre = 0

    def start(self, tag: str) -> None:
        if tag == "head":
            self._head = True
        elif tag not in _IN_HEAD:  # <body>, or any content, ends the head (as browsers do)
            self._head = False
        if tag in _DROP:
            self._drop += 1
            return
        if self._drop or self._head:
            return
        if tag == "pre":
            self._pre += 1
        if tag in _BLOCK or tag in _LINE:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        if tag in ("td", "th"):
            self.parts.append(" ")

    def end(self, tag: str) -> None:
        if tag == "head":
            self._head = False
        if tag in _DROP:
            self._drop = max(self._drop - 1, 0)
            return
        if self._drop or self._head:
            return
        if tag == "pre":
            self._pre = max(self._pre - 1, 0)
        if tag in _BLOCK:
            self.parts.append("\n")

    def data(self, text: str, *, decode: bool = True) -> None:
        if self._head and not self._drop and text and not text.isspace():
            self._head = False  # text ends the head, as in browsers
        if self._drop or self._head:
            return
        if decode and "&" in text:
            text = _unescape(text)
        self.parts.append(text if self._pre else _SPACE.sub(" ", text, concurrent=True))


def _unescape(text: str) -> str:
    """Decode character references; numbers too large for a character become U+FFFD."""
    return str(_CHARREF.sub(_charref, text, concurrent=True))


def _charref(match: regex.Match[str]) -> str:
    whole: str = match[0]
    hexa: str | None = match[1]
    name: str | None = match[3]
    if name is None:
        digits: str = hexa if hexa is not None else match[2]
        if len(digits.lstrip("0")) > 8:
            return "\ufffd"
        return _codepoint(int(digits, 16 if hexa is not None else 10))
    if name in html5:
        return html5[name]
    for cut in range(len(name.rstrip(";")), 1, -1):  # legacy names without ";": "&ampx"
        if name[:cut] in html5:
            return html5[name[:cut]] + name[cut:]
    return whole


def _codepoint(number: int) -> str:
    if 0x80 <= number <= 0x9F:  # the C1 range means Windows-1252, as browsers read it
        return bytes([number]).decode("cp1252", errors="replace")
    if number == 0 or 0xD800 <= number <= 0xDFFF or number > 0x10FFFF:
        return "\ufffd"
    return chr(number)
