"""Clusters as Kubernetes objects for the disruption tests and bench: a NodePool, an instance catalog, Nodes
with pods on them, as a user would write them for ``tenon simulate --disruption``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LONG_AGO = (NOW - timedelta(days=2)).isoformat()


def nodepool(name: str = "default", *, budgets: list[Any] | None = None, **disruption: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    spec.update(disruption)
    if budgets is not None:
        spec["budgets"] = budgets
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "x", "kind": "EC2NodeClass", "name": "default"}}},
            "disruption": spec,
        },
    }


def catalog(types: list[tuple[str, int, int, float]], *, spot: bool = False) -> dict[str, Any]:
    """(name, vCPU, GiB, price per hour) each, on-demand (and spot at 70%) in zone z1."""
    entries = []
    for name, cpu, gib, price in types:
        offerings = [{"zone": "z1", "capacityType": "on-demand", "price": price}]
        if spot:
            offerings.append({"zone": "z1", "capacityType": "spot", "price": round(price * 0.7, 6)})
        entries.append(
            {
                "name": name,
                "capacity": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": "110"},
                "offerings": offerings,
            }
        )
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": "default"},
        "spec": {"instanceTypes": entries},
    }


SIZES = [("c-2", 2, 4, 0.10), ("c-4", 4, 8, 0.20), ("c-8", 8, 16, 0.40), ("c-16", 16, 32, 0.80)]


def node(
    name: str,
    instance_type: str,
    cpu: int,
    gib: int,
    *,
    pool: str = "default",
    capacity: str = "on-demand",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": LONG_AGO,
            "annotations": annotations or {},
            "labels": {
                "karpenter.sh/nodepool": pool,
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": "z1",
                "karpenter.sh/capacity-type": capacity,
                "kubernetes.io/hostname": name,
            },
        },
        "status": {
            "allocatable": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": "110"},
            "capacity": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    node_name: str | None,
    cpu: str = "500m",
    memory: str = "512Mi",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {"app": "web"}}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "apiVersion": "apps/v1", "uid": "u"}]
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending", "startTime": LONG_AGO},
    }


def pdb(name: str, selector: dict[str, str], allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": selector}},
        "status": {"disruptionsAllowed": allowed},
    }
