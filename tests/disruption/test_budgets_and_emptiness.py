"""Budgets and emptiness as pure functions: which empty nodes go, which stay, and why."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proto import events as ev
from proto import registry
from tenon.domain.disruption.budgets import allowance, disruption_problems
from tenon.domain.disruption.candidates import candidates
from tenon.domain.disruption.durations import DurationError, parse_duration
from tenon.domain.disruption.rounds import decide_round
from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.replay import replay
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.projection_view import DisruptionState, build_view
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
) -> DisruptionState:
    decider, state = DisruptionDecider(), DisruptionState()
    for event in cluster_events(nodes, pool, pods=pods, node_annotations=node_annotations):
        state = decider.evolve(state, event)
    return state


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


def empty_round(state: DisruptionState, now: datetime) -> tuple[list[str], dict[str, str]]:
    """(claims emptiness would remove now, claim -> why it is kept)."""
    played = decide_round(build_view(state, now))
    command = played.command
    chosen = [c.name for c in command.candidates] if command and command.method == "emptiness" else []
    return chosen, {b.claim: b.why for b in played.blocked}


def test_percentage_budgets_round_up_and_count_what_is_in_progress() -> None:
    assert allowance(nodepool([{"nodes": "10%"}]), "Empty", total_nodes=15, disrupting=0, now=T0).allowed == 2
    assert allowance(nodepool([{"nodes": "10%"}]), "Empty", total_nodes=15, disrupting=1, now=T0).allowed == 1
    assert allowance(nodepool(), "Empty", total_nodes=3, disrupting=0, now=T0).allowed == 1  # default 10%
    mixed = nodepool([{"nodes": "5"}, {"nodes": "20%", "reasons": ["Drifted"]}])
    assert allowance(mixed, "Empty", total_nodes=100, disrupting=0, now=T0).allowed == 5


def test_karpenters_own_example_schedule_is_read_and_applies_only_inside_its_window() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "100%"}])
    monday_noon = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    inside = allowance(pool, "Empty", total_nodes=4, disrupting=0, now=monday_noon)
    evening = allowance(pool, "Empty", total_nodes=4, disrupting=0, now=monday_noon + timedelta(hours=6))
    sunday = allowance(pool, "Empty", total_nodes=4, disrupting=0, now=monday_noon - timedelta(days=1))
    assert inside.allowed == 0 and "mon-fri" in inside.budget and not inside.invalid
    assert evening.allowed == 4 and sunday.allowed == 4
    assert disruption_problems(pool) == []


@pytest.mark.parametrize(
    ("budgets", "field"),
    [
        ([5], "spec.disruption.budgets[0]"),
        ([{"nodes": "abc%"}], "budgets[0].nodes"),
        ([{"nodes": "lots"}], "budgets[0].nodes"),
        ([{"nodes": "1", "schedule": "61 * * * *", "duration": "1h"}], "budgets[0].schedule"),
        ([{"nodes": "1", "schedule": "@sometimes", "duration": "1h"}], "budgets[0].schedule"),
        ([{"nodes": "1", "schedule": "0 9 * * *"}], "'schedule' must be set with 'duration'"),
        ([{"nodes": "1", "schedule": "0 9 * * *", "duration": "10s"}], "budgets[0].duration"),
        ([{"nodes": "1", "reasons": ["Sometimes"]}], "budgets[0].reasons"),
        ("10%", "spec.disruption.budgets"),
    ],
)
def test_an_invalid_budget_allows_nothing_and_names_its_field(budgets: Any, field: str) -> None:
    pool = nodepool(budgets)
    result = allowance(pool, "Empty", total_nodes=4, disrupting=0, now=T0)
    assert result.allowed == 0 and result.invalid and field in result.budget
    problems = disruption_problems(pool)
    assert len(problems) == 1 and field in problems[0] and "\n" not in problems[0]


def test_a_huge_duration_costs_what_a_small_one_costs() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "100000h"}])
    started = time.perf_counter()
    for _ in range(200):
        result = allowance(pool, "Empty", total_nodes=4, disrupting=0, now=T0)
    assert result.allowed == 0 and not result.invalid  # active: the window is longer than any gap
    assert time.perf_counter() - started < 5  # 200 evaluations; a minute-by-minute walk would take hours


def test_durations_and_other_disruption_fields() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("Never", allow_never=True) is None
    with pytest.raises(DurationError):
        parse_duration("99999999999999999999h")
    bad = nodepool(consolidateAfter="soon", consolidationPolicy="Sometimes")
    assert [p.split(":")[0] for p in disruption_problems(bad)] == [
        "spec.disruption.consolidationPolicy",
        "spec.disruption.consolidateAfter",
    ]


def test_only_nodes_empty_long_enough_are_candidates() -> None:
    state = cluster(3, nodepool([{"nodes": "100%"}]), pods={0: [daemon_pod("agent-0")], 1: [app_pod("web")]})
    assert empty_round(state, T0 + timedelta(seconds=10))[0] == []  # consolidateAfter 30s not reached
    chosen, _ = empty_round(state, T0 + timedelta(seconds=31))
    assert chosen == ["default-0", "default-2"]  # node-1 runs an application pod


def test_a_daemon_pod_bound_to_an_empty_node_does_not_restart_its_wait() -> None:
    """Karpenter's pod events controller skips DaemonSet pods: the node is empty since its last application
    pod left, whenever its daemon pod was bound."""
    state = cluster(2, nodepool([{"nodes": "100%"}]))
    decider = DisruptionDecider()
    late = T0 + timedelta(seconds=25)
    for index in (0, 1):
        pod = daemon_pod(f"agent-{index}") if index == 0 else app_pod(f"web-{index}")
        pod["spec"] = {"nodeName": f"node-{index}"}
        arrived = ev.BoundPodObserved(**envelope(f"late-{index}", late), change="added", pod=pod)
        state = decider.evolve(state, arrived)
        gone = ev.BoundPodObserved(**envelope(f"gone-{index}", late), change="removed", pod=pod)
        state = decider.evolve(state, gone) if index == 1 else state
    chosen, _ = empty_round(state, T0 + timedelta(seconds=31))
    assert chosen == ["default-0"]  # node-1's application pod left at 25 s: its 30 s are not up


def test_budget_caps_how_many_go_at_once_and_names_the_budget() -> None:
    state = cluster(10, nodepool([{"nodes": "20%"}]))
    chosen, blocked = empty_round(state, T0 + timedelta(minutes=1))
    assert len(chosen) == 2 and len(blocked) == 8
    assert all("budget" in why and "nodes=20%" in why for why in blocked.values())


def test_do_not_disrupt_on_a_pod_the_node_or_the_nodepool_template_keeps_it() -> None:
    state = cluster(
        3,
        nodepool([{"nodes": "100%"}]),
        pods={0: [daemon_pod("agent-0", {"karpenter.sh/do-not-disrupt": "true"})]},
        node_annotations={1: {"karpenter.sh/do-not-disrupt": "true"}},
    )
    chosen, blocked = empty_round(state, T0 + timedelta(minutes=1))
    assert chosen == ["default-2"]
    assert "pod kube-system/agent-0 has karpenter.sh/do-not-disrupt" in blocked["default-0"]
    assert "node node-1 has karpenter.sh/do-not-disrupt" in blocked["default-1"]
    guarded = nodepool([{"nodes": "100%"}])
    guarded["spec"]["template"]["metadata"] = {"annotations": {"karpenter.sh/do-not-disrupt": "2h"}}
    state = cluster(1, guarded)
    assert (
        "template has karpenter.sh/do-not-disrupt"
        in empty_round(state, T0 + timedelta(hours=1))[1]["default-0"]
    )
    assert empty_round(state, T0 + timedelta(hours=3))[0] == ["default-0"]  # the duration has passed


def test_zero_budget_in_a_schedule_window_blocks_everything_inside_and_nothing_outside() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}, {"nodes": "100%"}])
    state = cluster(2, pool)
    chosen, blocked = empty_round(state, datetime(2026, 11, 29, 12, 0, tzinfo=UTC))
    assert chosen == [] and set(blocked) == {"default-0", "default-1"}
    assert empty_round(state, datetime(2026, 11, 29, 18, 0, tzinfo=UTC))[0] == ["default-0", "default-1"]


def test_policy_and_never_opt_out() -> None:
    assert empty_round(cluster(1, nodepool(consolidateAfter="Never")), T0 + timedelta(days=1))[0] == []
    underused_only = nodepool(consolidationPolicy="WhenUnderutilized")
    assert empty_round(cluster(1, underused_only), T0 + timedelta(days=1))[0] == []


def test_a_new_node_waiting_for_its_pods_is_not_empty() -> None:
    state = cluster(1, nodepool([{"nodes": "100%"}], consolidateAfter="0s"))
    projection = state.projection
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
    assert empty_round(state, T0 + timedelta(seconds=5))[0] == []
    assert empty_round(state, T0 + timedelta(minutes=2))[0] == ["default-0"]  # they never came


async def test_the_disruption_service_s_decisions_replay_to_the_same() -> None:
    event_log = InMemoryEventLog()
    for event in cluster_events(3, nodepool([{"nodes": "1"}], consolidateAfter="0s")):
        await event_log.publish(registry.subject_of(event), event)
    settle = timedelta(seconds=0.3)
    async with running(
        DisruptionDecider(settle=settle), BaseExecutor(), event_log, tick_seconds=0.05
    ) as runtime:
        requested = await until(
            lambda: [c for c in runtime.state.projection.claims.values() if c.disruption],
            what="a disruption requested",
        )
        assert len(requested) == 1  # the budget allows one node at a time
        # the next ticks: nothing to remove, two held back by the budget while the first drains
        decisions = await until(
            lambda: [e for e in event_log.events() if isinstance(e, ev.DisruptionDecision)][1:],
            what="a second decision",
        )
    stages = [d.stage for d in event_log.events() if isinstance(d, ev.DisruptionDecision)]
    assert stages[:2] == ["proposed", "confirmed"]  # judged again after settling, then acted on
    assert all(d.basis is not None for d in decisions)
    report = replay(DisruptionDecider(settle=settle), event_log.records())
    assert report.differing == [], [c.differences() for c in report.differing]
    assert [c.input_type for c in report.comparisons].count("tick") >= 2


def test_a_round_given_the_candidates_of_its_tick_decides_what_it_decides_alone() -> None:
    """The tick finds the candidates on a view without the core's input and hands them to the round, which
    would otherwise walk the cluster for them again: the same command and the same blocked claims."""
    pool = nodepool([{"nodes": "2"}], consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter="0s")
    state = cluster(4, pool, pods={i: [app_pod(f"web-{i}")] for i in range(4)})  # none empty: consolidation
    later = T0 + timedelta(minutes=1)
    alone = decide_round(build_view(state, later))
    known = candidates(build_view(state, later, with_core=False))
    given_them = decide_round(build_view(state, later), known=known)
    assert alone.command is not None and alone.command.method != "emptiness"
    assert given_them.command == alone.command and given_them.blocked == alone.blocked


def test_a_node_s_pod_clock_moves_when_a_pod_is_bound_finishes_or_terminates_not_when_it_starts() -> None:
    """Karpenter's pod events (``status.lastPodEventTime``, what ``consolidateAfter`` counts from): a pod's
    binding, its end and the start of its deletion; a pod starting to run changes nothing of its node."""
    projection = ClusterProjection()
    job = app_pod("job")
    job["spec"], job["status"] = {"nodeName": "node-0"}, {"phase": "Pending"}
    steps = [("bound", 1, {}, {}), ("running", 20, {}, {"phase": "Running"})]
    steps += [("terminating", 25, {"deletionTimestamp": "2026-11-29T10:00:25Z"}, {})]
    steps += [("succeeded", 27, {}, {"phase": "Succeeded"})]
    clock = {}
    for name, second, metadata, status in steps:
        job = {**job, "metadata": {**job["metadata"], **metadata}, "status": {**job["status"], **status}}
        at = T0 + timedelta(seconds=second)
        change = "added" if name == "bound" else "changed"
        projection.apply(ev.BoundPodObserved(**envelope(name, at), change=change, pod=job), second)
        clock[name] = (projection.last_pod_activity["node-0"] - T0).total_seconds()
    assert clock == {"bound": 1, "running": 1, "terminating": 25, "succeeded": 27}
