"""The planner as a pure function: in-flight capacity is used before anything is bought."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from proto import events as ev
from tenon.core.wellknown import UNREGISTERED_TAINT
from tenon.domain.projection import ClusterProjection
from tenon.services.scheduler.planner import plan_batch
from tests.support.events import build_event

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "capi-demo"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def envelope(event_id: str) -> dict[str, Any]:
    return {"id": event_id, "decided_at": T0, "producer": "pod-watcher"}


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEMO / name).read_text()) if d]


def pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
    }


def demo_projection() -> ClusterProjection:
    projection = ClusterProjection()
    objects = docs("nodepool.yaml")
    projection.apply(
        ev.NodePoolsSnapshot(**envelope("np"), nodepools=tuple(o for o in objects if o["kind"] == "NodePool"))
    )
    projection.apply(
        ev.NodeClassesSnapshot(
            **envelope("nc"), nodeclasses=tuple(o for o in objects if o["kind"] == "ClusterAPINodeClass")
        )
    )
    projection.apply(ev.DaemonSetsSnapshot(**envelope("ds"), daemonsets=tuple(docs("daemonset.yaml"))))
    projection.apply(
        ev.CatalogSnapshot(
            **envelope("cat"),
            provider="cluster-api",
            node_class="default",
            instance_types=(),
            sources=tuple(docs("machinedeployments.yaml")),
        )
    )
    return projection


def batch(batch_id: str, *pods: dict[str, Any]) -> ev.PendingBatch:
    return ev.PendingBatch(
        **envelope(batch_id), batch_id=batch_id, pods=pods, window_opened_at=T0, window_closed_by="idle"
    )


def planned(events: list[ev.Event]) -> list[ev.NodeClaimPlanned]:
    return [e for e in events if isinstance(e, ev.NodeClaimPlanned)]


def test_pods_offered_again_while_their_node_boots_buy_nothing() -> None:
    projection = demo_projection()
    first = plan_batch(projection, batch("b1", pod("big-0", "3"))).events
    [claim] = planned(first)
    for event in first:
        projection.apply(event)
    assert planned(plan_batch(projection, batch("b2", pod("big-0", "3"))).events) == []  # in flight: planned

    projection.apply(
        build_event(
            ev.NodeClaimLaunched, "l", nodeclaim=claim.nodeclaim, provider_id="p://1", instance_type="c3-8"
        )
    )
    projection.apply(
        build_event(ev.NodeClaimRegistered, "r", nodeclaim=claim.nodeclaim, node="n1", provider_id="p://1")
    )
    projection.apply(
        ev.NodeObserved(
            **envelope("n"),
            change="added",
            node={
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": dict(claim.labels)},
                "spec": {
                    "providerID": "p://1",
                    "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
                },
                "status": {
                    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "False"}],
                },
            },
        )
    )
    again = plan_batch(projection, batch("b3", pod("big-0", "3"))).events
    assert planned(again) == []  # registered, still booting: its room is still the pod's
    [answer] = [e for e in again if isinstance(e, ev.BatchPlanned)]
    assert [p.node for p in answer.existing] == ["n1"]


def test_a_node_that_is_not_tenons_keeps_its_taints() -> None:
    projection = demo_projection()
    projection.apply(
        ev.NodeObserved(
            **envelope("n"),
            change="added",
            node={
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "other", "labels": {}},
                "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "16", "memory": "32Gi", "pods": "110"}},
            },
        )
    )
    [claim] = planned(plan_batch(projection, batch("b1", pod("big-0", "3"))).events)
    assert claim.choice.instance_type == "c3-8"


def test_room_bought_for_a_pending_pod_is_not_offered_to_another() -> None:
    projection = demo_projection()
    offered = batch("b1", pod("a-0", "3"))
    first = plan_batch(projection, offered).events
    for event in (offered, *first):
        projection.apply(event)
    # a-0 is still pending (on its way to the c3-8); b-0 must not be squeezed into the same c3-8
    [claim] = planned(plan_batch(projection, batch("b2", pod("b-0", "3"))).events)
    assert claim.pods == ("default/b-0",) and claim.choice.instance_type == "c3-8"


def test_a_pod_that_landed_elsewhere_frees_the_room_bought_for_it() -> None:
    projection = demo_projection()
    offered = batch("b1", pod("a-0", "3"))
    first = plan_batch(projection, offered).events
    for event in (offered, *first):
        projection.apply(event)
    assert len(planned(first)) == 1
    # the kube-scheduler put a-0 on an unrelated node: the claim bought for it is free for the next pod
    landed = pod("a-0", "3")
    landed["spec"]["nodeName"] = "elsewhere"
    projection.apply(ev.BoundPodObserved(**envelope("bound"), change="added", pod=landed))
    again = plan_batch(projection, batch("b2", pod("c-0", "3"))).events
    assert planned(again) == []


def test_a_pod_deleted_before_it_landed_stops_holding_room() -> None:
    projection = demo_projection()
    offered = batch("b1", pod("a-0", "3"))
    for event in (offered, *plan_batch(projection, offered).events):
        projection.apply(event)
    # a-0 is never offered again (deleted while pending); two minutes later its claim's room is free again
    later = ev.PendingBatch(
        id="b2",
        decided_at=T0 + timedelta(minutes=2),
        producer="test",
        batch_id="b2",
        pods=(pod("c-0", "3"),),
        window_opened_at=T0,
        window_closed_by="idle",
    )
    projection.apply(later)
    assert planned(plan_batch(projection, later).events) == []
    # while it is still being offered, it keeps its room
    soon = ev.PendingBatch(
        id="b3",
        decided_at=T0 + timedelta(seconds=10),
        producer="test",
        batch_id="b3",
        pods=(pod("d-0", "3"),),
        window_opened_at=T0,
        window_closed_by="idle",
    )
    fresh = demo_projection()
    for event in (offered, *plan_batch(fresh, offered).events, soon):
        fresh.apply(event)
    assert len(planned(plan_batch(fresh, soon).events)) == 1


def test_a_claim_launched_as_its_fallback_offers_the_fallback_s_room() -> None:
    projection = demo_projection()
    offered = batch("b1", pod("a-0", "3"))
    first = plan_batch(projection, offered).events
    for event in (offered, *first):
        projection.apply(event)
    [claim] = planned(first)
    assert claim.choice.instance_type == "c3-8"
    assert [c.instance_type for c in claim.fallbacks] == ["c3-16"]
    # c3-8 was out of capacity: the launcher moved on to the fallback and launched a c3-16
    projection.apply(
        build_event(
            ev.NodeClaimLaunchFailed, "f", nodeclaim=claim.nodeclaim, instance_type="c3-8", reason="full"
        )
    )
    projection.apply(
        build_event(
            ev.NodeClaimLaunched, "l", nodeclaim=claim.nodeclaim, provider_id="p://1", instance_type="c3-16"
        )
    )
    # 4 vCPU fit beside a-0 on a c3-16 (8 vCPU), not on a c3-8 (4 vCPU): nothing is bought
    again = plan_batch(projection, batch("b2", pod("b-0", "4"))).events
    assert planned(again) == []
    [answer] = [e for e in again if isinstance(e, ev.BatchPlanned)]
    assert answer.unschedulable == ()


def test_pods_offered_again_right_after_their_node_was_initialized_buy_nothing() -> None:
    """Registered and Initialized are decided together for a Node already Ready, before the Node's next
    observation shows what the registration changed (the unregistered taint gone, the pool's labels on):
    the node is judged as the registration left it, not as it joined."""
    projection = demo_projection()
    first = plan_batch(projection, batch("b1", pod("big-0", "3"))).events
    [claim] = planned(first)
    for event in first:
        projection.apply(event)
    projection.apply(
        ev.NodeObserved(
            **envelope("n"),
            change="added",
            node={
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": {}},
                "spec": {
                    "providerID": "p://1",
                    "taints": [{"key": UNREGISTERED_TAINT, "effect": "NoExecute"}],
                },
                "status": {
                    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
    )
    for step in (
        build_event(
            ev.NodeClaimLaunched, "l", nodeclaim=claim.nodeclaim, provider_id="p://1", instance_type="c3-8"
        ),
        build_event(ev.NodeClaimRegistered, "r", nodeclaim=claim.nodeclaim, node="n1", provider_id="p://1"),
        build_event(ev.NodeClaimInitialized, "i", nodeclaim=claim.nodeclaim, node="n1"),
    ):
        projection.apply(step)
    again = plan_batch(projection, batch("b2", pod("big-0", "3"))).events
    assert planned(again) == []  # its room is the pod's: nothing bought twice
    [answer] = [e for e in again if isinstance(e, ev.BatchPlanned)]
    assert [p.node for p in answer.existing] == ["n1"]
