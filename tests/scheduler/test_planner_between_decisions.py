"""What the planner keeps between decisions (parsed Nodes, their views while they boot, running pods by node)
never changes a plan: each plan is the one a fresh scheduler folding the same events would make, and every
change to a Node or a pod is seen by the next plan."""

from __future__ import annotations

import random
from typing import Any

from proto import events as ev
from tenon.core.wellknown import INITIALIZED, NOT_READY_TAINT
from tenon.domain.projection import ClusterProjection, decode_projection, encode_projection
from tenon.services.scheduler.planner import plan_batch
from tests.scheduler.test_planner import batch, demo_projection, envelope, planned, pod
from tests.support.events import build_event


def node(name: str, cpu: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": extra.pop("labels", {})},
        "spec": extra.pop("spec", {}),
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}, **extra},
    }


def running(name: str, cpu: str, on: str, phase: str = "Running", app: str = "web") -> dict[str, Any]:
    found = pod(name, cpu)
    found["metadata"]["labels"] = {"app": app}
    found["spec"]["nodeName"] = on
    found["status"] = {"phase": phase}
    return found


def observed(obj: dict[str, Any], change: str = "added") -> ev.Event:
    if obj["kind"] == "Node":
        return ev.NodeObserved(**envelope(f"n-{obj['metadata']['name']}"), change=change, node=obj)
    return ev.BoundPodObserved(**envelope(f"p-{obj['metadata']['name']}"), change=change, pod=obj)


def placed_on(projection: ClusterProjection, batch_id: str, cpu: str) -> list[str]:
    """Where a new pod of ``cpu`` goes: the existing nodes it is placed on, or the types bought for it."""
    events = plan_batch(projection, batch(batch_id, pod(f"{batch_id}-0", cpu))).events
    [answer] = [e for e in events if isinstance(e, ev.BatchPlanned)]
    return [p.node for p in answer.existing] or [f"new {c.choice.instance_type}" for c in planned(events)]


def registered_on_n1() -> tuple[ClusterProjection, ev.NodeClaimPlanned]:
    """The demo cluster with one claim planned for a 3-CPU pod, launched (``p://1``) and registered as n1;
    and the claim's plan."""
    projection = demo_projection()
    [claim] = planned(plan_batch(projection, batch("b1", pod("big-0", "3"))).events)
    projection.apply(claim)
    projection.apply(
        build_event(
            ev.NodeClaimLaunched, "l", nodeclaim=claim.nodeclaim, provider_id="p://1", instance_type="c3-8"
        )
    )
    projection.apply(
        build_event(ev.NodeClaimRegistered, "r", nodeclaim=claim.nodeclaim, node="n1", provider_id="p://1")
    )
    return projection, claim


def test_a_pod_that_binds_finishes_or_goes_is_seen_by_the_next_plan() -> None:
    projection = demo_projection()
    projection.apply(observed(node("n1", "4")))
    assert placed_on(projection, "b1", "3") == ["n1"]
    projection.apply(observed(running("web-0", "2", on="n1")))
    assert placed_on(projection, "b2", "3") == ["new c3-8"]  # 2 of 4 vCPU left
    projection.apply(observed(running("web-0", "2", on="n1", phase="Succeeded"), "changed"))
    assert placed_on(projection, "b3", "3") == ["n1"]  # a finished pod takes no room
    projection.apply(observed(running("web-0", "2", on="n1"), "changed"))
    assert placed_on(projection, "b4", "3") == ["new c3-8"]
    projection.apply(observed(node("n2", "4")))
    projection.apply(observed(running("web-0", "2", on="n2"), "changed"))  # moved: n1 is free again
    assert placed_on(projection, "b5", "3") == ["n1"]
    projection.apply(observed(running("web-1", "2", on="n1")))
    projection.apply(observed(running("web-1", "2", on="n1"), "removed"))
    assert placed_on(projection, "b6", "3") == ["n1"]


