"""The scheduler service against a real broker and the sandbox's API: events in, claims and objects out."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto import events as ev
from proto import subjects
from proto.codec import encode
from tenon.runtime.decider import DeciderRuntime
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import EVENTS, NODECLAIMS, NODEPOOLS, NODES, Kube, load_kube
from tenon.runtime.replay import replay
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.service import SchedulerExecutor
from tests.support.events import append_to_claim
from tests.support.services import caught_up
from tests.support.services import running as running_service
from tests.support.waiting import until

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
def launch_timeout() -> timedelta:
    """Long enough that no claim is abandoned while a test looks at it (one test overrides it)."""
    return timedelta(minutes=5)


@pytest.fixture
async def running(
    jetstream_log: JetStreamEventLog, kube: Kube, launch_timeout: timedelta
) -> AsyncIterator[DeciderRuntime[Any]]:
    nodepools = [d for d in demo_objects("nodepool.yaml") if d["kind"] == "NodePool"]
    broken = copy.deepcopy(nodepools[0])
    broken["metadata"]["name"] = "broken"
    broken["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "Sideways"}
    ]
    await seed(jetstream_log, kube, [*nodepools, broken])
    decider = SchedulerDecider(launch_timeout=launch_timeout)
    async with running_service(decider, SchedulerExecutor(kube), jetstream_log) as runtime:
        yield runtime


async def test_a_3_vcpu_pod_gets_one_c3_8_and_a_nodeclaim_object(
    running: DeciderRuntime[Any], jetstream_log: JetStreamEventLog, kube: Kube
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
    planned = await until(lambda: [c.planned for c in running.state.claims.values() if c.planned])
    [claim] = planned
    assert claim.choice.instance_type == "c3-8"
    assert claim.pods == ("default/big-0",)
    assert [f.instance_type for f in claim.fallbacks] == ["c3-16"]
    assert claim.causation_id == batch.id and claim.nodepool == "default"

    async def planned_events() -> list[dict[str, Any]]:
        kube_events, _ = await kube.list(EVENTS, "default")
        return [e for e in kube_events if e["involvedObject"]["name"] == claim.nodeclaim]

    await until(planned_events, what="the NodeClaim object, its status, then its Event")
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
    redelivered = await jetstream_log.last_subject_sequence(subjects.PENDING)
    await until(lambda: running.handled >= redelivered, what="the repeated batch handled")
    await until(lambda: caught_up(running))
    assert len([c for c in running.state.claims.values() if c.planned]) == 1


async def test_invalid_nodepool_gets_a_condition_and_the_others_still_work(
    running: DeciderRuntime[Any], jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    async def validation() -> dict[str, Any]:
        pool = await kube.get(NODEPOOLS, "broken")
        return {c["type"]: c for c in (pool.get("status") or {}).get("conditions", [])}

    async def validated() -> bool:
        return "ValidationSucceeded" in await validation()

    await until(validated, what="the NodePool's ValidationSucceeded condition")
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
        return sorted(c.planned.choice.instance_type for c in running.state.claims.values() if c.planned)

    answered = await jetstream_log.last_subject_sequence(subjects.PENDING)
    await until(lambda: running.handled >= answered, what="the batch answered")
    assert planned() == ["c3-16", "c3-4"]


async def test_registration_and_initialization_sync_the_node(
    running: DeciderRuntime[Any], jetstream_log: JetStreamEventLog, kube: Kube
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
    [claim] = await until(lambda: [c for c in running.state.claims.values() if c.planned])
    name = claim.name
    await append_to_claim(
        jetstream_log,
        make_event(
            ev.NodeClaimLaunched,
            producer="launcher-capi",
            key=(name,),
            nodeclaim=name,
            provider_id="openstack:///abc",
            instance_type="c3-8",
        ),
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
    await until(lambda: running.state.claims[name].registered)
    patched = await kube.get(NODES, "c3-8-abc")
    assert patched["metadata"]["labels"]["karpenter.sh/nodepool"] == "default"
    assert not any(t["key"] == "karpenter.sh/unregistered" for t in patched["spec"].get("taints", []))

    patched["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    await jetstream_log.publish(
        subjects.node("c3-8-abc"), observed(ev.NodeObserved, ("n", 2), change="changed", node=patched)
    )
    await until(lambda: running.state.claims[name].initialized)

    async def conditions() -> dict[str, str]:
        obj = await kube.get_or_none(NODECLAIMS, name)  # written a moment after the claim changes
        return {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []}

    async def initialized() -> bool:
        return (await conditions()).get("Initialized") == "True"

    await until(initialized, what="the NodeClaim object Initialized")
    obj = await kube.get(NODECLAIMS, name)
    assert obj["status"]["nodeName"] == "c3-8-abc" and obj["status"]["providerID"] == "openstack:///abc"

    # the recorded decisions replay to the same thing offline
    records = [r async for r in jetstream_log.read()]
    report = replay(SchedulerDecider(), records)
    assert report.comparisons and not report.differing, [c.differences() for c in report.differing]


@pytest.mark.parametrize("launch_timeout", [timedelta(seconds=3)])
async def test_a_claim_never_launched_is_abandoned_and_its_pods_planned_again(
    running: DeciderRuntime[Any], jetstream_log: JetStreamEventLog, kube: Kube
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
    [first] = await until(lambda: [c for c in running.state.claims.values() if c.planned])
    abandoned = await until(lambda: running.state.claims[first.name].abandoned, timeout=20)
    assert "not launched within" in abandoned.reason
    second = await until(
        lambda: [c for c in running.state.claims.values() if c.planned and c.name != first.name]
    )
    assert second[0].planned.pods == ("default/big-0",)

    async def object_gone() -> bool:
        return await kube.get_or_none(NODECLAIMS, first.name) is None

    await until(object_gone, what="the abandoned claim's NodeClaim object gone")


async def test_a_restarted_scheduler_answers_what_came_while_it_was_down_and_nothing_twice(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    nodepools = [d for d in demo_objects("nodepool.yaml") if d["kind"] == "NodePool"]
    await seed(jetstream_log, kube, nodepools)

    def start() -> Any:
        return running_service(SchedulerDecider(), SchedulerExecutor(kube), jetstream_log)

    async with start() as first:
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
        await until(lambda: [c for c in first.state.claims.values() if c.planned])

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
    async with start() as second:
        await until(lambda: len([c for c in second.state.claims.values() if c.planned]) == 2)
        # the second batch was answered once the first answer was in the log behind it: all caught up
        await until(lambda: caught_up(second))
    planned = await events_of(jetstream_log, ev.NodeClaimPlanned)
    assert sorted(p.batch_id for p in planned) == ["before", "while-down"]  # each answered exactly once
