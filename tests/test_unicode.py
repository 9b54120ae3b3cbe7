"""The valid-Unicode rule's building blocks (fanloop._unicode): scrub, the joiner, the walks."""

from __future__ import annotations

import random

import pytest

from fanloop import _unicode
from fanloop._unicode import (
    Joiner,
    holds_surrogates,
    is_surrogate_free,
    may_escape_surrogates,
    scrub,
    scrub_json,
    scrub_model,
)
from fanloop.messages import Message, TextPart

HIGH, LOW, EMOJI, FFFD = "\ud83d", "\ude00", "\U0001f600", "\ufffd"
ALPHABET = ["a", "é", "€", EMOJI, HIGH, LOW, "\ud800", "\udfff", "\U0010ffff"]


def test_scrub_joins_pairs_and_replaces_lone_surrogates() -> None:
    assert scrub(f"a{HIGH}{LOW}b") == f"a{EMOJI}b"
    assert scrub(f"{LOW}{HIGH}") == FFFD * 2  # the wrong order is two lone halves
    assert scrub(f"x{HIGH}") == f"x{FFFD}"
    assert scrub(f"{HIGH}{HIGH}{LOW}") == f"{FFFD}{EMOJI}"
    for clean in ("plain", "é€" + EMOJI, ""):
        assert scrub(clean) is clean


def test_long_text_is_handled_a_window_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_unicode, "WINDOW", 8)
    text = "a" * 7 + HIGH + LOW + "b" * 20 + "\ud800" + "c" * 9  # a pair across a window edge
    assert scrub(text) == "a" * 7 + EMOJI + "b" * 20 + FFFD + "c" * 9
    assert not is_surrogate_free(text)
    assert is_surrogate_free("é" * 40)
    clean = "é" * 40
    assert scrub(clean) is clean


@pytest.mark.parametrize("seed", range(20))
def test_the_joiner_gives_pieces_that_add_up_to_the_scrubbed_whole(seed: int) -> None:
    rng = random.Random(seed)
    whole = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60)))
    cuts = sorted(rng.sample(range(len(whole) + 1), min(len(whole) + 1, rng.randint(0, 8))))
    pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    joiner = Joiner()
    out = [joiner.push(piece) for piece in pieces] + [joiner.flush()]
    assert "".join(out) == scrub(whole)
    assert all(is_surrogate_free(piece) for piece in out)


def test_only_a_surrogate_escape_can_decode_to_a_surrogate() -> None:
    assert may_escape_surrogates(b'{"t":"\\ud83d"}')
    assert may_escape_surrogates(b'"\\uDFFF"')
    assert may_escape_surrogates('"\\uDbFF"')
    assert not may_escape_surrogates(b'"\\u00e9 \\ud7ff"')  # below the surrogates
    assert not may_escape_surrogates("plain é".encode())
    assert not may_escape_surrogates(b'"\\ue000"')


def test_scrub_json_fixes_keys_and_values_and_keeps_clean_trees() -> None:
    tree = {"a": [1, None, {f"k{HIGH}": (f"v{LOW}", 2.5)}], "b": "ok"}
    assert scrub_json(tree) == {"a": [1, None, {f"k{FFFD}": [f"v{FFFD}", 2.5]}], "b": "ok"}
    clean = {"a": [1, {"b": "é"}]}
    assert scrub_json(clean) is clean


def test_the_walks_do_not_recurse() -> None:
    deep: list[object] = [f"x{HIGH}"]
    for _ in range(100_000):
        deep = [deep]
    assert holds_surrogates(deep)
    fixed = scrub_json(deep)
    for _ in range(100_000):
        fixed = fixed[0]  # type: ignore[index]
    assert fixed == [f"x{FFFD}"]


def test_scrub_model_copies_only_what_needs_it_and_remembers_what_it_checked() -> None:
    clean = Message.user("hello")
    assert scrub_model(clean) is clean
    assert _unicode.known_valid(clean)
    dirty = Message(role="user", content=(TextPart(text=f"a{HIGH}"),))
    fixed = scrub_model(dirty)
    assert fixed.content == (TextPart(text=f"a{FFFD}"),)
    assert not _unicode.known_valid(dirty) and _unicode.known_valid(fixed)
