"""Removing a Machine only on positive evidence, against a real broker and the sandbox's two clusters.

A Machine in the management cluster carries tenon's ownership mark (``tenon.sh/nodeclaim``) for a claim the
launcher's state does not have. It is removed only when, past the leak grace, no NodeClaim object of that name
exists in the workload cluster and the event log reaches back past the Machine's creation; otherwise it is
kept and the launcher says why (``MachineKept`` in the log, a Kubernetes Event on the Machine). A forged
``NodeClaimDrained`` (written by the wrong service, or without a disruption request) is refused and removes
nothing.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

from devtools.sandbox.store import Store
from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from proto import subjects
from tenon.core.wellknown import DELETE_MACHINE, NODECLAIM
from tenon.runtime.eventlog import EventLog
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import default_streams
from tenon.services.launcher_capi.executor import KEPT_EVENT_REASON, REMOVAL_EVENT_REASON
from tenon.services.launcher_capi.removal import (
    LOG_TOO_SHORT,
    NODECLAIM_OBJECT_EXISTS,
    NODECLAIM_OBJECTS_UNREADABLE,
    leak_suspects,
)
from tests.launcher_capi.launcher_support import (
    append_claim_event,
    claim_events,
    executor_of,
    machine_deployment,
    machine_rt,
    machines_of,
    md_rt,
    nodeclass,
    planned,
    publish_nodeclasses,
    replicas_of,
    running_launcher,
)
from tests.support.events import build_event
from tests.support.services import caught_up
from tests.support.waiting import until

GRACE = 0.5


async def stray_machine(store: Store, claim: str) -> dict[str, Any]:
    """An MD of two Machines, one of them bound to ``claim`` (which no one planned); the bound one."""
    store.create(md_rt(store), machine_deployment("c3-8", replicas=2))
    machines = await until(
        lambda: len(machines_of(store, "c3-8")) == 2 and machines_of(store, "c3-8"), what="two machines"
    )
    stray = machines[0]
    stray["metadata"].setdefault("annotations", {})[NODECLAIM] = claim
    store.update(machine_rt(store), stray)
    return stray


def nodeclaim_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.cluster.x-k8s.io",
                "kind": "ClusterAPINodeClass",
                "name": "default",
            },
            "requirements": [],
        },
    }


async def machine_story(event_log: EventLog, machine: dict[str, Any]) -> list[ev.Event]:
    meta = machine["metadata"]
    subject = subjects.capi_machine(meta["namespace"], meta["name"])
    return [r.event async for r in event_log.read(subject) if r.event is not None]


async def decision(event_log: EventLog, machine: dict[str, Any], event_type: type[Any]) -> Any:
    return next((e for e in await machine_story(event_log, machine) if isinstance(e, event_type)), None)


def machine_events(store: Store, machine: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    items = store.list(store.resource("v1", "Event"), "default")[0]
    name = machine["metadata"]["name"]
    return [e for e in items if e.get("reason") == reason and e["involvedObject"]["name"] == name]


def marked(store: Store, machine: dict[str, Any]) -> bool:
    current = store.get(machine_rt(store), machine["metadata"]["name"], "default")
    return DELETE_MACHINE in (current["metadata"].get("annotations") or {})


async def test_bound_to_a_claim_nowhere_past_the_grace_with_a_log_reaching_back_is_removed(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        stray = await stray_machine(store, "claim-never-planned")
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb, leak_grace=GRACE):
            await until(lambda: replicas_of(store, "c3-8") == 1, what="the leaked machine's replica removed")
            remaining = await until(
                lambda: len(machines_of(store, "c3-8")) == 1 and machines_of(store, "c3-8"),
                what="only the unbound machine left",
            )
            assert remaining[0]["metadata"]["name"] != stray["metadata"]["name"]
            assert NODECLAIM not in (remaining[0]["metadata"].get("annotations") or {})
            check = await decision(jetstream_log, stray, ev.MachineLeakChecked)
            removal = await decision(jetstream_log, stray, ev.MachineRemovalDecided)
            assert check.nodeclaim_object == "absent" and check.log_reaches_back
            assert (check.decided_at - check.bound_since).total_seconds() >= GRACE
            assert removal.causation_id == check.id and removal.reason.startswith("leaked")
            assert any("no NodeClaim object claim-never-planned" in fact for fact in removal.evidence)
            assert machine_events(store, stray, REMOVAL_EVENT_REASON)


async def test_bound_to_a_claim_whose_nodeclaim_object_exists_is_kept_with_an_event(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        sb.workload_store.create(
            sb.workload_store.resource("karpenter.sh/v1", "NodeClaim"), nodeclaim_object("claim-elsewhere")
        )
        stray = await stray_machine(store, "claim-elsewhere")
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb, leak_grace=GRACE):
            kept = await until(lambda: decision(jetstream_log, stray, ev.MachineKept), what="MachineKept")
            assert kept.code == NODECLAIM_OBJECT_EXISTS and "claim-elsewhere" in kept.reason
            [event] = await until(
                lambda: machine_events(store, stray, KEPT_EVENT_REASON), what="an Event on the Machine"
            )
            assert (
                event["type"] == "Warning" and "NodeClaim object claim-elsewhere exists" in event["message"]
            )
            assert not marked(store, stray) and replicas_of(store, "c3-8") == 2
            assert await decision(jetstream_log, stray, ev.MachineRemovalDecided) is None
            assert len(machines_of(store, "c3-8")) == 2


async def test_without_a_workload_cluster_to_look_in_the_machine_is_kept(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        stray = await stray_machine(store, "claim-unseen")
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb, workload=False, leak_grace=GRACE):
            kept = await until(lambda: decision(jetstream_log, stray, ev.MachineKept), what="MachineKept")
            assert kept.code == NODECLAIM_OBJECTS_UNREADABLE and "TENON_KUBECONFIG" in kept.reason
            assert not marked(store, stray) and replicas_of(store, "c3-8") == 2


async def test_bound_to_an_unknown_claim_when_the_log_lost_its_beginning_is_kept(
    nats_settings: ConnectionSettings,
) -> None:
    # a log that keeps 2 seconds: by the time the launcher looks, what was before the Machine is gone
    event_log = await JetStreamEventLog.connect(
        nats_settings, default_streams(max_age=2.0, duplicate_window=1.0)
    )
    try:
        async with running_sandbox() as sb:
            store = sb.management_store
            stray = await stray_machine(store, "claim-aged-out")
            await publish_nodeclasses(event_log, nodeclass())
            await until(
                lambda: _lost_beginning(event_log), timeout=15, what="the log's first records aged out"
            )
            async with running_launcher(event_log, sb, leak_grace=GRACE):
                kept = await until(lambda: _kept_in(event_log, stray), timeout=15, what="MachineKept")
                assert kept.code == LOG_TOO_SHORT and "may have aged out" in kept.reason
                assert machine_events(store, stray, KEPT_EVENT_REASON)
                assert not marked(store, stray) and replicas_of(store, "c3-8") == 2
    finally:
        await event_log.close()


async def _lost_beginning(event_log: EventLog) -> bool:
    return (await event_log.bounds()).first_sequence > 1


async def _kept_in(event_log: EventLog, machine: dict[str, Any]) -> ev.MachineKept | None:
    # records age out of this log within seconds: follow it live rather than read it afterwards
    return await decision(event_log, machine, ev.MachineKept)


async def test_a_forged_drain_is_dead_lettered_and_the_machine_stays(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb) as runtime:
            await append_claim_event(jetstream_log, planned("claim-f", "c3-8"))
            launched = await until(lambda: _launched(jetstream_log, "claim-f"), what="claim-f Launched")
            # well-formed, on the right subject, appended after the claim's last event: but not disruption's
            forged = build_event(
                ev.NodeClaimDrained,
                "forged-drain",
                at=datetime.now(UTC),
                producer="launcher-capi",
                nodeclaim="claim-f",
                node=launched.machine,
            )
            await append_claim_event(jetstream_log, forged)
            letters = await until(lambda: _dead_letters(jetstream_log), what="the forged event dead-lettered")
            assert "only disruption may write" in letters[0].error and runtime.refused == 1
            # disruption's name, but no disruption was requested: refused as well
            unrequested = build_event(
                ev.NodeClaimDrained, "unrequested-drain", at=datetime.now(UTC), nodeclaim="claim-f", node="n"
            )
            await append_claim_event(jetstream_log, unrequested)
            await until(lambda: runtime.refused == 2, what="the second forgery refused")
            # the refused events were never folded: the claim is live, its Machine unmarked, nothing decided
            assert runtime.state.claims["claim-f"].live and runtime.state.claims["claim-f"].drained is None
            [machine] = machines_of(store, "c3-8")
            assert machine["metadata"]["name"] == launched.machine and not marked(store, machine)
            assert replicas_of(store, "c3-8") == 1
            await runtime.tick()
            assert await decision(jetstream_log, machine, ev.MachineRemovalDecided) is None
            assert not any(
                isinstance(e, ev.NodeClaimTerminated) for e in await claim_events(jetstream_log, "claim-f")
            )


async def _launched(event_log: EventLog, claim: str) -> ev.NodeClaimLaunched | None:
    return next(
        (e for e in await claim_events(event_log, claim) if isinstance(e, ev.NodeClaimLaunched)), None
    )


async def _dead_letters(event_log: EventLog) -> list[ev.DeadLetter]:
    return [
        r.event
        async for r in event_log.read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM)
        if isinstance(r.event, ev.DeadLetter)
    ]


async def test_a_restart_after_the_log_lost_its_beginning_keeps_every_machine(
    nats_settings: ConnectionSettings,
) -> None:
    # a log that keeps 3 seconds: the claims' first events age out between the terms
    event_log = await JetStreamEventLog.connect(
        nats_settings, default_streams(max_age=3.0, duplicate_window=1.0)
    )
    try:
        async with running_sandbox() as sb:
            store = sb.management_store
            store.create(md_rt(store), machine_deployment("c3-8"))
            await publish_nodeclasses(event_log, nodeclass())
            async with running_launcher(event_log, sb, leak_grace=GRACE):
                for claim in ("claim-1", "claim-2"):
                    await append_claim_event(event_log, planned(claim, "c3-8"))
                await until(lambda: _both_launched(store), what="both claims' Machines up")
            last = (await event_log.bounds()).last_sequence
            await until(lambda: _aged_out(event_log, last), timeout=15, what="the first term aged out")

            # with the launcher's snapshot: the claims are known, nothing is suspect
            async with running_launcher(event_log, sb, leak_grace=GRACE) as runtime:
                await until(lambda: caught_up(runtime), what="rebuilt and caught up")
                assert sorted(runtime.state.claims) == ["claim-1", "claim-2"]
                later = datetime.now(UTC) + timedelta(seconds=GRACE * 10)
                assert list(leak_suspects(runtime.state, later, timedelta(seconds=GRACE))) == []
                await runtime.tick()
            assert replicas_of(store, "c3-8") == 2 and not any(
                marked(store, m) for m in machines_of(store, "c3-8")
            )

            # without it (and without the claims' events): both Machines are suspect, and both are kept
            await event_log.snapshots().delete("launcher-capi")
            async with running_launcher(event_log, sb, leak_grace=GRACE) as runtime:
                await until(lambda: caught_up(runtime), what="rebuilt from what is left")
                assert runtime.state.claims == {}
                executor = executor_of(runtime)
                machines = machines_of(store, "c3-8")
                await until(lambda: len(runtime.state.machines) == 2, what="both Machines observed again")
                await executor.ticked(datetime.now(UTC) + timedelta(seconds=GRACE * 10))
                kept = [
                    await until(functools.partial(_kept_in, event_log, m), timeout=10, what="MachineKept")
                    for m in machines
                ]
                assert {k.code for k in kept} == {LOG_TOO_SHORT}
            assert replicas_of(store, "c3-8") == 2 and not any(
                marked(store, m) for m in machines_of(store, "c3-8")
            )
    finally:
        await event_log.close()


def _both_launched(store: Store) -> bool:
    machines = machines_of(store, "c3-8")
    return len(machines) == 2 and all(
        (m["metadata"].get("annotations") or {}).get(NODECLAIM) and (m.get("spec") or {}).get("providerID")
        for m in machines
    )


async def _aged_out(event_log: EventLog, sequence: int) -> bool:
    return (await event_log.bounds()).first_sequence > sequence
