"""``fanloop web``: a chat page for an agent, served on 127.0.0.1.

One Starlette app: the page (static files shipped in the wheel, no build step) at ``/``, the
AG-UI endpoint at ``POST /ag-ui`` (:class:`fanloop.ui.AGUIApp`), the Vercel AI UI message
stream at ``POST /api/chat`` (:class:`fanloop.ui.VercelAIApp`), a favicon, and the small JSON
endpoints the page reads: ``/api/info``, ``/api/sessions`` and ``/api/sessions/{id}`` (a
session's history, calls waiting for approval and spend, for resuming it).

It binds 127.0.0.1 unless ``--host`` says otherwise, and any other host needs ``--token``:
every request must then carry it (``Authorization: Bearer``, the cookie the page gets, or
``?token=`` once, which sets the cookie), compared in constant time. On loopback the ``Host``
header must name the loopback address (a DNS-rebinding page cannot reach the agent), and a
request from another origin is refused whatever the host. See docs/ui.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import importlib
import ipaddress
import json
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AsyncExitStack
from http.cookies import SimpleCookie
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import anyio
from anyio.abc import TaskStatus

from .. import Agent, Limits
from .._delegate import Delegation
from .._record import record
from ..errors import ConfigurationError
from ..messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from ..sessions import (
    MemoryStore,
    PostgresStore,
    Session,
    SessionNotFound,
    SQLiteStore,
    pending_approvals,
    session_spend,
    set_session_budget,
)
from ..ui._core import send_body
from ._app import (
    EXIT_CONFIG,
    SYSTEM_PROMPT,
    CommandError,
    Console,
    close_provider,
    make_provider,
    make_store,
    open_mcp,
    store_label,
    store_target,
)

__all__ = ["WebOptions", "build_app", "cmd_web", "load_agent"]

Store = SQLiteStore | PostgresStore | MemoryStore
TOKEN_COOKIE = "fanloop_token"
TOKEN_ENV = "FANLOOP_WEB_TOKEN"
MAX_SESSION_ID = 200
MAX_SESSIONS_LISTED = 200
MAX_MESSAGES_SHOWN = 400
MAX_PART_CHARS = 20_000
_LOOPBACK_NAMES = ("localhost",)
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- the agent --------------------------------------------------------------------------------


def load_agent(reference: str) -> Agent[Any, Any]:
    """The agent a ``module:attribute`` reference names (an :class:`~fanloop.Agent`, or a
    function of no arguments that returns one). The current directory is importable.

    Raises:
        CommandError: with exit code 2 for a bad reference, a failed import or anything
            that is not an agent.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(f"{reference!r}: give the agent as module:attribute", EXIT_CONFIG)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {module_name!r}: {exc}", EXIT_CONFIG) from None
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise CommandError(f"{reference!r}: no attribute {name!r}", EXIT_CONFIG) from None
    if not isinstance(target, Agent) and callable(target):
        target = target()
    if not isinstance(target, Agent):
        raise CommandError(
            f"{reference!r} is a {type(target).__name__}, not a fanloop Agent", EXIT_CONFIG
        )
    return target


def _options_agent(
    args: argparse.Namespace, provider: Any, extra_tools: Sequence[Any] = ()
) -> Agent[Any, Any]:
    """The agent ``fanloop run``'s options describe, without a terminal view or prompt;
    ``extra_tools`` are the ``--mcp`` servers' tools."""
    from ..tools import DEFAULT_TOOLS, default_tools, read_only_tools

    root = args.root
    return Agent(
        provider,
        system=SYSTEM_PROMPT.format(root=os.path.abspath(root or ".")),
        tools=[*(DEFAULT_TOOLS if root is None else default_tools(root=root)), *extra_tools],
        auto_approve=args.yes,
        delegation=(
            Delegation(tools=None if root is None else read_only_tools(root=root))
            if args.delegate
            else False
        ),
        memory=args.memory,
        skills=args.skills,
        workspace=root,
        limits=Limits(max_turns=args.max_turns, timeout=args.timeout),
    )


# -- the app ----------------------------------------------------------------------------------


@record(frozen=True)
class WebOptions:
    """What the page is told about the server (``GET /api/info``) and who may use it.

    Attributes:
        model: the model's name, shown on the page and used to price usage.
        demo: whether the scripted demo model answers.
        token: the token every request must carry; ``None`` on loopback without one.
        loopback: the server listens on this machine only (the ``Host`` header is checked).
    """

    model: str = ""
    demo: bool = False
    token: str | None = None
    loopback: bool = True


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("web", name).read_bytes()


def _clip(text: str) -> str:
    if len(text) <= MAX_PART_CHARS:
        return text
    return text[:MAX_PART_CHARS] + f"… [{len(text) - MAX_PART_CHARS:,} more characters]"


