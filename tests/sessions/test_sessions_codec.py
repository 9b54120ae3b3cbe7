"""The stores' JSON, piece by piece (sessions/_bigjson.py, sessions/_codec.py).

The piecewise writer and reader are checked against the json module with windows of a few
characters, so every cut (inside escapes, UTF-8 sequences, surrogate pairs...) is exercised by
small values; then the stores' large-value path against pydantic's one-shot calls.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fanloop import _unicode
from fanloop.messages import (
    DocumentPart,
    ImagePart,
    Message,
    Origin,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from fanloop.sessions import SessionError, SQLiteStore, _bigjson, _codec

ALPHABET = ["a", '"', "\\", "\n", "\x00", "\x1f", "é", "€", "\U0001f600", "/", "u", "d", "8", ":"]
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3


def small_windows(monkeypatch: pytest.MonkeyPatch, window: int, long: int) -> None:
    for module in (_unicode, _bigjson, _codec):
        monkeypatch.setattr(module, "WINDOW", window)
    monkeypatch.setattr(_bigjson, "LONG", long)


def text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, size)))


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return text(rng, 80)
    if roll < 0.5:
        return rng.choice([None, True, False, 0, -3, 1.5, 10**20, 1e300])
    if roll < 0.75:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {text(rng, 10): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("window", [12, 13, 17, 64])
def test_the_piecewise_json_matches_the_json_module(
    monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    small_windows(monkeypatch, window, long=window // 3)
    rng = random.Random(window)
    for _ in range(500):
        v = value(rng)
        compact = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        assert _bigjson.dump(v) == compact.encode()
        assert (
            _bigjson.dump(v, sort_keys=True)
            == json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
        )
        # Read back: its own text, escaped ASCII (dense \uXXXX escapes and pairs), spaced.
        for written in (compact, json.dumps(v), json.dumps(v, ensure_ascii=False, indent=1)):
            assert _bigjson.load(written.encode()) == v


@pytest.mark.parametrize(
    "data",
    [
        b'"abc',
        b'"abc\\',
        b'["a" "b"]',
        b'{"a":1',
        b"",
        b'"\xff"',
        b'"a\x01b"',
        b"[" * 100_000,
        b'["' + b"x" * 50 + b'"] tail',
    ],
)
def test_malformed_json_is_a_value_error(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    small_windows(monkeypatch, 16, long=5)
    with pytest.raises(ValueError):
        _bigjson.load(data)


def test_a_lone_surrogate_escape_is_refused_unless_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small_windows(monkeypatch, 16, long=5)
    for data in (b'"\\ud800"', b'["' + b"x" * 40 + b'\\udc00"]', b'"' + b"y" * 40 + b'\\ud83d"'):
        with pytest.raises(ValueError, match="surrogate"):
            _bigjson.load(data)
        assert _bigjson.load(data, surrogates=True) == json.loads(data)
    assert _bigjson.load(b'["' + b"x" * 40 + b'\\ud83d\\ude00"]') == ["x" * 40 + "\U0001f600"]


def messages() -> list[Message]:
    long_text = 'é€ "quoted" \\ \n' * 50
    return [
        Message.user(long_text),
        Message(
            role="assistant",
            content=(
                ThinkingPart(text=long_text, signature="sig"),
                TextPart(text=long_text + "\U0001f600"),
                ToolCallPart(id="c1", name="write", arguments={"path": "x", "text": long_text}),
            ),
            origin=Origin(provider="p", api="a", model="m", raw=[{"text": long_text, "n": 1.5}]),
        ),
        Message(
            role="user",
            content=(
                ToolResultPart(
                    call_id="c1",
                    content=long_text,
                    parts=(ImagePart(data=PNG), DocumentPart(data=b"%PDF-1.4 " * 300, title="t")),
                ),
                ImagePart(url="https://example.com/a.png"),
            ),
        ),
    ]


async def test_large_messages_take_the_piecewise_path_and_come_back_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one_shot = [m.model_dump_json().encode() for m in messages()]
    small_windows(monkeypatch, 64, long=16)
    monkeypatch.setattr(_codec, "INLINE", 100)
    written = await _codec.dump_models(messages())
    # The same JSON values as pydantic writes (the text itself may differ in its escapes).
    assert [json.loads(w) for w in written] == [json.loads(o) for o in one_shot]
    for data in (written, one_shot):
        record = await _codec.load_record("s", 1.0, 2.0, "{}", data)
        assert list(record.messages) == messages()
    part = messages()[2].content[0]
    (written_part,) = await _codec.dump_models([part])
    assert _codec._load(ToolResultPart, written_part, "the result") == part


async def test_a_stored_message_that_cannot_be_read_is_a_session_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    session = await store.open("s")
    await session.append(Message.user("fine"))
    await session.append(Message.user("soon broken"))
    big_garbage = '{"role":"user","content":[{"kind":"text","text":"' + "x" * 3_000_000 + '"}'
    for broken in (
        '{"role":"user","content":[{"kind":"text","text":"\\ud800"}]}',
        "nope",
        big_garbage,
    ):
        with sqlite3.connect(tmp_path / "s.db") as conn:
            conn.execute("UPDATE messages SET json = ? WHERE idx = 1", (broken,))
        async with SQLiteStore(tmp_path / "s.db") as other:
            with pytest.raises(SessionError, match="message 1 of session 's' cannot be read"):
                await other.load("s")
    await store.aclose()


async def test_large_metadata_round_trips_as_through_the_json_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    small_windows(monkeypatch, 64, long=16)
    monkeypatch.setattr(_codec, "INLINE", 100)
    values = {"notes": 'é"\\\n' * 100, "numbers": [1, 2.5, None, float("inf")], "t": "title"}
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = await store.open("m")
        await session.set_metadata(**values)
        assert session.metadata == json.loads(json.dumps(values))
        await session.set_metadata(t=None)
        async with SQLiteStore(tmp_path / "s.db") as other:
            assert (await other.load("m")).metadata == session.metadata
            assert "t" not in session.metadata


_FREED_IN: list[str] = []


class _Tracked(bytes):
    """Stored text that notes the thread it is freed in."""

    def __del__(self) -> None:
        import threading

        _FREED_IN.append(threading.current_thread().name)


async def test_a_long_stored_text_is_freed_in_the_worker_not_on_the_loop() -> None:
    # Freeing tens of MiB gives pages back to the system (4-17 ms for 54 MB, much more on a busy
    # machine): load_record drops each text once decoded, in the thread that decoded it.
    import threading

    _FREED_IN.clear()
    message = Message.user("x" * (2 * _unicode.INLINE))
    texts: list[Any] = [_Tracked(message.model_dump_json().encode())]
    record = await _codec.load_record("s", 0.0, 0.0, "{}", texts)
    assert record.messages == (message,)
    assert texts == [b""]  # handed over: emptied
    assert _FREED_IN and _FREED_IN[0] != threading.main_thread().name


async def test_release_frees_long_texts_in_a_worker_thread() -> None:
    # What the PostgreSQL store does with a long message's JSON once it is written.
    import threading

    _FREED_IN.clear()
    texts: list[Any] = [_Tracked(b"x" * (2 * _unicode.INLINE))]
    await _codec.release(texts)
    assert texts == []
    assert _FREED_IN and _FREED_IN[0] != threading.main_thread().name
