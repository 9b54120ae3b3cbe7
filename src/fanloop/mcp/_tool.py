"""MCP tools as ordinary fanloop tools: :class:`MCPTool`, :func:`load_mcp_tools`.

A call never raises out of :meth:`MCPTool.run`: a server error, a crashed server, a closed
connection or a call that passes its timeout all come back as a :class:`~fanloop.ToolResult`
with ``is_error=True`` and a message the model can read.

Images (and PDF resources) a server returns reach the model as they are, in
``ToolResult.parts``, within the limits of :mod:`fanloop.messages`.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pydantic
from mcp import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp_types import Tool as RemoteTool

from .._log import logger
from ..errors import ConfigurationError
from ..messages import (
    IMAGE_MEDIA_TYPES,
    MAX_PART_BYTES,
    MAX_RESULT_PARTS,
    DocumentPart,
    ImagePart,
    media_base64,
    sniff_image,
)
from ..tools.base import Tool, ToolResult, compile_validator
from ._server import MCPServer, MCPServerError, _describe

__all__ = ["MCPTool", "load_mcp_tools", "open_mcp_tools"]

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64
_THREAD_DECODE = 1 << 20
"""Results carrying more base64 than this are converted in a worker thread."""


class MCPTool(Tool):
    """A tool that lives on an MCP server; calling it calls the server.

    Built by :func:`load_mcp_tools`. ``dangerous`` is ``False`` and ``concurrent_safe`` is
    ``True`` only when the server marks the tool read-only (``annotations.read_only_hint``);
    both are plain attributes, so an application that trusts a server may change them.

    Attributes:
        server: the :class:`MCPServer` the tool is called through.
        remote_name: the tool's name on the server (``name`` may carry a prefix).
        read_only: the server marked the tool read-only.
        annotations: the server's hints as a plain dict (``read_only_hint``,
            ``destructive_hint``, ``idempotent_hint``, ``open_world_hint``, ``title``).
    """

    def __init__(
        self,
        server: MCPServer,
        remote: RemoteTool,
        *,
        name: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Wrap one tool of ``server`` as listed by the SDK.

        Args:
            server: the server to call.
            remote: the SDK's description of the tool.
            name: the name the model sees; defaults to the remote name.
            timeout: seconds before a call becomes an error result (``None``: no limit).
        """
        self.server = server
        self.remote_name = remote.name
        self.name = name or remote.name
        self.description = remote.description or remote.title or ""
        self.parameters = dict(remote.input_schema)
        hints = remote.annotations
        self.annotations: dict[str, Any] = (
            hints.model_dump(exclude_none=True) if hints is not None else {}
        )
        self.read_only = bool(hints is not None and hints.read_only_hint)
        self.dangerous = not self.read_only
        self.concurrent_safe = self.read_only
        self.timeout = timeout

    async def run(self, **kwargs: Any) -> ToolResult:
        """Call the remote tool; every failure becomes an error result."""
        try:
            result = await self.server.call_tool(self.remote_name, kwargs, timeout=self.timeout)
        except MCPError as err:
            return self._failed(err)
        except MCPServerError as err:
            logger.warning("mcp_tool_unavailable", tool=self.name, error=str(err))
            return ToolResult(str(err), is_error=True)
        except Exception as err:  # the transport's errors are many; none may escape
            logger.info("mcp_tool_failed", tool=self.name, error=repr(err))
            return ToolResult(
                f"MCP tool {self.name!r} failed: {_describe(err)}",
                is_error=True,
            )
        convert = partial(convert_result, result, tool=self.name, server=self.server.name)
        if _binary_chars(result) > _THREAD_DECODE:  # decoding megabytes: off the event loop
            return await anyio.to_thread.run_sync(convert, abandon_on_cancel=True)
        return convert()

    def _failed(self, err: MCPError) -> ToolResult:
        server = self.server.name
        if err.code == REQUEST_TIMEOUT:
            logger.info("mcp_tool_timeout", tool=self.name, server=server, timeout=self.timeout)
            limit = f" within {self.timeout:g} s" if self.timeout is not None else ""
            text = f"MCP tool {self.name!r} did not answer{limit}."
        elif err.code == CONNECTION_CLOSED:
            refused = self.server._take_refused()
            logger.warning(
                "mcp_server_connection_closed",
                tool=self.name,
                server=server,
                stderr=self.server.stderr_tail(),
                refused=str(refused) if refused is not None else None,
            )
            why = f" ({refused})" if refused is not None else " (it may have crashed)"
            text = (
                f"MCP server {server!r} closed the connection{why}; "
                f"tool {self.name!r} is unavailable."
            )
        else:
            logger.info("mcp_tool_error", tool=self.name, server=server, code=err.code)
            text = f"MCP tool {self.name!r} failed: {err.message} (MCP error {err.code})"
        return ToolResult(text, is_error=True)


