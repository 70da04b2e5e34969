"""Emptiness (pure): nodes whose every pod is a DaemonSet or mirror pod (or finished), removed within the
``Empty`` budget, as Karpenter's ``Emptiness`` method: under both consolidation policies, once the node has
been consolidatable (no pod arrived or left) for ``consolidateAfter``. Candidates go in consolidation order
(price per reschedule cost, highest first), so when the budget is short the most expensive idle nodes go
first; those left over are blocked by the budget, and the command says so."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from tenon.domain.disruption.budgets import POLICIES, Allowance
from tenon.domain.disruption.candidates import (
    Blocked,
    Candidate,
    consolidatable,
    consolidation_policy,
)
from tenon.domain.disruption.commands import Command
from tenon.domain.disruption.view import ClusterView

REASON = "Empty"


def order(candidates: list[Candidate]) -> list[Candidate]:
    """Karpenter's consolidation order: price per reschedule cost, highest first (then by name)."""
    return sorted(candidates, key=lambda c: (-c.savings_ratio, c.name))


EMPTY_LONG_ENOUGH = "empty (only DaemonSet or mirror pods) for longer than consolidateAfter"
EMPTY_SOON_ENOUGH = "empty (only DaemonSet or mirror pods); consolidateAfter ends before the proposal settles"


def empty_candidates(
    view: ClusterView, candidates: list[Candidate], within: timedelta = timedelta(0)
) -> list[Candidate]:
    """The empty ones, consolidatable now or (``within``) by ``view.now + within``."""
    return [
        c
        for c in candidates
        if c.empty and consolidation_policy(c.nodepool) in POLICIES and consolidatable(view, c, within)
    ]


def decide(
    view: ClusterView,
    candidates: list[Candidate],
    budgets: Mapping[str, Allowance],
    within: timedelta = timedelta(0),
) -> tuple[Command | None, list[Blocked]]:
    """The empty candidates the budgets let go, and those they hold back. ``within``: a proposal that
    settles that long also takes the empty nodes whose ``consolidateAfter`` ends by then (see
    :func:`tenon.services.disruption.queue.empty_queue`)."""
    chosen: list[Candidate] = []
    blocked: list[Blocked] = []
    left = {pool: allowance.allowed for pool, allowance in budgets.items()}
    for candidate in order(empty_candidates(view, candidates, within)):
        if left.get(candidate.pool, 0) <= 0:
            allowance = budgets.get(candidate.pool)
            why = f"budget: {allowance.budget}" if allowance else f"NodePool {candidate.pool} not found"
            blocked.append(Blocked(candidate.name, candidate.node_name, why))
            continue
        left[candidate.pool] -= 1
        chosen.append(candidate)
    if not chosen:
        return None, blocked
    pools = sorted({c.pool for c in chosen})
    command = Command(
        method="emptiness",
        reason=REASON,
        candidates=tuple(chosen),
        why={c.name: EMPTY_LONG_ENOUGH if consolidatable(view, c) else EMPTY_SOON_ENOUGH for c in chosen},
        budget="; ".join(budgets[p].budget for p in pools if p in budgets),
        detail=f"{len(chosen)} empty node(s) removed",
        blocked=tuple(blocked),
    )
    return command, blocked
