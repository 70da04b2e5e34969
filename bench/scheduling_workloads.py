"""Workloads and scenarios for the scheduling bench, as Kubernetes object dicts (what users feed tenon).

* :func:`diverse_pods` is Karpenter's ``makeDiversePods`` (scheduling_benchmark_test.go): a fifth each of
  generic pods, zonal spread (maxSkew 1, DoNotSchedule, selector on a random ``my-label``), hostname spread,
  zonal self-affinity (``my-affininity``, sic) and hostname anti-affinity (``app: nginx``), the remainder
  generic; CPU in {100,250,500,1000,1500}m, memory in {100,256,512,1024,2048,4096}Mi, labels a-g. Seeded
  Python ``random`` (not Go's), so the draw differs from Karpenter's but the distribution is the same.
* :func:`kwok_basic_pods` is Karpenter's e2e "basic" performance test: 500 pods of 0.9 CPU / 3.1 GiB and 500
  of 3.5 CPU / 28 GiB.
* :func:`random_scenario` draws a small cost scenario (a few instance types with uneven prices, a DaemonSet,
  up to ~14 pods of a few shapes) small enough for an exact MILP optimum.
* :func:`capi_field_case` is the OVH Cluster API case (c3-4/c3-8/c3-16, 100m DaemonSet).
"""

from __future__ import annotations

import random
from typing import Any

LABEL_VALUES = "abcdefg"


def pod(
    name: str, cpu: str, memory: str, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **spec,
        },
    }


def node_pool(
    name: str = "default",
    requirements: list[dict[str, Any]] | None = None,
    node_class: str = "default",
    kind: str = "EC2NodeClass",
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "x", "kind": kind, "name": node_class},
                    "requirements": requirements or [],
                }
            }
        },
    }


def diverse_pods(count: int, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)

    def resources() -> tuple[str, str]:
        return (
            f"{rng.choice([100, 250, 500, 1000, 1500])}m",
            f"{rng.choice([100, 256, 512, 1024, 2048, 4096])}Mi",
        )

    def value() -> str:
        return rng.choice(LABEL_VALUES)

    pods: list[dict[str, Any]] = []
    fifth = count // 5
    for i in range(fifth):
        pods.append(pod(f"generic-{i}", *resources()))
    for key, kind in (("topology.kubernetes.io/zone", "zspread"), ("kubernetes.io/hostname", "hspread")):
        for i in range(fifth):
            cpu, mem = resources()
            pods.append(
                pod(
                    f"{kind}-{i}",
                    cpu,
                    mem,
                    {"my-label": value()},
                    topologySpreadConstraints=[
                        {
                            "maxSkew": 1,
                            "topologyKey": key,
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"my-label": value()}},
                        }
                    ],
                )
            )
    for i in range(fifth):
        cpu, mem = resources()
        labels = {"my-affininity": value()}
        pods.append(
            pod(
                f"zaffinity-{i}",
                cpu,
                mem,
                labels,
                affinity={
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": dict(labels)},
                                "topologyKey": "topology.kubernetes.io/zone",
                            }
                        ]
                    }
                },
            )
        )
    for i in range(fifth):
        cpu, mem = resources()
        pods.append(
            pod(
                f"hanti-{i}",
                cpu,
                mem,
                {"app": "nginx"},
                affinity={
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "nginx"}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
            )
        )
    for i in range(count - len(pods)):
        pods.append(pod(f"generic-extra-{i}", *resources()))
    return pods


def kwok_basic_pods() -> list[dict[str, Any]]:
    small = [pod(f"small-{i}", "900m", "3174Mi") for i in range(500)]  # 3.1 GiB = 3174.4Mi, rounded down
    big = [pod(f"big-{i}", "3500m", "28Gi") for i in range(500)]
    return small + big


def instance_catalog(name: str, types: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": name},
        "spec": {"instanceTypes": types},
    }


def daemon_set(cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                },
            }
        },
    }


def random_scenario(rng: random.Random, pods_range: tuple[int, int] = (4, 14)) -> list[dict[str, Any]]:
    """A small cost scenario: NodePool, catalog of 3-6 types, a DaemonSet, 4-14 pods of 2-4 shapes."""
    types: list[dict[str, Any]] = []
    names = set()
    rate_cpu, rate_mem = rng.uniform(0.02, 0.05), rng.uniform(0.002, 0.008)
    for _ in range(rng.randint(3, 6)):
        cpu = rng.choice([1, 2, 4, 8, 16])
        gib = cpu * rng.choice([1, 2, 4, 8])
        name = f"t{cpu}x{gib}"
        if name in names:
            continue
        names.add(name)
        price = round((rate_cpu * cpu + rate_mem * gib) * rng.uniform(0.8, 1.2), 4)
        types.append(
            {
                "name": name,
                "capacity": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": "110"},
                "overhead": {"cpu": "100m", "memory": "256Mi"},
                "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": price}],
            }
        )
    rooms = [
        (int(t["capacity"]["cpu"]) * 1000 - 300, int(t["capacity"]["memory"][:-2]) * 1024 - 384)
        for t in types
    ]
    shapes: list[tuple[str, str]] = []
    while len(shapes) < rng.randint(2, 4):
        cpu = rng.choice([100, 250, 500, 1000, 1500, 2000, 3000])
        mem = rng.choice([128, 256, 512, 1024, 2048, 4096, 8192])
        if any(cpu <= c and mem <= m for c, m in rooms):  # every pod fits some type
            shapes.append((f"{cpu}m", f"{mem}Mi"))
    pods = [pod(f"p{i}", *rng.choice(shapes)) for i in range(rng.randint(*pods_range))]
    ds = daemon_set(rng.choice(["50m", "100m", "200m"]), "128Mi")
    return [node_pool(), instance_catalog("default", types), ds, *pods]


def capi_field_case(pods: int, cpu: str, priced: bool = True) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [node_pool(kind="ClusterAPINodeClass")]
    for name, vcpu, price in (("c3-4", 2, "0.05"), ("c3-8", 4, "0.10"), ("c3-16", 8, "0.20")):
        annotations = {
            "capacity.cluster-autoscaler.kubernetes.io/cpu": str(vcpu),
            "capacity.cluster-autoscaler.kubernetes.io/memory": f"{2 * vcpu}Gi",
        }
        if priced:
            annotations["tenon.sh/price-per-hour"] = price
        docs.append(
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "MachineDeployment",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "annotations": annotations,
                    "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
                },
                "spec": {"replicas": 0},
            }
        )
    docs.append(daemon_set("100m", "0"))
    docs += [pod(f"w-{i}", cpu, "256Mi") for i in range(pods)]
    return docs
