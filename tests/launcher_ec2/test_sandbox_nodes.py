"""The sandbox's EC2 nodes hold what the catalog planned for them: a Node made from an instance has the
allocatable the catalog predicts for its type (so a claim's pods fit on the node bought for them), the
providerID the launcher recorded and the type's architecture."""

from __future__ import annotations

import pytest

from devtools.sandbox.controllers.ec2_instances import node_for_instance
from tenon.core.quantities import parse_quantity
from tenon.services.launcher_ec2.shipped import described_instance_types, offline_catalog
from tests.launcher_ec2.ec2_support import ec2_nodeclass


@pytest.mark.parametrize("name", ["m5.large", "c6g.xlarge", "r5.4xlarge", "t3.micro"])
def test_a_node_of_an_instance_has_the_allocatable_the_catalog_predicts(name: str) -> None:
    described = {d["InstanceType"]: d for d in described_instance_types()[0]}[name]
    instance = {
        "InstanceId": "i-0123456789abcdef0",
        "InstanceType": name,
        "PrivateDnsName": "ip-10-0-0-1.ec2.internal",
        "Placement": {"AvailabilityZone": "us-east-1b"},
    }
    node = node_for_instance(instance, described, "us-east-1")
    entry = next(t for t in offline_catalog(ec2_nodeclass())["spec"]["instanceTypes"] if t["name"] == name)
    for resource in ("cpu", "memory", "pods", "ephemeral-storage"):
        predicted = parse_quantity(entry["capacity"][resource]) - parse_quantity(
            entry["overhead"].get(resource, "0")
        )
        assert parse_quantity(node["status"]["allocatable"][resource]) == predicted, resource
    assert node["spec"]["providerID"] == "aws:///us-east-1b/i-0123456789abcdef0"
    assert node["metadata"]["name"] == "ip-10-0-0-1.ec2.internal"
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/arch"] == entry["labels"]["kubernetes.io/arch"]
    assert labels["node.kubernetes.io/instance-type"] == name
    assert node["spec"]["taints"] == [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
