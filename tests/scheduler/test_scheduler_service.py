"""The scheduler service against a real broker and the sandbox's API: events in, claims and objects out."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto import events as ev
from proto import subjects
from proto.codec import encode
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import EVENTS, NODECLAIMS, NODEPOOLS, NODES, Kube, load_kube
from tenon.runtime.replay import replay
from tenon.runtime.service import ServiceContext
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.service import SchedulerService

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "capi-demo"


def demo_objects(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEMO / name).read_text()) if doc]


def pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def observed(event_type: type[ev.Event], key: tuple[object, ...], **fields: Any) -> ev.Event:
    return make_event(event_type, producer="pod-watcher", key=key, **fields)


async def wait_for(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def events_of(event_log: JetStreamEventLog, event_type: type[ev.Event]) -> list[Any]:
    return [r.event async for r in event_log.read() if isinstance(r.event, event_type)]


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxHandle]:
    async with running_sandbox(controllers=False) as handle:
        yield handle


@pytest.fixture
async def kube(sandbox: SandboxHandle) -> AsyncIterator[Kube]:
    client = await load_kube(str(sandbox.workload_kubeconfig))
    yield client
    await client.close()


async def seed(event_log: JetStreamEventLog, kube: Kube, nodepools: list[dict[str, Any]]) -> None:
    """What pod-watcher and launcher-capi would have published for the CAPI demo."""
    nodeclasses = [d for d in demo_objects("nodepool.yaml") if d["kind"] == "ClusterAPINodeClass"]
    for nodepool in nodepools:
        await kube.create(NODEPOOLS, nodepool)
    await event_log.publish(
        subjects.NODEPOOLS, observed(ev.NodePoolsSnapshot, ("np", len(nodepools)), nodepools=tuple(nodepools))
    )
    await event_log.publish(
        subjects.NODECLASSES, observed(ev.NodeClassesSnapshot, ("nc",), nodeclasses=tuple(nodeclasses))
    )
    await event_log.publish(
        subjects.DAEMONSETS,
        observed(ev.DaemonSetsSnapshot, ("ds",), daemonsets=tuple(demo_objects("daemonset.yaml"))),
    )
    catalog = make_event(
        ev.CatalogSnapshot,
        producer="launcher-capi",
        key=("catalog",),
        provider="cluster-api",
        node_class="default",
        instance_types=(),
        sources=tuple(demo_objects("machinedeployments.yaml")),
    )
    await event_log.publish(subjects.catalog("default"), catalog)


@pytest.fixture
async def running(jetstream_log: JetStreamEventLog, kube: Kube) -> AsyncIterator[SchedulerService]:
    ctx = ServiceContext("scheduler", "test", jetstream_log)
    service = SchedulerService(ctx, kube, tick_seconds=0.2, launch_timeout=timedelta(seconds=3))
    nodepools = [d for d in demo_objects("nodepool.yaml") if d["kind"] == "NodePool"]
    broken = copy.deepcopy(nodepools[0])
    broken["metadata"]["name"] = "broken"
    broken["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "Sideways"}
    ]
    await seed(jetstream_log, kube, [*nodepools, broken])
    task = asyncio.create_task(service.run())
    yield service
    ctx.stopping.set()
    await asyncio.wait_for(task, 20)


async def test_a_3_vcpu_pod_gets_one_c3_8_and_a_nodeclaim_object(
    running: SchedulerService, jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    batch = observed(
        ev.PendingBatch,
        ("b1",),
        batch_id="b1",
        pods=(pod("big-0", "3"),),
        window_opened_at=datetime.now(UTC),
        window_closed_by="idle",
    )
    await jetstream_log.publish(subjects.PENDING, batch)
    planned = await wait_for(lambda: [c.planned for c in running.projection.claims.values() if c.planned])
    [claim] = planned
    assert claim.choice.instance_type == "c3-8"
    assert claim.pods == ("default/big-0",)
    assert [f.instance_type for f in claim.fallbacks] == ["c3-16"]
    assert claim.causation_id == batch.id and claim.nodepool == "default"

    async def planned_events() -> list[dict[str, Any]]:
        kube_events, _ = await kube.list(EVENTS, "default")
        return [e for e in kube_events if e["involvedObject"]["name"] == claim.nodeclaim]

    deadline = asyncio.get_running_loop().time() + 5
    while not await planned_events():  # the object, its status, then its Event
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    obj = await kube.get(NODECLAIMS, claim.nodeclaim)
    assert obj["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c3-8"
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Launched"] == "Unknown"
    [planned_event] = await planned_events()
    assert planned_event["reason"] == "Planned" and "c3-8" in planned_event["message"]

    decisions = await events_of(jetstream_log, ev.BatchPlanned)
    assert [d.nodeclaims for d in decisions] == [(claim.nodeclaim,)]

    # the same batch delivered again (past the broker's duplicate window) plans nothing more
    await jetstream_log.publish_raw(
        subjects.PENDING, encode(batch), headers={"Nats-Msg-Id": "another-message-id"}
    )
    await asyncio.sleep(1.0)
    assert len([c for c in running.projection.claims.values() if c.planned]) == 1


async def test_invalid_nodepool_gets_a_condition_and_the_others_still_work(
    running: SchedulerService, jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    async def validation() -> dict[str, Any]:
        pool = await kube.get(NODEPOOLS, "broken")
        return {c["type"]: c for c in (pool.get("status") or {}).get("conditions", [])}

    deadline = asyncio.get_running_loop().time() + 10
    while "ValidationSucceeded" not in await validation():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    condition = (await validation())["ValidationSucceeded"]
    assert condition["status"] == "False"
    assert "broken" in condition["message"] and "operator" in condition["message"]
    good = await kube.get(NODEPOOLS, "default")
    assert {c["type"]: c["status"] for c in good["status"]["conditions"]}["ValidationSucceeded"] == "True"

    batch = observed(
        ev.PendingBatch,
        ("b2",),
        batch_id="b2",
        pods=tuple(pod(f"w-{i}", "1") for i in range(8)),
        window_opened_at=datetime.now(UTC),
        window_closed_by="idle",
    )
    await jetstream_log.publish(subjects.PENDING, batch)

    def planned() -> list[str]:
        return sorted(c.planned.choice.instance_type for c in running.projection.claims.values() if c.planned)

    await wait_for(lambda: len(planned()) >= 2)  # the claims of one answer are appended one after the other
    await asyncio.sleep(0.3)
    assert planned() == ["c3-16", "c3-4"]


async def test_registration_and_initialization_sync_the_node(
    running: SchedulerService, jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await jetstream_log.publish(
        subjects.PENDING,
        observed(
            ev.PendingBatch,
            ("b3",),
            batch_id="b3",
            pods=(pod("big-0", "3"),),
            window_opened_at=datetime.now(UTC),
            window_closed_by="idle",
        ),
    )
    [claim] = await wait_for(lambda: [c for c in running.projection.claims.values() if c.planned])
    name = claim.name
    await jetstream_log.append(
        subjects.nodeclaim(name),
        make_event(
            ev.NodeClaimLaunched,
            producer="launcher-capi",
            key=(name,),
            nodeclaim=name,
            provider_id="openstack:///abc",
            instance_type="c3-8",
        ),
        expected_last_sequence=claim.last_sequence,
    )
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "c3-8-abc", "labels": {"node.kubernetes.io/instance-type": "c3-8"}},
        "spec": {
            "providerID": "openstack:///abc",
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "False"}],
        },
    }
    created = await kube.create(NODES, node)
    await jetstream_log.publish(
        subjects.node("c3-8-abc"), observed(ev.NodeObserved, ("n", 1), change="added", node=created)
    )
    await wait_for(lambda: running.projection.claims[name].registered)
    patched = await kube.get(NODES, "c3-8-abc")
    assert patched["metadata"]["labels"]["karpenter.sh/nodepool"] == "default"
    assert not any(t["key"] == "karpenter.sh/unregistered" for t in patched["spec"].get("taints", []))

    patched["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    await jetstream_log.publish(
        subjects.node("c3-8-abc"), observed(ev.NodeObserved, ("n", 2), change="changed", node=patched)
    )
    await wait_for(lambda: running.projection.claims[name].initialized)

    async def conditions() -> dict[str, str]:
        obj = await kube.get(NODECLAIMS, name)
        return {c["type"]: c["status"] for c in obj["status"]["conditions"]}

    deadline = asyncio.get_running_loop().time() + 5
    while (await conditions()).get("Initialized") != "True":
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    obj = await kube.get(NODECLAIMS, name)
    assert obj["status"]["nodeName"] == "c3-8-abc" and obj["status"]["providerID"] == "openstack:///abc"

    # the recorded decisions replay to the same thing offline
    records = [r async for r in jetstream_log.read()]
    report = replay(SchedulerDecider(), records)
    assert report.comparisons and not report.differing, [c.differences() for c in report.differing]


async def test_a_claim_never_launched_is_abandoned_and_its_pods_planned_again(
    running: SchedulerService, jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await jetstream_log.publish(
        subjects.PENDING,
        observed(
            ev.PendingBatch,
            ("b4",),
            batch_id="b4",
            pods=(pod("big-0", "3"),),
            window_opened_at=datetime.now(UTC),
            window_closed_by="idle",
        ),
    )
    [first] = await wait_for(lambda: [c for c in running.projection.claims.values() if c.planned])
    abandoned = await wait_for(lambda: running.projection.claims[first.name].abandoned, timeout=20)
    assert "not launched within" in abandoned.reason
    second = await wait_for(
        lambda: [c for c in running.projection.claims.values() if c.planned and c.name != first.name]
    )
    assert second[0].planned.pods == ("default/big-0",)
    deadline = asyncio.get_running_loop().time() + 5
    while await kube.get_or_none(NODECLAIMS, first.name) is not None:  # the abandoned claim's object goes
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def test_a_restarted_scheduler_answers_what_came_while_it_was_down_and_nothing_twice(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    nodepools = [d for d in demo_objects("nodepool.yaml") if d["kind"] == "NodePool"]
    await seed(jetstream_log, kube, nodepools)

    def start() -> tuple[ServiceContext, SchedulerService, asyncio.Task[None]]:
        ctx = ServiceContext("scheduler", "test", jetstream_log)
        service = SchedulerService(ctx, kube, tick_seconds=0.2)
        return ctx, service, asyncio.create_task(service.run())

    ctx, first, task = start()
    await jetstream_log.publish(
        subjects.PENDING,
        observed(
            ev.PendingBatch,
            ("before",),
            batch_id="before",
            pods=(pod("a-0", "3"),),
            window_opened_at=datetime.now(UTC),
            window_closed_by="idle",
        ),
    )
    await wait_for(lambda: [c for c in first.projection.claims.values() if c.planned])
    ctx.stopping.set()
    await asyncio.wait_for(task, 20)

    # while no scheduler runs, another batch arrives
    await jetstream_log.publish(
        subjects.PENDING,
        observed(
            ev.PendingBatch,
            ("while-down",),
            batch_id="while-down",
            pods=(pod("b-0", "3"),),
            window_opened_at=datetime.now(UTC),
            window_closed_by="idle",
        ),
    )
    ctx, second, task = start()
    await wait_for(lambda: len([c for c in second.projection.claims.values() if c.planned]) == 2)
    await asyncio.sleep(0.5)
    ctx.stopping.set()
    await asyncio.wait_for(task, 20)
    planned = await events_of(jetstream_log, ev.NodeClaimPlanned)
    assert sorted(p.batch_id for p in planned) == ["before", "while-down"]  # each answered exactly once
