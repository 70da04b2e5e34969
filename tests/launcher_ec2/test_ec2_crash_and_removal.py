"""launcher-ec2's durability against the local AWS and a real nats-server: a launcher killed in the middle of
CreateFleet never yields two instances; a drained claim's instance is terminated and the claim Terminated;
an instance of a claim that exists nowhere is terminated only on recorded evidence, and kept (with why) when a
NodeClaim object of its name exists; what it decided replays to the same from the log."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devtools.aws import LocalAws, aws_environment, client
from devtools.broker import LocalNatsServer
from devtools.processes import kill_process, stop_process
from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto import events as ev
from proto import subjects
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import NODECLAIMS, Kube, load_kube
from tenon.runtime.replay import replay
from tenon.services.launcher_ec2.decider import Ec2LauncherDecider
from tests.launcher_ec2.ec2_support import (
    CLUSTER,
    TEST_TYPES,
    catalog_of,
    choice,
    claim_events,
    ec2_nodeclass,
    instances_of_claim,
    plan_claim,
    publish_nodeclasses,
    running_launcher,
)
from tests.support.events import append_to_claim, build_event
from tests.support.waiting import until

pytestmark = pytest.mark.integration

CLAIM = "default-kkkkk"


def launcher_process(nats: LocalNatsServer, aws: LocalAws, log: Path) -> subprocess.Popen[bytes]:
    """``tenon run launcher-ec2`` as its own process, on the test's broker and local AWS."""
    env = {
        **os.environ,
        **aws_environment(aws.url),
        "TENON_NATS_URL": nats.url,
        "TENON_AWS_ENDPOINT": aws.url,
        "TENON_CLUSTER_NAME": CLUSTER,
        "TENON_EC2_INSTANCE_TYPES": TEST_TYPES,
        "TENON_EC2_POLL": "0.2s",
        "TENON_LAUNCHER_TICK": "0.2s",
        "TENON_LEASE_TTL": "1s",
        "TENON_HEALTH_HOST": "127.0.0.1",
        "TENON_HEALTH_PORT": "0",
        "TENON_LOG_FORMAT": "json",
    }
    env.pop("TENON_KUBECONFIG", None)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tenon.services.launcher_ec2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        stop_process(process, timeout=5)


def live(url: str, claim: str) -> list[dict[str, Any]]:
    return [i for i in instances_of_claim(url, claim) if i["State"]["Name"] != "terminated"]


async def story_of(event_log: JetStreamEventLog, kind: type[ev.Event], subject: str) -> list[Any]:
    return [r.event async for r in event_log.read(subject) if isinstance(r.event, kind)]


async def test_a_launcher_killed_during_create_fleet_never_yields_two_instances(
    jetstream_log, nats_server, local_aws, processes, tmp_path: Path
) -> None:
    aws, _ = local_aws
    await publish_nodeclasses(jetstream_log, ec2_nodeclass())
    processes.append(launcher_process(nats_server, aws, tmp_path / "first.log"))
    await until(lambda: catalog_of(jetstream_log), 60, what="the first launcher's catalog")
    aws.delay("CreateFleet", 60)  # EC2 launches, the launcher does not hear of it before it dies
    await plan_claim(jetstream_log, CLAIM, choice("m5.large", zone="us-east-1a"), choice("m5.xlarge"))
    await until(lambda: live(aws.url, CLAIM), 30, what="the instance launched by the first CreateFleet")
    assert await story_of(jetstream_log, ev.Ec2FleetRequested, subjects.ec2_fleet(CLAIM))
    assert not await story_of(jetstream_log, ev.Ec2FleetAnswered, subjects.ec2_fleet(CLAIM))
    kill_process(processes[0])  # SIGKILL in the middle of the call
    aws.delay("CreateFleet", 0)

    processes.append(launcher_process(nats_server, aws, tmp_path / "second.log"))

    async def launched() -> list[ev.Event]:
        return [e for e in await claim_events(jetstream_log, CLAIM) if isinstance(e, ev.NodeClaimLaunched)]

    [event] = await until(launched, 25, what="the claim Launched by the next launcher")
    [instance] = live(aws.url, CLAIM)
    assert event.provider_id == f"aws:///us-east-1a/{instance['InstanceId']}"
    [answer] = await story_of(jetstream_log, ev.Ec2FleetAnswered, subjects.ec2_fleet(CLAIM))
    assert answer.found_by_tag and answer.instance_id == instance["InstanceId"]


