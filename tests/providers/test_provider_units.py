"""Unit tests of the wire helpers: SSE decoding, Retry-After, error classification."""

from __future__ import annotations

import email.utils
import time

import pytest

from fanloop.errors import (
    BadRequest,
    ContextWindowExceeded,
    Overloaded,
    RateLimited,
    ServerError,
)
from fanloop.messages import INVALID_ARGUMENTS_KEY
from fanloop.providers._http import parse_retry_after, status_error, stream_error
from fanloop.providers._sse import SSEDecoder
from fanloop.providers._wire import parse_arguments


def test_sse_frames_split_anywhere() -> None:
    body = (
        b'event: message_start\ndata: {"a":1}\n\n: comment\n\n'
        b"event: ping\r\ndata: {}\r\n\r\ndata: first\ndata: second\n\nid: 7\nretry: 5\n\n"
    )
    for size in (1, 2, 3, 7, len(body)):
        decoder = SSEDecoder()
        frames = []
        for i in range(0, len(body), size):
            frames += decoder.feed(body[i : i + size])
        assert frames == [
            (b"message_start", b'{"a":1}'),
            (b"ping", b"{}"),
            (b"", b"first\nsecond"),
        ], size


def test_sse_data_keeps_its_own_whitespace_and_blank_lines() -> None:
    """Only the one space after ``data:`` is the field's; the rest is payload, on every line."""
    body = (
        b"data:  two spaces\ndata:\ndata:tab\t\ndata: trailing  \n\n"
        b"event: e\ndata: \ndata:  x \n\n"
        b"data:  single line kept \n\n"
        b"event:  named \ndata:  y \n\n"
    )
    for size in (1, 5, len(body)):
        decoder = SSEDecoder()
        frames = []
        for i in range(0, len(body), size):
            frames += decoder.feed(body[i : i + size])
        assert frames == [
            (b"", b" two spaces\n\ntab\t\ntrailing  "),
            (b"e", b"\n x "),
            (b"", b" single line kept "),
            (b"named", b" y "),
        ], size


def test_sse_lone_cr_and_unfinished_frame() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\rdata: y") == [(b"", b"x")]
    assert decoder.feed(b"") == []


def test_retry_after_forms() -> None:
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after": "-4"}) == 0.0
    assert parse_retry_after({"retry-after-ms": "120", "retry-after": "9"}) == 0.12
    assert parse_retry_after({"retry-after-ms": "junk", "retry-after": "9"}) == 9.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after({"retry-after": date}) <= 30  # type: ignore[operator]


def test_should_retry_header_overrides() -> None:
    forced = status_error(400, {"x-should-retry": "true"}, {}, provider="p")
    assert type(forced) is BadRequest and forced.transient
    refused = status_error(529, {"x-should-retry": "false"}, {}, provider="p")
    assert type(refused) is Overloaded and not refused.transient
    default = status_error(429, {}, {}, provider="p")
    assert type(default) is RateLimited and default.transient


def test_status_error_bodies() -> None:
    anthropic_body = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 1 > 0"},
        "request_id": "req_body",
    }
    error = status_error(400, {}, anthropic_body, provider="anthropic")
    assert type(error) is ContextWindowExceeded
    assert error.request_id == "req_body"
    openai_body = {"error": {"message": "too long", "code": "context_length_exceeded"}}
    assert type(status_error(400, {}, openai_body, provider="openai")) is ContextWindowExceeded
    assert status_error(418, {}, "teapot", provider="p").message == "HTTP 418"


