"""Expiration (pure): claims older than their NodePool's ``expireAfter`` (Karpenter v1's default 720h;
``Never`` opts out) are terminated, forcefully as in Karpenter v1: no budget holds it back and no
replacement is launched first (the pods go pending and are provisioned for); the drain still honours
PodDisruptionBudgets and ``do-not-disrupt`` until the pool's ``terminationGracePeriod``, which bounds it."""

from __future__ import annotations

from tenon.domain.disruption.candidates import Candidate, expire_after, lifetime_remaining
from tenon.domain.disruption.commands import Command
from tenon.domain.disruption.view import ClusterView, is_active, is_reschedulable

REASON = "Expired"


def expired(view: ClusterView) -> list[Candidate]:
    found = []
    for name in sorted(view.claims):
        claim = view.claims[name]
        nodepool = view.nodepools.get(claim.nodepool)
        if claim.disrupting or claim.node is None or nodepool is None:
            continue
        lifetime = expire_after(nodepool)
        if lifetime is None or view.now - claim.created_at < lifetime:
            continue
        node = view.nodes.get(claim.node)
        if node is None:
            continue
        pods = tuple(view.pods_on(claim.node))
        found.append(
            Candidate(
                claim=claim,
                node=node,
                nodepool=nodepool,
                pods=pods,
                reschedulable=tuple(p for p in pods if is_reschedulable(p)),
                disruption_cost=float(sum(1 for p in pods if is_active(p)))
                * lifetime_remaining(claim, nodepool, view.now),
                reschedule_cost=1.0,
            )
        )
    return found


def decide(view: ClusterView) -> Command | None:
    candidates = expired(view)
    if not candidates:
        return None
    return Command(
        method="expiration",
        reason=REASON,
        candidates=tuple(candidates),
        why={
            c.name: f"older than expireAfter ({expire_after(c.nodepool)}) of NodePool {c.pool}"
            for c in candidates
        },
        budget="expiration is forceful: budgets do not apply",
        detail=f"{len(candidates)} expired node(s)",
    )
