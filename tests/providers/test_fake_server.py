"""FakeLLMServer itself: script queues, recording, auth, sync use, latency."""

from __future__ import annotations

import json
import time

import anthropic
import httpx2
import openai

from fanloop.testing import FakeLLMServer, Fault, reply


def test_sync_sdk_clients_and_recording() -> None:
    with FakeLLMServer(["Hi from the script."]) as server:
        server.add("Only for OpenAI.", api="openai")
        client = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
        completion = client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "hello"}]
        )
        assert completion.choices[0].message.content == "Only for OpenAI."
        claude = anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url, max_retries=0)
        message = claude.messages.create(
            model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hello"}]
        )
        assert message.content[0].text == "Hi from the script."
        client.close()
        claude.close()
        first, second = server.requests
        assert (first.api, first.path, first.stream) == ("openai", "/v1/chat/completions", False)
        assert first.body["messages"] == [{"role": "user", "content": "hello"}]
        assert second.api == "anthropic"
        assert json.loads(second.raw_body) == second.body
        assert server.remaining == 0


def test_sdk_streaming_helpers_accept_the_stream() -> None:
    with FakeLLMServer(chars_per_delta=3) as server:
        server.add(reply("Streaming works.", thinking="hmm", signature="s1"))
        claude = anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url, max_retries=0)
        with claude.messages.stream(
            model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        claude.close()
        assert text == "Streaming works."
        assert final.content[0].signature == "s1"
        assert final.stop_reason == "end_turn"


def test_callable_turns_and_responder() -> None:
    seen: list[dict] = []

    def echo(body: dict) -> str:
        seen.append(body)
        return f"echo {len(body['messages'])}"

    async def late(body: dict) -> Fault:
        return Fault.http(503)

    with FakeLLMServer([echo, late], responder=lambda body: "default") as server:
        with httpx2.Client(base_url=server.url) as http:
            payload = {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
            }
            first = http.post("/v1/messages", json=payload, headers={"x-api-key": "k"})
            second = http.post("/v1/messages", json=payload)
            third = http.post("/v1/messages", json=payload)
        assert first.json()["content"] == [{"type": "text", "text": "echo 1"}]
        assert second.status_code == 503
        assert third.json()["content"][0]["text"] == "default"
        assert seen[0]["model"] == "m"


def test_api_key_checked_when_set() -> None:
    with FakeLLMServer(["ok", "ok"], api_key="right") as server, httpx2.Client() as http:
        payload = {"model": "m", "max_tokens": 5, "messages": []}
        url = f"{server.anthropic_base_url}/v1/messages"
        assert http.post(url, json=payload, headers={"x-api-key": "wrong"}).status_code == 401
        assert http.post(url, json=payload, headers={"x-api-key": "right"}).status_code == 200
        ok = http.post(url, json=payload, headers={"authorization": "Bearer right"})
        assert ok.status_code == 200


def test_unknown_path_and_bad_body() -> None:
    with FakeLLMServer() as server, httpx2.Client(base_url=server.url) as http:
        assert http.post("/v2/other", json={}).status_code == 404
        assert http.post("/v1/messages", content=b"not json").status_code == 400


def test_http_fault_headers() -> None:
    with FakeLLMServer([Fault.http(429, retry_after=2, retry_after_ms=1500)]) as server:
        with httpx2.Client(base_url=server.openai_base_url) as http:
            response = http.post("/chat/completions", json={"model": "m", "messages": []})
        assert response.status_code == 429
        assert response.headers["retry-after"] == "2"
        assert response.headers["retry-after-ms"] == "1500"
        assert response.headers["x-request-id"] == server.requests[-1].request_id
        assert response.json()["error"]["type"] == "requests"


def test_latency_is_applied() -> None:
    with FakeLLMServer(["a"], latency=0.1) as server, httpx2.Client() as http:
        started = time.monotonic()
        http.post(f"{server.url}/v1/messages", json={"model": "m", "max_tokens": 1, "messages": []})
        assert time.monotonic() - started >= 0.09


async def test_async_context_manager_and_restart() -> None:
    server = FakeLLMServer(["one"])
    async with server:
        port = server.port
        async with httpx2.AsyncClient() as http:
            response = await http.post(
                f"{server.url}/v1/messages", json={"model": "m", "max_tokens": 1, "messages": []}
            )
        assert response.json()["content"][0]["text"] == "one"
    assert port
    server.start()  # a stopped server can start again
    try:
        assert server.port
    finally:
        server.stop()
    assert "requests=1" in repr(server)


def test_many_keep_alive_connections() -> None:
    import asyncio

    async def hammer(url: str) -> int:
        limits = httpx2.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx2.AsyncClient(limits=limits) as http:
            payload = {"model": "m", "max_tokens": 1, "messages": [], "stream": True}

            async def one() -> int:
                response = await http.post(url, json=payload)
                return response.text.count('"text_delta"')

            counts = await asyncio.gather(*(one() for _ in range(600)))
        return sum(counts)

    with FakeLLMServer(responder=lambda body: "twelve chars", record=False) as server:
        total = asyncio.run(hammer(f"{server.url}/v1/messages"))
    assert total == 600
