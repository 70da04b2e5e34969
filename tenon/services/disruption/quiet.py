"""How long a round that found nothing keeps finding nothing while no event is folded (pure): the first
moment after it at which something the round reads of the clock changes value.

A round reads the clock only through facts that change at known moments: a budget's schedule window opening
or closing, a node becoming consolidatable (``consolidateAfter`` after a pod last came or went), a node bought
for pending pods no longer held for them (60 s after it was initialized) or those pods no longer pending
(60 s after they were last offered), a ``do-not-disrupt`` duration ending (on a pod, a node or a NodePool's
template), a claim expiring. Until the first of these, the same state gives the same round: nothing. (The
remaining lifetime in a candidate's disruption cost moves with the clock too, but no method reads it.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

from cronsim import CronSim

from tenon.core.wellknown import DO_NOT_DISRUPT

# LOOKBACK_LIMIT and pod_started: read exactly as Budget.active and the pod checks read them
from tenon.domain.disruption.budgets import LOOKBACK_LIMIT, MACROS, read_budgets
from tenon.domain.disruption.candidates import NOMINATION_TTL, consolidate_after, expire_after
from tenon.domain.disruption.view import (
    ClaimFacts,
    ClusterView,
    KubeObject,
    do_not_disrupt_until,
    meta,
    pod_started,
    spec,
)
from tenon.domain.projection import PENDING_TTL, ClusterProjection
from tenon.services.disruption.due import NEVER, later

_AFTER = timedelta(microseconds=1)
"""``still_pending`` holds up to ``PENDING_TTL`` included: it turns false one tick of the clock later."""


def unchanged_until(projection: ClusterProjection, view: ClusterView) -> datetime:
    """The first moment after ``view.now`` at which a fact a round reads of the clock may change."""
    now = view.now
    pools = {name: _PoolClock.of(pool) for name, pool in view.nodepools.items()}
    moments = chain(
        _budget_windows(view.nodepools, now),
        chain.from_iterable(_claim_moments(view, facts, pools) for facts in view.claims.values()),
        _pod_moments(view),
        _pending_moments(projection),
    )
    return min((m for m in moments if m > now), default=NEVER)


@dataclass(frozen=True)
class _PoolClock:
    """What of a NodePool a claim's moments read (read once per pool, not once per claim)."""

    expire_after: timedelta | None
    consolidate_after: timedelta | None
    template: Mapping[str, Any] | None

    @classmethod
    def of(cls, pool: KubeObject) -> _PoolClock:
        template = spec(pool).get("template")
        guarded = isinstance(template, Mapping) and DO_NOT_DISRUPT in (
            meta(template).get("annotations") or {}
        )
        return cls(expire_after(pool), consolidate_after(pool), template if guarded else None)


def _budget_windows(nodepools: Mapping[str, KubeObject], now: datetime) -> Iterator[datetime]:
    """A scheduled budget is active while a match of its schedule lies within ``duration`` before now: it
    can change only at its next match, or when the window of the first match still counted closes."""
    for pool in nodepools.values():
        budgets, problems = read_budgets(pool)
        if problems:
            continue  # an invalid budget allows nothing, whatever the time
        for budget in budgets:
            if budget.schedule is None or budget.duration is None:
                continue
            expression = MACROS.get(budget.schedule, budget.schedule)
            lookback = min(budget.duration, LOOKBACK_LIMIT)  # as Budget.active looks back
            yield next(CronSim(expression, now))
            yield next(CronSim(expression, now - lookback)) + lookback


def _claim_moments(
    view: ClusterView, facts: ClaimFacts, pools: Mapping[str, _PoolClock]
) -> Iterator[datetime]:
    pool = pools.get(facts.nodepool)
    if pool is None:
        return
    yield later(facts.created_at, pool.expire_after)
    initialized = facts.initialized_at
    if initialized is None or facts.node is None:
        return
    yield initialized + NOMINATION_TTL
    last = max(view.last_pod_event.get(facts.node, initialized), initialized)
    yield later(last, pool.consolidate_after)
    for obj in (view.nodes.get(facts.node), pool.template):
        if obj is not None:
            yield from _do_not_disrupt_ends(obj, initialized)


def _do_not_disrupt_ends(obj: Mapping[str, Any], since: datetime | None) -> Iterator[datetime]:
    until = do_not_disrupt_until(obj, since)
    if isinstance(until, datetime):
        yield until


def _pod_moments(view: ClusterView) -> Iterator[datetime]:
    for pods in view.pods_by_node.values():
        for pod in pods:
            annotations = (pod.get("metadata") or {}).get("annotations")
            if annotations and DO_NOT_DISRUPT in annotations:
                yield from _do_not_disrupt_ends(pod, pod_started(pod))


def _pending_moments(projection: ClusterProjection) -> Iterator[datetime]:
    """A pending pod stops being pending (the view's pending pods, the core's, a claim held for them)."""
    for seen in projection.pending_seen.values():
        yield seen + PENDING_TTL + _AFTER
