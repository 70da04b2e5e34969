"""End to end on Cluster API: pending pods become machines, nodes and Running pods, through separate service
processes that share nothing but the event log (real nats-server, sandbox clusters, fast timing profile)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from devtools.stack import DEMO_DIR, LocalStack, apply_manifests, connect, load_manifests
from proto import events as ev
from proto import subjects
from tenon.runtime.eventlog import EventLogError
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODECLAIMS, PODS, Kube
from tests.support.waiting import until

INFRASTRUCTURE = ("nodepool.yaml", "machinedeployments.yaml", "daemonset.yaml")


def workload(name: str) -> list[dict[str, Any]]:
    return load_manifests([DEMO_DIR / name])


async def infrastructure_in_the_log(stack: LocalStack) -> None:
    """Wait until the NodePool and the catalog of its MachineDeployments are in the log: pods applied before
    would be batched while the scheduler knows no pool, and wait for the next offer."""
    operator = "operator"  # a stack may refuse anonymous clients (``anonymous=None``): read as the operator
    settings = ConnectionSettings(
        servers=(stack.nats_url,), user=operator, password=stack.identities.passwords[operator]
    )
    event_log = await JetStreamEventLog.connect(settings, provision=False)

    async def known() -> bool:
        try:
            return await facts_recorded()
        except EventLogError:  # no service has provisioned the stream yet
            return False

    # each counts once seen: under a retention of seconds (tests/e2e/test_durable_state.py) the first may age
    # out of the log before the second is written, and the services have folded it by then
    seen = {"pools": False, "catalog": False}

    async def facts_recorded() -> bool:
        async for record in event_log.read(subjects.NODEPOOLS):
            event = record.event
            seen["pools"] |= isinstance(event, ev.NodePoolsSnapshot) and bool(event.nodepools)
        async for record in event_log.read(subjects.CATALOGS):
            event = record.event
            seen["catalog"] |= isinstance(event, ev.CatalogSnapshot) and bool(
                event.sources or event.instance_types
            )
        return seen["pools"] and seen["catalog"]

    try:
        await until(known, 30, what="the NodePool and the catalog in the log")
    finally:
        await event_log.close()


async def provision(stack: LocalStack, manifest: str, app: str) -> tuple[Kube, Kube]:
    """Apply the demo infrastructure and a workload; wait until every pod of ``app`` runs."""
    kube, management = await connect(stack)
    await apply_manifests(kube, management, load_manifests([DEMO_DIR / f for f in INFRASTRUCTURE]))
    await infrastructure_in_the_log(stack)
    await apply_manifests(kube, management, workload(manifest))

    async def all_running() -> list[dict[str, Any]] | None:
        assert not stack.dead_services(), {n: stack.tail(n) for n in stack.dead_services()}
        pods, _ = await kube.list(PODS, "default", label_selector=f"app={app}")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        expected = sum(d["spec"]["replicas"] for d in workload(manifest))
        return pods if len(running) == expected == len(pods) else None

    await until(all_running, 45, what=f"{app} pods Running")
    return kube, management


async def claims_by_type(kube: Kube, count: int) -> list[str]:
    """The instance types of the NodeClaim objects, once there are ``count`` of them: the scheduler writes
    them off the decision path, a moment after each claim is planned, and pods may run before that."""

    async def written() -> list[dict[str, Any]] | None:
        claims, _ = await kube.list(NODECLAIMS)
        return claims if len(claims) >= count else None

    claims = await until(written, 20, what=f"{count} NodeClaim objects")
    return sorted(c["metadata"]["labels"]["node.kubernetes.io/instance-type"] for c in claims)


def tap_json(stack: LocalStack) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "tenon.cli.main", "tap", "--server", stack.nats_url, "--no-follow", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


async def test_one_3_vcpu_pod_gets_one_c3_8(stack: LocalStack) -> None:
    kube, management = await provision(stack, "workload-one-3cpu.yaml", "big")
    assert await claims_by_type(kube, 1) == ["c3-8"]
    replicas = {
        m["metadata"]["name"]: m["spec"]["replicas"] for m in (await management.list(MACHINEDEPLOYMENTS))[0]
    }
    assert replicas == {"c3-4": 0, "c3-8": 1, "c3-16": 0}
    await kube.close()
    await management.close()


async def test_eight_1_vcpu_pods_get_a_c3_16_and_a_c3_4_and_the_log_tells_and_replays_it(
    stack: LocalStack,
) -> None:
    kube, management = await provision(stack, "workload-eight-1cpu.yaml", "small")
    assert await claims_by_type(kube, 2) == ["c3-16", "c3-4"]
    machines, _ = await management.list(MACHINES)
    assert len(machines) == 2
    await kube.close()
    await management.close()

    # tap: each claim's chain, in log order, each step answering the one before
    records = await asyncio.to_thread(tap_json, stack)
    events = [r["event"] for r in records if "event" in r]
    by_id = {e["id"]: (i, e) for i, e in enumerate(events)}
    planned = [e for e in events if e["type"] == "NodeClaimPlanned"]
    assert len(planned) == 2
    for plan in planned:
        batch_index, batch = by_id[plan["causationId"]]
        assert batch["type"] == "PendingBatch"
        chain = [
            (i, e["type"])
            for i, e in enumerate(events)
            if e["type"] in subjects.NODECLAIM_STEPS and e.get("nodeclaim") == plan["nodeclaim"]
        ]
        assert [t for _, t in chain] == [
            "NodeClaimPlanned",
            "NodeClaimLaunched",
            "NodeClaimRegistered",
            "NodeClaimInitialized",
        ]
        assert batch_index < chain[0][0]

    # replay: the scheduler's decisions recomputed offline from the log alone are the recorded ones
    replayed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tenon.cli.main", "replay", "scheduler", "--server", stack.nats_url, "--diff"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "0 differ from the log" in replayed.stdout
    assert replayed.stdout.count("NodeClaimPlanned:") == 2


async def test_two_replicas_of_every_service_act_once(stack: LocalStack) -> None:
    for name in ("pod-watcher", "scheduler", "launcher-capi", "disruption"):
        stack.start_service(name, replica=2)
    kube, management = await provision(stack, "workload-eight-1cpu.yaml", "small")
    assert await claims_by_type(kube, 2) == ["c3-16", "c3-4"]
    machines, _ = await management.list(MACHINES)
    assert len(machines) == 2
    events = [r["event"] for r in await asyncio.to_thread(tap_json, stack) if "event" in r]
    assert len([e for e in events if e["type"] == "PendingBatch"]) == 1
    assert len([e for e in events if e["type"] == "NodeClaimLaunched"]) == 2
    await kube.close()
    await management.close()


def test_tenon_up_runs_the_demo_unattended() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tenon.cli.main",
            "up",
            "--demo",
            "inflate",
            "--exit-when-done",
            "--json",
            "--timeout",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert sorted(c["instanceType"] for c in summary["nodeClaims"]) == ["c3-16", "c3-4"]
    assert sum(len(c["pods"]) for c in summary["nodeClaims"]) == 8
    timeline = summary["timeline"]
    # the claim milestones are read off the NodeClaim objects, written after each step is in the log (off
    # the decision path), so pods may be Running before their claims' objects show it: only the claims'
    # own steps are ordered (as in Karpenter, kube-scheduler never waits for a NodeClaim)
    assert (
        0
        < timeline["claimsCreated"]
        <= timeline["launched"]
        <= timeline["registered"]
        <= timeline["initialized"]
    )
    assert timeline["allPodsRunning"] > 0
    assert summary["totalPricePerHour"] == pytest.approx(0.25)
    # then the Deployment is deleted and the pool returns to zero
    assert timeline["allNodesRemoved"] > 0
    assert summary["finalMachineDeployments"] == {"c3-4": 0, "c3-8": 0, "c3-16": 0}
    # the services' own metrics, scraped before they stopped, counted each claim and node once
    metrics = summary["metrics"]
    assert metrics["karpenter_nodeclaims_created_total"] == 2
    assert metrics["karpenter_nodes_created_total"] == 2
    assert metrics["karpenter_nodeclaims_terminated_total"] == 2
    assert metrics["karpenter_scheduler_scheduling_duration_seconds_count"] >= 1
