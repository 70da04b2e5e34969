"""An EC2NodeClass's catalog built offline from what launcher-ec2 ships (what ``tenon simulate`` plans with):
Karpenter's formulas on the shipped instance types, the shipped prices, spot estimated and flagged."""

from __future__ import annotations

import pytest

from tenon.core import parse_objects, solve
from tenon.services.launcher_ec2.nodeclass import NodeClassInvalid
from tenon.services.launcher_ec2.shipped import offline_catalog, on_demand_prices
from tests.launcher_ec2.ec2_support import ec2_nodeclass


def entry(catalog: dict, name: str) -> dict:
    return next(t for t in catalog["spec"]["instanceTypes"] if t["name"] == name)


def test_m5_large_has_karpenter_s_capacity_and_overhead_and_the_list_price() -> None:
    catalog = offline_catalog(ec2_nodeclass())
    m5 = entry(catalog, "m5.large")
    assert m5["capacity"]["pods"] == "29"  # 3 ENIs x (10 IPv4 - 1) + 2
    assert m5["capacity"]["memory"] == "7577Mi"  # 8192Mi - ceil(7.5%)
    assert m5["overhead"]["cpu"] == "70m" and m5["overhead"]["memory"] == f"{11 * 29 + 255 + 100}Mi"
    on_demand = {o["price"] for o in m5["offerings"] if o["capacityType"] == "on-demand"}
    assert on_demand == {on_demand_prices()["m5.large"]}
    spot = {o["price"] for o in m5["offerings"] if o["capacityType"] == "spot"}
    assert spot == {round(on_demand_prices()["m5.large"] * 0.35, 6)} and m5["priceEstimated"] is True
    flags = {o["capacityType"]: o.get("priceEstimated", False) for o in m5["offerings"]}
    assert flags == {"spot": True, "on-demand": False}  # the list price is no estimate
    assert {o["zone"] for o in m5["offerings"]} >= {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert "spot prices estimated" in catalog["metadata"]["annotations"]["tenon.sh/catalog-notes"]


def test_the_nodeclass_s_kubelet_settings_shape_the_catalog() -> None:
    catalog = offline_catalog(ec2_nodeclass(kubelet={"maxPods": 110}))
    assert entry(catalog, "m5.large")["capacity"]["pods"] == "110"


def test_a_nodeclass_that_cannot_be_read_names_the_field() -> None:
    with pytest.raises(NodeClassInvalid, match="subnetSelectorTerms"):
        offline_catalog(ec2_nodeclass(subnetSelectorTerms="everything"))


def test_the_core_plans_an_ec2_nodepool_on_the_offline_catalog() -> None:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                    ],
                }
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}]},
    }
    nodeclass = ec2_nodeclass()
    documents = [pool, nodeclass, offline_catalog(nodeclass), pod]
    plan = solve(parse_objects(("test", i, d) for i, d in enumerate(documents)))
    [claim] = plan.node_claims
    assert (claim.instance_type, claim.capacity_type) == ("m5.large", "on-demand")
    assert claim.price == on_demand_prices()["m5.large"]
