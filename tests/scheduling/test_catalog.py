"""Instance types from Cluster API MachineDeployments and InstanceCatalogs, and the generated catalogs."""

from __future__ import annotations

from typing import Any

from tenon.core import instance_types_from_catalog, instance_types_from_machine_deployments
from tenon.core.catalogs_generated import fake_400, kwok_144


def md(
    name: str, cpu: str | None, memory: str = "8Gi", price: str | None = None, **annotations: str
) -> dict[str, Any]:
    ann = {"capacity.cluster-autoscaler.kubernetes.io/memory": memory, **annotations}
    if cpu is not None:
        ann["capacity.cluster-autoscaler.kubernetes.io/cpu"] = cpu
    if price is not None:
        ann["tenon.sh/price-per-hour"] = price
    return {
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "capi",
            "annotations": ann,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
        },
        "spec": {"replicas": 2},
    }


def test_machine_deployment_capacity_price_max_size_and_defaults():
    types, skipped = instance_types_from_machine_deployments(
        [
            md(
                "c3-8",
                "4",
                price="0.1",
                **{
                    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
                    "capacity.cluster-autoscaler.kubernetes.io/labels": "disk=ssd",
                    "capacity.cluster-autoscaler.kubernetes.io/taints": "gpu=yes:NoSchedule",
                },
            )
        ]
    )
    assert skipped == []
    (t,) = types
    assert (t.name, t.capacity["cpu"], t.capacity["memory"], t.capacity["pods"]) == (
        "c3-8",
        4000,
        8 * 2**30,
        110,
    )
    assert t.max_new == 3 and t.labels["disk"] == "ssd" and t.taints[0].key == "gpu"
    assert [(o.capacity_type, o.price) for o in t.offerings] == [
        ("on-demand", 0.1)
    ]  # capacity-type defaulted
    assert not t.price_estimated


def test_unpriced_machine_deployments_get_flagged_estimates_that_grow_with_size():
    types, _ = instance_types_from_machine_deployments([md("small", "2", "4Gi"), md("big", "8", "16Gi")])
    small, big = types
    assert small.price_estimated and big.price_estimated
    assert 0 < small.offerings[0].price < big.offerings[0].price


def test_estimates_follow_priced_siblings():
    types, _ = instance_types_from_machine_deployments(
        [md("a", "2", "4Gi", price="1.0"), md("b", "4", "8Gi")]
    )
    assert abs(types[1].offerings[0].price - 2.0) < 1e-6 and types[1].price_estimated


def test_unreadable_machine_deployment_skipped_with_named_reason():
    types, skipped = instance_types_from_machine_deployments(
        [md("ok", "2"), md("broken", "two"), md("nocpu", None)]
    )
    assert [t.name for t in types] == ["ok"]
    assert [(s.name, "cpu" in s.reason) for s in skipped] == [("capi/broken", True), ("capi/nocpu", True)]
    non_member = md("other", "2")
    non_member["metadata"]["labels"] = {}
    assert instance_types_from_machine_deployments([non_member]) == ([], [])


def test_generated_catalogs_match_the_published_data():
    # Values copied from shared/data/catalogs/{fake-400,kwok-144}.json (the team's data hand-off).
    fake = fake_400()["spec"]["instanceTypes"]
    assert len(fake) == 400
    assert fake[0]["capacity"] == {"cpu": "1", "memory": "2Gi", "pods": "10"}
    assert fake[0]["offerings"][0] == {"zone": "test-zone-1", "capacityType": "spot", "price": 0.314748}
    assert fake[399]["offerings"][4] == {
        "zone": "test-zone-3",
        "capacityType": "on-demand",
        "price": 125.899346,
    }
    kwok = kwok_144()["spec"]["instanceTypes"]
    assert [t["name"] for t in kwok[:5]] == [
        "c-1x-amd64-linux",
        "c-1x-arm64-linux",
        "c-1x-amd64-windows",
        "c-1x-arm64-windows",
        "s-1x-amd64-linux",
    ]
    assert kwok[0]["offerings"][:2] == [
        {"zone": "test-zone-a", "capacityType": "spot", "price": 0.019003},
        {"zone": "test-zone-a", "capacityType": "on-demand", "price": 0.027147},
    ]
    last = kwok[-1]
    assert last["name"] == "m-256x-arm64-windows" and last["capacity"]["pods"] == "1024"
    assert (
        last["offerings"][1]["price"] == 8.599023
        and last["labels"]["karpenter.kwok.sh/instance-memory"] == "2097152"
    )
    parsed = instance_types_from_catalog(kwok_144())
    assert len(parsed) == 144 and parsed[0].allocatable["cpu"] == 900