def _part_json(part: Any) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": _clip(part.text)}
    if isinstance(part, ThinkingPart):
        return {"type": "thinking", "text": _clip(part.text)}
    if isinstance(part, ToolCallPart):
        arguments = _clip(json.dumps(part.arguments, ensure_ascii=False, default=str))
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": arguments}
    if isinstance(part, ToolResultPart):
        return {
            "type": "tool_result",
            "call_id": part.call_id,
            "content": _clip(part.content),
            "is_error": part.is_error,
        }
    return None


def _message_json(message: Message) -> dict[str, Any]:
    parts = [p for p in (_part_json(part) for part in message.content) if p is not None]
    return {"role": message.role, "parts": parts}


def session_json(session: Session) -> dict[str, Any]:
    """A session as the page shows it: the last messages, waiting calls and spend."""
    messages = session.messages
    shown = messages[-MAX_MESSAGES_SHOWN:]
    title = session.metadata.get("title")
    return {
        "id": session.id,
        "title": title if isinstance(title, str) else None,
        "message_count": len(messages),
        "messages_omitted": len(messages) - len(shown),
        "messages": [_message_json(m) for m in shown],
        "pending": [p.to_json() for p in pending_approvals(session)],
        "spend": session_spend(session).to_json(),
    }


def build_app(
    agent: Agent[Any, Any], store: Store, options: WebOptions, *, extra: Mapping[str, Any] = {}
) -> Any:
    """The ASGI app of ``fanloop web``: the page, the protocol endpoints and the JSON API.

    ``extra`` adds routes (path → ASGI app) beside the protocol endpoints.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from .._version import __version__

    files = {name: _static(name) for name in _STATIC}
    endpoints = _protocol_apps(agent, store)
    endpoints.update(extra)

    def static(name: str, *, page: bool = False) -> Any:
        headers = {"Cache-Control": "no-cache"}
        if page:
            headers["Content-Security-Policy"] = _CSP

        async def endpoint(request: Request) -> Response:
            return Response(files[name], media_type=_STATIC[name], headers=headers)

        return endpoint

    async def info(request: Request) -> Response:
        return JSONResponse(
            {
                "version": __version__,
                "model": options.model,
                "demo": options.demo,
                "endpoints": {"ag_ui": "/ag-ui" in endpoints, "vercel": "/api/chat" in endpoints},
            }
        )

    titles = _Titles(store)

    async def sessions(request: Request) -> Response:
        if request.method == "POST":
            return await new_session(request)
        infos = (await store.list())[:MAX_SESSIONS_LISTED]
        return JSONResponse(
            [
                {
                    "id": i.id,
                    "title": i.title or await titles.of(i.id, i.message_count),
                    "updated_at": i.updated_at,
                    "message_count": i.message_count,
                }
                for i in infos
            ]
        )

    async def new_session(request: Request) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "send JSON"}, status_code=415)
        body = await _small_json(request)
        title = body.get("title") if isinstance(body, dict) else None
        session = await store.open()
        await set_session_budget(session, _ACCOUNT)
        if isinstance(title, str) and title.strip():
            await session.set_metadata(title=" ".join(title.split())[:80])
        return JSONResponse({"id": session.id}, status_code=201)

    async def one_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if len(session_id) > MAX_SESSION_ID:
            return JSONResponse({"error": "no such session"}, status_code=404)
        try:
            session = await store.load(session_id)
        except SessionNotFound:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(session_json(session))

    routes: list[Any] = [
        Route("/", static("index.html", page=True)),
        Route("/app.js", static("app.js")),
        Route("/app.css", static("app.css")),
        Route("/favicon.svg", static("favicon.svg")),
        Route("/favicon.ico", static("favicon.svg")),
        Route("/api/info", info),
        Route("/api/sessions", sessions, methods=["GET", "POST"]),
        Route("/api/sessions/{session_id}", one_session),
    ]
    routes += [Route(path, app) for path, app in endpoints.items()]
    return Guard(Starlette(routes=routes), options)


_ACCOUNT = Limits(max_turns=None)
"""A session budget with no caps: the session keeps an account of what its runs spent (shown
on the page, and kept when the session is resumed), and nothing is limited."""


async def _small_json(request: Any, limit: int = 8_192) -> Any:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    try:
        return json.loads(body or b"{}")
    except (ValueError, RecursionError):
        return None


class _Titles:
    """Titles for sessions that have none (made by another client): their first prompt."""

    def __init__(self, store: Store, *, cap: int = 1_000) -> None:
        self.store = store
        self.cap = cap
        self.known: dict[str, str | None] = {}

    async def of(self, session_id: str, message_count: int) -> str | None:
        if session_id in self.known or message_count == 0:
            return self.known.get(session_id)
        try:
            session = await self.store.load(session_id)
        except SessionNotFound:
            return None
        first = next((m for m in session.messages if m.role == "user"), None)
        text = " ".join(first.text.split())[:80] if first is not None else ""
        if len(self.known) >= self.cap:
            self.known.clear()
        self.known[session_id] = text or None
        return text or None


def _protocol_apps(agent: Agent[Any, Any], store: Store) -> dict[str, Any]:
    """``/ag-ui`` and ``/api/chat``, for those of :mod:`fanloop.ui`'s apps this build has."""
    apps: dict[str, Any] = {}
    try:
        from .. import ui
    except ImportError:
        return apps
    # An agent that approves everything itself (--yes) is left to do so; any other asks the page.
    ask_browser = not agent.auto_approve
    for path, name in (("/ag-ui", "AGUIApp"), ("/api/chat", "VercelAIApp")):
        cls = getattr(ui, name, None)
        if cls is not None:
            apps[path] = cls(agent, store=store, ask_browser=ask_browser)
    return apps


