"""Helpers for the launcher-ec2 tests: the local AWS, an EC2NodeClass, the events a scheduler would write, a
running launcher.

The tests play the scheduler and the pod-watcher: they publish ``NodeClassesSnapshot`` and append
``NodeClaimPlanned`` (and disruption's steps) on a real log (nats-server), and watch what the launcher does
to the local AWS (moto's server on loopback, with its fault seam) and to the log.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from devtools.aws import client
from proto import events as ev
from proto import subjects
from proto.ids import derive_id
from tenon.runtime.decider import DeciderRuntime
from tenon.runtime.eventlog import EventLog
from tenon.runtime.kube import Kube
from tenon.services.launcher_ec2.aws import Aws, AwsSettings
from tenon.services.launcher_ec2.decider import Ec2LauncherDecider
from tenon.services.launcher_ec2.executor import Ec2Executor
from tenon.services.launcher_ec2.service import LauncherEc2Settings, publisher_settings
from tenon.services.launcher_ec2.state import Ec2State
from tests.support.events import append_to_claim, build_event
from tests.support.services import running
from tests.support.waiting import until

NODECLASS = "default"
CLUSTER = "tenon-sandbox"
TEST_TYPES = "m5.*,c5.*,r5.*,t3.*,m6g.*"
"""The families the tests' catalogs hold (a smaller catalog: faster to build and to read)."""


def ec2_nodeclass(name: str = NODECLASS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "generation": 1},
        "spec": {
            "instanceProfile": "KarpenterNodeInstanceProfile",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "tags": {"team": "tenon"},
            **spec,
        },
    }


def settings(url: str, **overrides: Any) -> LauncherEc2Settings:
    values: dict[str, Any] = {
        "cluster_name": CLUSTER,
        "aws_endpoint": url,
        "instance_types": TEST_TYPES,
        "poll": 0.2,
        "leak_grace": 0.0,
        **overrides,
    }
    return LauncherEc2Settings(**values)


def make_executor(config: LauncherEc2Settings, workload: Kube | None = None) -> Ec2Executor:
    aws = Aws(AwsSettings(config.aws_region, config.aws_endpoint, config.kubernetes_version))
    return Ec2Executor(
        aws,
        publisher_settings(config),
        workload=workload,
        cluster_tag=config.cluster_tag,
        poll=config.poll,
        leak_grace=config.leak_grace,
        launch_timeout=config.launch_timeout,
    )


@contextlib.asynccontextmanager
async def running_launcher(
    event_log: EventLog, url: str, *, workload: Kube | None = None, **overrides: Any
) -> AsyncIterator[DeciderRuntime[Ec2State]]:
    config = settings(url, **overrides)
    executor = make_executor(config, workload)
    async with running(Ec2LauncherDecider(CLUSTER), executor, event_log, tick_seconds=0.2) as runtime:
        await until(executor.started.is_set, 60, what="launcher-ec2 started")
        yield runtime


async def publish_nodeclasses(event_log: EventLog, *objects: dict[str, Any], key: str = "1") -> None:
    event = build_event(ev.NodeClassesSnapshot, derive_id("test", "nodeclasses", key), nodeclasses=objects)
    await event_log.publish(subjects.NODECLASSES, event)


def choice(
    instance_type: str, capacity_type: str = "on-demand", zone: str | None = None, price: float = 0.1
) -> ev.InstanceChoice:
    return ev.InstanceChoice(instance_type, zone, capacity_type, price)


async def plan_claim(
    event_log: EventLog, name: str, *choices: ev.InstanceChoice, nodepool: str = "default"
) -> int:
    planned = build_event(
        ev.NodeClaimPlanned,
        derive_id("test", "planned", name),
        nodeclaim=name,
        nodepool=nodepool,
        node_class=NODECLASS,
        choice=choices[0],
        fallbacks=tuple(choices[1:]),
        pods=(f"default/{name}-pod",),
        requirements=(),
        labels={},
        correlation=name,
    )
    return await append_to_claim(event_log, planned)


async def catalog_of(event_log: EventLog, node_class: str = NODECLASS) -> ev.CatalogSnapshot | None:
    found = None
    async for record in event_log.last_per_subject(subjects.catalog(node_class)):
        if isinstance(record.event, ev.CatalogSnapshot):
            found = record.event
    return found


async def claim_events(event_log: EventLog, name: str) -> list[ev.Event]:
    return [r.event async for r in event_log.read(subjects.nodeclaim(name)) if r.event is not None]


def instances_of_claim(url: str, name: str) -> list[dict[str, Any]]:
    ec2 = client("ec2", url)
    reservations = ec2.describe_instances(Filters=[{"Name": "tag:karpenter.sh/nodeclaim", "Values": [name]}])
    return [i for r in reservations["Reservations"] for i in r["Instances"]]
