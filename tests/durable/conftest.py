"""Fixtures for the durable tests: one DBOS system database per session, the fake models, and
worker processes (real ``python`` processes running DBOS, killed with SIGKILL where a test
says so). Skipped, with the reason, when PostgreSQL or DBOS is missing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from durable_helpers import Env, drop_database, new_database_url, pg_unreachable, respond

from fanloop.testing import FakeLLMServer


@pytest.fixture(scope="session")
def dbos_database() -> Iterator[str]:
    """The URL of this session's DBOS system database (created and migrated; dropped after)."""
    if (reason := pg_unreachable()) is not None:
        pytest.skip(reason)
    from dbos import DBOS

    name, url = new_database_url()
    try:
        DBOS.migrate(url)
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="module")
def env(dbos_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """The fake models (one fast, one streaming slowly) and a place for the tools' marks."""
    with (
        FakeLLMServer(responder=respond) as server,
        FakeLLMServer(responder=respond, chars_per_delta=6, delta_delay=0.02) as slow,
    ):
        environment = Env(dbos_database, server, slow, tmp_path_factory.mktemp("marks"))
        try:
            yield environment
        finally:
            for worker in environment.workers:
                worker.stop()
        assert not server.errors
        assert not slow.errors


@pytest.fixture
async def client(dbos_database: str) -> AsyncIterator[Any]:
    """A ``DBOSClient`` on the session's database: the test process reads runs through it."""
    from dbos import DBOSClient

    dbos_client = DBOSClient(system_database_url=dbos_database, use_listen_notify=True)
    try:
        yield dbos_client
    finally:
        dbos_client.destroy()
