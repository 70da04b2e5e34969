"""Which nodes may be disrupted, for which reason, and what blocks the others (pure), as Karpenter's
``NewCandidate`` and ``BuildDisruptionBudgetMapping`` decide it.

A **candidate** is a claim whose node is Initialized, not being disrupted, not deleting, not waiting for the
pods it was bought for, whose NodePool still exists; it is **blocked** (and says by what) when:

* the Node, or the NodePool's template (``spec.template.metadata.annotations``), carries
  ``karpenter.sh/do-not-disrupt``: ``"true"``, or a duration counted from the node's initialization;
* a pod on it has an active ``karpenter.sh/do-not-disrupt`` (``"true"`` or a duration since the pod started);
* an evictable pod on it is covered by more than one PodDisruptionBudget (the Eviction API refuses those) or
  by one that allows no disruption now.

Graceful methods (emptiness, consolidation) respect pod blocks always; eventual ones (drift) ignore them when
the NodePool sets ``terminationGracePeriod``, which bounds the drain instead (Karpenter's classes).

Disruption cost orders candidates as Karpenter does: the sum of the pods' eviction costs times the fraction of
the node's lifetime left before ``expireAfter``; consolidation sorts by price per reschedule cost (``1 +`` the
positive eviction costs), highest first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tenon.core.wellknown import DO_NOT_DISRUPT
from tenon.domain.disruption.budgets import Allowance, allowance, template_spec
from tenon.domain.disruption.durations import DurationError, parse_duration
from tenon.domain.disruption.view import (
    ClaimFacts,
    ClusterView,
    KubeObject,
    do_not_disrupt_active,
    eviction_cost,
    is_active,
    is_evictable,
    is_reschedulable,
    matches_selector,
    meta,
    pdbs_of,
    pod_do_not_disrupt,
    pod_key,
    pod_labels,
    spec,
)

DEFAULT_EXPIRE_AFTER = timedelta(hours=720)
"""Karpenter v1's default ``expireAfter``."""
NOMINATION_TTL = timedelta(seconds=60)
"""How long a node bought for pending pods is kept for them (they may have been deleted meanwhile)."""


@dataclass(frozen=True)
class Candidate:
    claim: ClaimFacts
    node: KubeObject
    nodepool: KubeObject
    pods: tuple[KubeObject, ...]
    """Every pod on the node that has not finished."""
    reschedulable: tuple[KubeObject, ...]
    disruption_cost: float
    reschedule_cost: float

    @property
    def name(self) -> str:
        return self.claim.name

    @property
    def node_name(self) -> str:
        return str(self.claim.node)

    @property
    def pool(self) -> str:
        return self.claim.nodepool

    @property
    def price(self) -> float:
        return self.claim.price

    @property
    def empty(self) -> bool:
        return not self.reschedulable

    @property
    def savings_ratio(self) -> float:
        return self.price / self.reschedule_cost


@dataclass(frozen=True)
class Blocked:
    claim: str
    node: str | None
    why: str