@pytest.mark.parametrize(
    ("body", "cls"),
    [
        ({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}, Overloaded),
        ({"error": {"type": "rate_limit_error"}}, RateLimited),
        ({"error": {"code": 429, "message": "slow"}}, RateLimited),
        ({"error": {"code": 502, "message": "upstream"}}, ServerError),
        ({"error": {"type": "invalid_request_error", "message": "bad"}}, BadRequest),
        ({"error": {"message": "?"}}, ServerError),
        ("garbage", ServerError),
    ],
)
def test_stream_error_classes(body: object, cls: type) -> None:
    error = stream_error(body, provider="p", request_id="r1")
    assert type(error) is cls
    assert error.status_code is None
    assert error.request_id == "r1"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, null, true], "b": "\\u00e9"}',
        "{}",
        ' {"a": 1}',
        '{"a": 1}\n ',
        "\t[]\r\n",
        "7",
        '"\\ud83d"',  # half a pair, as decoded (the stream parsers join it)
        "NaN",
    ],
)
def test_load_frame_decodes_what_json_loads_decodes(text: str) -> None:
    """``load_frame`` scans the value at the start and takes the decoder's word wherever
    the frame is not exactly one value: leading or trailing whitespace gives the same value,
    bytes the same as text."""
    import json

    from fanloop.providers._wire import load_frame

    want = repr(json.loads(text))  # (a repr: NaN is not equal to itself)
    assert repr(load_frame(text)) == want
    assert repr(load_frame(text.encode("utf-8", "surrogatepass"))) == want


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": 1} {}', "[1]x", "nul", "{'a': 1}"])
def test_load_frame_refuses_what_json_loads_refuses(text: str) -> None:
    """Not one JSON value (nothing, half a value, a value with more after it): the decoder's
    own error, a ``ValueError`` that says where."""
    import json

    from fanloop.providers._wire import load_frame

    with pytest.raises(json.JSONDecodeError) as ours:
        load_frame(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_load_frame_nested_too_deeply_is_malformed() -> None:
    from fanloop.providers._wire import Malformed, load_frame

    with pytest.raises(Malformed, match="nested too deeply"):
        load_frame("[" * 100_000 + "]" * 100_000)


def test_dumps_writes_what_the_compact_encoder_writes() -> None:
    """``dumps`` is ``JSONEncoder(separators=(",", ":")).encode`` without its Python layers:
    the same text, the same errors, and a failure (a circular list, a value JSON has no form
    for) leaves nothing behind for the next call."""
    import json

    from fanloop.providers._wire import dumps

    encode = json.JSONEncoder(separators=(",", ":")).encode
    values: list[object] = [
        {"a": [1, 2.5, None, True, float("nan"), -float("inf")], "\u00e9": "\ud83d \u2028"},
        [],
        {},
        "t\u00e9xt",
        7,
        None,
        (1, "2"),
        {1: 2, 2.5: "x", None: 1, False: 0},
    ]
    for value in values:
        assert dumps(value) == encode(value)
    circular: list[object] = []
    circular.append(circular)
    for bad in (circular, {"x": object()}, {(1,): 2}):
        with pytest.raises((ValueError, TypeError)) as ours:
            dumps(bad)
        with pytest.raises((ValueError, TypeError)) as theirs:
            encode(bad)
        assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))
    shared: list[object] = [1]
    assert dumps([shared, shared]) == "[[1],[1]]"  # not taken for a circle
    mended: list[object] = [1, object()]
    with pytest.raises(TypeError):
        dumps(mended)
    mended[1] = 2
    assert dumps(mended) == "[1,2]"  # the failed call's table of containers is gone


def test_parse_arguments() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments("  ") == {}
    assert parse_arguments('{"a": [1]}') == {"a": [1]}
    assert parse_arguments('{"a": ') == {INVALID_ARGUMENTS_KEY: '{"a": '}
    assert parse_arguments("[1]") == {INVALID_ARGUMENTS_KEY: "[1]"}


def test_message_cache_texts_are_get_for_each_skipping_the_empty() -> None:
    """``MessageCache.texts`` gives what ``get`` gives for each object, in order, without the
    ones that render to nothing; each is rendered once, whether its memo is in a slot (a
    message) or in the identity table (anything else), and a second cache renders its own."""
    from fanloop.messages import Message
    from fanloop.providers._wire import MessageCache, add_joined

    rendered: list[object] = []

    def render(obj: object) -> str:
        rendered.append(obj)
        if isinstance(obj, Message):
            return "" if obj.text == "skip" else f"<{obj.text}>"
        return f"[{obj!r}]"

    class Other:
        def __repr__(self) -> str:
            return "other"

    first, skipped, last, other = (
        Message.user("a"),
        Message.user("skip"),
        Message.user("b"),
        Other(),
    )
    cache = MessageCache(render)
    objs = [first, skipped, other, last]
    assert cache.texts(objs) == ["<a>", "[other]", "<b>"]
    assert cache.texts(objs) == [t for t in map(cache.get, objs) if t]
    assert rendered == objs  # once each, however often asked
    mine = MessageCache(render)
    assert mine.texts([first]) == ["<a>"] and rendered[-1] is first  # its own text
    pieces = ["["]
    add_joined(pieces, cache.texts(objs))
    add_joined(pieces, [])
    assert "".join(pieces) == "[<a>,[other],<b>"


