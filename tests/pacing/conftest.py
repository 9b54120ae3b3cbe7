"""Fixtures for the pacing tests: a Redis key of their own, or a skip with the reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pacing_workers import REDIS_URL


def redis_reason() -> str | None:
    """Why Redis cannot be used here, or ``None``."""
    try:
        import redis
    except ImportError:
        return "the redis package is not installed (pip install 'fanloop[redis]')"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        client.close()
    except Exception as exc:
        return f"no Redis server at {REDIS_URL}: {exc}"
    return None


@pytest.fixture
def redis_key() -> Iterator[str]:
    """A fresh pacing key on the local Redis; its keys are deleted afterwards."""
    reason = redis_reason()
    if reason is not None:
        pytest.skip(reason)
    key = f"test-{uuid.uuid4().hex[:12]}"
    yield key
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.delete(f"fanloop:pacing:{{{key}}}:state", f"fanloop:pacing:{{{key}}}:leases")
    client.close()