def node_ready(node: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def expire_after(nodepool: Mapping[str, Any]) -> timedelta | None:
    """The pool's ``expireAfter`` (Karpenter's default 720h when absent); None for ``Never`` or unreadable
    (an unreadable value is reported on the NodePool, and expires nothing)."""
    raw = template_spec(nodepool).get("expireAfter")
    if raw is None:
        return DEFAULT_EXPIRE_AFTER
    try:
        return parse_duration(raw, allow_never=True)
    except DurationError:
        return None


def termination_grace_period(nodepool: Mapping[str, Any]) -> timedelta | None:
    raw = template_spec(nodepool).get("terminationGracePeriod")
    if raw is None:
        return None
    try:
        return parse_duration(raw)
    except DurationError:
        return None


def lifetime_remaining(claim: ClaimFacts, nodepool: Mapping[str, Any], now: datetime) -> float:
    expiry = expire_after(nodepool)
    if not expiry:
        return 1.0
    left = (expiry - (now - claim.created_at)).total_seconds() / expiry.total_seconds()
    return min(1.0, max(0.0, left))


# --- PodDisruptionBudgets ----------------------------------------------------------------------------------


def _scaled(value: Any, total: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(total * int(value[:-1]) / 100)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def disruptions_allowed(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> int:
    """``status.disruptionsAllowed`` when the PDB has a status; else what its spec allows over ``pods``
    (every active pod it selects counted healthy), as the disruption controller computes it."""
    status = pdb.get("status")
    if isinstance(status, Mapping) and isinstance(status.get("disruptionsAllowed"), int):
        return max(0, int(status["disruptionsAllowed"]))
    namespace = meta(pdb).get("namespace") or "default"
    selector = spec(pdb).get("selector")
    healthy = sum(
        1
        for p in pods
        if is_active(p)
        and (meta(p).get("namespace") or "default") == namespace
        and matches_selector(selector, pod_labels(p))
    )
    min_available = _scaled(spec(pdb).get("minAvailable"), healthy)
    if min_available is not None:
        return max(0, healthy - min_available)
    max_unavailable = _scaled(spec(pdb).get("maxUnavailable"), healthy)
    return max(0, max_unavailable) if max_unavailable is not None else healthy


class PdbLedger:
    """What each PodDisruptionBudget still allows in one round: moves are charged as they are chosen, so no
    round plans more evictions under a PDB than it allows."""

    def __init__(self, view: ClusterView) -> None:
        self.pdbs = view.pdbs
        every = [p for pods in view.pods_by_node.values() for p in pods]
        self.left = {_pdb_key(pdb): disruptions_allowed(pdb, every) for pdb in view.pdbs}

    def _covered(
        self, pods: Iterable[Mapping[str, Any]], now: datetime
    ) -> Iterator[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
        """The evictable pods of ``pods`` a PDB covers, each with the PDBs covering it. Whether a pod is
        evictable is read only for covered pods, none without PDBs: a round asks about each pod several
        times."""
        if not self.pdbs:
            return
        for pod in pods:
            covering = pdbs_of(pod, self.pdbs)
            if covering and is_evictable(pod, now):
                yield pod, covering

    def refusal(self, pods: Iterable[Mapping[str, Any]], now: datetime) -> str | None:
        """Why evicting ``pods`` together would break a PDB (None when it would not)."""
        wanted: dict[str, int] = {}
        for pod, covering in self._covered(pods, now):
            if len(covering) > 1:
                names = ", ".join(sorted(_pdb_key(p) for p in covering))
                return f"pod {pod_key(pod)} is covered by several PodDisruptionBudgets ({names})"
            for pdb in covering:
                wanted[_pdb_key(pdb)] = wanted.get(_pdb_key(pdb), 0) + 1
        for key, count in sorted(wanted.items()):
            if count > self.left.get(key, 0):
                return (
                    f"PodDisruptionBudget {key} allows {self.left.get(key, 0)} disruption(s), {count} needed"
                )
        return None

    def charge(self, pods: Iterable[Mapping[str, Any]], now: datetime) -> None:
        for _, covering in self._covered(pods, now):
            for pdb in covering:
                self.left[_pdb_key(pdb)] = self.left.get(_pdb_key(pdb), 0) - 1


def _pdb_key(pdb: Mapping[str, Any]) -> str:
    return f"{meta(pdb).get('namespace') or 'default'}/{meta(pdb).get('name')}"


# --- candidates --------------------------------------------------------------------------------------------


def _node_block(claim: ClaimFacts, node: KubeObject, nodepool: KubeObject, now: datetime) -> str | None:
    since = claim.initialized_at
    if do_not_disrupt_active(node, since, now):
        return f"node {claim.node} has {DO_NOT_DISRUPT}"
    template = (
        (spec(nodepool).get("template") or {}) if isinstance(spec(nodepool).get("template"), Mapping) else {}
    )
    if do_not_disrupt_active(template, since, now):
        return f"NodePool {claim.nodepool}'s template has {DO_NOT_DISRUPT}"
    return None


def pod_block(pods: Iterable[KubeObject], ledger: PdbLedger, now: datetime) -> str | None:
    """Why the pods keep their node (do-not-disrupt, PDBs), or None."""
    pods = list(pods)
    for pod in pods:
        if pod_do_not_disrupt(pod, now):
            return f"pod {pod_key(pod)} has {DO_NOT_DISRUPT}"
    return ledger.refusal(pods, now)


def _unavailable(view: ClusterView, claim: ClaimFacts, now: datetime) -> str | None:
    """Why a claim is not a candidate at all (not a block worth reporting), or None."""
    if claim.disrupting or claim.initialized_at is None or claim.node is None:
        return "not initialized or already disrupting"
    node = view.nodes.get(claim.node)
    if node is None or meta(node).get("deletionTimestamp"):
        return "node gone or deleting"
    if claim.waiting_for_pods and now - claim.initialized_at < NOMINATION_TTL:
        return "nominated for pending pods"
    return None


def candidates(
    view: ClusterView, *, eventual: bool = False, ledger: PdbLedger | None = None
) -> tuple[list[Candidate], list[Blocked]]:
    """Every disruptable claim, and the blocked ones with the reason, in claim-name order."""
    now = view.now
    ledger = ledger or PdbLedger(view)
    found: list[Candidate] = []
    blocked: list[Blocked] = []
    for name in sorted(view.claims):
        claim = view.claims[name]
        if _unavailable(view, claim, now) is not None:
            continue
        node = view.nodes[str(claim.node)]
        nodepool = view.nodepools.get(claim.nodepool)
        if nodepool is None:
            blocked.append(Blocked(name, claim.node, f"NodePool {claim.nodepool} not found"))
            continue
        pods = tuple(view.pods_on(claim.node))
        why = _node_block(claim, node, nodepool, now)
        if why is None and not (eventual and termination_grace_period(nodepool) is not None):
            why = pod_block(pods, ledger, now)
        if why is not None:
            blocked.append(Blocked(name, claim.node, why))
            continue
        costs = [eviction_cost(p) for p in pods]  # once per pod: both sums read them
        reschedulable = [(p, cost) for p, cost in zip(pods, costs, strict=True) if is_reschedulable(p)]
        active = sum(cost for p, cost in zip(pods, costs, strict=True) if is_active(p))
        found.append(
            Candidate(
                claim=claim,
                node=node,
                nodepool=nodepool,
                pods=pods,
                reschedulable=tuple(p for p, _ in reschedulable),
                disruption_cost=active * lifetime_remaining(claim, nodepool, now),
                reschedule_cost=1.0 + sum(max(0.0, cost) for _, cost in reschedulable),
            )
        )
    return found, blocked


def pool_counts(view: ClusterView) -> dict[str, tuple[int, int]]:
    """NodePool -> (its initialized nodes, those being disrupted, deleting or not Ready): Karpenter's totals
    for budgets; the view's ``budget_load`` when it has one (it also counts the claims whose Node is drained
    or gone until they are Terminated, which ``claims`` leaves out)."""
    if view.budget_load is not None:
        return view.budget_load
    counts: dict[str, list[int]] = {}
    for claim in view.claims.values():
        node = view.nodes.get(claim.node or "")
        if claim.initialized_at is None or node is None:
            continue
        entry = counts.setdefault(claim.nodepool, [0, 0])
        entry[0] += 1
        if claim.disrupting or meta(node).get("deletionTimestamp") or not node_ready(node):
            entry[1] += 1
    return {pool: (total, busy) for pool, (total, busy) in counts.items()}


def budget_mapping(view: ClusterView, reason: str) -> dict[str, Allowance]:
    """NodePool -> how many more of its nodes may be disrupted now for ``reason``."""
    counts = pool_counts(view)
    return {
        name: allowance(
            pool,
            reason,
            total_nodes=counts.get(name, (0, 0))[0],
            disrupting=counts.get(name, (0, 0))[1],
            now=view.now,
        )
        for name, pool in sorted(view.nodepools.items())
    }


def last_activity(view: ClusterView, candidate: Candidate) -> datetime:
    initialized = candidate.claim.initialized_at or candidate.claim.created_at
    return max(view.last_pod_event.get(candidate.node_name, initialized), initialized)


def consolidation_policy(nodepool: Mapping[str, Any]) -> str:
    disruption = spec(nodepool).get("disruption")
    policy = disruption.get("consolidationPolicy") if isinstance(disruption, Mapping) else None
    return str(policy or "WhenEmptyOrUnderutilized")


def consolidate_after(nodepool: Mapping[str, Any]) -> timedelta | None:
    """The pool's ``consolidateAfter`` (0s when absent); None for ``Never`` or an unreadable value (reported
    on the NodePool; nothing is consolidated meanwhile)."""
    disruption = spec(nodepool).get("disruption")
    raw = disruption.get("consolidateAfter", "0s") if isinstance(disruption, Mapping) else "0s"
    try:
        return parse_duration(raw, allow_never=True)
    except DurationError:
        return None


def consolidatable(view: ClusterView, candidate: Candidate, within: timedelta = timedelta(0)) -> bool:
    """Karpenter's ``Consolidatable`` condition: the pool consolidates (``consolidateAfter`` is not Never)
    and no pod arrived or left for ``consolidateAfter``; with ``within``, whether it will be by
    ``view.now + within`` if no pod comes or goes meanwhile."""
    wait = consolidate_after(candidate.nodepool)
    return wait is not None and view.now + within - last_activity(view, candidate) >= wait
