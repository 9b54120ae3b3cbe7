"""A message keeps its wire text on itself: per provider, never copied with it.

Each provider renders a message once and keeps the text on the message (a slot, not a
field); another provider's text is not taken for its own, and a copy of the message (with
its content changed) is rendered afresh.
"""

from __future__ import annotations

from provider_helpers import make_anthropic, make_openai, request

from fanloop.messages import Message, TextPart
from fanloop.testing import FakeLLMServer


async def test_each_provider_sends_its_own_wire_text_of_a_shared_message(
    server: FakeLLMServer,
) -> None:
    openai, anthropic = make_openai(server), make_anthropic(server)
    shared = Message.user("the shared question")
    try:
        for provider in (openai, anthropic, openai, anthropic):
            server.add("ok")
            await provider.complete(request(shared))
    finally:
        await openai.aclose()
        await anthropic.aclose()
    sent = [(r.api, r.body["messages"][0]) for r in server.requests]
    # Alternating providers, each request carries that provider's own form of the message.
    assert [api for api, _ in sent] == ["openai", "anthropic", "openai", "anthropic"]
    assert sent[0][1] == sent[2][1] == {"role": "user", "content": "the shared question"}
    for _, message in sent[1::2]:
        assert message["role"] == "user"
        assert message["content"][0]["type"] == "text"
        assert message["content"][0]["text"] == "the shared question"


async def test_a_changed_copy_of_a_message_is_rendered_afresh(server: FakeLLMServer) -> None:
    openai = make_openai(server)
    first = Message.user("before")
    changed = first.model_copy(update={"content": (TextPart(text="after"),)})
    try:
        for message in (first, changed, first):
            server.add("ok")
            await openai.complete(request(message))
    finally:
        await openai.aclose()
    assert [r.body["messages"][0]["content"] for r in server.requests] == [
        "before",
        "after",
        "before",
    ]
