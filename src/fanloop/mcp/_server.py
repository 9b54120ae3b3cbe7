"""Connections to MCP servers: :class:`MCPServer` and its errors.

An :class:`MCPServer` is configuration (how to reach the server, timeouts, how to name its
tools) plus the connections opened from it. ``async with server`` opens one connection and
closes it when the block ends (for a stdio server: the subprocess is stopped). The object can
be entered again afterwards, and several tasks may each hold their own connection at once:
every ``async with`` opens a fresh one, bound to the entering task through a context variable,
so an agent shared by concurrent runs can enter the server once per run and each run's tool
calls go over that run's connection. A task that did not enter the server itself (a task
started before the ``async with``) uses the server's only open connection, if it has one.
"""

from __future__ import annotations

import contextvars
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult
from mcp_types import Tool as RemoteTool

from .._log import logger
from ..errors import FanloopError
from ._inbound import Inbound, Refused
from ._limits import DEFAULT_LIMITS, MAX_LIST_PAGES, MCPLimits
from ._stdio import stdio_transport

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["MCPConnectionError", "MCPListingError", "MCPServer", "MCPServerError"]

DEFAULT_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 60.0
_STDERR_TAIL = 2000


class MCPServerError(FanloopError):
    """An MCP server could not be used (not connected, failed, or answered nonsense).

    Attributes:
        server: the server's display name.
    """

    def __init__(self, message: str = "", /, *, server: str | None = None) -> None:
        super().__init__(message)
        self.server = server


class MCPConnectionError(MCPServerError):
    """The connection to an MCP server could not be opened (raised by ``async with server``).

    Attributes:
        server: the server's display name.
        stderr: the end of what a stdio server wrote to stderr before it failed, when fanloop
            captured it (``errlog=None``).
    """

    def __init__(
        self, message: str = "", /, *, server: str | None = None, stderr: str | None = None
    ) -> None:
        super().__init__(message, server=server)
        self.stderr = stderr


class MCPListingError(MCPServerError):
    """An MCP server's tool listing broke a limit of :class:`~fanloop.mcp.MCPLimits`: too
    many tools, too many bytes, too many pages, or a page cursor seen before.

    Attributes:
        server: the server's display name.
        limit: the limit broken: ``"max_tools"``, ``"max_listing_bytes"``,
            ``"max_message_bytes"``, ``"pages"`` or ``"cursor"``.
    """

    def __init__(self, message: str = "", /, *, server: str | None = None, limit: str = "") -> None:
        super().__init__(message, server=server)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class _StdioSpec:
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | Path | None
    errlog: TextIO | None


@dataclass(frozen=True, slots=True)
class _HttpSpec:
    url: str
    headers: Mapping[str, str] | None
    http_client: httpx2.AsyncClient | None