async def test_a_drained_claim_s_instance_is_terminated_and_the_run_replays_to_the_same(
    jetstream_log, local_aws
) -> None:
    aws, _ = local_aws
    await publish_nodeclasses(jetstream_log, ec2_nodeclass())
    async with running_launcher(jetstream_log, aws.url) as runtime:
        await until(lambda: catalog_of(jetstream_log), 60, what="the EC2 catalog")
        await plan_claim(jetstream_log, CLAIM, choice("m5.large", zone="us-east-1b"))

        async def launched() -> list[ev.Event]:
            events = await claim_events(jetstream_log, CLAIM)
            return [e for e in events if isinstance(e, ev.NodeClaimLaunched)]

        await until(launched, 30, what="NodeClaimLaunched")  # disruption drains only what was launched
        [instance] = live(aws.url, CLAIM)
        requested = build_event(
            ev.DisruptionRequested,
            "drain-request",
            at=datetime.now(UTC),
            nodeclaim=CLAIM,
            method="emptiness",
            reason="empty",
            node=None,
        )
        await append_to_claim(jetstream_log, requested)
        await append_to_claim(
            jetstream_log,
            build_event(ev.NodeClaimDrained, "drained", at=datetime.now(UTC), nodeclaim=CLAIM, node=None),
        )

        async def terminated() -> list[ev.Event]:
            events = await claim_events(jetstream_log, CLAIM)
            return [e for e in events if isinstance(e, ev.NodeClaimTerminated)]

        [done] = await until(terminated, 30, what="NodeClaimTerminated")
        await until(lambda: runtime.state.claims[CLAIM].terminated is not None, 10, what="folded")
    states = [i["State"]["Name"] for i in instances_of_claim(aws.url, CLAIM)]
    assert states in (["terminated"], ["shutting-down"])
    assert instance["InstanceId"] in done.reason
    [decided] = await story_of(
        jetstream_log, ev.Ec2InstanceTerminationDecided, subjects.ec2_instance(instance["InstanceId"])
    )
    assert decided.reason == f"NodeClaim {CLAIM} drained"
    records = [r async for r in jetstream_log.read(subjects.ALL_EVENTS)]
    report = replay(Ec2LauncherDecider(CLUSTER), records)
    assert report.comparisons and report.differing == [], [c.differences() for c in report.differing]


@pytest.fixture
async def workload() -> AsyncIterator[Kube]:
    handle: SandboxHandle
    async with running_sandbox("fast") as handle:
        kube = await load_kube(str(handle.workload_kubeconfig))
        try:
            yield kube
        finally:
            await kube.close()


def ghost_instance(url: str, claim: str) -> str:
    """An instance tagged for the cluster and a claim, launched behind tenon's back (a lost record)."""
    ec2 = client("ec2", url)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [
        {"Key": "karpenter.sh/nodeclaim", "Value": claim},
        {"Key": "karpenter.sh/nodepool", "Value": "default"},
        {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
    ]
    answer = ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(answer["Instances"][0]["InstanceId"])


async def test_a_leaked_instance_goes_only_on_evidence_and_one_with_a_nodeclaim_object_stays(
    jetstream_log, local_aws, workload: Kube
) -> None:
    aws, _ = local_aws
    await publish_nodeclasses(jetstream_log, ec2_nodeclass())  # the log begins here
    bounds = await jetstream_log.bounds()
    assert bounds.first_time is not None
    # the log must reach back past an instance's launch minus the launch timeout (1 s here)
    await until(
        lambda: datetime.now(UTC) - bounds.first_time > timedelta(seconds=1.5), 5, what="the log older"
    )
    leaked = ghost_instance(aws.url, "ghost-a")
    kept = ghost_instance(aws.url, "ghost-b")
    await workload.create(
        NODECLAIMS,
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "ghost-b"}, "spec": {}},
    )
    async with running_launcher(jetstream_log, aws.url, workload=workload, launch_timeout=1.0):

        async def decided() -> list[Any] | None:
            found = [
                *await story_of(
                    jetstream_log, ev.Ec2InstanceTerminationDecided, subjects.ec2_instance(leaked)
                ),
                *await story_of(jetstream_log, ev.Ec2InstanceKept, subjects.ec2_instance(kept)),
            ]
            return found if len(found) == 2 else None

        terminated, keep = await until(decided, 30, what="a verdict on each instance")
    assert terminated.reason.startswith("leaked: tagged with NodeClaim ghost-a")
    assert any("no NodeClaim object ghost-a in the workload cluster" in e for e in terminated.evidence)
    assert keep.code == "nodeclaim-object-exists"
    states = {i: s for i, s in _states(aws.url)}
    assert states[leaked] in ("shutting-down", "terminated") and states[kept] == "running"


def _states(url: str) -> list[tuple[str, str]]:
    from devtools.aws import instance_states

    return list(instance_states(url))