def test_a_booting_node_read_without_its_boot_taints_is_read_again_when_it_changes() -> None:
    projection, claim = registered_on_n1()
    booting = node(
        "n1",
        "4",
        labels=dict(claim.labels),
        spec={"providerID": "p://1", "taints": [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]},
    )
    projection.apply(observed(booting))
    assert placed_on(projection, "b2", "1") == ["n1"]  # not-ready: a taint it sheds by itself
    smaller = {**booting, "status": {"allocatable": {"cpu": "1", "memory": "32Gi", "pods": "110"}}}
    projection.apply(observed(smaller, "changed"))
    assert placed_on(projection, "b3", "3") == ["new c3-8"]  # what the Node says now, not what was kept
    tainted = {**smaller, "spec": {"providerID": "p://1", "taints": [{"key": "gpu", "effect": "NoSchedule"}]}}
    projection.apply(observed(tainted, "changed"))
    assert placed_on(projection, "b4", "1") == ["new c3-4"]


def _churn(seed: int, steps: int) -> list[ev.Event]:
    """Nodes joining and leaving, pods binding, moving, finishing and going, at random."""
    rng = random.Random(seed)
    events: list[ev.Event] = []
    nodes: list[str] = []
    pods: dict[str, str] = {}
    for step in range(steps):
        roll = rng.random()
        if roll < 0.15 or not nodes:
            name = f"n{step}"
            nodes.append(name)
            events.append(observed(node(name, rng.choice(["2", "4", "8"]))))
        elif roll < 0.2 and len(nodes) > 1:
            gone = nodes.pop(rng.randrange(len(nodes)))
            events.append(observed(node(gone, "1"), "removed"))
        elif roll < 0.7 or not pods:
            name = f"p{step}"
            pods[name] = rng.choice(nodes)
            cpu = rng.choice(["500m", "1", "2"])
            events.append(observed(running(name, cpu, on=pods[name], app=rng.choice(["web", "db"]))))
        else:
            name = rng.choice(sorted(pods))
            change = rng.choice(["moved", "finished", "removed"])
            if change == "moved":
                pods[name] = rng.choice(nodes)
            phase = "Failed" if change == "finished" else "Running"
            events.append(observed(running(name, "1", on=pods[name], phase=phase), "changed"))
            if change == "removed":
                events[-1] = observed(running(name, "1", on=pods.pop(name)), "removed")
    return events


def test_every_plan_is_the_one_a_fresh_scheduler_makes() -> None:
    for seed in range(3):
        kept = demo_projection()
        history = _churn(seed, 60)
        for step, event in enumerate(history):
            kept.apply(event)
            if step % 3:
                continue
            fresh = demo_projection()
            for earlier in history[: step + 1]:
                fresh.apply(earlier)
            offered = batch(f"b{step}", pod(f"new-{step}", "1500m"), pod(f"big-{step}", "3"))
            assert plan_batch(kept, offered).events == plan_batch(fresh, offered).events


def test_a_snapshot_holds_the_facts_only_and_plans_the_same() -> None:
    kept = demo_projection()
    fresh = demo_projection()
    for event in _churn(7, 40):
        kept.apply(event)
        fresh.apply(event)
        plan_batch(kept, batch("warm", pod("warm-0", "1")))  # fills what is kept between decisions
    assert encode_projection(kept) == encode_projection(fresh)
    offered = batch("b", pod("new-0", "1500m"))
    assert plan_batch(decode_projection(encode_projection(kept)), offered).events == (
        plan_batch(kept, offered).events
    )


def test_a_node_whose_claim_stops_booting_is_read_with_every_taint_it_shows() -> None:
    projection, claim = registered_on_n1()
    taint = {"key": NOT_READY_TAINT, "effect": "NoSchedule"}
    spec = {"providerID": "p://1", "taints": [taint]}
    projection.apply(observed(node("n1", "4", labels={INITIALIZED: "true"}, spec=spec)))
    assert placed_on(projection, "b2", "1") == ["n1"]  # its claim boots: judged without the taint it sheds
    projection.apply(build_event(ev.NodeClaimInitialized, "i", nodeclaim=claim.nodeclaim, node="n1"))
    assert placed_on(projection, "b3", "1") == ["new c3-4"]  # initialized, still showing it: kept off