class Guard:
    """ASGI middleware: the token, the ``Host`` check on loopback, same-origin requests, and
    headers that keep the page from being framed or sniffed."""

    def __init__(self, app: Any, options: WebOptions) -> None:
        self.app = app
        self.token = None if options.token is None else options.token.encode()
        self.loopback = options.loopback
        self.stopping = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _plain(send, 403, refusal)
            return
        if self.token is not None and not self._authorised(headers):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (query.get("token") or [""])[0].encode()
            if scope["path"] == "/" and hmac.compare_digest(given, self.token):
                await _set_cookie_and_reload(send, self.token.decode())
                return
            await _plain(send, 401, "a token is needed: open the URL fanloop web printed")
            return

        started = finished = False

        async def send_with_headers(message: Any) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                ]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        async def receive_until_stopped() -> Any:
            """The client's next message, or a disconnect once the server is stopping: a
            stream still open then ends its run as it would for a client that left."""
            if self.stopping.is_set():
                return _DISCONNECT
            message: Any = _DISCONNECT
            async with anyio.create_task_group() as tg:

                async def next_message() -> None:
                    nonlocal message
                    message = await receive()
                    tg.cancel_scope.cancel()

                tg.start_soon(next_message)
                await self.stopping.wait()
                tg.cancel_scope.cancel()
            return message

        await self.app(scope, receive_until_stopped, send_with_headers)
        if started and not finished and self.stopping.is_set():
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def stop(self) -> None:
        """The server is stopping: every open request sees its client leave."""
        self.stopping.set()

    def _refusal(self, scope: Any, headers: dict[str, str]) -> str | None:
        host = headers.get("host", "")
        if self.loopback and not is_loopback(_hostname(host)):
            return "this server answers on its loopback address only"
        origin = headers.get("origin")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return "requests from another origin are refused"
        return None

    def _authorised(self, headers: dict[str, str]) -> bool:
        assert self.token is not None
        bearer = headers.get("authorization", "")
        if bearer[:7].lower() == "bearer " and hmac.compare_digest(
            bearer[7:].strip().encode(), self.token
        ):
            return True
        cookie = SimpleCookie()
        with contextlib.suppress(Exception):
            cookie.load(headers.get("cookie", ""))
        morsel = cookie.get(TOKEN_COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.token)


_DISCONNECT = {"type": "http.disconnect"}


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8000`` → ``::1``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _plain(send: Any, status: int, text: str) -> None:
    await send_body(send, status, text.encode() + b"\n", b"text/plain; charset=utf-8")


async def _set_cookie_and_reload(send: Any, token: str) -> None:
    """``/?token=T``: keep the token in a cookie and drop it from the address bar."""
    cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", b"/"),
                (b"set-cookie", cookie.encode()),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


