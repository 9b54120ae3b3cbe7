"""Run by ``test_provider_hostile.py`` in a child process, so that a crash (a segfault) is a
failed test rather than a dead test run: providers of both APIs, streamed and not, on one
transport (``argv[1]``), against a loopback server whose answers carry hostile headers.

Prints one JSON line per case: the outcome (the answer's text, or the error's class), whether
the error is a ``ProviderError`` and transient, the seconds it took and the longest gap of a
heartbeat that ran meanwhile.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import time
from typing import Any

from provider_helpers import request

from fanloop.errors import ProviderError
from fanloop.providers import ModelResponse
from fanloop.providers.anthropic import AnthropicProvider
from fanloop.providers.openai import OpenAIProvider, OpenAIResponsesProvider
from fanloop.testing import reply
from fanloop.testing._faults import render_body, render_stream
from heartbeat import heartbeat

MIX = ["gzip", "deflate", "br", "identity", "x-unknown"]


def _lines(codings: list[str], per_line: int) -> list[bytes]:
    return [
        b"content-encoding: " + ", ".join(codings[i : i + per_line]).encode()
        for i in range(0, len(codings), per_line)
    ]


CASES: dict[str, tuple[int, list[bytes], bool]] = {
    # name: (status, header lines, whether the body is gzipped)
    "gzip": (200, [b"content-encoding: gzip"], True),
    "identity and gzip": (200, [b"content-encoding: identity", b"content-encoding: gzip"], True),
    "five gzip": (200, _lines(["gzip"] * 5, 5), True),
    "50,000 gzip": (200, _lines(["gzip"] * 50_000, 1_000), True),
    "12,000 mixed": (200, _lines(MIX * 2_400, 1_000), True),
    "one long value": (200, _lines(["gzip"] * 1_300, 1_300), True),  # 7.8 KB: under 8,190
    "20 identity": (200, _lines(["identity"] * 20, 20), False),
    "a 90 KB header": (200, [b"x-junk: " + b"j" * 90_000], False),
    "503, 50,000 gzip": (503, _lines(["gzip"] * 50_000, 1_000), True),
    "503, 12,000 mixed": (503, _lines(MIX * 2_400, 1_000), True),
}


def _body(api: str, streaming: bool) -> bytes:
    turn = reply("the answer")
    if streaming:
        return b"".join(render_stream(api, turn, "m", "req_1", 100))
    return json.dumps(render_body(api, turn, "m", "req_1")).encode()


async def _case(transport: str, api: str, streaming: bool, name: str) -> dict[str, Any]:
    status, lines, packed = CASES[name]
    body = _body(api, streaming)
    if packed:
        body = gzip.compress(body)
    kind = b"text/event-stream" if streaming else b"application/json"
    head = b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
    head %= (status, kind, len(body))
    answer = head + b"".join(line + b"\r\n" for line in lines) + b"\r\n" + body

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    provider: Any
    if api == "anthropic":
        provider = AnthropicProvider("m", api_key="k", base_url=url, transport=transport)
    else:
        cls = OpenAIProvider if api == "openai" else OpenAIResponsesProvider
        provider = cls("m", api_key="k", base_url=f"{url}/v1", transport=transport)
    outcome: str
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        async with heartbeat() as beat:
            try:
                if streaming:
                    outcome = "no answer"
                    async with provider.stream(request("hi")) as events:
                        async for item in events:
                            if isinstance(item, ModelResponse):
                                outcome = item.text
                else:
                    outcome = (await provider.complete(request("hi"))).text
            except Exception as exc:
                error = exc
                outcome = type(exc).__name__
    finally:
        await provider.aclose()
        server.close()
        await server.wait_closed()
    return {
        "transport": transport,
        "api": api,
        "streaming": streaming,
        "case": name,
        "outcome": outcome,
        "status": getattr(error, "status_code", None),
        "provider_error": isinstance(error, ProviderError),
        "transient": getattr(error, "transient", None),
        "message": str(error)[:200] if error is not None else None,
        "seconds": time.perf_counter() - started,
        "max_gap": beat.max_gap,
        "max_stall": beat.max_stall,
    }


async def main(transport: str) -> None:
    # One plain case of each API first, unmeasured: what the first request of a process pays
    # once (importing the transport's and the SDK's modules, 0.2-0.3 s on a busy machine) is
    # the cold start (test_provider_coldstart.py), not the hostile headers' doing.
    for api in ("anthropic", "openai", "responses"):
        await _case(transport, api, False, "gzip")
    for api in ("anthropic", "openai", "responses"):
        for streaming in (False, True):
            for name in CASES:
                result = await _case(transport, api, streaming, name)
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
