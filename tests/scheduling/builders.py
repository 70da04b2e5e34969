"""Small builders of Kubernetes object dicts for the scheduling tests (what users would write in YAML)."""

from __future__ import annotations

from typing import Any

from tenon.core import ClusterInput, Plan, parse_objects, solve


def pod(
    name: str,
    cpu: str = "100m",
    memory: str = "64Mi",
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **spec,
        },
    }


def node_pool(
    name: str = "default",
    weight: int | None = None,
    requirements: list[dict[str, Any]] | None = None,
    taints: list[dict[str, Any]] | None = None,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    catalog: str = "cat",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": catalog},
                "requirements": requirements or [],
                "taints": taints or [],
            },
        }
    }
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def itype(
    name: str,
    cpu: int,
    gib: int,
    price: float,
    zones: tuple[str, ...] = ("z1",),
    capacity_types: tuple[str, ...] = ("on-demand",),
    labels: dict[str, str] | None = None,
    overhead_cpu: str = "0",
) -> dict[str, Any]:
    return {
        "name": name,
        "capacity": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": "110"},
        "overhead": {"cpu": overhead_cpu},
        "labels": labels or {},
        "offerings": [
            {"zone": z, "capacityType": ct, "price": price} for z in zones for ct in capacity_types
        ],
    }


def catalog(*types: dict[str, Any], name: str = "cat") -> dict[str, Any]:
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": name},
        "spec": {"instanceTypes": list(types)},
    }


def daemon_set(cpu: str, memory: str = "0", name: str = "agent", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                    **spec,
                },
            }
        },
    }


def node(
    name: str,
    cpu: str,
    memory: str,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def anti_affinity(labels: dict[str, str], key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
            ]
        }
    }


def affinity(labels: dict[str, str], key: str) -> dict[str, Any]:
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
            ]
        }
    }


def spread(
    labels: dict[str, str], key: str, max_skew: int = 1, when: str = "DoNotSchedule"
) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": labels},
        }
    ]


def parse(*docs: dict[str, Any]) -> ClusterInput:
    return parse_objects(("test.yaml", i, d) for i, d in enumerate(docs))


def plan_for(*docs: dict[str, Any]) -> Plan:
    return solve(parse(*docs))


def where(plan: Plan) -> dict[str, str]:
    """pod key -> "new:<i>" or the existing node name; unschedulable pods are absent."""
    return plan.placement()
