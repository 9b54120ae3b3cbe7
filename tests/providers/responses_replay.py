"""A loopback HTTP server that answers with recorded Responses API traffic.

Each recorded interaction of ``data/responses_cassettes/cassettes.json`` is served at
``POST /<name>/v1/responses``: its recorded status, content type and body bytes, whatever the
request says (a streamed body goes out in small chunks, so clients take it apart across
reads). The bodies received are kept, by name, for the tests to look at.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "responses_cassettes" / "cassettes.json"
CHUNK = 997  # odd, so chunks split events, lines and UTF-8 sequences anywhere


@dataclass(frozen=True)
class Interaction:
    """One recorded ``POST /v1/responses`` and its answer."""

    name: str
    source: str
    request: dict[str, Any]
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def streamed(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")


def load() -> list[Interaction]:
    """The recorded interactions, in the order of the file."""
    raw = json.loads(DATA.read_text(encoding="utf-8"))["interactions"]
    return [
        Interaction(
            name=item["name"],
            source=item["source"],
            request=item["request"],
            status=item["status"],
            headers=item["headers"],
            body=item["body"].encode(),
        )
        for item in raw
    ]


class ReplayServer:
    """Serves :func:`load`'s interactions on 127.0.0.1 (a context manager)."""

    def __init__(self, interactions: list[Interaction]) -> None:
        self.by_name = {item.name: item for item in interactions}
        self.received: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def base_url(self, name: str) -> str:
        """The ``base_url`` (with ``/v1``) whose ``/responses`` answers with ``name``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/{name}/v1"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                parts = self.path.strip("/").split("/")
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                item = server.by_name.get(parts[0]) if parts[1:] == ["v1", "responses"] else None
                if item is None:
                    self.send_error(404)
                    return
                with server._lock:
                    server.received.setdefault(item.name, []).append(body)
                self.send_response(item.status)
                for key, value in item.headers.items():
                    self.send_header(key, value)
                if not item.streamed:
                    self.send_header("content-length", str(len(item.body)))
                    self.end_headers()
                    self.wfile.write(item.body)
                    return
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for start in range(0, len(item.body), CHUNK):
                    chunk = item.body[start : start + CHUNK]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        return Handler
