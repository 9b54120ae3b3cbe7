"""The valid-Unicode rule's building blocks (fanloop._unicode): scrub, the joiner, the walks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from fanloop import Agent, Limits, TerminationReason, _unicode, tool
from fanloop._unicode import (
    Joiner,
    holds_surrogates,
    is_surrogate_free,
    may_escape_surrogates,
    scrub,
    scrub_json,
    scrub_model,
    valid_models,
)
from fanloop.messages import Message, TextPart, ToolResultPart
from fanloop.providers import ModelRequest
from fanloop.sessions import MemoryStore
from fanloop.testing import ScriptedProvider, call, reply

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


async def test_valid_models_walks_a_light_clean_model_once_and_fixes_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searched: list[str] = []
    check = _unicode.is_surrogate_free
    monkeypatch.setattr(_unicode, "is_surrogate_free", lambda t: searched.append(t) or check(t))
    clean = Message(role="user", content=(TextPart(text="é"), TextPart(text="€")))
    assert await valid_models((clean,)) == (clean,)
    assert sorted(searched) == ["é", "€"] and _unicode.known_valid(clean)
    assert await valid_models((clean,)) == (clean,)  # remembered: not searched again
    assert len(searched) == 2
    # A lone surrogate, and a model too heavy to check on the loop, take the full path.
    (fixed,) = await valid_models((Message(role="user", content=(TextPart(text=f"a{HIGH}"),)),))
    assert fixed.content == (TextPart(text=f"a{FFFD}"),)
    heavy = Message(role="user", content=(TextPart(text="é" * _unicode.INLINE),))
    assert not _unicode._light_and_clean((heavy,), _unicode.INLINE)
    assert await valid_models((heavy,)) == (heavy,) and _unicode.known_valid(heavy)
    dirty = Message(role="user", content=(TextPart(text="é" * _unicode.INLINE + LOW),))
    (fixed,) = await valid_models((dirty,))
    assert fixed.text == "é" * _unicode.INLINE + FFFD


@pytest.mark.parametrize("stored", [False, True])
async def test_each_appended_message_is_searched_once_not_the_conversation_again(
    monkeypatch: pytest.MonkeyPatch, stored: bool
) -> None:
    """The check on append costs O(the new message), not O(the conversation): each non-ASCII
    string of the transcript is searched once (not again on each later append, nor by the
    store), and the memo's look-ups per message do not grow with the conversation (walking
    the history on every append would make them grow with it, memo or not)."""
    searched: list[str] = []  # (an ASCII string may be passed over without a search)
    check = _unicode.is_surrogate_free
    monkeypatch.setattr(
        _unicode, "is_surrogate_free", lambda t: t.isascii() or searched.append(t) or check(t)
    )
    looked_up = [0]
    known = _unicode.known_valid

    def counted(model: object) -> bool:
        looked_up[0] += 1
        return known(model)

    monkeypatch.setattr(_unicode, "known_valid", counted)
    per_message = []
    for rounds in (5, 20):
        searched.clear()
        looked_up[0] = 0
        messages = await _conversation(rounds, stored)
        assert len(messages) == 2 * rounds + 2
        assert sorted(searched) == sorted(t for m in messages for t in _texts(m))
        assert len(searched) == len(messages)  # one non-ASCII string each
        per_message.append(looked_up[0] / len(messages))
    short, long = per_message
    assert long <= short * 1.25, per_message  # quadratic: about 4 times as many


async def _conversation(rounds: int, stored: bool) -> tuple[Message, ...]:
    """A run of ``rounds`` tool rounds whose every message holds one non-ASCII string."""

    @tool
    async def look(i: int) -> str:
        """Look."""
        return f"found é {i}"

    script = [reply(f"looking € {i}", tool_calls=[call("look", i=i)]) for i in range(rounds)]
    agent = Agent(
        ScriptedProvider([*script, "done ü"]), tools=[look], limits=Limits(max_turns=rounds + 1)
    )
    session = await MemoryStore().open() if stored else None
    result = await agent.run("go ä", session=session)
    assert result.termination_reason is TerminationReason.COMPLETED
    return result.messages


def _texts(message: Message) -> list[str]:
    """The non-ASCII strings of a message: its text parts and tool results."""
    out = [p.text for p in message.content if isinstance(p, TextPart)]
    out += [p.content for p in message.content if isinstance(p, ToolResultPart)]
    return [t for t in out if not t.isascii()]


async def test_a_user_message_of_ascii_text_is_known_valid_when_made() -> None:
    plain, odd = Message.user("plain"), Message.user("a\ud800b")
    assert _unicode.known_valid(plain) and not _unicode.known_valid(odd)
    # The other one is still searched (and fixed) when a run appends it.
    result = await Agent(ScriptedProvider(["ok"])).run(odd)
    assert result.messages[0].text == "a\ufffdb"


async def test_tool_results_of_ascii_text_are_known_valid_when_made() -> None:
    plain = Message.tool_results([ToolResultPart(call_id="c1", content="ok")])
    odd = Message.tool_results(
        [
            ToolResultPart(call_id="c1", content="ok"),
            ToolResultPart(call_id="c2", content="a\ud800"),
        ]
    )
    accented = Message.tool_results([ToolResultPart(call_id="c1", content="é")])
    assert _unicode.known_valid(plain)
    assert not _unicode.known_valid(odd) and not _unicode.known_valid(accented)

    @tool
    async def bad() -> str:
        """Answer with a lone surrogate."""
        return "x\ud800y"

    # A tool's answer that is not ASCII is still searched (and fixed) when the run appends it.
    result = await Agent(
        ScriptedProvider([reply("", tool_calls=[call("bad")]), "done"]), tools=[bad]
    ).run("go")
    (part,) = result.messages[2].content
    assert isinstance(part, ToolResultPart) and part.content == "x\ufffdy"


@tool
async def look() -> str:
    """Look."""
    return "ok"


async def _replay(turn: Any, rounds: int) -> tuple[Message, ...]:
    """A run whose model answers ``turn`` (the same object) on each of ``rounds`` rounds."""
    provider = ScriptedProvider(lambda r: turn if len(r.messages) < 2 * rounds else "done")
    result = await Agent(provider, tools=[look], limits=Limits(max_turns=rounds + 1)).run("go")
    assert result.termination_reason is TerminationReason.COMPLETED
    ids = [c.id for m in result.messages for c in m.tool_calls]
    assert len(set(ids)) == len(ids) == rounds  # the repeated id renumbered each round
    return result.messages


async def test_a_scripted_turn_that_plays_again_is_searched_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A test's script often answers every round with one turn. Its text is searched for lone
    surrogates the first time it plays, not each time a copy joins the conversation (the
    copy with the provider's name filled in, the one with its repeated call id renumbered)."""
    searched: list[str] = []
    check = _unicode.is_surrogate_free
    monkeypatch.setattr(
        _unicode, "is_surrogate_free", lambda t: t.isascii() or searched.append(t) or check(t)
    )
    for rounds in (2, 6):
        searched.clear()
        await _replay(reply("looking €", tool_calls=[call("look", _id="c")]), rounds)
        assert searched == ["looking €"], rounds


