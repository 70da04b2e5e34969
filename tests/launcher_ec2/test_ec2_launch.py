"""launcher-ec2 against the local AWS (moto's server) and a real nats-server: catalog, launch, insufficient
capacity, termination."""

from __future__ import annotations

import pytest

from devtools.aws import Refusal
from proto import events as ev
from tenon.runtime.observability import metrics
from tests.launcher_ec2.ec2_support import (
    catalog_of,
    choice,
    claim_events,
    ec2_nodeclass,
    instances_of_claim,
    plan_claim,
    publish_nodeclasses,
    running_launcher,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration


async def test_a_planned_claim_becomes_one_tagged_instance_and_launched(jetstream_log, local_aws) -> None:
    aws, _ = local_aws
    await publish_nodeclasses(jetstream_log, ec2_nodeclass())
    async with running_launcher(jetstream_log, aws.url):
        catalog = await until(lambda: catalog_of(jetstream_log), 60, what="the EC2 catalog")
        names = {t["name"] for t in catalog.instance_types}
        assert "m5.large" in names and catalog.provider == "aws"
        await plan_claim(
            jetstream_log, "default-aaaaa", choice("m5.large", zone="us-east-1b"), choice("m5.xlarge")
        )

        async def launched() -> ev.NodeClaimLaunched | None:
            found = [
                e
                for e in await claim_events(jetstream_log, "default-aaaaa")
                if isinstance(e, ev.NodeClaimLaunched)
            ]
            return found[0] if found else None

        event = await until(launched, 30, what="NodeClaimLaunched")
    [instance] = instances_of_claim(aws.url, "default-aaaaa")
    assert event.provider_id == f"aws:///us-east-1b/{instance['InstanceId']}"
    assert (instance["InstanceType"], event.instance_type) == ("m5.large", "m5.large")
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["karpenter.sh/nodepool"] == "default"
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
    assert tags["kubernetes.io/cluster/tenon-sandbox"] == "owned"
    assert tags["team"] == "tenon"


async def test_refused_capacity_fails_over_to_the_next_choice_and_marks_the_offering(
    jetstream_log, local_aws
) -> None:
    aws, _ = local_aws
    aws.refuse(Refusal("m5.large", "us-east-1a"))
    await publish_nodeclasses(jetstream_log, ec2_nodeclass())
    async with running_launcher(jetstream_log, aws.url):
        await until(lambda: catalog_of(jetstream_log), 60, what="the EC2 catalog")
        await plan_claim(
            jetstream_log,
            "default-bbbbb",
            choice("m5.large", zone="us-east-1a"),
            choice("m5.xlarge", zone="us-east-1a"),
        )

        async def story() -> list[ev.Event] | None:
            events = await claim_events(jetstream_log, "default-bbbbb")
            return events if any(isinstance(e, ev.NodeClaimLaunched) for e in events) else None

        events = await until(story, 30, what="the claim launched on its next choice")

        async def marked() -> bool:
            catalog = await catalog_of(jetstream_log)
            entry = next(t for t in catalog.instance_types if t["name"] == "m5.large") if catalog else {}
            return any(
                o["zone"] == "us-east-1a" and o["capacityType"] == "on-demand" and o["available"] is False
                for o in entry.get("offerings") or []
            )

        await until(marked, 15, what="m5.large on-demand in us-east-1a published unavailable")
        # and Karpenter's offering gauges say the same
        offering = {"instance_type": "m5.large", "capacity_type": "on-demand", "zone": "us-east-1a"}
        sample = metrics.REGISTRY.get_sample_value
        assert sample("karpenter_cloudprovider_instance_type_offering_available", offering) == 0
        assert (sample("karpenter_cloudprovider_instance_type_offering_price_estimate", offering) or 0) > 0
    [failed] = [e for e in events if isinstance(e, ev.NodeClaimLaunchFailed)]
    assert failed.instance_type == "m5.large" and "InsufficientInstanceCapacity" in failed.reason
    [launched] = [e for e in events if isinstance(e, ev.NodeClaimLaunched)]
    assert launched.instance_type == "m5.xlarge"
    assert len(instances_of_claim(aws.url, "default-bbbbb")) == 1
