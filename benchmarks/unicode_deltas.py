"""Per-delta cost of the stream parsers, valid-Unicode check included.

Run: ``python benchmarks/unicode_deltas.py [N]``. Prints nanoseconds per ``feed()`` of one
text-delta event (the best of 200 batches of N, 1000 by default, so a busy machine shows its
floor), for each API (Anthropic Messages, OpenAI Chat Completions and Responses) and for three
kinds of event: plain ASCII, non-ASCII text (raw UTF-8 for Anthropic, ``\\u00e9`` escapes for
the OpenAI APIs, as Python servers write it), and an emoji written as a surrogate-pair escape
(the rare path: the event's text goes through the joiner). Compare two checkouts by running
it under each.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable
from typing import Any

from fanloop.providers import _responses, anthropic, openai
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider

NOWHERE = "http://127.0.0.1:9"
ANTHROPIC_EVENT = (
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s"}}'
)
OPENAI_EVENT = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt",'
    b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}'
)
RESPONSES_EVENT = (
    b'{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,'
    b'"content_index":0,"delta":"%s","logprobs":[],"sequence_number":4}'
)
TEXTS = {
    "ascii": (b"Hello, world. ", b"Hello, world. "),
    "non-ascii": ("Grüße, café ".encode(), b"Gr\\u00fc\\u00dfe, caf\\u00e9 "),
    "emoji escape": (b"hi \\ud83d\\ude00 ", b"hi \\ud83d\\ude00 "),
}


def anthropic_parser() -> Any:
    provider = AnthropicProvider("m", api_key="k", base_url=NOWHERE)
    parser = anthropic._StreamParser(provider, None)
    parser.feed(
        b"content_block_start",
        b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
    )
    return parser


def openai_parser() -> Any:
    return openai._StreamParser(OpenAIProvider("m", api_key="k", base_url=NOWHERE), None)


def responses_parser() -> Any:
    provider = OpenAIResponsesProvider("m", api_key="k", base_url=NOWHERE)
    parser = _responses._StreamParser(provider, None)
    parser.feed(
        b"response.output_item.added",
        b'{"type":"response.output_item.added","output_index":0,"item":{"type":"message",'
        b'"id":"msg_1","status":"in_progress","role":"assistant","content":[]}}',
    )
    return parser


def best(feed: Callable[[bytes, bytes], Any], event: bytes, data: bytes, n: int) -> float:
    runs = timeit.repeat(lambda: feed(event, data), number=n, repeat=200)
    return min(runs) / n * 1e9


def main(n: int) -> None:
    for kind, (raw, escaped) in TEXTS.items():
        a = best(anthropic_parser().feed, b"content_block_delta", ANTHROPIC_EVENT % raw, n)
        o = best(openai_parser().feed, b"", OPENAI_EVENT % escaped, n)
        r = best(
            responses_parser().feed, b"response.output_text.delta", RESPONSES_EVENT % escaped, n
        )
        print(
            f"{kind:13s} anthropic {a:6.0f} ns/delta   openai {o:6.0f} ns/delta   "
            f"responses {r:6.0f} ns/delta"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
