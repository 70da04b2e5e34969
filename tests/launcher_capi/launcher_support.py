"""Helpers for the launcher-capi tests: manifests, the events a scheduler would write, a running launcher.

The tests play the scheduler and the pod-watcher themselves: they publish ``NodeClassesSnapshot`` and append
``NodeClaimPlanned`` / ``NodeClaimAbandoned`` on the real log, and watch what the launcher does to the
sandbox's management cluster (whose simulated Cluster API controller turns replicas into Machines with
providerIDs).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.store import Store
from devtools.sandbox.testing import SandboxHandle
from proto import subjects
from proto.events import (
    Event,
    InstanceChoice,
    NodeClaimAbandoned,
    NodeClaimPlanned,
    NodeClassesSnapshot,
)
from proto.ids import derive_id
from tenon.core.wellknown import (
    CAPACITY_PREFIX,
    DEPLOYMENT_NAME,
    KARPENTER_MEMBER,
    MAX_SIZE,
    PRICE_PER_HOUR,
)
from tenon.runtime.decider import DeciderRuntime
from tenon.runtime.eventlog import EventLog
from tenon.runtime.kube import load_kube
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.launcher_capi.executor import LauncherExecutor
from tenon.services.launcher_capi.state import LauncherState
from tests.support.events import append_to_claim
from tests.support.services import running
from tests.support.waiting import until

NODECLASS = "default"
SIZES = {"c3-4": ("2", "4Gi", "0.048"), "c3-8": ("4", "8Gi", "0.096"), "c3-16": ("8", "16Gi", "0.192")}


def machine_deployment(
    name: str, *, replicas: int = 0, max_size: int | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    cpu, memory, price = SIZES.get(name, ("4", "8Gi", "0.1"))
    notes = {
        CAPACITY_PREFIX + "cpu": cpu,
        CAPACITY_PREFIX + "memory": memory,
        PRICE_PER_HOUR: price,
        CAPACITY_PREFIX + "labels": f"node.kubernetes.io/instance-type={name}",
    }
    if max_size is not None:
        notes[MAX_SIZE] = str(max_size)
    notes.update(annotations or {})
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {KARPENTER_MEMBER: "", "cluster.x-k8s.io/cluster-name": "demo"},
            "annotations": notes,
        },
        "spec": {
            "clusterName": "demo",
            "replicas": replicas,
            "selector": {"matchLabels": {}},
            "template": {
                "metadata": {"labels": {}},
                "spec": {
                    "clusterName": "demo",
                    "failureDomain": "zone-a",
                    "bootstrap": {"configRef": {"kind": "KubeadmConfigTemplate", "name": "b"}},
                    "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": name},
                },
            },
        },
    }


def nodeclass(name: str = NODECLASS) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": name},
        "spec": {"scalableResourceSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "demo"}}},
    }


def choice(instance_type: str, zone: str | None = "zone-a") -> InstanceChoice:
    return InstanceChoice(
        instance_type, zone, "on-demand", float(SIZES.get(instance_type, ("", "", "0.1"))[2])
    )


def planned(claim: str, instance_type: str, *fallbacks: str, node_class: str = NODECLASS) -> NodeClaimPlanned:
    return NodeClaimPlanned(
        id=derive_id("scheduler", "NodeClaimPlanned", claim),
        decided_at=datetime.now(UTC),
        producer="scheduler",
        correlation_id=claim,
        nodeclaim=claim,
        nodepool="default",
        node_class=node_class,
        choice=choice(instance_type),
        fallbacks=tuple(choice(t) for t in fallbacks),
        pods=("default/p-1",),
        requirements=(),
        labels={},
    )


def abandoned(claim: str) -> NodeClaimAbandoned:
    return NodeClaimAbandoned(
        id=derive_id("scheduler", "NodeClaimAbandoned", claim),
        decided_at=datetime.now(UTC),
        producer="scheduler",
        correlation_id=claim,
        nodeclaim=claim,
        reason="not registered",
    )


async def publish_nodeclasses(event_log: EventLog, *objects: dict[str, Any]) -> None:
    event = NodeClassesSnapshot(
        id=derive_id("pod-watcher", "NodeClassesSnapshot", *(str(o) for o in objects)),
        decided_at=datetime.now(UTC),
        producer="pod-watcher",
        nodeclasses=objects,
    )
    await event_log.publish(subjects.NODECLASSES, event)


async def append_claim_event(event_log: EventLog, event: Any) -> int:
    return await append_to_claim(event_log, event)


async def claim_events(event_log: EventLog, claim: str) -> list[Event]:
    return [r.event async for r in event_log.read(subjects.nodeclaim(claim)) if r.event is not None]


async def catalog_events(event_log: EventLog, node_class: str = NODECLASS) -> list[Any]:
    return [r.event async for r in event_log.read(subjects.catalog(node_class)) if r.event is not None]


def md_rt(store: Store) -> Any:
    return store.resource("cluster.x-k8s.io/v1beta1", "MachineDeployment")


def machine_rt(store: Store) -> Any:
    return store.resource("cluster.x-k8s.io/v1beta1", "Machine")


def machines_of(store: Store, md: str, *, include_deleting: bool = True) -> list[dict[str, Any]]:
    items = store.list(machine_rt(store), "default")[0]
    return [
        m
        for m in items
        if m["metadata"].get("labels", {}).get(DEPLOYMENT_NAME) == md
        and (include_deleting or not m["metadata"].get("deletionTimestamp"))
    ]


def replicas_of(store: Store, md: str) -> int:
    return int(store.get(md_rt(store), md, "default")["spec"].get("replicas") or 0)


async def settled(event_log: EventLog, durable: str = "launcher-capi") -> bool:
    """Whether the launcher (in this process or another) has handled every record the log holds: every record
    of the events stream is one of its inputs, and it acks an input only once its decisions are recorded, so
    from then on nothing it has seen is left to decide."""
    last = (await event_log.bounds()).last_sequence
    return last > 0 and await event_log.consumer_ack_floor(durable) >= last


@contextlib.asynccontextmanager
async def running_launcher(
    event_log: EventLog, sandbox: SandboxHandle, *, workload: bool = True, **settings: Any
) -> AsyncIterator[DeciderRuntime[LauncherState]]:
    """The launcher (decider, executor, runtime) in this event loop against the sandbox's management cluster
    (and its workload cluster, where NodeClaim objects live, unless ``workload`` is False); stopped on exit.
    ``runtime.executor`` is the :class:`LauncherExecutor`."""
    management = await load_kube(str(sandbox.management_kubeconfig))
    workload_kube = await load_kube(str(sandbox.workload_kubeconfig)) if workload else None
    executor = LauncherExecutor(management, workload=workload_kube, **settings)
    try:
        async with running(CapiLauncherDecider(), executor, event_log, tick_seconds=0.2) as runtime:
            await until(executor.started.is_set, what="launcher started")
            yield runtime
    finally:
        await management.close()
        if workload_kube is not None:
            await workload_kube.close()


def executor_of(runtime: DeciderRuntime[LauncherState]) -> LauncherExecutor:
    executor = runtime.executor
    assert isinstance(executor, LauncherExecutor)
    return executor
