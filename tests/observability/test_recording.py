"""A service's decisions move Karpenter's counters once, with the claim's pool, zone and capacity type, and
the scheduler publishes how many claims are in each phase and what each pool costs (what the dashboard
reads)."""

from __future__ import annotations

from proto import events as ev
from tenon.domain.nodeclaim import NodeClaim
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.observability import metrics, recording
from tenon.services.scheduler.decider import SchedulerDecider
from tests.runtime.test_decider_runtime import publish_batches, seeded
from tests.support.events import build_event, planned_claim
from tests.support.services import caught_up, running
from tests.support.waiting import until

CLAIM = "default-rec01"


def value(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def claim_story(*steps: ev.NodeClaimEvent) -> NodeClaim:
    claim = NodeClaim(CLAIM)
    for sequence, step in enumerate(steps, start=1):
        claim.apply(step, sequence)
    return claim


def planned(nodepool: str = "rec-pool") -> ev.NodeClaimPlanned:
    return planned_claim(
        CLAIM, "rec-planned", nodepool=nodepool, choice=ev.InstanceChoice("c3-8", "zone-b", "on-demand", 0.2)
    )


def launched() -> ev.NodeClaimLaunched:
    return build_event(
        ev.NodeClaimLaunched,
        "rec-launched",
        nodeclaim=CLAIM,
        provider_id="p://rec",
        instance_type="c3-8",
        zone="zone-a",
        capacity_type="spot",
    )


def registered() -> ev.NodeClaimRegistered:
    return build_event(
        ev.NodeClaimRegistered, "rec-registered", nodeclaim=CLAIM, node="n", provider_id="p://rec"
    )


def test_a_node_registered_and_terminated_is_counted_in_the_zone_and_capacity_it_launched_in() -> None:
    nodes = ("karpenter_nodes_created_total", {"nodepool": "rec-pool", "zone": "zone-a"})
    gone = (
        "karpenter_nodeclaims_terminated_total",
        {"nodepool": "rec-pool", "capacity_type": "spot", "zone": "zone-a"},
    )
    before = value(nodes[0], **nodes[1]), value(gone[0], **gone[1])

    claim = claim_story(planned(), launched(), registered())
    recording.recorded(claim.registered, claim, None)  # type: ignore[arg-type]
    requested = build_event(
        ev.DisruptionRequested, "rec-empty", nodeclaim=CLAIM, method="emptiness", reason="Empty", node="n"
    )
    claim.apply(requested, 4)
    claim.apply(build_event(ev.NodeClaimDrained, "rec-drained", nodeclaim=CLAIM, node="n"), 5)
    terminated = build_event(ev.NodeClaimTerminated, "rec-terminated", nodeclaim=CLAIM, reason="deleted")
    claim.apply(terminated, 6)
    recording.recorded(terminated, claim, None)

    assert value(nodes[0], **nodes[1]) == before[0] + 1
    assert value(gone[0], **gone[1]) == before[1] + 1
    assert value("karpenter_nodes_terminated_total", nodepool="rec-pool", zone="zone-a") >= 1


def test_a_disrupted_claim_is_counted_under_karpenters_reason() -> None:
    labels = {
        "reason": "drifted",
        "nodepool": "rec-pool",
        "capacity_type": "spot",
        "consolidation_policy": "",
        "termination_mode": "graceful",
    }
    before = value("karpenter_nodeclaims_disrupted_total", **labels)
    claim = claim_story(planned(), launched(), registered())
    requested = build_event(
        ev.DisruptionRequested, "rec-disrupt", nodeclaim=CLAIM, method="drift", reason="Drifted", node="n"
    )
    claim.apply(requested, 4)
    recording.recorded(requested, claim, None)
    assert value("karpenter_nodeclaims_disrupted_total", **labels) == before + 1


def test_a_replacement_claim_is_created_for_its_commands_reason() -> None:
    labels = {"reason": "underutilized", "nodepool": "rec-pool", "min_values_relaxed": "false"}
    before = value("karpenter_nodeclaims_created_total", **labels)
    cause = build_event(
        ev.ReplacementsRequested,
        "rec-replace",
        command="cmd",
        candidates=("old",),
        replacements=(),
        reason="Underutilized",
    )
    claim = claim_story(planned())
    recording.recorded(claim.planned, claim, cause)  # type: ignore[arg-type]
    assert value("karpenter_nodeclaims_created_total", **labels) == before + 1


async def test_the_scheduler_counts_what_it_plans_and_publishes_claims_by_phase_and_pool_cost() -> None:
    created = {"reason": "provisioned", "nodepool": "default", "min_values_relaxed": "false"}
    before = value("karpenter_nodeclaims_created_total", **created)
    simulations = value("karpenter_scheduler_scheduling_duration_seconds_count", controller="provisioner")
    event_log = await seeded()
    await publish_batches(event_log, "a", "b")
    async with running(SchedulerDecider(), BaseExecutor(), event_log, claim_gauges=True) as runtime:
        await until(lambda: caught_up(runtime))
        claims = [c for c in runtime.state.claims.values() if c.planned]
        cost = sum(c.planned.choice.price_per_hour for c in claims if c.planned)

        def gauges() -> bool:
            return value("tenon_nodeclaims", phase="Planned", nodepool="default") == len(claims) and (
                abs(value("karpenter_nodepools_cost_total", nodepool="default") - cost) < 1e-6
            )

        await until(gauges, what="the claims gauges at the scheduler's tick")
    assert len(claims) == 2
    assert value("karpenter_nodeclaims_created_total", **created) == before + 2
    assert (
        value("karpenter_scheduler_scheduling_duration_seconds_count", controller="provisioner") > simulations
    )


def test_the_pods_a_batch_could_not_place_are_the_unschedulable_gauge() -> None:
    planned_batch = build_event(
        ev.BatchPlanned,
        "rec-batch",
        batch_id="b",
        nodeclaims=(),
        unschedulable=(
            ev.UnschedulablePod(pod="default/a", reason="no room"),
            ev.UnschedulablePod(pod="default/b", reason="no room"),
        ),
    )
    recording.recorded(planned_batch, None, None)
    assert value("karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 2


def test_a_confirmed_disruption_is_one_of_karpenters_decisions_a_proposal_is_not() -> None:
    labels = {"decision": "replace", "reason": "underutilized", "consolidation_type": "multi"}
    before = value("karpenter_voluntary_disruption_decisions_total", **labels)
    candidates = tuple(
        ev.DisruptionCandidate(nodeclaim=f"c-{i}", node=f"n-{i}", nodepool="default", reason="Underutilized")
        for i in range(2)
    )
    for stage in ("proposed", "confirmed"):
        decision = build_event(
            ev.DisruptionDecision,
            f"rec-consolidate-{stage}",
            method="consolidation",
            candidates=candidates,
            reason="Underutilized",
            budget="10%",
            replacements=("default-new",),
            stage=stage,
        )
        recording.recorded(decision, None, None)
    assert value("karpenter_voluntary_disruption_decisions_total", **labels) == before + 1
