"""What a socket holds, asked without reading it: shared by both transports' guards against
bytes nobody asked for (:mod:`~fanloop.providers._idle`), and light to import (the ``aiohttp``
transport's guard needs nothing of ``httpcore2``, about 50 ms to import with what it loads)."""

from __future__ import annotations

import select
from typing import Any

__all__ = ["socket_readable"]


def socket_readable(sock: Any) -> bool:
    """Whether ``sock`` has bytes (or an end of stream) waiting to be read, without reading.

    A socket that is gone counts as readable: a connection on it must not be reused.
    """
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return True
    poller = select.poll()  # not select(): descriptors over 1023 are common with big pools
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
