"""The launcher against a real broker and the sandbox's Cluster API: Planned claims become bound Machines.

Each test plays the scheduler: it appends ``NodeClaimPlanned`` (or ``NodeClaimAbandoned``) on the claim's
subject and checks what a user would see: MachineDeployment replicas, Machines and their annotations, and the
claim's story in the log.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import (
    DisruptionRequested,
    NodeClaimDrained,
    NodeClaimLaunched,
    NodeClaimLaunchFailed,
    NodeClaimPlanned,
    NodeClaimTerminated,
)
from tenon.core.wellknown import DELETE_MACHINE, NODECLAIM
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.launcher_capi.launcher_support import (
    abandoned,
    append_claim_event,
    claim_events,
    machine_deployment,
    machines_of,
    md_rt,
    nodeclass,
    planned,
    publish_nodeclasses,
    replicas_of,
    running_launcher,
)
from tests.support.services import caught_up
from tests.support.waiting import until


def types_of(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


async def test_planned_claim_scales_binds_and_launches_once_even_when_redelivered(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        for name in ("c3-4", "c3-8", "c3-16"):
            store.create(md_rt(store), machine_deployment(name))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb) as runtime:
            await append_claim_event(jetstream_log, planned("claim-a", "c3-8", "c3-16"))
            launched = await until(lambda: _launched(jetstream_log, "claim-a"), what="claim-a Launched")
            machines = machines_of(store, "c3-8")
            assert replicas_of(store, "c3-8") == 1
            assert len(machines) == 1
            machine = machines[0]
            assert machine["metadata"]["annotations"][NODECLAIM] == "claim-a"
            assert machine["metadata"]["labels"]["karpenter.sh/nodepool"] == "default"
            assert launched.provider_id == machine["spec"]["providerID"]
            assert launched.machine == machine["metadata"]["name"]
            assert (launched.instance_type, launched.zone, launched.capacity_type) == (
                "c3-8",
                "zone-a",
                "on-demand",
            )
            assert replicas_of(store, "c3-4") == 0 and replicas_of(store, "c3-16") == 0

            # the same Planned decided again (what a redelivery does), then a tick: nothing new
            records = [r async for r in jetstream_log.read(subjects.nodeclaim("claim-a"))]
            record = records[0]
            assert isinstance(record.event, NodeClaimPlanned)
            await until(lambda: caught_up(runtime), what="every record handled")
            assert list(runtime.decider.decide(runtime.state, record.event)) == []
            await runtime.tick()
            assert replicas_of(store, "c3-8") == 1
            assert len(machines_of(store, "c3-8")) == 1
            assert types_of(await claim_events(jetstream_log, "claim-a")) == [
                "NodeClaimPlanned",
                "NodeClaimLaunched",
            ]


async def _launched(event_log: JetStreamEventLog, claim: str) -> NodeClaimLaunched | None:
    return next((e for e in await claim_events(event_log, claim) if isinstance(e, NodeClaimLaunched)), None)


async def test_max_size_reached_fails_over_to_the_next_choice(jetstream_log: JetStreamEventLog) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8", replicas=1, max_size=1))
        store.create(md_rt(store), machine_deployment("c3-16"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb):
            await until(lambda: len(machines_of(store, "c3-8")) == 1, what="the existing c3-8 machine")
            await append_claim_event(jetstream_log, planned("claim-b", "c3-8", "c3-16"))
            launched = await until(lambda: _launched(jetstream_log, "claim-b"), what="claim-b Launched")
            events = await claim_events(jetstream_log, "claim-b")
            assert types_of(events) == ["NodeClaimPlanned", "NodeClaimLaunchFailed", "NodeClaimLaunched"]
            failed = events[1]
            assert isinstance(failed, NodeClaimLaunchFailed)
            assert failed.instance_type == "c3-8" and failed.retryable
            assert "max size 1" in failed.reason and "default/c3-8" in failed.reason
            assert launched.instance_type == "c3-16"
            assert replicas_of(store, "c3-8") == 1 and replicas_of(store, "c3-16") == 1
            assert [m["metadata"]["annotations"].get(NODECLAIM) for m in machines_of(store, "c3-16")] == [
                "claim-b"
            ]

            # no fallback left: the failure is final
            await append_claim_event(jetstream_log, planned("claim-c", "c3-8"))
            final = await until(lambda: _failed(jetstream_log, "claim-c"), what="claim-c LaunchFailed")
            assert final.retryable is False
            assert replicas_of(store, "c3-8") == 1


async def _failed(event_log: JetStreamEventLog, claim: str) -> NodeClaimLaunchFailed | None:
    return next(
        (e for e in await claim_events(event_log, claim) if isinstance(e, NodeClaimLaunchFailed)), None
    )


async def test_abandoned_claim_removes_exactly_its_machine(jetstream_log: JetStreamEventLog) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb):
            for claim in ("claim-1", "claim-2", "claim-3"):
                await append_claim_event(jetstream_log, planned(claim, "c3-8"))
            for claim in ("claim-1", "claim-2", "claim-3"):
                await until(functools.partial(_launched, jetstream_log, claim), what=f"{claim} Launched")
            assert replicas_of(store, "c3-8") == 3
            owner = {
                m["metadata"]["annotations"][NODECLAIM]: m["metadata"]["name"]
                for m in machines_of(store, "c3-8")
            }
            assert sorted(owner) == ["claim-1", "claim-2", "claim-3"]

            await append_claim_event(jetstream_log, abandoned("claim-2"))
            await until(
                lambda: owner["claim-2"] not in {m["metadata"]["name"] for m in machines_of(store, "c3-8")},
                what="claim-2's machine gone",
            )
            assert replicas_of(store, "c3-8") == 2
            remaining = {m["metadata"]["name"]: m for m in machines_of(store, "c3-8")}
            assert sorted(remaining) == sorted([owner["claim-1"], owner["claim-3"]])
            assert not any(DELETE_MACHINE in m["metadata"].get("annotations", {}) for m in remaining.values())


async def test_drained_claim_loses_its_machine_and_is_terminated(jetstream_log: JetStreamEventLog) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb):
            await append_claim_event(jetstream_log, planned("claim-d", "c3-8"))
            launched = await until(lambda: _launched(jetstream_log, "claim-d"), what="claim-d Launched")
            requested = DisruptionRequested(
                id="requested-d",
                decided_at=datetime.now(UTC),
                producer="disruption",
                nodeclaim="claim-d",
                method="emptiness",
                reason="empty",
                node=launched.machine,
            )
            await append_claim_event(jetstream_log, requested)
            drained = NodeClaimDrained(
                id="drained-d",
                decided_at=datetime.now(UTC),
                producer="disruption",
                nodeclaim="claim-d",
                node=launched.machine,
            )
            await append_claim_event(jetstream_log, drained)
            terminated = await until(lambda: _terminated(jetstream_log, "claim-d"), what="claim-d Terminated")
            assert terminated.machine == launched.machine and terminated.producer == "launcher-capi"
            assert machines_of(store, "c3-8") == [] and replicas_of(store, "c3-8") == 0


async def _terminated(event_log: JetStreamEventLog, claim: str) -> NodeClaimTerminated | None:
    return next((e for e in await claim_events(event_log, claim) if isinstance(e, NodeClaimTerminated)), None)