def convert_result(result: CallToolResult, *, tool: str, server: str) -> ToolResult:
    """Turn the SDK's ``CallToolResult`` into a :class:`~fanloop.ToolResult`.

    Text blocks are joined with newlines; when there is no text at all, the structured content
    is given as JSON. Images (PNG, JPEG, GIF, WebP; bytes that are plainly another of these
    types go as that type) and PDF resources pass through to the model in ``parts`` while they
    fit the limits (:data:`~fanloop.messages.MAX_RESULT_PARTS` parts,
    :data:`~fanloop.messages.MAX_PART_BYTES` in all); the rest, audio and other binary
    resources are summarised in one line each (saying why an image was not passed on).
    Embedded text resources are included with their URI. ``is_error`` is carried over, and the
    structured content (when any) is kept in ``metadata["structured_content"]``. Never raises.
    """
    parts: list[str] = []
    media = _Media()
    has_text = False
    for block in result.content:
        if isinstance(block, TextContent):
            has_text = True
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            line = media.add(block.data, block.mime_type, None)
            if line:
                parts.append(line)
        elif isinstance(block, AudioContent):
            parts.append(f"[audio: {block.mime_type}, {_b64_size(block.data)} bytes]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link: {block.name} <{block.uri}>]")
        elif isinstance(block, EmbeddedResource):
            res = block.resource
            if isinstance(res, TextResourceContents):
                has_text = True
                parts.append(f"[resource <{res.uri}>]\n{res.text}")
            elif isinstance(res, BlobResourceContents):
                mime = res.mime_type or "application/octet-stream"
                line = media.add(res.blob, mime, str(res.uri))
                if line:
                    parts.append(line)
        else:  # a block type newer than this code
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    structured = result.structured_content
    if structured is not None and not has_text:
        parts.insert(0, json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if result.is_error and not text:
        text = f"MCP tool {tool!r} failed without a message."
    metadata: dict[str, Any] = {"mcp_server": server}
    if structured is not None:
        metadata["structured_content"] = structured
    return ToolResult(text, is_error=result.is_error, metadata=metadata, parts=tuple(media.parts))


def _b64_size(data: str) -> int:
    data = data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def _binary_chars(result: CallToolResult) -> int:
    """The base64 characters of a result's images, audio and binary resources."""
    n = 0
    for block in result.content:
        if isinstance(block, ImageContent | AudioContent):
            n += len(block.data)
        elif isinstance(block, EmbeddedResource) and isinstance(
            block.resource, BlobResourceContents
        ):
            n += len(block.resource.blob)
    return n


class _Media:
    """The images and PDFs of one result that pass through, within the limits."""

    def __init__(self) -> None:
        self.parts: list[ImagePart | DocumentPart] = []
        self.total = 0

    def add(self, data: str, mime: str, uri: str | None) -> str | None:
        """Pass ``data`` (base64) on as a part; else the line that summarises it."""
        mime = mime.lower()
        is_image = mime in IMAGE_MEDIA_TYPES
        size = _b64_size(data)
        label = f"resource <{uri}>" if uri is not None else "image"
        summary = f"[{label}: {mime}, {size} bytes"
        if not is_image and mime != "application/pdf":
            return summary + "]"
        if len(self.parts) >= MAX_RESULT_PARTS:
            return summary + f"; not shown: over {MAX_RESULT_PARTS} images and documents]"
        if self.total + size > MAX_PART_BYTES:
            return summary + f"; not shown: over {MAX_PART_BYTES // (1 << 20)} MiB in all]"
        try:
            raw = binascii.a2b_base64(data)  # lenient about line breaks, as servers send them
        except (binascii.Error, ValueError):
            return summary + "; not shown: not valid base64]"
        try:
            part: ImagePart | DocumentPart
            if is_image:
                # Bytes that are plainly another image type go as that type (a mislabelled
                # image would make the provider refuse the whole request).
                part = ImagePart(data=raw, media_type=sniff_image(raw) or mime)
            else:
                part = DocumentPart(data=raw, title=_title(uri))
        except pydantic.ValidationError as exc:
            return summary + f"; not shown: {exc.errors()[0]['msg']}]"
        media_base64(part)  # encoded for the wire here, in the worker thread for big results
        self.parts.append(part)
        self.total += len(raw)
        return None


def _title(uri: str | None) -> str | None:
    """A document's title: the last segment of its URI."""
    if not uri:
        return None
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return name[:256] or None


def _local_name(remote: str, prefix: str | None) -> str:
    name = f"{prefix}_{remote}" if prefix else remote
    return _NAME_OK.sub("_", name)[:_MAX_NAME]


async def load_mcp_tools(
    server: MCPServer,
    *,
    prefix: str | None = None,
    include: Iterable[str] | None = None,
    timeout: float | None = None,
) -> list[Tool]:
    """List an open server's tools and wrap each as a :class:`~fanloop.Tool`.

    Args:
        server: an :class:`MCPServer` inside its ``async with`` block.
        prefix: prepended to each tool's name with an underscore (``prefix="fs"`` turns
            ``read`` into ``fs_read``), to keep apart the tools of several servers. Names are
            also made safe for model APIs: characters outside ``[A-Za-z0-9_-]`` become ``_``.
            Defaults to the server's ``prefix``.
        include: load only these tools (remote names); defaults to the server's ``include``,
            or every tool.
        timeout: seconds before a call becomes an error result; defaults to the server's
            ``timeout`` (60 s unless set).

    Returns:
        One :class:`MCPTool` per remote tool, in the server's order. A tool over the
        server's ``MCPLimits(max_tool_bytes=...)``, or whose input schema is not a valid JSON
        Schema, is skipped with an ``mcp_tool_skipped`` warning. Each tool's schema is
        checked and compiled in a worker thread.

    Raises:
        MCPListingError: the listing broke a limit of the server's
            :class:`~fanloop.mcp.MCPLimits` (the message names the one to raise).
        MCPServerError: the server is not open, failed, or did not answer.
        ConfigurationError: ``include`` names a tool the server does not have, or two tools
            end up with the same name.
    """
    prefix = prefix if prefix is not None else server.prefix
    wanted = tuple(include) if include is not None else server.include
    call_timeout = timeout if timeout is not None else server.timeout
    remote = await server.list_tools()
    if wanted is not None:
        available = {t.name for t in remote}
        missing = [n for n in wanted if n not in available]
        if missing:
            raise ConfigurationError(
                f"MCP server {server.name!r} has no tool {', '.join(map(repr, missing))}; "
                f"it has: {', '.join(sorted(available)) or 'none'}"
            )
        remote = [t for t in remote if t.name in wanted]
    tools = await anyio.to_thread.run_sync(
        partial(_wrap, server, remote, prefix=prefix, timeout=call_timeout),
        abandon_on_cancel=True,
    )
    logger.debug("mcp_tools_loaded", server=server.name, count=len(tools))
    return tools


def _wrap(
    server: MCPServer, remote: list[RemoteTool], *, prefix: str | None, timeout: float | None
) -> list[Tool]:
    """The listed tools as :class:`MCPTool` objects, each measured and its schema compiled.

    Run in a worker thread (the run can leave it): what a server lists is untrusted, and
    checking a schema against its metaschema is CPU work. A tool over ``max_tool_bytes``, or
    with a schema that is invalid or nested too deeply, is skipped with a warning.
    """
    limit = server.limits.max_tool_bytes
    tools: list[Tool] = []
    seen: dict[str, str] = {}
    for spec in remote:
        name = _local_name(spec.name, prefix)
        tool = MCPTool(server, spec, name=name, timeout=timeout)
        problem = _problem(spec, tool, limit)
        if problem is not None:
            logger.warning(
                "mcp_tool_skipped", server=server.name, tool=spec.name[:_MAX_NAME], reason=problem
            )
            continue
        if name in seen:
            raise ConfigurationError(
                f"MCP server {server.name!r}: tools {seen[name]!r} and {spec.name!r} would both "
                f"be named {name!r}; pass include= to choose"
            )
        seen[name] = spec.name
        tools.append(tool)
    return tools


def _problem(spec: RemoteTool, tool: MCPTool, limit: int) -> str | None:
    """Why a listed tool is not loaded, or ``None``."""
    try:
        size = len(spec.model_dump_json(by_alias=True, exclude_none=True))
    except (ValueError, RecursionError):  # pydantic's serialisation errors are ValueErrors
        return "its description cannot be measured (nested too deeply?)"
    if size > limit:
        return (
            f"it takes {size:,} bytes, over MCPLimits(max_tool_bytes={limit:,}); raise it to "
            "load this tool"
        )
    try:
        compile_validator(tool)
    except ConfigurationError as exc:
        return str(exc)
    except RecursionError:
        return "its input schema is nested too deeply"
    return None


@asynccontextmanager
async def open_mcp_tools(servers: Sequence[MCPServer]) -> AsyncIterator[list[Tool]]:
    """Open several servers, load all their tools, and close the servers at the end.

    Each server's own ``prefix``, ``include`` and ``timeout`` apply. This is the way for code
    that owns servers (an agent, once per run) to get their tools::

        async with open_mcp_tools([github, files]) as tools:
            ...

    Raises:
        MCPConnectionError: a server could not be opened (those already open are closed).
        ConfigurationError: two servers offer a tool with the same name (use ``prefix``).
    """
    async with AsyncExitStack() as stack:
        tools: list[Tool] = []
        owner: dict[str, str] = {}
        for server in servers:
            await stack.enter_async_context(server)
            for t in await load_mcp_tools(server):
                if t.name in owner:
                    raise ConfigurationError(
                        f"tool {t.name!r} is offered by MCP servers {owner[t.name]!r} and "
                        f"{server.name!r}; give one of them a prefix"
                    )
                owner[t.name] = server.name
                tools.append(t)
        yield tools