# -- serving ----------------------------------------------------------------------------------


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its own signal handlers: the command owns Ctrl-C."""

        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    return Server


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def check_binding(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str | None:
    """The token the server asks for (``--token``, else ``$FANLOOP_WEB_TOKEN``).

    Raises:
        CommandError: with exit code 2 when a host other than loopback comes without one.
    """
    env = os.environ if environ is None else environ
    token = args.token or env.get(TOKEN_ENV, "").strip() or None
    if token is not None and len(token) < 16:
        raise CommandError("the token is too short: use at least 16 characters", EXIT_CONFIG)
    if not is_loopback(args.host) and token is None:
        raise CommandError(
            f"--host {args.host} lets other machines in: give a --token (or set {TOKEN_ENV}), "
            "e.g. --token $(python -c 'import secrets; print(secrets.token_urlsafe())')",
            EXIT_CONFIG,
        )
    return token


async def serve(
    app: Any, sock: socket.socket, *, ready: Callable[[], None], verbose: int = 0
) -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM (a second one forces the exit);
    ``ready()`` is called once those signals are caught."""
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="info" if verbose else "warning",
        access_log=verbose > 1,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = _server_class()(config)

    async def watch(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                if server.should_exit:
                    server.force_exit = True
                server.should_exit = True
                stop = getattr(app, "stop", None)
                if stop is not None:
                    stop()  # open streams end their runs, so the shutdown need not wait

    async with anyio.create_task_group() as tg:
        if sys.platform != "win32" and threading.current_thread() is threading.main_thread():
            await tg.start(watch)
        ready()
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def _url(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


async def cmd_web(args: argparse.Namespace, console: Console) -> int:
    """``fanloop web``: serve the chat page until Ctrl-C."""
    token = check_binding(args)
    for flag in ("json", "defer"):
        if getattr(args, flag, False):
            raise CommandError(
                f"--{flag} has no meaning for fanloop web: the page shows the events and asks "
                "before dangerous calls",
                EXIT_CONFIG,
            )
    if args.demo and args.agent:
        raise CommandError("give either --demo or an agent, not both", EXIT_CONFIG)
    if getattr(args, "fast", False) and not args.demo:
        raise CommandError("--fast is for --demo: it takes the demo's pauses out", EXIT_CONFIG)
    if getattr(args, "mcp", None) and (args.demo or args.agent):
        raise CommandError(
            "--mcp adds tools to the agent the options describe, not to --demo or "
            "MODULE:AGENT (give that agent its MCP tools in your code: see docs/mcp.md)",
            EXIT_CONFIG,
        )
    async with AsyncExitStack() as stack:
        store: Store
        if args.demo:
            agent, model = await _demo_agent(stack, fast=getattr(args, "fast", False))
            store = MemoryStore()
        else:
            if args.agent:
                agent = load_agent(args.agent)
            else:
                provider = make_provider(args.provider, args.model)
                stack.push_async_callback(close_provider, provider)
                agent = _options_agent(args, provider, await open_mcp(args, stack))
            model = str(getattr(agent.provider, "model", ""))
            try:
                store = make_store(store_target(args))
            except ConfigurationError as exc:
                raise CommandError(str(exc), EXIT_CONFIG) from None
            stack.push_async_callback(store.aclose)
        app = build_app(
            agent,
            store,
            WebOptions(model=model, demo=args.demo, token=token, loopback=is_loopback(args.host)),
        )
        sock = _listen(args.host, args.port)
        port = sock.getsockname()[1]
        where = "the demo model, offline" if args.demo else f"sessions in {_store_name(store)}"

        def ready() -> None:
            console.out.write(f"fanloop web: {_url(args.host, port, token)} ({where})\n")
            console.out.write("press Ctrl-C to stop\n")
            console.out.flush()

        await serve(app, sock, ready=ready, verbose=args.verbose)
        console.out.write("fanloop web: stopped\n")
        console.out.flush()
    return 0


def _store_name(store: Store) -> str:
    return "memory" if isinstance(store, MemoryStore) else store_label(store)


async def _demo_agent(stack: AsyncExitStack, *, fast: bool = False) -> tuple[Agent[Any, Any], str]:
    """The agent of ``--demo``: the scripted chat model behind a fake server on 127.0.0.1,
    driven through the real OpenAI provider; ``write_file`` works in a temporary folder.
    ``fast``: no pauses (``--fast``, what the tests run)."""
    import httpx2

    from ..providers.openai import OpenAIProvider
    from ..testing import FakeLLMServer
    from ..tools import WriteFileTool
    from ._demo import FAST, MODEL, WEB, ChatScript, chat_tools

    pace = FAST if fast else WEB

    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fanloop-web-"))
    server = FakeLLMServer(
        responder=ChatScript(),
        delta_delay=pace.delta_delay,
        chars_per_delta=pace.chars_per_delta,
        record=False,
    )
    await stack.enter_async_context(server)
    client = await stack.enter_async_context(httpx2.AsyncClient(trust_env=False, timeout=30.0))
    provider = OpenAIProvider(
        MODEL, api_key="demo", base_url=server.openai_base_url, http_client=client
    )
    agent = Agent(
        provider,
        system="You are fanloop's demo assistant.",
        tools=[WriteFileTool(root=workdir, read_cache=False)],
        delegation=Delegation(tools=chat_tools(pace)),
        memory=False,
        workspace=workdir,
        limits=Limits(max_turns=10),
    )
    return agent, MODEL
