"""The broker of the local stack (one NATS user per service, permissions from proto/registry.py) refuses an
event from an identity that does not own it: the launcher's identity cannot write ``NodeClaimDrained``, though
it writes its own steps of the same claim; a client without credentials reads as the operator and writes
nothing, or is refused outright when the stack allows no anonymous client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest

from devtools.broker import LOCAL_MAX_PAYLOAD, LocalNatsServer
from devtools.nats_permissions import OPERATOR, Identities
from proto import events as ev
from proto import subjects
from tenon.runtime.claims import append_claim_event
from tenon.runtime.eventlog import EventLogError
from tenon.runtime.eventlog.connection import ConnectionSettings, inbox_prefix
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.trust.identities import broker_said, connect_as

IDENTITIES = Identities()
CLAIM = "default-trust"


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalNatsServer]:
    """The local stack's broker configuration: identities on, anonymous clients are the operator."""
    config = IDENTITIES.authorization(anonymous=OPERATOR)
    with LocalNatsServer(max_payload=LOCAL_MAX_PAYLOAD, config=config) as server:
        yield server


def planned() -> ev.NodeClaimPlanned:
    choice = ev.InstanceChoice("c3-4", None, "on-demand", 0.1)
    return make_event(
        ev.NodeClaimPlanned,
        producer="scheduler",
        key=(CLAIM, "planned"),
        nodeclaim=CLAIM,
        nodepool="default",
        node_class="default",
        choice=choice,
        fallbacks=(),
        pods=("default/p",),
        requirements=(),
        labels={},
    )


def step(event_type: type[ev.NodeClaimEvent], producer: str, **fields: object) -> ev.NodeClaimEvent:
    return make_event(
        event_type, producer=producer, key=(CLAIM, event_type.__name__), nodeclaim=CLAIM, **fields
    )


async def test_the_launchers_identity_cannot_write_drained_but_writes_its_own_steps(
    broker: LocalNatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = await connect_as(broker.url, IDENTITIES, "scheduler", provision=True)
    launcher = await connect_as(broker.url, IDENTITIES, "launcher-capi")
    try:
        first = await append_claim_event(scheduler, planned(), expected=0)
        launched = step(
            ev.NodeClaimLaunched,
            "launcher-capi",
            provider_id="capi://m-1",
            instance_type="c3-4",
            machine="m-1",
        )
        second = await append_claim_event(launcher, launched, expected=first.sequence)
        assert second.sequence > first.sequence  # the identity is valid: its own step is stored

        forged = step(ev.NodeClaimDrained, "disruption", node="n-1")  # it even names the right producer
        caplog.clear()
        with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError):
            await asyncio.wait_for(append_claim_event(launcher, forged, expected=second.sequence), 2.0)
        drained = subjects.nodeclaim_step(CLAIM, "NodeClaimDrained")
        said = await broker_said(caplog, f'permissions violation for publish to "{drained}"')
        assert "permissions violation" in said.lower()
        history = [r.subject async for r in scheduler.read(subjects.nodeclaim(CLAIM))]
        assert drained not in history and len(history) == 2
    finally:
        await launcher.close()
        await scheduler.close()


async def test_a_service_reads_its_own_replies_and_cannot_listen_to_another_services(
    broker: LocalNatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = await connect_as(broker.url, IDENTITIES, "scheduler", provision=True)
    try:
        # its own requests are answered on its own inbox: reading the log works
        assert [r async for r in scheduler.read(subjects.nodeclaim("default-none"))] == []
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            await scheduler.client.subscribe(f"{inbox_prefix('launcher-capi')}.>")
            said = await broker_said(caplog, "permissions violation for subscription")
        assert inbox_prefix("launcher-capi").lower() in said.lower()
    finally:
        await scheduler.close()


async def test_a_client_without_credentials_reads_as_the_operator_and_writes_nothing(
    broker: LocalNatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    pod_watcher = await connect_as(broker.url, IDENTITIES, "pod-watcher", provision=True)
    anonymous = await JetStreamEventLog.connect(
        ConnectionSettings(servers=(broker.url,), max_reconnect_attempts=0), provision=False
    )
    try:
        batch = make_event(
            ev.PendingBatch,
            producer="pod-watcher",
            key=("anonymous-reads",),
            batch_id="anonymous-reads",
            pods=(),
            window_opened_at=datetime.now(UTC),
            window_closed_by="idle",
        )
        await pod_watcher.publish(subjects.PENDING, batch)
        assert batch.id in [r.decode().id async for r in anonymous.read(subjects.PENDING)]
        caplog.clear()
        with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError):
            await asyncio.wait_for(
                anonymous.publish(subjects.PENDING, msgspec.structs.replace(batch, id="forged")), 2.0
            )
        await broker_said(caplog, f'permissions violation for publish to "{subjects.PENDING}"')
    finally:
        await anonymous.close()
        await pod_watcher.close()


async def test_a_strict_broker_refuses_a_client_without_credentials(caplog: pytest.LogCaptureFixture) -> None:
    with LocalNatsServer(config=IDENTITIES.authorization()) as strict:
        settings = ConnectionSettings(servers=(strict.url,), max_reconnect_attempts=0, connect_timeout=1.0)
        with caplog.at_level(logging.WARNING), pytest.raises(EventLogError, match="cannot reach NATS"):
            await JetStreamEventLog.connect(settings, provision=False)
        await broker_said(caplog, "authorization violation")


async def test_the_operator_cannot_delete_a_snapshot_and_is_told_so(broker: LocalNatsServer) -> None:
    scheduler = await connect_as(broker.url, IDENTITIES, "scheduler", provision=True)
    operator = await connect_as(broker.url, IDENTITIES, OPERATOR)
    try:
        await scheduler.snapshots().save("scheduler", b"state", format="scheduler/test", covers=7)
        with pytest.raises(EventLogError, match="could not delete the snapshots of scheduler"):
            await operator.snapshots().delete("scheduler")
        kept = await operator.snapshots().load("scheduler")
        assert kept is not None and kept.data == b"state"
        await scheduler.snapshots().delete("scheduler")  # its owner may
        assert await operator.snapshots().load("scheduler") is None
    finally:
        await operator.close()
        await scheduler.close()
