"""The end-to-end bench (``bench/e2e.py``) kept honest: its log analysis on hand-made histories, and its two
measurements run for real at a tiny size (20 pods; 10 nodes to zero) so the code ``make bench`` runs at full
size cannot rot. Speed targets are the bench's business; these tests check what the figures mean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bench.e2e import (
    HOPS,
    TimedEvent,
    chain_hops,
    disruption_overlap,
    last_steps_of_unfinished,
    measure_provisioning,
    measure_scale_to_zero,
    percentile,
    planning_waves,
    provider_id_waits,
    provisioning_targets,
)
from devtools.stack import LocalStack
from proto.events import (
    DisruptionDecision,
    DisruptionRequested,
    Event,
    InstanceChoice,
    MachineObserved,
    NodeClaimInitialized,
    NodeClaimLaunched,
    NodeClaimPlanned,
    NodeClaimRegistered,
    NodeClaimTerminated,
    PendingBatch,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float, event: Event) -> TimedEvent:
    return TimedEvent(T0 + timedelta(seconds=seconds), event)


def common(event_id: str, causation: str | None = None) -> dict[str, Any]:
    return {"id": event_id, "decided_at": T0, "producer": "test", "causation_id": causation}


def planned(claim: str, batch: str = "batch-1") -> NodeClaimPlanned:
    return NodeClaimPlanned(
        **common(f"planned-{claim}", batch),
        nodeclaim=claim,
        nodepool="default",
        node_class="default",
        choice=InstanceChoice("c3-4", None, "on-demand", 0.05),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={},
    )


def batch(event_id: str = "batch-1", opened_s: float = 0.0, pods: int = 0) -> PendingBatch:
    return PendingBatch(
        **common(event_id),
        batch_id=event_id,
        pods=tuple({"n": i} for i in range(pods)),
        window_opened_at=T0 + timedelta(seconds=opened_s),
        window_closed_by="idle",
    )


def requested(claim: str) -> DisruptionRequested:
    return DisruptionRequested(**common(f"req-{claim}"), nodeclaim=claim, method="emptiness", reason="empty")


def terminated(claim: str) -> NodeClaimTerminated:
    return NodeClaimTerminated(**common(f"term-{claim}"), nodeclaim=claim, reason="disrupted")


def decision(event_id: str) -> DisruptionDecision:
    return DisruptionDecision(
        **common(event_id), method="emptiness", candidates=(), reason="empty", budget="10%"
    )


def launched(event_id: str, claim: str) -> NodeClaimLaunched:
    return NodeClaimLaunched(
        **common(event_id), nodeclaim=claim, provider_id=f"p://{claim}", instance_type="c3-4"
    )


def test_chain_hops_follow_each_claim_through_its_batch_and_ignore_repeated_steps() -> None:
    events = [
        at(0.0, batch("batch-1")),
        at(0.5, batch("batch-2")),
        at(0.1, planned("a", "batch-1")),
        at(0.9, planned("b", "batch-2")),
        at(0.3, launched("l-a", "a")),
        at(9.0, launched("l-a2", "a")),
        at(0.4, NodeClaimRegistered(**common("r-a"), nodeclaim="a", node="n-a", provider_id="p://a")),
        at(0.6, NodeClaimInitialized(**common("i-a"), nodeclaim="a", node="n-a")),
    ]
    hops = chain_hops(events)
    assert sorted(round(v, 3) for v in hops[HOPS[0]]) == [0.1, 0.4]
    # the redelivered Launched at 9 s is no new step
    assert [round(v, 3) for v in hops["Planned -> Launched"]] == [0.2]
    assert [round(v, 3) for v in hops["Launched -> Registered"]] == [0.1]
    assert [round(v, 3) for v in hops["Registered -> Initialized"]] == [0.2]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0


def test_overlap_counts_claims_between_request_and_termination_against_the_budget_of_the_time() -> None:
    claims = [f"c{i}" for i in range(20)]
    events = [at(0.0, planned(c)) for c in claims]
    # 20 alive -> budget 2; c0 and c1 overlap, c2 starts after c0 ended
    events += [
        at(1.0, decision("d1")),
        at(1.1, requested("c0")),
        at(1.2, requested("c1")),
        at(1.5, terminated("c0")),
        at(1.6, requested("c2")),
    ]
    overlap = disruption_overlap(events, 10)
    assert (overlap.peak, overlap.budget_at_peak, overlap.initial_budget, overlap.violations) == (2, 2, 2, 0)
    assert (overlap.disrupted, overlap.unfinished) == (3, 2)

    # a third claim while two are still in flight exceeds ceil(10% of 20) = 2
    events.append(at(1.7, requested("c3")))
    overlap = disruption_overlap(events, 10)
    assert (overlap.peak, overlap.violations, overlap.worst_excess) == (3, 1, 1)

    # after the pool shrank to 9 claims, the budget is ceil(0.9) = 1
    shrunk = [at(0.0, planned(c)) for c in claims[:10]]
    shrunk += [
        at(1.0, decision("d1")),
        at(1.1, requested("c0")),
        at(1.2, terminated("c0")),
        at(2.0, decision("d2")),
        at(2.1, requested("c1")),
        at(2.2, requested("c2")),
    ]
    overlap = disruption_overlap(shrunk, 10)
    assert (overlap.initial_budget, overlap.peak, overlap.budget_at_peak, overlap.violations) == (1, 2, 1, 1)


def test_the_budget_counts_the_claims_alive_at_each_request_and_how_full_it_was_kept() -> None:
    claims = [f"c{i}" for i in range(20)]
    events = [at(0.0, planned(c)) for c in claims]
    # 20 alive: a budget of 2, kept full from 1 s to 3 s (c2 starts the moment c0 ends)
    events += [
        at(1.0, requested("c0")),
        at(1.0, requested("c1")),
        at(2.0, terminated("c0")),
        at(2.0, requested("c2")),
        at(3.0, terminated("c1")),
        at(3.0, requested("c3")),
    ]
    overlap = disruption_overlap(events, 10)
    assert (overlap.initial_budget, overlap.peak, overlap.violations) == (2, 2, 0)
    assert overlap.utilisation == 1.0
    # half of it idle for a second: c4 comes a second after c2 ended
    events += [at(4.0, terminated("c2")), at(5.0, requested("c4"))]
    overlap = disruption_overlap(events, 10)
    assert overlap.utilisation is not None and round(overlap.utilisation, 3) == round(3.5 / 4, 3)
    # 10 claims left: ceil(10% of 10) = 1, so a second one at once is over the budget of the moment
    shrunk = [at(0.0, planned(c)) for c in claims[:11]]
    shrunk += [
        at(1.0, requested("c0")),
        at(1.5, terminated("c0")),
        at(2.0, requested("c1")),
        at(2.1, requested("c2")),
    ]
    overlap = disruption_overlap(shrunk, 10)
    assert (overlap.initial_budget, overlap.peak, overlap.budget_at_peak, overlap.violations) == (2, 2, 1, 1)


def test_planning_waves_separate_pods_offered_again_from_the_first_wave() -> None:
    events = [
        at(1.0, batch("b1", opened_s=0.0, pods=30)),
        at(1.1, planned("a", "b1")),
        at(1.2, planned("b", "b1")),
        at(31.0, batch("b2", opened_s=30.0, pods=4)),
        at(31.1, planned("c", "b2")),
    ]
    waves = planning_waves(events, last_unschedulable=T0 + timedelta(seconds=0.3))
    assert waves.first_wave_last_planned == T0 + timedelta(seconds=1.2)
    assert (waves.later_batches, waves.later_pods, waves.later_claims) == (1, 4, 1)


def test_unfinished_claims_are_counted_by_the_step_they_stopped_at() -> None:
    events = [
        at(0, planned("a")),
        at(0, planned("b")),
        at(0, planned("c")),
        at(1, launched("l-b", "b")),
        at(2, requested("a")),
        at(3, terminated("a")),
    ]
    assert last_steps_of_unfinished(events) == {"NodeClaimLaunched": 1, "NodeClaimPlanned": 1}


def machine(
    event_id: str, uid: str, change: str = "changed", provider_id: str | None = None
) -> MachineObserved:
    spec = {"providerID": provider_id} if provider_id else {}
    obj = {"metadata": {"name": f"m-{uid}", "namespace": "default", "uid": uid}, "spec": spec}
    return MachineObserved(**common(event_id), change=change, machine=obj)


def test_provider_id_waits_run_from_a_machines_first_sighting_to_its_first_provider_id() -> None:
    events = [
        at(0.0, machine("a1", "a", "added")),
        at(0.1, machine("b1", "b", "added")),
        at(0.3, machine("a2", "a", provider_id="openstack:///a")),
        at(0.5, machine("a3", "a", provider_id="openstack:///a")),  # seen again: not a second figure
        at(2.1, machine("b2", "b", provider_id="openstack:///b")),
        at(2.2, machine("c1", "c", "added", provider_id="openstack:///c")),  # came with it: no wait seen
        at(2.3, machine("d1", "d", "added")),  # never provisioned: no figure
        at(2.4, machine("e1", "e", "added")),
        at(2.5, machine("e2", "e", "removed")),
    ]
    assert [round(w, 3) for w in provider_id_waits(events)] == [0.3, 2.0]


async def test_provisioning_measurement_at_a_tiny_size(stack: LocalStack) -> None:
    figures = await measure_provisioning(stack, deployments=2, replicas=10, timeout=60, stall=20)
    assert figures["pods"] == 20 and figures["pods_seen_unschedulable"] == 20
    assert figures["pods_never_running"] == 0
    assert figures["claims"] >= 1 and figures["nodes"] == figures["claims"]
    assert figures["price_per_hour"] > 0
    # every claim went through every hop, and planning came after the last pod was seen Unschedulable
    assert {hop: figures["hops"][hop]["count"] for hop in HOPS} == {hop: figures["claims"] for hop in HOPS}
    # the sandbox's own wait for each Machine's providerID, as it was (the profile says 0.15 s)
    waits = figures["sandbox_waits"]["Machine seen -> providerID"]
    assert 1 <= waits["count"] <= figures["claims"] and waits["p50_ms"] > 0
    assert figures["last_unschedulable_to_all_planned_s"] > 0
    assert figures["all_running_s"] > figures["last_unschedulable_to_all_planned_s"]
    assert set(figures["cpu_seconds"]) >= {"sandbox", "pod-watcher", "scheduler", "launcher-capi"}
    # each target is judged once: one per hop, none listed twice
    names = [target.name for target in provisioning_targets(figures)]
    assert len(names) == len(set(names)) and sum(name.startswith("hop ") for name in names) == len(HOPS)


async def test_scale_to_zero_measurement_at_a_tiny_size(stack: LocalStack) -> None:
    figures = await measure_scale_to_zero(stack, nodes=10, timeout=60, stall=15)
    assert figures["nodes"] == figures["claims"] == 10  # one pod per node
    assert figures["pods_never_running"] == 0
    assert figures["nodes_left"] == 0, figures["stuck_claims_last_step"]
    assert figures["claims_disrupted"] == 10 and figures["claims_unfinished"] == 0
    assert figures["initial_budget"] == 1  # ceil(10% of 10)
    assert figures["budget_violations"] == 0 and 1 <= figures["peak_disrupting"] <= figures["budget_at_peak"]
    assert figures["delete_to_last_terminated_s"] is not None
    assert 0 < figures["delete_to_no_node_s"] and figures["delete_to_replicas_zero_s"] is not None