async def test_a_scripted_turn_with_a_lone_surrogate_is_fixed_each_time_it_plays() -> None:
    messages = await _replay(reply(f"looking {HIGH}", tool_calls=[call("look", _id="c")]), 3)
    answers = [m.text for m in messages if m.role == "assistant" and m.tool_calls]
    assert answers == [f"looking {FFFD}"] * 3


async def test_a_scripted_copy_is_vouched_only_with_the_names_it_was_given() -> None:
    """The copy of a clean turn carries the provider's model and name: vouched for only when
    they are valid too."""
    turn = reply("clean")
    request = ModelRequest(messages=(Message.user("go"),))
    ok = await ScriptedProvider([turn], model="m").complete(request)
    odd = await ScriptedProvider([turn], model=f"m{HIGH}").complete(request)
    assert _unicode.known_valid(ok) and ok.model == "m"
    assert not _unicode.known_valid(odd) and odd.model == f"m{HIGH}"


def test_the_memo_slots_keep_no_class_alive() -> None:
    """Looking for a memo slot caches nothing per class: a model class made at run time
    (``create_model`` per request) is freed once unused."""
    import gc
    import weakref

    from pydantic import create_model

    refs = []
    for i in range(50):
        made = create_model(f"Out{i}", x=(str, ...))
        assert not _unicode.holds_surrogates(made(x="a"))  # walks it, asks for its slot
        refs.append(weakref.ref(made))
        del made
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 0


async def test_an_observer_that_writes_into_a_turn_cannot_slip_a_surrogate_past_the_check() -> None:
    """A parsed turn is known valid, but an observer sees it before it is appended: what it
    writes into the turn's dicts (here the origin's raw form) is checked on append."""
    from fanloop.observers import NullObserver
    from fanloop.providers.openai import OpenAIProvider
    from fanloop.testing import FakeLLMServer

    class Edit(NullObserver):
        def on_response(self, response: Any) -> None:
            response.origin.raw["content"] = "bad \ud800"

    with FakeLLMServer() as server:
        server.add("hello")
        provider = OpenAIProvider("gpt-4.1", api_key="k", base_url=server.openai_base_url)
        result = await Agent(provider, observer=Edit()).run("hi")
        await provider.aclose()
    assert result.messages[-1].origin is not None
    assert result.messages[-1].origin.raw["content"] == "bad \ufffd"
