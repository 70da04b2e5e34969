"""Emptiness (pure): nodes that carry nothing but DaemonSet pods, removed within budgets.

A candidate is a NodeClaim that is Initialized, not already being disrupted, whose NodePool's
``spec.disruption.consolidationPolicy`` is ``WhenEmpty`` or ``WhenEmptyOrUnderutilized`` (the default), whose
``consolidateAfter`` is not ``Never``, and whose Node has carried no pod other than DaemonSet pods since at
least ``consolidateAfter`` ago (counted from the last pod arriving or leaving, or from initialization).

A node bought for pods that are still pending is not a candidate for ``NOMINATION_TTL`` after it initialized:
it is empty only because they have not landed yet (Karpenter's "nominated" nodes).

A candidate is *blocked* (and the decision says by what) when the Node carries
``karpenter.sh/do-not-disrupt: "true"``, when any pod on it does, or when the pool's budget for the ``Empty``
reason is used up. Oldest-empty candidates go first, so a budget lets the longest-idle nodes go.

``decide`` returns one :class:`DisruptionDecision` per NodePool that has candidates or blocked candidates,
and one :class:`DisruptionRequested` per chosen candidate, with ids derived from the decision's content: the
same situation decided twice yields the same ids, and the claim's aggregate check rejects a second request.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from proto import events as ev
from proto.ids import derive_id
from tenon.core.wellknown import DO_NOT_DISRUPT, NODEPOOL
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject
from tenon.services.disruption.budgets import BudgetError, allowance, parse_duration

PRODUCER = "disruption"
EMPTY_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized")
NOMINATION_TTL = timedelta(seconds=60)
"""How long a new node is kept for the pending pods it was bought for (they may have been deleted
meanwhile)."""


@dataclass(frozen=True)
class Candidate:
    claim: NodeClaim
    node: KubeObject
    nodepool: str
    empty_since: datetime


def _is_daemon_pod(pod: KubeObject) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


def _annotated(obj: KubeObject) -> bool:
    return (
        str(((obj.get("metadata") or {}).get("annotations") or {}).get(DO_NOT_DISRUPT, "")).lower() == "true"
    )


def consolidate_after(nodepool: KubeObject) -> timedelta | None:
    """The pool's consolidateAfter, or None for ``Never``."""
    raw = ((nodepool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
    if str(raw) == "Never":
        return None
    try:
        return parse_duration(str(raw)) if str(raw) not in ("0", "0s") else timedelta(0)
    except BudgetError:
        return None


def _node_ready(node: KubeObject) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def pool_counts(projection: ClusterProjection, pool: str) -> tuple[int, int]:
    """(nodes in the pool, nodes being disrupted or not Ready)."""
    total = disrupting = 0
    disrupting_nodes = {
        c.registered.node
        for c in projection.claims.values()
        if c.registered and c.disruption and not c.terminated
    }
    for name, node in projection.nodes.items():
        if ((node.get("metadata") or {}).get("labels") or {}).get(NODEPOOL) != pool:
            continue
        total += 1
        deleting = bool((node.get("metadata") or {}).get("deletionTimestamp"))
        if name in disrupting_nodes or deleting or not _node_ready(node):
            disrupting += 1
    return total, disrupting


def empty_nodes(
    projection: ClusterProjection, now: datetime
) -> tuple[list[Candidate], list[tuple[NodeClaim, str, str]]]:
    """(empty candidates long enough, [(claim, node, what blocks it)] for empty nodes that cannot go)."""
    candidates: list[Candidate] = []
    blocked: list[tuple[NodeClaim, str, str]] = []
    for claim in projection.claims.values():
        if claim.phase != "Initialized" or claim.registered is None or claim.planned is None:
            continue
        node = projection.nodes.get(claim.registered.node)
        if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
            continue
        nodepool = projection.nodepools.get(claim.planned.nodepool)
        if nodepool is None:
            continue
        policy = ((nodepool.get("spec") or {}).get("disruption") or {}).get(
            "consolidationPolicy", "WhenEmptyOrUnderutilized"
        )
        wait = consolidate_after(nodepool)
        if policy not in EMPTY_POLICIES or wait is None:
            continue
        pods = projection.pods_on(claim.registered.node)
        if any(not _is_daemon_pod(p) for p in pods):
            continue
        if (
            now - claim.initialized.decided_at < NOMINATION_TTL  # type: ignore[union-attr]
            and any(projection.still_pending(p, now) for p in claim.planned.pods)
        ):
            continue  # bought for pods that have not landed yet: empty only because they are on their way
        since = max(
            projection.last_pod_activity.get(claim.registered.node, claim.initialized.decided_at),  # type: ignore[union-attr]
            claim.initialized.decided_at,  # type: ignore[union-attr]
        )
        if now - since < wait:
            continue
        node_name = claim.registered.node
        if _annotated(node):
            blocked.append((claim, node_name, f"node {node_name} has {DO_NOT_DISRUPT}=true"))
            continue
        guarded = [p for p in pods if _annotated(p)]
        if guarded:
            meta = guarded[0].get("metadata") or {}
            blocked.append(
                (
                    claim,
                    node_name,
                    f"pod {meta.get('namespace')}/{meta.get('name')} has {DO_NOT_DISRUPT}=true",
                )
            )
            continue
        candidates.append(Candidate(claim, node, claim.planned.nodepool, since))
    return candidates, blocked


def decide(projection: ClusterProjection, now: datetime) -> list[ev.Event]:
    candidates, blocked = empty_nodes(projection, now)
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: (c.empty_since, c.claim.name)):
        by_pool.setdefault(candidate.nodepool, []).append(candidate)
    blocked_by_pool: dict[str, list[ev.BlockedCandidate]] = {}
    for claim, node_name, why in blocked:
        assert claim.planned is not None
        blocked_by_pool.setdefault(claim.planned.nodepool, []).append(
            ev.BlockedCandidate(nodeclaim=claim.name, node=node_name, blocked_by=why)
        )
    events: list[ev.Event] = []
    for pool in sorted(set(by_pool) | set(blocked_by_pool)):
        pool_candidates = by_pool.get(pool, [])
        total, disrupting = pool_counts(projection, pool)
        allowed = allowance(
            projection.nodepools[pool], "Empty", total_nodes=total, disrupting=disrupting, now=now
        )
        chosen, over = pool_candidates[: allowed.allowed], pool_candidates[allowed.allowed :]
        pool_blocked = list(blocked_by_pool.get(pool, []))
        pool_blocked += [
            ev.BlockedCandidate(
                nodeclaim=c.claim.name,
                node=c.claim.registered.node if c.claim.registered else None,
                blocked_by=f"budget: {allowed.budget}",
            )
            for c in over
        ]
        content = (
            "|".join(sorted(c.claim.name for c in chosen))
            + "#"
            + "|".join(sorted(f"{b.nodeclaim}:{b.blocked_by}" for b in pool_blocked))
        )
        digest = hashlib.sha256(content.encode()).hexdigest()[:16]
        decision = ev.DisruptionDecision(
            id=derive_id(PRODUCER, "DisruptionDecision", "emptiness", pool, digest),
            decided_at=now,
            producer=PRODUCER,
            correlation_id=f"emptiness-{pool}",
            method="emptiness",
            candidates=tuple(
                ev.DisruptionCandidate(
                    nodeclaim=c.claim.name,
                    node=c.claim.registered.node if c.claim.registered else None,
                    nodepool=pool,
                    reason=f"empty (only DaemonSet pods) since {c.empty_since:%H:%M:%S}, "
                    f"longer than consolidateAfter",
                )
                for c in chosen
            ),
            reason=f"{len(chosen)} empty node(s) of NodePool {pool} removed"
            + (f", {len(pool_blocked)} kept" if pool_blocked else ""),
            budget=allowed.budget,
            blocked=tuple(pool_blocked),
        )
        events.append(decision)
        for c in chosen:
            events.append(
                ev.DisruptionRequested(
                    id=derive_id(PRODUCER, "DisruptionRequested", c.claim.name),
                    decided_at=now,
                    producer=PRODUCER,
                    causation_id=decision.id,
                    correlation_id=c.claim.name,
                    nodeclaim=c.claim.name,
                    method="emptiness",
                    reason="node is empty",
                    node=c.claim.registered.node if c.claim.registered else None,
                    decision_id=decision.id,
                )
            )
    return events
