"""State outlives the log: with a retention of seconds, every service killed and restarted after the claims'
whole story aged out of the log keeps every machine, and a new pending pod is still provisioned.

Twice: from each service's snapshot, and with the snapshots deleted too (a log that no longer has the claims'
first events: the launcher does not know the Machines' claims, finds their NodeClaim objects, and keeps them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from devtools.stack import LocalStack, apply_manifests
from proto import events as ev
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODECLAIMS, PODS, Kube
from tests.e2e.test_provisioning import claims_by_type, provision, until

SHORT_RETENTION = {
    "TENON_EVENTS_MAX_AGE": "8s",  # the claims' stories are gone from the log within seconds
    "TENON_EVENTS_DUPLICATE_WINDOW": "2s",
    "TENON_LAUNCHER_LEAK_GRACE": "2s",  # a Machine the launcher cannot place is looked at almost at once
    "TENON_LAUNCHER_TICK": "1s",
    "TENON_SNAPSHOT_INTERVAL": "1s",
    "TENON_LEASE_TTL": "2s",  # a killed leader's lease goes quickly
}


def big_pod_deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "3"}}}]
                },
            },
        },
    }


async def cluster_state(kube: Kube, management: Kube) -> tuple[set[str], dict[str, int], set[str]]:
    machines, _ = await management.list(MACHINES)
    deployments, _ = await management.list(MACHINEDEPLOYMENTS)
    claims, _ = await kube.list(NODECLAIMS)
    return (
        {m["metadata"]["name"] for m in machines if not m["metadata"].get("deletionTimestamp")},
        {d["metadata"]["name"]: d["spec"]["replicas"] for d in deployments},
        {c["metadata"]["name"] for c in claims},
    )


async def claim_history_end(event_log: JetStreamEventLog) -> int:
    """The sequence of the last event of any claim's story so far."""
    return await event_log.last_subject_sequence("tenon.nodeclaim.>")


async def aged_out(event_log: JetStreamEventLog, sequence: int) -> bool:
    return (await event_log.bounds()).first_sequence > sequence


async def snapshots_cover(event_log: JetStreamEventLog, sequence: int) -> bool:
    for name in ("scheduler", "launcher-capi", "disruption"):
        stored = await event_log.snapshots().load(name)
        if stored is None or stored.manifest.covers < sequence:
            return False
    return True


async def recorded_after(event_log: JetStreamEventLog, event_type: type[ev.Event], moment: float) -> bool:
    async for record in event_log.read():
        event = record.event
        if isinstance(event, event_type) and record.recorded_at.timestamp() >= moment:
            return True
    return False


async def kept_machines(event_log: JetStreamEventLog) -> set[str]:
    return {
        record.event.machine
        async for record in event_log.read("tenon.capi.machine.>")
        if isinstance(record.event, ev.MachineKept)
    }


async def delete_snapshot_as(stack: LocalStack, service: str) -> None:
    """Delete ``service``'s snapshot connecting as that service: only a snapshot's owner may purge it."""
    password = stack.identities.passwords[service]
    own_log = await JetStreamEventLog.connect(
        ConnectionSettings(servers=(stack.nats_url,), user=service, password=password), provision=False
    )
    try:
        await own_log.snapshots().delete(service)
        assert await own_log.snapshots().load(service) is None, f"{service}'s snapshot is still there"
    finally:
        await own_log.close()


@pytest.mark.parametrize("snapshots", ["kept", "deleted"])
async def test_every_machine_survives_a_restart_after_its_claims_aged_out_of_the_log(
    tmp_path: Path, snapshots: str
) -> None:
    with LocalStack(profile="fast", run_dir=tmp_path / "run", extra_env=SHORT_RETENTION) as stack:
        kube, management = await provision(stack, "workload-eight-1cpu.yaml", "small")
        event_log = await JetStreamEventLog.connect(
            ConnectionSettings(servers=(stack.nats_url,)), provision=False
        )
        await claims_by_type(kube, 2)  # their objects are written a moment after the claims are planned
        before = await cluster_state(kube, management)
        assert len(before[0]) == 2 and len(before[2]) == 2

        story_end = await claim_history_end(event_log)
        await until(
            lambda: aged_out(event_log, story_end), timeout=40, what="the claims' stories aged out of the log"
        )
        await until(
            lambda: snapshots_cover(event_log, story_end), timeout=20, what="snapshots past the stories"
        )

        for service in stack.services:
            stack.kill(service)
        if snapshots == "deleted":
            for service in stack.services:
                await delete_snapshot_as(stack, service)
        restarted = time.time()
        for service in stack.services:
            stack.start_service(service)

        # a new pending pod is still provisioned (NodePools, catalogs and nodes were re-asserted)
        await apply_manifests(kube, management, [big_pod_deployment("later")])

        async def later_running() -> bool:
            pods, _ = await kube.list(PODS, "default", label_selector="app=later")
            return bool(pods) and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        await until(later_running, timeout=60, what="the new pod Running")
        # the launcher has lived past the leak grace and decided since: a catalog it published after that
        past_grace = restarted + 2 + 2
        await until(
            lambda: recorded_after(event_log, ev.CatalogSnapshot, past_grace),
            timeout=30,
            what="a catalog published after the leak grace",
        )
        if snapshots == "deleted":
            # nothing in the log or a snapshot knows their claims: the launcher found the NodeClaim objects
            # (each Machine is looked at and kept on its own: one may be recorded before the other)
            async def every_machine_kept() -> bool:
                return before[0] <= await kept_machines(event_log)

            await until(every_machine_kept, timeout=30, what="the launcher keeping every unknown Machine")

        machines, replicas, claims = await cluster_state(kube, management)
        assert before[0] <= machines, "a machine was removed"
        for name, count in before[1].items():
            assert replicas[name] >= count, f"MachineDeployment {name} lost a replica"
        assert before[2] <= claims, "a NodeClaim object went away"
        assert len(machines) == len(before[0]) + 1  # the new pod's machine, and nothing else
        await event_log.close()
        await kube.close()
        await management.close()
