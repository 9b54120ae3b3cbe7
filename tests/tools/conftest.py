"""Fixtures for the built-in tool tests: a workspace, a read cache, a git repository, a local
HTTP server, a run context, and the PostgreSQL server when it is reachable."""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tools_helpers import PG_DSN, git

from fanloop.tools import ReadCache


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared read cache and git never touch the real home directory."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("FANLOOP_HOME", str(home / ".fanloop"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("FANLOOP_SQL_DSN", raising=False)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace root (a sibling directory ``outside`` exists for escape tests)."""
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    return root


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[ReadCache]:
    """A read cache in a temporary database."""
    c = ReadCache(tmp_path / "cache" / "fanloop.db")
    yield c
    c.close()


@pytest.fixture
def repo(ws: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit (README.md) in the workspace."""
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Test Author")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.invalid")
    git(ws, "init", "-q", "-b", "main")
    (ws / "README.md").write_text("hello\n")
    git(ws, "add", "README.md")
    git(ws, "commit", "-q", "-m", "Initial commit")
    return ws


# -- a local HTTP server -------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    release: threading.Event

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self) -> None:
        path = self.path.split("?")[0]
        if path == "/page":
            html = (
                "<!doctype html><html><head><title>Test  Page</title>"
                "<style>body { color: red }</style><script>var hidden = 1;</script></head>"
                "<body><h1>Welcome</h1><p>Hello <b>world</b> &amp; friends.</p>"
                "<ul><li>one</li><li>two</li></ul><noscript>enable js</noscript>"
                "<script>alert('x')</script></body></html>"
            )
            self._send(200, html.encode(), "text/html; charset=utf-8")
        elif path == "/text":
            self._send(200, b"plain text body\n", "text/plain")
        elif path == "/json":
            self._send(200, b'{"a": 1, "b": [1, 2]}', "application/json")
        elif path == "/missing":
            self._send(404, b"<html><body><p>Not here</p></body></html>", "text/html")
        elif path == "/binary":
            self._send(200, bytes(range(256)) * 4, "application/octet-stream")
        elif path == "/big":
            self._send(200, b"x" * 200_000, "text/plain")
        elif path == "/redirect":
            self._send(302, b"", "text/plain", Location="/text")
        elif path == "/slow":
            self.release.wait(10)  # held until the test releases it
            self._send(200, b"late", "text/plain")
        elif path == "/echo":
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else None
            echo = {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json.loads(body) if body else None,
            }
            self._send(201, json.dumps(echo).encode(), "application/json", **{"X-Echo": "yes"})
        else:
            self._send(404, b"no route", "text/plain")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _route


@pytest.fixture
def http_server() -> Iterator[str]:
    """A local HTTP server on 127.0.0.1; yields its base URL."""
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join()


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)``: a fresh schema on the test server with a table ``items``."""
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed")
    try:
        conn = psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {PG_DSN}: {exc}")
    schema = f"fanloop_{uuid.uuid4().hex[:10]}"
    with conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.items (id serial PRIMARY KEY, name text NOT NULL)")
        conn.execute(f"INSERT INTO {schema}.items (name) VALUES ('apple'), ('pear')")
        conn.execute(
            f"CREATE FUNCTION {schema}.sneaky_write() RETURNS int LANGUAGE sql VOLATILE AS "
            f"$$ INSERT INTO {schema}.items (name) VALUES ('written') RETURNING id $$"
        )
        try:
            yield PG_DSN, schema
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
