"""What a server sends enters fanloop as valid Unicode (docs/security.md).

A surrogate pair split across two stream events (``"ab\\ud83d"``, then ``"\\ude00cd"``) is
joined into its character, so the streamed deltas and the final message agree; any other
(lone) surrogate escape becomes U+FFFD; a pair of escapes in one event is the character. Each
case runs on both APIs, both transports, streamed and not (where the server can send it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from provider_helpers import make_anthropic, make_openai, request, stream_all

from fanloop.events import TextDelta, ThinkingDelta, ToolCallDelta
from fanloop.messages import INVALID_ARGUMENTS_KEY, Message
from fanloop.providers import ModelResponse
from fanloop.providers._http import HTTPProvider, create_pool
from fanloop.testing import FakeLLMServer, call, reply

EMOJI = "\U0001f600"
HIGH, LOW = "\ud83d", "\ude00"  # EMOJI's surrogate pair, as two code points
FFFD = "\ufffd"
STREAMING = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "complete"])


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    # 3 characters per delta: "ab" + HIGH | LOW + "cd" splits the pair across two events.
    with FakeLLMServer(chars_per_delta=3) as srv:
        yield srv
    assert not srv.errors, srv.errors


@pytest.fixture
async def provider(server: FakeLLMServer, api: str, transport: str) -> AsyncIterator[HTTPProvider]:
    pool = create_pool(transport=transport)  # type: ignore[arg-type]
    make = make_anthropic if api == "anthropic" else make_openai
    made = make(server, http_client=pool)
    yield made
    await made.aclose()
    await pool.aclose()


async def answer(provider: HTTPProvider, *, streaming: bool) -> tuple[list[Any], ModelResponse]:
    if streaming:
        return await stream_all(provider, request("go"))
    return [], await provider.complete(request("go"))


def joined(deltas: list[Any], kind: type) -> str:
    return "".join(d.text for d in deltas if type(d) is kind)


def valid(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_storable(response: ModelResponse) -> None:
    """The turn can be serialised (origin included) and read back unchanged."""
    message = Message(role="assistant", content=response.content, origin=response.origin)
    assert Message.model_validate_json(message.model_dump_json()) == message


@STREAMING
async def test_a_surrogate_pair_split_across_events_is_joined(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    server.add(reply(f"ab{HIGH}{LOW}cd", thinking=f"th{HIGH}{LOW}nk{HIGH}{LOW}", signature="sig"))
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"ab{EMOJI}cd"
    assert final.thinking == f"th{EMOJI}nk{EMOJI}"
    if streaming:
        assert joined(deltas, TextDelta) == final.text
        assert joined(deltas, ThinkingDelta) == final.thinking
        assert all(valid(d.text) for d in deltas if isinstance(d, TextDelta | ThinkingDelta))
        # The pair really was split across two events: its high half waited for the low one.
        assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["ab", f"{EMOJI}cd"]
    check_storable(final)


@STREAMING
async def test_lone_surrogates_become_the_replacement_character(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    tool = call("look\ud800up", **{"q\udc00": f"x{LOW}y{HIGH}", "ok": EMOJI})
    server.add(
        reply(f"a\ud800b{LOW}cd{HIGH}", tool_calls=[tool], thinking=f"t{HIGH}", signature="s")
    )
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"a{FFFD}b{FFFD}cd{FFFD}"
    assert final.thinking == f"t{FFFD}"
    (made,) = final.tool_calls
    assert made.name == f"look{FFFD}up"
    assert made.arguments == {f"q{FFFD}": f"x{FFFD}y{FFFD}", "ok": EMOJI}
    if streaming:
        # The high surrogate that ends the text is held back, then sent as U+FFFD when its
        # block ends: the deltas still add up to the final text.
        assert joined(deltas, TextDelta) == final.text
        assert joined(deltas, ThinkingDelta) == final.thinking
        for delta in deltas:
            for name in ("text", "arguments_delta", "name"):
                assert valid(getattr(delta, name, ""))
    check_storable(final)


@STREAMING
async def test_a_pair_of_escapes_in_one_event_is_the_character(
    server: FakeLLMServer, provider: HTTPProvider, streaming: bool
) -> None:
    server.chars_per_delta = 1000
    server.add(reply(f"{HIGH}{LOW} and {EMOJI}", tool_calls=[call("get_weather", city=EMOJI)]))
    deltas, final = await answer(provider, streaming=streaming)
    assert final.text == f"{EMOJI} and {EMOJI}"
    assert final.tool_calls[0].arguments == {"city": EMOJI}
    if streaming:
        assert joined(deltas, TextDelta) == final.text
    check_storable(final)


async def test_a_pair_split_inside_tool_call_arguments_is_joined(
    server: FakeLLMServer, provider: HTTPProvider
) -> None:
    # The argument text itself (not an escape inside it) carries the pair, split across two
    # events: '{"q":"a' + HIGH | LOW + 'b"}'.
    raw = f'{{"q": "ab{HIGH}{LOW}cd", "r": "{HIGH}"}}'
    server.chars_per_delta = 10
    server.add(reply(tool_calls=[call("get_weather", **{INVALID_ARGUMENTS_KEY: raw})]))
    deltas, final = await answer(provider, streaming=True)
    assert final.tool_calls[0].arguments == {"q": f"ab{EMOJI}cd", "r": FFFD}
    fragments = "".join(d.arguments_delta for d in deltas if isinstance(d, ToolCallDelta))
    assert valid(fragments)
    check_storable(final)