class _Connection:
    """One session with the server, run by a task of its own.

    The SDK's transports run their I/O in task groups; an error in one of them (an HTTP
    server that vanished mid-request) would cancel the task that entered the client. So the
    client is entered by a runner task that catches whatever ends it: the task that opened
    the connection, and the run it belongs to, never see a transport failure. In-flight calls
    get the SDK's ``CONNECTION_CLOSED`` error and later calls the same, without a round trip.
    """

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.inbound = Inbound(server.limits, server.name)
        self.client: Client | None = None
        self.failure: Exception | None = None
        self.stderr: IO[bytes] | None = None
        self.previous: _Connection | None = None
        self.lost = False
        self.closed = False
        self._stack = AsyncExitStack()
        self._closing = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._reconnecting = anyio.Lock()

    async def open(self) -> None:
        """Start the runner and wait for the handshake; raise if it failed."""
        spec = self.server._spec
        try:
            if isinstance(spec, _StdioSpec) and spec.errlog is None:
                self.stderr = self._stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 - closed by the stack
            tg = self._tg = await self._stack.enter_async_context(anyio.create_task_group())
            self._stack.callback(self._closing.set)  # runs before the task group exits
            await tg.start(self._run)
        except BaseException:
            await self.close()
            raise
        if self.client is None:
            failure: Exception = (
                self.failure
                if isinstance(self.failure, Exception)
                else RuntimeError("the connection ended during the handshake")
            )
            tail = self.stderr_tail()
            await self.close()
            raise self.server._connect_error(failure, tail) from failure

    async def close(self) -> None:
        # Not shielded: a cancel scope around it would wrap the task group's own exit. The
        # SDK shields the stdio shutdown itself, so a cancelled close still stops the child.
        self.closed = True
        await self._stack.aclose()

    async def reconnect(self) -> None:
        """Open the session again after the server crashed or hung up (a stdio server is
        started again). The new runner starts in the connection's own task group, so the task
        that entered the server still owns and closes it.

        Raises:
            MCPServerError: the server could not be reached again.
        """
        async with self._reconnecting:
            if self.client is not None and not self.lost:
                return  # another task reconnected while this one waited
            if self.closed or self._tg is None:
                raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
            logger.info("mcp_server_reconnecting", server=self.server.name)
            self.lost = False
            self.failure = None
            await self._tg.start(self._run)
            if self.client is None:
                failure = self.failure or RuntimeError("the connection ended at once")
                raise MCPServerError(
                    f"MCP server {self.server.name!r} crashed or hung up, and could not be "
                    f"reached again: {_describe(failure)}",
                    server=self.server.name,
                ) from failure

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        limit = self.server.connect_timeout
        # The handshake's deadline: a scope around the client's whole life (the client's task
        # groups must sit inside it), lifted once connected. The SDK's own probe waits 10 s.
        handshake = anyio.CancelScope(deadline=anyio.current_time() + limit)
        try:
            with handshake:
                async with AsyncExitStack() as stack:
                    self.inbound.reset()
                    transport = await self.server._transport(stack, self.stderr, self.inbound)
                    # The session's default read timeout bounds list_tools too; each tool
                    # call passes its own.
                    client = Client(transport, read_timeout_seconds=limit, cache=None)
                    await stack.enter_async_context(client)
                    handshake.deadline = math.inf
                    self.client = client
                    task_status.started()
                    started = True
                    await self._closing.wait()
            if handshake.cancelled_caught and not started:
                self.failure = TimeoutError(f"no answer within {limit:g} s")
        except Exception as err:  # whatever ends the transport is reported, never raised
            self.failure = err
            if started:
                logger.warning(
                    "mcp_server_connection_lost", server=self.server.name, error=_describe(err)
                )
        finally:
            self.client = None
            if not started:
                task_status.started()

    def require_client(self) -> Client:
        if self.client is None or self.lost:
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        return self.client

    def stderr_tail(self) -> str | None:
        return _read_tail(self.stderr)


# server -> the connection the current task opened (copied into the tasks it starts)
_bound: contextvars.ContextVar[Mapping[MCPServer, _Connection]] = contextvars.ContextVar(
    "fanloop_mcp_connections", default=MappingProxyType({})
)


