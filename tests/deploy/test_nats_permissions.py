"""The NATS users of deploy/components/nats, on a real nats-server: each service can do its work through
tenon's own event log code (provision the streams, publish what it writes, consume and ack, dead-letter, hold
its lease, keep its snapshots), and cannot write another service's subjects or delete the log; the operator
reads, never writes."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import nats.errors
import pytest
import yaml

from devtools.broker import LocalNatsServer
from proto import subjects
from proto.events import PendingBatch
from tenon.runtime.eventlog import ConsumerSettings, EventLogError, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]
USERS = (
    "pod-watcher",
    "scheduler",
    "disruption",
    "launcher-capi",
    "launcher-ec2",
    "interruption-handler",
    "operator",
)
PASSWORDS = {user: secrets.token_hex(16) for user in USERS}


def authorization_block() -> str:
    """The ``authorization`` block of the NATS configuration the capi overlay renders."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "deploy" / "overlays" / "capi")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    [config] = [d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"] == "nats-config"]
    text: str = config["data"]["nats.conf"]
    block = re.search(r"^authorization \{.*^\}$", text, re.S | re.M)
    assert block, "nats.conf: no authorization block"
    return block[0]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNatsServer]:
    directory = tmp_path_factory.mktemp("nats")
    config = directory / "tenon.conf"
    config.write_text("max_payload: 8MB\n" + authorization_block() + "\n")
    with pytest.MonkeyPatch.context() as patch:  # the block reads each password from the server's environment
        for user, password in PASSWORDS.items():
            patch.setenv(user.upper().replace("-", "_") + "_PASSWORD", password)
        (directory / "store").mkdir()
        server = LocalNatsServer(store_dir=directory / "store", extra_args=("--config", str(config))).start()
    try:
        yield server
    finally:
        server.cleanup()


def as_user(broker: LocalNatsServer, user: str) -> ConnectionSettings:
    return ConnectionSettings(
        servers=(broker.url,),
        name=f"test-{user}",
        user=user,
        password=PASSWORDS[user],
        max_reconnect_attempts=0,
    )


@pytest.fixture
async def logs(broker: LocalNatsServer) -> AsyncIterator[dict[str, JetStreamEventLog]]:
    opened = {}
    try:
        for user in ("scheduler", "pod-watcher", "disruption"):
            opened[user] = await JetStreamEventLog.connect(
                as_user(broker, user)
            )  # provisions: create or update
        opened["operator"] = await JetStreamEventLog.connect(as_user(broker, "operator"), provision=False)
        yield opened
    finally:
        for log in opened.values():
            await log.close()


def batch(name: str) -> PendingBatch:
    now = datetime.now(UTC)
    return PendingBatch(
        id=f"batch-{name}-{secrets.token_hex(4)}",
        decided_at=now,
        producer="pod-watcher",
        batch_id=name,
        pods=(),
        window_opened_at=now,
        window_closed_by="idle",
    )


async def test_services_publish_consume_ack_and_dead_letter(logs: dict[str, JetStreamEventLog]) -> None:
    event = batch("consumed")
    await logs["pod-watcher"].publish(subjects.PENDING, event)
    handled: asyncio.Queue[str] = asyncio.Queue()

    async def scheduler_handles(record: LogRecord) -> None:
        handled.put_nowait(record.decode().id)

    async def disruption_fails(record: LogRecord) -> None:
        raise RuntimeError("poison")

    runners = [
        logs["scheduler"].consumer(
            ConsumerSettings("perm-scheduler", (subjects.PENDING,)), scheduler_handles
        ),
        logs["disruption"].consumer(
            ConsumerSettings("perm-disruption", (subjects.PENDING,), max_deliver=1, backoff=(0.0,)),
            disruption_fails,
        ),
    ]
    for runner in runners:
        await runner.start()
    try:
        assert await asyncio.wait_for(handled.get(), 20) == event.id
        await until(lambda: runners[1].dead_lettered, 10, what="disruption's refusal dead-lettered")
    finally:
        for runner in runners:
            await runner.stop()
    letters = [
        r async for r in logs["operator"].read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM)
    ]
    assert [r.subject for r in letters] == [f"tenon.deadletter.{subjects.EVENTS_STREAM}.perm-disruption"]


async def test_a_service_holds_its_lease_and_keeps_its_snapshots(logs: dict[str, JetStreamEventLog]) -> None:
    kv = await logs["scheduler"].key_value("tenon_leases", ttl=6.0)
    revision = await kv.create("scheduler-perm", b"scheduler-1")
    revision = await kv.update("scheduler-perm", b"scheduler-1", revision=revision)
    await kv.delete("scheduler-perm", revision=revision)
    store = logs["scheduler"].snapshots()
    for generation in range(3):  # the third save purges the first generation
        await store.save("scheduler", f"state {generation}".encode(), format="test", covers=generation)
    loaded = await store.load("scheduler")
    assert loaded is not None and loaded.data == b"state 2"


async def _refused(
    caplog: pytest.LogCaptureFixture, log: JetStreamEventLog, subject: str, attempt: object
) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises((nats.errors.Error, TimeoutError)):
        await attempt  # type: ignore[misc]
    said = f'permissions violation for publish to "{subject.lower()}"'
    await until(  # the server says why on the connection, asynchronously
        lambda: any(said in r.getMessage().lower() for r in caplog.records),
        2,
        interval=0.02,
        what=f"a permissions violation reported for {subject}",
    )


async def test_a_service_cannot_write_another_services_subjects_or_delete_the_log(
    logs: dict[str, JetStreamEventLog], caplog: pytest.LogCaptureFixture
) -> None:
    pod_watcher = logs["pod-watcher"]
    forged = "tenon.nodeclaim.default-forged"
    await _refused(caplog, pod_watcher, forged, pod_watcher.js.publish(forged, b"{}", timeout=1.0))
    deleting = f"$JS.API.STREAM.DELETE.{subjects.EVENTS_STREAM}"
    await _refused(caplog, pod_watcher, deleting, pod_watcher.js.delete_stream(subjects.EVENTS_STREAM))
    snapshot = "tenon.snapshot.scheduler.manifest"
    await _refused(caplog, pod_watcher, snapshot, pod_watcher.js.publish(snapshot, b"{}", timeout=1.0))
    info = await logs["scheduler"].js.stream_info(subjects.EVENTS_STREAM, subjects_filter=forged)
    assert not (info.state.subjects or {})  # nothing landed, and the stream is still there


async def test_the_operator_reads_the_log_and_writes_nothing(
    logs: dict[str, JetStreamEventLog], caplog: pytest.LogCaptureFixture
) -> None:
    event = batch("read-by-operator")
    await logs["pod-watcher"].publish(subjects.PENDING, event)
    read = [r.decode().id async for r in logs["operator"].read(subjects.PENDING)]
    assert event.id in read
    operator = logs["operator"]
    await _refused(
        caplog, operator, subjects.PENDING, operator.js.publish(subjects.PENDING, b"{}", timeout=1.0)
    )


async def test_a_wrong_password_is_refused(broker: LocalNatsServer, caplog: pytest.LogCaptureFixture) -> None:
    settings = ConnectionSettings(
        servers=(broker.url,),
        user="scheduler",
        password="not-it",
        max_reconnect_attempts=0,
        connect_timeout=1.0,
    )
    with caplog.at_level(logging.WARNING), pytest.raises(EventLogError, match="cannot reach NATS"):
        await JetStreamEventLog.connect(settings)
    assert any("Authorization Violation" in r.getMessage() for r in caplog.records)
