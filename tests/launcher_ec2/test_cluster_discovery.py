"""Where the nodes join: launcher-ec2 takes the cluster's endpoint and CA from its settings, and asks EKS for
what is not set (``DescribeCluster``, as Karpenter does); with neither, it refuses to launch, saying why."""

from __future__ import annotations

import pytest

from devtools.aws import SERVICE_CIDR, LocalAws, Seeded, client
from tenon.runtime.observability import metrics
from tenon.runtime.settings import SettingsError
from tenon.services.launcher_ec2.aws import Aws, AwsSettings
from tenon.services.launcher_ec2.service import discovered_cluster
from tests.launcher_ec2.ec2_support import CLUSTER, settings


def aws_of(url: str) -> Aws:
    return Aws(AwsSettings("us-east-1", url))


def test_an_unset_endpoint_and_ca_come_from_eks(local_aws: tuple[LocalAws, Seeded]) -> None:
    aws, _ = local_aws
    described = client("eks", aws.url).describe_cluster(name=CLUSTER)["cluster"]
    cluster = discovered_cluster(aws_of(aws.url), settings(aws.url))
    assert cluster.endpoint == described["endpoint"] and cluster.endpoint.startswith("https://")
    assert cluster.certificate_authority == described["certificateAuthority"]["data"] != ""
    assert cluster.cidr == SERVICE_CIDR


def test_configured_values_win_over_eks(local_aws: tuple[LocalAws, Seeded]) -> None:
    aws, _ = local_aws
    config = settings(aws.url, cluster_endpoint="https://api.example:6443", cluster_ca="Q0E=")
    cluster = discovered_cluster(aws_of(aws.url), config)
    assert (cluster.endpoint, cluster.certificate_authority) == ("https://api.example:6443", "Q0E=")


def test_an_unknown_cluster_without_an_endpoint_is_a_one_line_error(
    local_aws: tuple[LocalAws, Seeded],
) -> None:
    aws, _ = local_aws
    labels = {"controller": "eks", "method": "describe_cluster", "provider": "aws"}
    errors_before = sample(
        "karpenter_cloudprovider_errors_total", error="ResourceNotFoundException", **labels
    )
    calls_before = sample("karpenter_cloudprovider_duration_seconds_count", **labels)
    with pytest.raises(SettingsError) as raised:
        discovered_cluster(aws_of(aws.url), settings(aws.url, cluster_name="not-there"))
    message = str(raised.value)
    assert "TENON_CLUSTER_ENDPOINT" in message and "'not-there'" in message and "\n" not in message
    # Karpenter's cloud provider metrics saw the call and EKS's answer
    assert sample("karpenter_cloudprovider_duration_seconds_count", **labels) == calls_before + 1
    assert (
        sample("karpenter_cloudprovider_errors_total", error="ResourceNotFoundException", **labels)
        == errors_before + 1
    )


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0