class MCPServer:
    """An MCP server reached over stdio or streamable HTTP; an async context manager.

    Build it with :meth:`stdio` or :meth:`http`, open it with ``async with``, then load its tools
    with :func:`~fanloop.mcp.load_mcp_tools`::

        server = MCPServer.stdio(sys.executable, ["server.py"])
        async with server:
            agent = Agent(provider, tools=await load_mcp_tools(server))
            result = await agent.run("...")

    Tools keep a reference to the server, not to one connection: they call through the
    connection of the task they run in (or the server's only open connection), so tools loaded
    once keep working when the server is entered again later.

    Attributes:
        name: a display name used in logs and error messages.
        timeout: default seconds before a tool call becomes an error result.
        connect_timeout: seconds allowed for opening the connection and listing tools.
        prefix: default prefix for tool names (see :func:`~fanloop.mcp.load_mcp_tools`).
        include: default subset of remote tool names to load.
        limits: what the server may send (:class:`~fanloop.mcp.MCPLimits`).
    """

    def __init__(
        self,
        spec: _StdioSpec | _HttpSpec,
        *,
        name: str,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        prefix: str | None = None,
        include: Sequence[str] | None = None,
        limits: MCPLimits | None = None,
    ) -> None:
        """Prefer :meth:`stdio` and :meth:`http`; this signature is not part of the API."""
        if limits is not None and not isinstance(limits, MCPLimits):
            raise TypeError(f"limits= takes an MCPLimits, not {limits!r}")
        self._spec = spec
        self.name = name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.prefix = prefix
        self.include = tuple(include) if include is not None else None
        self.limits = limits if limits is not None else DEFAULT_LIMITS
        self._open: list[_Connection] = []

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        prefix: str | None = None,
        include: Sequence[str] | None = None,
        limits: MCPLimits | None = None,
    ) -> MCPServer:
        """A server run as a subprocess that speaks MCP on its stdin and stdout.

        The subprocess is started by ``async with`` and stopped when the block ends.

        Args:
            command: the executable (``sys.executable`` for a Python server in this environment).
            args: its arguments.
            env: environment variables for the child. Following the MCP SDK, the child inherits
                only ``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM`` and ``USER`` from this
                process; pass anything else it needs (``PYTHONPATH``, API keys) here.
            cwd: the child's working directory.
            errlog: where the child's stderr goes. ``None`` (the default) keeps it out of the
                terminal: it goes to a temporary file, and its end is attached to the error
                raised when the server fails to start. Pass ``sys.stderr`` to see it.
            name: display name; defaults to the command line.
            timeout: seconds before a tool call becomes an error result (``None``: no limit).
            connect_timeout: seconds allowed for starting the server and listing its tools.
            prefix: default prefix for the loaded tools' names.
            include: default subset of tool names to load.
            limits: what the server may send: how many tools, how many bytes
                (:class:`~fanloop.mcp.MCPLimits`; its defaults when ``None``).
        """
        display = name or " ".join([Path(command).name, *args])[:80]
        spec = _StdioSpec(command, tuple(args), env, cwd, errlog)
        return cls(
            spec,
            name=display,
            timeout=timeout,
            connect_timeout=connect_timeout,
            prefix=prefix,
            include=include,
            limits=limits,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        http_client: httpx2.AsyncClient | None = None,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        prefix: str | None = None,
        include: Sequence[str] | None = None,
        limits: MCPLimits | None = None,
    ) -> MCPServer:
        """A server reached over streamable HTTP, e.g. ``http://127.0.0.1:8000/mcp``.

        Args:
            url: the MCP endpoint.
            headers: headers sent with every request (e.g. ``Authorization``).
            http_client: an ``httpx2.AsyncClient`` to use instead of fanloop's own (for auth,
                proxies, TLS); fanloop never closes it, and does not change it, so the SDK
                reads its response bodies unbounded (``limits`` still caps the tool count).
                Not combined with ``headers``.
            name: display name; defaults to the URL.
            timeout: seconds before a tool call becomes an error result (``None``: no limit).
            connect_timeout: seconds allowed for connecting and listing tools.
            prefix: default prefix for the loaded tools' names.
            include: default subset of tool names to load.
            limits: what the server may send: how many tools, how many bytes
                (:class:`~fanloop.mcp.MCPLimits`; its defaults when ``None``).

        Raises:
            ValueError: both ``headers`` and ``http_client`` were given.
        """
        if headers is not None and http_client is not None:
            raise ValueError("pass headers or http_client, not both (set headers on the client)")
        return cls(
            _HttpSpec(url, headers, http_client),
            name=name or url,
            timeout=timeout,
            connect_timeout=connect_timeout,
            prefix=prefix,
            include=include,
            limits=limits,
        )

    def __repr__(self) -> str:
        kind = "stdio" if isinstance(self._spec, _StdioSpec) else "http"
        return f"<MCPServer {kind} {self.name!r} open={len(self._open)}>"

    @property
    def connected(self) -> bool:
        """Whether this task has a live connection (its own, or the server's only one).

        ``False`` outside ``async with server`` and after the server crashed or hung up.
        """
        conn = self._connection()
        return conn is not None and conn.client is not None and not conn.lost

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Open a connection (start the subprocess) and bind it to the current task.

        Raises:
            MCPConnectionError: the server could not be started or reached, or did not answer
                the handshake within ``connect_timeout``.
        """
        conn = _Connection(self)
        await conn.open()
        bound = _bound.get()
        conn.previous = bound.get(self)
        _bound.set({**bound, self: conn})
        self._open.append(conn)
        logger.debug("mcp_server_connected", server=self.name, open=len(self._open))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close this task's connection (stop the subprocess)."""
        bound = _bound.get()
        conn = bound.get(self)
        if conn is not None:
            rest = {k: v for k, v in bound.items() if k is not self}
            if conn.previous is not None:
                rest[self] = conn.previous
            _bound.set(rest)
        elif self._open:  # exited in a context that did not enter: close the newest
            conn = self._open[-1]
        if conn is None or conn not in self._open:
            return
        self._open.remove(conn)
        try:
            await conn.close()
        except Exception as err:  # closing must not mask the block's own outcome
            logger.warning("mcp_server_close_failed", server=self.name, error=_describe(err))
        logger.debug("mcp_server_closed", server=self.name, open=len(self._open))

    async def _transport(
        self, stack: AsyncExitStack, errlog: IO[bytes] | None, inbound: Inbound
    ) -> Any:
        """The SDK transport for this server, its messages checked by ``inbound``; what it
        needs closing goes on ``stack``."""
        spec = self._spec
        if isinstance(spec, _StdioSpec):
            params = StdioServerParameters(
                command=spec.command,
                args=list(spec.args),
                env=dict(spec.env) if spec.env is not None else None,
                cwd=spec.cwd,
            )
            return stdio_transport(params, spec.errlog or errlog, inbound)  # type: ignore[arg-type]
        client = spec.http_client
        if client is None:
            # The SDK's client, with the headers given and a hook that bounds what it reads
            # (the SDK never closes a client it is given).
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(
                create_mcp_http_client(
                    headers={
                        **(spec.headers or {}),
                        "accept-encoding": "gzip, deflate",  # what the hook decodes
                    }
                )
            )
            client.event_hooks = {"request": [], "response": [inbound.on_response]}
        return streamable_http_client(spec.url, http_client=client)

    def _connect_error(self, err: Exception, stderr: str | None) -> MCPConnectionError:
        if isinstance(err, TimeoutError) or _is_mcp_error(err, REQUEST_TIMEOUT):
            reason = f"no answer within {self.connect_timeout:g} s"
        else:
            reason = _describe(err)
        message = f"could not connect to MCP server {self.name!r}: {reason}"
        if stderr:
            message += f"\n--- server stderr (end) ---\n{stderr}"
        logger.warning("mcp_server_connect_failed", server=self.name, error=reason)
        return MCPConnectionError(message, server=self.name, stderr=stderr)

    # -- calls -------------------------------------------------------------------------------

    def _connection(self) -> _Connection | None:
        conn = _bound.get().get(self)
        if conn is not None and conn in self._open:
            return conn
        if len(self._open) == 1:
            return self._open[0]
        return None

    def _live_connection(self) -> _Connection:
        conn = self._connection()
        if conn is not None:
            return conn
        if not self._open:
            raise MCPServerError(
                f"MCP server {self.name!r} is not connected; use it inside `async with server:`",
                server=self.name,
            )
        raise MCPServerError(
            f"MCP server {self.name!r} has {len(self._open)} open connections and none belongs "
            "to this task; enter the server in the task that calls its tools",
            server=self.name,
        )

    async def list_tools(self) -> list[RemoteTool]:
        """The server's tools as the MCP SDK describes them (every page).

        The listing is bounded by :attr:`limits` (tools and bytes, all pages together), by
        100 pages, and by ``connect_timeout`` for the whole of it; a page over a limit is
        refused before the SDK decodes it.

        Raises:
            MCPListingError: the listing broke a limit (the message names the option to raise).
            MCPServerError: not connected, the server failed, or it did not answer within
                ``connect_timeout``.
        """
        conn = self._live_connection()
        inbound = conn.inbound
        tools: list[RemoteTool] = []
        cursors: set[str] = set()
        cursor: str | None = None
        start = inbound.listing_bytes
        inbound.take_refused()
        try:
            with anyio.fail_after(self.connect_timeout):
                if conn.client is None or conn.lost:
                    await conn.reconnect()
                client = conn.require_client()
                for _ in range(MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    self._check_listing(len(tools), inbound.listing_bytes - start)
                    cursor = page.next_cursor
                    if cursor is None:
                        return tools
                    if cursor in cursors:
                        raise MCPListingError(
                            f"MCP server {self.name!r} sent the same page cursor twice: its "
                            "listing would never end",
                            server=self.name,
                            limit="cursor",
                        )
                    cursors.add(cursor)
                raise MCPListingError(
                    f"MCP server {self.name!r} lists its tools on more than {MAX_LIST_PAGES} pages",
                    server=self.name,
                    limit="pages",
                )
        except MCPListingError:
            raise
        except Exception as err:
            if _is_mcp_error(err, CONNECTION_CLOSED):
                conn.lost = True
            refused = inbound.take_refused()
            if refused is not None:
                raise _listing_error(self.name, refused) from err
            reason = (
                f"no answer within {self.connect_timeout:g} s"
                if isinstance(err, TimeoutError)
                else _describe(err)
            )
            raise MCPServerError(
                f"MCP server {self.name!r} failed to list its tools: {reason}",
                server=self.name,
            ) from err

    def _check_listing(self, count: int, size: int) -> None:
        """Raise :class:`MCPListingError` when a listing of ``count`` tools and ``size`` bytes
        (so far) breaks a limit."""
        limits = self.limits
        if count > limits.max_tools:
            raise MCPListingError(
                f"MCP server {self.name!r} lists more than {limits.max_tools} tools "
                f"(MCPLimits(max_tools={limits.max_tools})); raise it to load them (and pick the "
                "ones to use with include=)",
                server=self.name,
                limit="max_tools",
            )
        if size > limits.max_listing_bytes:
            raise MCPListingError(
                f"MCP server {self.name!r} sent a tool listing of {size:,} bytes "
                f"(MCPLimits(max_listing_bytes={limits.max_listing_bytes:,})); raise it to load "
                "this server's tools",
                server=self.name,
                limit="max_listing_bytes",
            )

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, timeout: float | None
    ) -> CallToolResult:
        """Call a tool by its remote name and return the SDK's raw result.

        A connection lost since the last call (the server crashed or hung up) is opened again
        first; a call in flight when it was lost is not retried (its outcome is unknown).

        Raises:
            MCPServerError: not connected, or the server could not be reached again.
            mcp.MCPError: the server answered with a protocol error, the connection closed
                (``CONNECTION_CLOSED``), or ``timeout`` passed (``REQUEST_TIMEOUT``).
        """
        conn = self._live_connection()
        if conn.client is None or conn.lost:
            await conn.reconnect()  # a server that crashed since the last call starts again
        client = conn.require_client()
        # None would fall back to the session's default (connect_timeout): spell "no limit".
        limit = math.inf if timeout is None else timeout
        try:
            return await client.call_tool(name, dict(arguments), read_timeout_seconds=limit)
        except MCPError as err:
            if err.code == CONNECTION_CLOSED:
                conn.lost = True  # a closed session never reopens: fail later calls at once
            raise

    def _take_refused(self) -> Refused | None:
        """The last limit this task's connection refused a message for, once."""
        conn = self._connection()
        return conn.inbound.take_refused() if conn is not None else None

    def stderr_tail(self) -> str | None:
        """The end of this task's stdio server stderr, when fanloop captures it."""
        conn = self._connection()
        return conn.stderr_tail() if conn is not None else None


def _read_tail(file: IO[bytes] | None) -> str | None:
    if file is None or file.closed:
        return None
    try:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - _STDERR_TAIL))
        data = file.read()
    except OSError:
        return None
    text = data.decode("utf-8", "replace").strip()
    return text or None


def _listing_error(server: str, refused: Refused) -> MCPListingError:
    return MCPListingError(str(refused), server=server, limit=refused.limit)


def _is_mcp_error(err: BaseException, code: int) -> bool:
    """Whether ``err`` is, or is a group holding, an SDK error with this code."""
    if isinstance(err, BaseExceptionGroup):
        return any(_is_mcp_error(e, code) for e in err.exceptions)
    return isinstance(err, MCPError) and err.code == code


def _describe(err: BaseException) -> str:
    """A one-line account of an error, unwrapping exception groups."""
    if isinstance(err, BaseExceptionGroup) and err.exceptions:
        return "; ".join(_describe(e) for e in err.exceptions)
    if isinstance(err, MCPError):
        return f"{err.message} (MCP error {err.code})"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
