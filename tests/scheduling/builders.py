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


def node_claim(
    name: str,
    pool: str = "default",
    instance_type: str = "t",
    zone: str | None = "z1",
    capacity: dict[str, str] | None = None,
    nominated: str = "",
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodeClaim not yet a Node (in flight)."""
    labels = {"karpenter.sh/nodepool": pool, "node.kubernetes.io/instance-type": instance_type}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    claim: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels, "annotations": {}},
        "spec": {"requirements": []},
        "status": {},
    }
    if capacity:
        claim["status"]["capacity"] = capacity
    if nominated:
        claim["metadata"]["annotations"]["tenon.sh/nominated-pods"] = nominated
    return claim


def machine_deployment(
    name: str, cpu: str, memory: str, price: str, max_size: str | None = None, replicas: int = 0
) -> dict[str, Any]:
    """A Cluster API MachineDeployment member of the Karpenter node groups."""
    annotations = {
        "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
        "capacity.cluster-autoscaler.kubernetes.io/memory": memory,
        "tenon.sh/price-per-hour": price,
    }
    if max_size is not None:
        annotations["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] = max_size
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": annotations,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
        },
        "spec": {"replicas": replicas},
    }


def capi_pool(name: str = "default", weight: int | None = None) -> dict[str, Any]:
    pool = node_pool(name, weight=weight)
    pool["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "infrastructure.cluster.x-k8s.io",
        "kind": "ClusterAPINodeClass",
        "name": "capi",
    }
    return pool


def pvc(name: str, storage_class: str | None = None, volume: str = "", namespace: str = "default") -> dict:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def pv(name: str, zones: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
    }


def storage_class(name: str, zones: list[str] | None = None, mode: str = "WaitForFirstConsumer") -> dict:
    sc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": mode,
    }
    if zones:
        sc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": zones}]}
        ]
    return sc


def with_claim(claim: str) -> dict[str, Any]:
    """The pod spec fields naming a PersistentVolumeClaim."""
    return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}


def preferred(labels: dict[str, str], key: str, weight: int, anti: bool = False) -> dict[str, Any]:
    """Preferred pod affinity (or anti-affinity) of one weighted term."""
    kind = "podAntiAffinity" if anti else "podAffinity"
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    return {
        kind: {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": term}]
        }
    }
