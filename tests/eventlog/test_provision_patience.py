"""A service that starts while the broker cannot provision streams yet (a cluster electing its meta leader, a
server without JetStream) asks again with backoff, says why while it waits, and after its patience fails with
one EventLogError naming the stream (``tenon run`` prints it in one line and exits 1), never a traceback."""

from __future__ import annotations

import logging
import socket
import subprocess
from collections.abc import Iterator

import pytest

from devtools.broker import free_port, nats_server_binary
from tenon.runtime.eventlog import EventLogError
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.support.waiting import until_sync


@pytest.fixture
def broker_without_jetstream() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"nats://127.0.0.1:{port}"

        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        until_sync(listening, 10, what="nats-server listening")
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def test_provisioning_is_retried_then_fails_in_one_line(
    broker_without_jetstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    event_log = await JetStreamEventLog.connect(
        ConnectionSettings(servers=(broker_without_jetstream,)), provision=False
    )
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(EventLogError) as failed:
            await event_log.provision(patience=2.0)
        assert str(failed.value).startswith("cannot provision stream TENON_EVENTS: ")
        assert "\n" not in str(failed.value)
        retries = [r for r in caplog.records if r.getMessage().startswith("the broker cannot provision")]
        assert retries, "no retry was logged before giving up"
    finally:
        await event_log.close()
