"""What a service's decisions add to its metrics: Karpenter's NodeClaim and Node counters, the scheduling
duration, and the claims gauges.

The decider runtime calls these as it records decisions, so each counter moves exactly once in the whole
system, in the process of the service that owns the step (the scheduler plans and registers, a launcher
terminates, disruption requests): summed over processes, ``karpenter_nodeclaims_created_total`` is every
claim created. A counter's labels come from the claim as its history tells it (:class:`NodeClaim`), read after
the decision is folded.

Karpenter's reasons are its own words: a claim is created ``provisioned`` for pending pods, or for a
disruption command's replacement with the command's reason in lower case (``underutilized``, ``drifted``,
...); a disrupted claim is labelled with its method in the same words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from proto import events as ev
from tenon.domain.nodeclaim import NodeClaim
from tenon.runtime.observability import metrics

KARPENTER_REASONS = {
    "emptiness": "empty",
    "consolidation": "underutilized",
    "drift": "drifted",
    "expiration": "expired",
    "interruption": "interrupted",
    "delete": "deleted",
}
"""Karpenter's reason label for each disruption method (``karpenter_nodeclaims_disrupted_total``)."""
PROVISIONED = "provisioned"
PROVISIONER = "provisioner"
"""Karpenter's ``controller`` label of the scheduling simulation for pending pods."""
GRACEFUL, FORCEFUL = "graceful", "forceful"


def decided(cause: ev.Event | None, seconds: float) -> None:
    """A decision on ``cause`` took ``seconds``: a pending batch's is Karpenter's scheduling simulation."""
    if isinstance(cause, ev.PendingBatch):
        metrics.SCHEDULING_DURATION.labels(controller=PROVISIONER).observe(seconds)


def recorded(decision: ev.Event, claim: NodeClaim | None, cause: ev.Event | None) -> None:
    """``decision`` is in the log and folded into ``claim`` (its NodeClaim, for claim steps)."""
    if isinstance(decision, ev.BatchPlanned):
        metrics.UNSCHEDULABLE_PODS.labels(controller=PROVISIONER).set(len(decision.unschedulable))
    elif isinstance(decision, ev.DisruptionDecision) and decision.stage == "confirmed":
        metrics.DISRUPTION_DECISIONS.labels(
            decision="replace" if decision.replacements else "delete",
            reason=KARPENTER_REASONS.get(decision.method, decision.method),
            consolidation_type=_consolidation_type(decision),
        ).inc()
    if not isinstance(decision, ev.NodeClaimEvent) or claim is None or claim.planned is None:
        return
    nodepool = claim.planned.nodepool
    if isinstance(decision, ev.NodeClaimPlanned):
        reason = _replacement_reason(cause) if isinstance(cause, ev.ReplacementsRequested) else PROVISIONED
        metrics.NODECLAIMS_CREATED.labels(reason=reason, nodepool=nodepool, min_values_relaxed="false").inc()
    elif isinstance(decision, ev.NodeClaimRegistered):
        metrics.NODES_CREATED.labels(nodepool=nodepool, zone=zone_of(claim)).inc()
    elif isinstance(decision, ev.DisruptionRequested):
        metrics.NODECLAIMS_DISRUPTED.labels(
            reason=KARPENTER_REASONS.get(decision.method, decision.method),
            nodepool=nodepool,
            capacity_type=capacity_type_of(claim),
            consolidation_policy="",
            termination_mode=FORCEFUL if decision.method in ("expiration", "delete") else GRACEFUL,
        ).inc()
    elif isinstance(decision, ev.NodeClaimTerminated):
        zone = zone_of(claim)
        metrics.NODECLAIMS_TERMINATED.labels(
            nodepool=nodepool, capacity_type=capacity_type_of(claim), zone=zone
        ).inc()
        if claim.registered is not None:
            metrics.NODES_TERMINATED.labels(nodepool=nodepool, zone=zone).inc()


def claims_gauges(claims: Iterable[NodeClaim]) -> None:
    """``tenon_nodeclaims`` (claims not yet terminated, by phase and pool) and
    ``karpenter_nodepools_cost_total`` (the price per hour of each pool's live claims) as ``claims`` have
    them now."""
    phases: Counter[tuple[str, str]] = Counter()
    cost: dict[str, float] = {}
    for claim in claims:
        where = claim.phase  # asked once: a refresh walks every claim
        if claim.planned is None or where.ended:
            continue
        nodepool = claim.planned.nodepool
        phases[(str(where), nodepool)] += 1
        if where.live:
            cost[nodepool] = cost.get(nodepool, 0.0) + claim.planned.choice.price_per_hour
    metrics.NODECLAIMS_BY_PHASE.clear()
    for (phase, nodepool), count in phases.items():
        metrics.NODECLAIMS_BY_PHASE.labels(phase=phase, nodepool=nodepool).set(count)
    metrics.NODEPOOL_COST.clear()
    for nodepool, price in cost.items():
        metrics.NODEPOOL_COST.labels(nodepool=nodepool).set(round(price, 6))


def offerings(instance_types: Iterable[Mapping[str, Any]]) -> None:
    """Karpenter's offering gauges from a catalog's entries (InstanceCatalog format): each offering's price
    and whether it is available now (1/0), by instance type, capacity type and zone."""
    for entry in instance_types:
        name = str(entry.get("name") or "")
        for offering in entry.get("offerings") or ():
            labels = {
                "instance_type": name,
                "capacity_type": str(offering.get("capacityType") or ""),
                "zone": str(offering.get("zone") or ""),
            }
            price = offering.get("price")
            if isinstance(price, int | float):
                metrics.OFFERING_PRICE_ESTIMATE.labels(**labels).set(price)
            metrics.OFFERING_AVAILABLE.labels(**labels).set(1 if offering.get("available", True) else 0)


def zone_of(claim: NodeClaim) -> str:
    launched = claim.launched.zone if claim.launched is not None else None
    planned = claim.planned.choice.zone if claim.planned is not None else None
    return launched or planned or ""


def capacity_type_of(claim: NodeClaim) -> str:
    launched = claim.launched.capacity_type if claim.launched is not None else None
    planned = claim.planned.choice.capacity_type if claim.planned is not None else None
    return launched or planned or ""


def _consolidation_type(decision: ev.DisruptionDecision) -> str:
    """Karpenter's ``consolidation_type``: ``empty``, ``single`` or ``multi`` node; "" for other methods."""
    if decision.method == "emptiness":
        return "empty"
    if decision.method == "consolidation":
        return "single" if len(decision.candidates) == 1 else "multi"
    return ""


def _replacement_reason(cause: ev.ReplacementsRequested) -> str:
    """The command's reason as Karpenter labels it (``Underutilized`` -> ``underutilized``)."""
    reason = cause.reason.strip().lower()
    return reason if reason in KARPENTER_REASONS.values() else "disrupting"
