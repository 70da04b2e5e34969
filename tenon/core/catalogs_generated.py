"""The two benchmark catalogs, generated from their published formulas instead of copied.

* ``fake-400``: Karpenter's scheduling benchmark (``fake.InstanceTypes(400)``): type *i* has i+1 vCPU,
  2(i+1) GiB, 10(i+1) pods; spot offerings in zones 1-2 and on-demand in zones 1-3, all priced
  0.1 x vCPU + 0.1 x memory in GB (10^9 bytes); overhead 100m CPU and 10Mi memory.
* ``kwok-144``: Karpenter's KWOK provider types: vCPU in {1,...,256}, families c/s/m with 2/4/8 GiB per vCPU,
  linux|windows x amd64|arm64, pods = min(16 x vCPU, 1024), 20Gi ephemeral storage, 4 zones x spot/on-demand;
  on-demand price 0.025 x vCPU + 0.001 x memory in GB, spot 0.7 x that; overhead 100m CPU and 10Mi memory.

Both return ``InstanceCatalog`` documents (dicts) in the format ``objects.parse_objects`` reads; the team's
data hand-off (``shared/data/catalogs/*.json``) holds the same documents, which the tests check entry by entry
against values copied from it.
"""

from __future__ import annotations

from typing import Any

KWOK_CPUS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
KWOK_FAMILIES = (("c", 2), ("s", 4), ("m", 8))
OVERHEAD = {"cpu": "100m", "memory": "10Mi"}


def _gb(gib: int) -> float:
    return gib * 2**30 / 1e9


def fake_400(count: int = 400) -> dict[str, Any]:
    types = []
    for i in range(count):
        cpu, gib = i + 1, 2 * (i + 1)
        price = round(0.1 * cpu + 0.1 * _gb(gib), 6)
        offerings = [{"zone": f"test-zone-{z}", "capacityType": "spot", "price": price} for z in (1, 2)]
        offerings += [
            {"zone": f"test-zone-{z}", "capacityType": "on-demand", "price": price} for z in (1, 2, 3)
        ]
        types.append(
            {
                "name": f"fake-it-{i}",
                "capacity": {"cpu": str(cpu), "memory": f"{gib}Gi", "pods": str(10 * cpu)},
                "overhead": dict(OVERHEAD),
                "labels": {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": f"fake-it-{i}"},
                "offerings": offerings,
            }
        )
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": f"fake-{count}"},
        "spec": {"instanceTypes": types},
    }


def kwok_144() -> dict[str, Any]:
    types = []
    for cpu in KWOK_CPUS:
        for family, per_cpu in KWOK_FAMILIES:
            gib = cpu * per_cpu
            on_demand = 0.025 * cpu + 0.001 * _gb(gib)
            for os_name in ("linux", "windows"):
                for arch in ("amd64", "arm64"):
                    name = f"{family}-{cpu}x-{arch}-{os_name}"
                    offerings = []
                    for zone in "abcd":
                        offerings.append(
                            {
                                "zone": f"test-zone-{zone}",
                                "capacityType": "spot",
                                "price": round(0.7 * on_demand, 6),
                            }
                        )
                        offerings.append(
                            {
                                "zone": f"test-zone-{zone}",
                                "capacityType": "on-demand",
                                "price": round(on_demand, 6),
                            }
                        )
                    types.append(
                        {
                            "name": name,
                            "capacity": {
                                "cpu": str(cpu),
                                "memory": f"{gib}Gi",
                                "pods": str(min(16 * cpu, 1024)),
                                "ephemeral-storage": "20Gi",
                            },
                            "overhead": dict(OVERHEAD),
                            "labels": {
                                "kubernetes.io/arch": arch,
                                "kubernetes.io/os": os_name,
                                "node.kubernetes.io/instance-type": name,
                                "karpenter.kwok.sh/instance-family": family,
                                "karpenter.kwok.sh/instance-cpu": str(cpu),
                                "karpenter.kwok.sh/instance-memory": str(gib * 1024),
                                "karpenter.kwok.sh/instance-size": f"{cpu}x",
                            },
                            "offerings": offerings,
                        }
                    )
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": "kwok-144"},
        "spec": {"instanceTypes": types},
    }
