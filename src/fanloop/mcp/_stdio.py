"""The stdio transport: an MCP server as a subprocess, its messages read by fanloop.

The MCP SDK's own ``stdio_client`` decodes each line of the server's stdout on the event loop,
however long it is, and joins the pieces of a long line by copying all of them again for each
new piece. This one is the same transport with another reader: lines are found in one pass,
a line longer than ``max_message_bytes`` is never kept, and each line goes through
:class:`~fanloop.mcp._inbound.Inbound` (a large one is decoded in a worker thread). Starting and
stopping the process (its own process group, the MCP shutdown sequence, every wait bounded) is
the SDK's, reused as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any

import anyio
import anyio.lowlevel
from mcp.client.stdio import (
    StdioServerParameters,
    _aclose_all,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

from .._log import logger
from ._inbound import Inbound

__all__ = ["stdio_transport"]

_WRITER_FLUSH_TIMEOUT = 0.5


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: IO[Any], inbound: Inbound
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server and yield the SDK's ``(read_stream, write_stream)`` pair.

    Raises:
        OSError: the server process could not be started.
    """
    command = await _get_executable_command(params.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=params.args,
        env=get_default_environment() | (params.env or {}),
        errlog=errlog,  # type: ignore[arg-type]
        cwd=params.cwd,
    )
    # No awaits until the task group is entered: a cancellation there would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    limit = inbound.limits.max_message_bytes

    async def read() -> None:
        assert process.stdout is not None
        stdout = process.stdout
        try:
            try:
                buffer = bytearray()
                scanned = 0  # the bytes of `buffer` known to hold no newline
                async for chunk in stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n", scanned)) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        scanned = 0
                        if len(line) > limit:
                            return too_large()
                        if line.strip():
                            await read_writer.send(await inbound.decode(line))
                    scanned = len(buffer)
                    if scanned > limit:
                        return too_large()
            finally:
                read_writer.close()  # the end of the session: requests still waiting fail
                await _drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session or the transport is gone

    def too_large() -> None:
        """A message over the limit ends the session, without being kept or decoded."""
        logger.warning("mcp_message_too_large", server=inbound.server, limit=limit)
        inbound.too_large()

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    message = session_message.message
                    inbound.sent(message)
                    data = message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still be alive: end the read side, so no request waits forever.
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await _stop_server_process(process)
        await _aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded, every wait inside bounded: a cancelled caller never leaks the process.
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()
