"""Budgets and emptiness as pure functions: which empty nodes go, which stay, and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proto import events as ev
from proto import registry
from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.replay import replay
from tenon.services.disruption import emptiness
from tenon.services.disruption.budgets import BudgetError, allowance, cron_matches, parse_duration
from tenon.services.disruption.decider import DisruptionDecider
from tests.support.events import build_event
from tests.support.services import running
from tests.support.waiting import until

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def nodepool(budgets: list[dict[str, Any]] | None = None, **disruption: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s", **disruption}
    if budgets is not None:
        spec["budgets"] = budgets
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}, "disruption": spec},
    }


def envelope(event_id: str, at: datetime = T0) -> dict[str, Any]:
    return {"id": event_id, "decided_at": at, "producer": "pod-watcher"}


def cluster(
    nodes: int,
    pool: dict[str, Any],
    *,
    pods: dict[int, list[dict[str, Any]]] | None = None,
    node_annotations: dict[int, dict[str, str]] | None = None,
) -> ClusterProjection:
    projection = ClusterProjection()
    for event in cluster_events(nodes, pool, pods=pods, node_annotations=node_annotations):
        projection.apply(event)
    return projection


def cluster_events(
    nodes: int,
    pool: dict[str, Any],
    *,
    pods: dict[int, list[dict[str, Any]]] | None = None,
    node_annotations: dict[int, dict[str, str]] | None = None,
) -> list[ev.Event]:
    """What the log says of a pool of initialized nodes (and the pods on them)."""
    events: list[ev.Event] = [ev.NodePoolsSnapshot(**envelope("np"), nodepools=(pool,))]
    for i in range(nodes):
        claim, node = f"default-{i}", f"node-{i}"
        events.append(
            build_event(
                ev.NodeClaimPlanned,
                f"p{i}",
                nodeclaim=claim,
                nodepool="default",
                node_class="default",
                choice=ev.InstanceChoice("c3-4", None, "on-demand", 0.05),
                fallbacks=(),
                pods=(),
                requirements=(),
                labels={},
            )
        )
        events.append(
            build_event(
                ev.NodeClaimLaunched, f"l{i}", nodeclaim=claim, provider_id=f"p://{i}", instance_type="c3-4"
            )
        )
        events.append(
            build_event(ev.NodeClaimRegistered, f"r{i}", nodeclaim=claim, node=node, provider_id=f"p://{i}")
        )
        events.append(build_event(ev.NodeClaimInitialized, f"i{i}", nodeclaim=claim, node=node))
        events.append(
            ev.NodeObserved(
                **envelope(f"n{i}"),
                change="added",
                node={
                    "metadata": {
                        "name": node,
                        "labels": {"karpenter.sh/nodepool": "default"},
                        "annotations": (node_annotations or {}).get(i, {}),
                    },
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                },
            )
        )
        for j, pod in enumerate((pods or {}).get(i, [])):
            pod = {**pod, "spec": {**pod.get("spec", {}), "nodeName": node}}
            events.append(ev.BoundPodObserved(**envelope(f"pod{i}-{j}"), change="added", pod=pod))
    return events


def daemon_pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "annotations": annotations or {},
            "ownerReferences": [{"kind": "DaemonSet", "name": "agent"}],
        },
        "status": {"phase": "Running"},
    }


def app_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "status": {"phase": "Running"}}


def decided(events: list[ev.Event]) -> tuple[list[str], dict[str, str]]:
    [decision] = [e for e in events if isinstance(e, ev.DisruptionDecision)]
    return [c.nodeclaim for c in decision.candidates], {b.nodeclaim: b.blocked_by for b in decision.blocked}


def test_percentage_budgets_round_up_and_count_what_is_in_progress() -> None:
    assert allowance(nodepool([{"nodes": "10%"}]), "Empty", total_nodes=15, disrupting=0, now=T0).allowed == 2
    assert allowance(nodepool([{"nodes": "10%"}]), "Empty", total_nodes=15, disrupting=1, now=T0).allowed == 1
    assert allowance(nodepool(), "Empty", total_nodes=3, disrupting=0, now=T0).allowed == 1  # default 10%
    mixed = nodepool([{"nodes": "5"}, {"nodes": "20%", "reasons": ["Drifted"]}])
    assert allowance(mixed, "Empty", total_nodes=100, disrupting=0, now=T0).allowed == 5


def test_scheduled_budget_applies_only_inside_its_window() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}, {"nodes": "100%"}])
    inside = allowance(
        pool, "Empty", total_nodes=4, disrupting=0, now=datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    )
    outside = allowance(
        pool, "Empty", total_nodes=4, disrupting=0, now=datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
    )
    assert inside.allowed == 0 and "schedule" in inside.budget
    assert outside.allowed == 4


def test_invalid_budget_allows_nothing_and_says_why() -> None:
    result = allowance(nodepool([{"nodes": "lots"}]), "Empty", total_nodes=4, disrupting=0, now=T0)
    assert result.allowed == 0 and "invalid" in result.budget and "lots" in result.budget


def test_cron_and_durations() -> None:
    assert cron_matches("*/15 9-17 * * 1-5", datetime(2026, 11, 30, 9, 45, tzinfo=UTC))  # a Monday
    assert not cron_matches("*/15 9-17 * * 1-5", datetime(2026, 11, 29, 9, 45, tzinfo=UTC))  # a Sunday
    assert cron_matches("@daily", datetime(2026, 11, 29, 0, 0, tzinfo=UTC))
    assert parse_duration("1h30m") == timedelta(minutes=90)
    with pytest.raises(BudgetError):
        cron_matches("* * *", T0)


def test_only_nodes_empty_long_enough_are_candidates() -> None:
    projection = cluster(
        3, nodepool([{"nodes": "100%"}]), pods={0: [daemon_pod("agent-0")], 1: [app_pod("web")]}
    )
    assert emptiness.decide(projection, T0 + timedelta(seconds=10)) == []  # consolidateAfter 30s not reached
    candidates, blocked = decided(emptiness.decide(projection, T0 + timedelta(seconds=31)))
    assert candidates == ["default-0", "default-2"] and blocked == {}  # node-1 runs an application pod


def test_budget_caps_how_many_go_at_once_and_names_the_budget() -> None:
    projection = cluster(10, nodepool([{"nodes": "20%"}]))
    events = emptiness.decide(projection, T0 + timedelta(minutes=1))
    candidates, blocked = decided(events)
    assert len(candidates) == 2 and len(blocked) == 8
    assert all("budget" in why and "nodes=20%" in why for why in blocked.values())
    requested = [e for e in events if isinstance(e, ev.DisruptionRequested)]
    assert [r.nodeclaim for r in requested] == candidates


def test_do_not_disrupt_on_a_pod_or_the_node_keeps_it() -> None:
    projection = cluster(
        3,
        nodepool([{"nodes": "100%"}]),
        pods={0: [daemon_pod("agent-0", {"karpenter.sh/do-not-disrupt": "true"})]},
        node_annotations={1: {"karpenter.sh/do-not-disrupt": "true"}},
    )
    candidates, blocked = decided(emptiness.decide(projection, T0 + timedelta(minutes=1)))
    assert candidates == ["default-2"]
    assert "pod kube-system/agent-0 has karpenter.sh/do-not-disrupt" in blocked["default-0"]
    assert "node node-1 has karpenter.sh/do-not-disrupt" in blocked["default-1"]


def test_zero_budget_in_a_schedule_window_blocks_everything_inside_and_nothing_outside() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}, {"nodes": "100%"}])
    projection = cluster(2, pool)
    inside = emptiness.decide(projection, datetime(2026, 11, 29, 12, 0, tzinfo=UTC))
    candidates, blocked = decided(inside)
    assert candidates == [] and set(blocked) == {"default-0", "default-1"}
    outside = emptiness.decide(projection, datetime(2026, 11, 29, 18, 0, tzinfo=UTC))
    assert decided(outside)[0] == ["default-0", "default-1"]


def test_policy_and_never_opt_out() -> None:
    assert emptiness.decide(cluster(1, nodepool(consolidateAfter="Never")), T0 + timedelta(days=1)) == []
    underused_only = nodepool(consolidationPolicy="WhenUnderutilized")
    assert emptiness.decide(cluster(1, underused_only), T0 + timedelta(days=1)) == []


def test_a_new_node_waiting_for_its_pods_is_not_empty() -> None:
    projection = cluster(1, nodepool([{"nodes": "100%"}], consolidateAfter="0s"))
    pod = app_pod("on-its-way")
    projection.claims["default-0"].planned = build_event(
        ev.NodeClaimPlanned,
        "p0",
        nodeclaim="default-0",
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("c3-4", None, "on-demand", 0.05),
        fallbacks=(),
        pods=("default/on-its-way",),
        requirements=(),
        labels={},
    )
    projection.apply(
        ev.PendingBatch(
            **envelope("batch"), batch_id="b", pods=(pod,), window_opened_at=T0, window_closed_by="idle"
        )
    )
    assert emptiness.decide(projection, T0 + timedelta(seconds=5)) == []
    assert decided(emptiness.decide(projection, T0 + timedelta(minutes=2)))[0] == [
        "default-0"
    ]  # they never came


async def test_the_disruption_service_s_decisions_replay_to_the_same() -> None:
    event_log = InMemoryEventLog()
    for event in cluster_events(3, nodepool([{"nodes": "1"}], consolidateAfter="0s")):
        await event_log.publish(registry.subject_of(event), event)
    async with running(DisruptionDecider(), BaseExecutor(), event_log, tick_seconds=0.05) as runtime:
        requested = await until(
            lambda: [c for c in runtime.state.claims.values() if c.disruption], what="a disruption requested"
        )
        assert len(requested) == 1  # the budget allows one node at a time
        # the next ticks: nothing to remove, two held back by the budget while the first drains
        decisions = await until(
            lambda: [e for e in event_log.events() if isinstance(e, ev.DisruptionDecision)][1:],
            what="a second decision",
        )
    assert all(d.basis is not None and len(d.blocked) == 2 for d in decisions)
    report = replay(DisruptionDecider(), event_log.records())
    assert report.differing == [], [c.differences() for c in report.differing]
    assert [c.input_type for c in report.comparisons].count("tick") >= 2