def test_message_cache_texts_of_a_growing_conversation_render_only_the_new() -> None:
    """A conversation asked for turn after turn, as a tuple, a list or any iterable: what was
    rendered is read back and only the new messages are rendered; joined with commas, the
    answer is ``get`` for each (a long tuple comes back joined in one text). A message last
    rendered by another cache, in the middle, is rendered again by this one."""
    from fanloop.messages import Message
    from fanloop.providers._wire import MessageCache

    rendered: list[object] = []

    def render(obj: object) -> str:
        rendered.append(obj)
        assert isinstance(obj, Message)
        return "" if obj.text == "skip" else f"<{obj.text}>"

    cache, other = MessageCache(render), MessageCache(lambda m: "other's")
    conversation: list[Message] = []
    want = ""
    for i in range(12):
        conversation += [Message.user(f"q{i}"), Message.user("skip" if i == 2 else f"a{i}")]
        before = len(rendered)
        want = ",".join(f"<{m.text}>" for m in conversation if m.text != "skip")
        assert ",".join(cache.texts(tuple(conversation))) == want
        assert ",".join(cache.texts(conversation)) == want
        assert ",".join(cache.texts(iter(conversation))) == want
        assert rendered[before:] == conversation[-2:]  # the new two, once each
    assert other.texts(conversation[3:4]) == ["other's"]  # its memo is now the other cache's
    assert ",".join(cache.texts(conversation)) == want
    assert rendered[-1] is conversation[3]
    assert cache.texts(()) == [] and cache.texts([]) == []


def test_a_runs_long_conversation_is_read_once_and_each_request_adds_its_new_turns() -> None:
    """With a run's memo, a tuple of eight messages or more that starts with the very objects
    the last request carried takes their texts from the memo, and only its new messages are
    looked at. One that differs (a message replaced, even by an equal one; one dropped; a
    list; another cache) is read message by message, and the answer is always ``get`` for
    each. A conversation cut short lets the memo go."""
    from fanloop._model_types import JoinedTexts
    from fanloop.messages import Message
    from fanloop.providers._wire import MessageCache

    rendered: list[Message] = []

    def render(obj: object) -> str:
        assert isinstance(obj, Message)
        rendered.append(obj)
        return f"<{obj.text}>"

    cache, other = MessageCache(render), MessageCache(lambda m: "x")
    memo = JoinedTexts()

    def texts(messages: list[Message], via: MessageCache[Message] = cache) -> list[str]:
        before = len(rendered)
        out = via.texts(tuple(messages), memo)
        if via is cache:
            assert out == [f"<{m.text}>" for m in messages]
            seen = {id(m) for m in rendered[:before]}
            assert not any(id(m) in seen for m in rendered[before:])  # once each
        return out

    conversation = [Message.user(str(i)) for i in range(7)]
    texts(conversation)
    assert memo == {}  # too short to keep
    conversation.append(Message.user("7"))
    texts(conversation)
    for turn in range(8, 30, 2):
        conversation += [Message.user(f"{turn}"), Message.user(f"{turn + 1}")]
        looked_at = len(rendered)
        texts(conversation).insert(0, "a system message")  # (the caller's own list)
        assert len(rendered) == looked_at + 2  # the new two
    assert [id(m) for m in rendered] == [id(m) for m in conversation]
    texts(conversation)  # the same request again
    texts([*conversation, Message.user("paused")])  # a request with a passing message
    texts(conversation)
    equal = Message.user(conversation[3].text)
    assert equal == conversation[3]
    conversation[3] = equal  # replaced by an equal message: another object, read again
    texts(conversation)
    assert rendered[-1] is equal
    del conversation[5]
    texts(conversation)
    assert texts(conversation, other) == ["x"] * len(conversation)
    assert len(memo) == 2  # one entry a cache
    conversation.append(Message.user("more"))
    texts(conversation)
    assert cache.texts(conversation, memo) == [f"<{m.text}>" for m in conversation]  # a list
    assert len(memo) == 1  # (which let this cache's entry go)
    assert cache.texts(tuple(conversation)) == [f"<{m.text}>" for m in conversation]  # no memo
