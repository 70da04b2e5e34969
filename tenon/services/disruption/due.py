"""When a tick could next have something to do (pure, derived from the state), kept as events fold, so that
a tick with nothing due costs next to nothing however large the cluster (issue 16: the cost grows with the
work, not with the cluster).

Per claim, two moments:

* **expires**: when expiration may take it (its NodePool's ``expireAfter`` after it was planned);
* **acts**: when a round may first act on it: at once when it drifted; else when it becomes consolidatable
  (``consolidateAfter`` since a pod was last bound, finished or began terminating there, as Karpenter's pod
  events, or since it was initialized), which both emptiness and consolidation need.

Only what can *allow* an action sets a moment. What only forbids one (budgets, PodDisruptionBudgets,
``do-not-disrupt``, a node bought for pods still pending, a pod on the node) is left out, so no method can
act on any claim before the earliest moment, and a tick before it decides what the whole tick would decide:
nothing. A round that found nothing is remembered with the moment its clock-read inputs change
(:mod:`.quiet`): at the same state, ticks before then find nothing again.

It is derived data, never in snapshots: a state gets its index on first use and builds it from the whole
projection; from then on ``evolve`` marks what each event can change: a claim's events its claim; a Node,
or a pod coming or going, the claims on that Node; NodePools, NodeClasses and catalogs that changed, every
claim. A marked claim's moments are computed again at the next tick. (So a state with an index changes only
through ``evolve``, as every runtime and replay changes it.) Beside the moments it keeps the Nodes
being deleted and the claims registered on each Node (``decide`` answers a user's ``kubectl delete node``
from them), and each claim's drift (the executor keeps the Drifted condition from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from proto import events as ev
from tenon.domain.disruption.budgets import POLICIES
from tenon.domain.disruption.candidates import consolidate_after, consolidation_policy, expire_after
from tenon.domain.disruption.drift import drift_reason
from tenon.domain.disruption.view import ClaimFacts, ClusterView, meta
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, object_key
from tenon.services.disruption.projection_view import claim_facts, offers

if TYPE_CHECKING:
    from tenon.services.disruption.projection_view import DisruptionState

AT_ONCE = datetime.min.replace(tzinfo=UTC)
NEVER = datetime.max.replace(tzinfo=UTC)
_FACTS_CHANGE = (ev.NodePoolsSnapshot, ev.NodeClassesSnapshot, ev.CatalogSnapshot)


def later(moment: datetime, wait: timedelta | None) -> datetime:
    """``moment + wait``; NEVER for no wait (``Never``) or beyond the calendar."""
    if wait is None:
        return NEVER
    try:
        return moment + wait
    except OverflowError:
        return NEVER


@dataclass(frozen=True)
class Moments:
    expires: datetime = NEVER
    acts: datetime = NEVER
    drift: tuple[str, str] | None = None
    """(reason, detail) when the claim drifted."""


class Quiet:
    """A round found nothing at ``version`` and ``since``: at that version, nothing before ``until()``
    (computed on the first tick that asks: most rounds are followed by an event, not by an idle tick)."""

    def __init__(self, version: int, since: datetime, until: Callable[[], datetime]) -> None:
        self.version = version
        self.since = since
        self._until: Callable[[], datetime] | datetime = until

    def holds(self, version: int, now: datetime) -> bool:
        if version != self.version or now < self.since:
            return False
        if not isinstance(self._until, datetime):
            self._until = self._until()
        return now < self._until


def _node_deleting(node: KubeObject | None) -> bool:
    return node is not None and bool(meta(node).get("deletionTimestamp"))


def moments_of(state: DisruptionState, claim: NodeClaim, facts_view: ClusterView) -> Moments:
    """The claim's moments (see the module docstring); ``facts_view`` holds the NodePools, NodeClasses,
    Nodes and catalog offers drift reads."""
    if claim.disruption is not None:
        return Moments()
    facts = claim_facts(state, claim, claim.planned.decided_at if claim.planned else NEVER, set())
    if facts is None or facts.node is None:
        return Moments()
    pool = facts_view.nodepools.get(facts.nodepool)
    if pool is None:
        return Moments()
    expires = later(facts.created_at, expire_after(pool))
    drifted = drift_reason(facts_view, facts)
    if drifted is not None:
        return Moments(expires, AT_ONCE, drifted)
    return Moments(expires, _consolidatable_from(state.projection, facts, pool))


def _consolidatable_from(projection: ClusterProjection, facts: ClaimFacts, pool: KubeObject) -> datetime:
    node = str(facts.node)
    if facts.initialized_at is None or _node_deleting(projection.nodes.get(node)):
        return NEVER  # not a candidate until an event says otherwise
    if consolidation_policy(pool) not in POLICIES:
        return NEVER
    initialized = facts.initialized_at
    last = max(projection.last_pod_activity.get(node, initialized), initialized)
    return later(last, consolidate_after(pool))


class DueIndex:
    """The moments of every claim, and what ``decide`` looks up (see the module docstring)."""

    def __init__(self) -> None:
        self.built = False
        self.stale: set[str] = set()
        """Claims whose moments are to be computed again."""
        self.moments: dict[str, Moments] = {}
        self.claims_on: dict[str, set[str]] = {}
        """Node -> the claims registered as it."""
        self.deleting: set[str] = set()
        """Nodes with a deletion timestamp."""
        self.quiet: Quiet | None = None
        self._facts_view: ClusterView | None = None
        self._earliest: tuple[datetime, datetime] | None = None

    # --- folding (from evolve) ------------------------------------------------------------------------------

    def before(self, projection: ClusterProjection, event: ev.Event) -> object:
        """What the event replaces, read before it is folded (for :meth:`after`)."""
        if not self.built:
            return None
        if isinstance(event, ev.BoundPodObserved):
            previous = projection.bound_pods.get(object_key(event.pod))
            return (previous.get("spec") or {}).get("nodeName") if previous is not None else None
        if isinstance(event, ev.NodePoolsSnapshot):
            return projection.nodepools
        if isinstance(event, ev.NodeClassesSnapshot):
            return projection.nodeclasses
        if isinstance(event, ev.CatalogSnapshot):
            previous_catalog = projection.catalogs.get(event.node_class)
            return previous_catalog.instance_types if previous_catalog is not None else None
        return None

    def after(self, projection: ClusterProjection, event: ev.Event, before: object, *, pruned: bool) -> None:
        """Mark what ``event`` (just folded) can change."""
        if not self.built:
            return
        if isinstance(event, ev.NodeClaimEvent):
            self.stale.add(event.nodeclaim)
            if isinstance(event, ev.NodeClaimRegistered):
                self.claims_on.setdefault(event.node, set()).add(event.nodeclaim)
        elif isinstance(event, ev.NodeObserved):
            self._node_changed(projection, str(meta(event.node).get("name")))
        elif isinstance(event, ev.BoundPodObserved):
            for node in {before, (event.pod.get("spec") or {}).get("nodeName")}:
                if node:
                    self.stale.update(self.claims_on.get(str(node), ()))
        elif isinstance(event, _FACTS_CHANGE) and before != _facts_of(projection, event):
            self._facts_view = None
            self.stale.update(projection.claims)
        if pruned:
            self._forget_pruned(projection)

    def _node_changed(self, projection: ClusterProjection, name: str) -> None:
        if _node_deleting(projection.nodes.get(name)):
            self.deleting.add(name)
        else:
            self.deleting.discard(name)
        self.stale.update(self.claims_on.get(name, ()))

    def _forget_pruned(self, projection: ClusterProjection) -> None:
        for name in [n for n in self.moments if n not in projection.claims]:
            del self.moments[name]
        for node, names in list(self.claims_on.items()):
            names.intersection_update(projection.claims)
            if not names:
                del self.claims_on[node]
        self._earliest = None

    # --- reading --------------------------------------------------------------------------------------------

    def build(self, state: DisruptionState) -> None:
        """The Nodes being deleted and the claims on each (cheap); every claim's moments are marked stale."""
        if self.built:
            return
        projection = state.projection
        self.deleting = {name for name, node in projection.nodes.items() if _node_deleting(node)}
        for name, claim in projection.claims.items():
            if claim.registered is not None:
                self.claims_on.setdefault(claim.registered.node, set()).add(name)
        self.stale = set(projection.claims)
        self.built = True

    def refresh(self, state: DisruptionState) -> None:
        """The moments of the claims marked since the last refresh, computed again."""
        self.build(state)
        if not self.stale:
            return
        if self._facts_view is None:
            self._facts_view = _facts_view(state.projection)
        claims = state.projection.claims
        for name in self.stale:
            claim = claims.get(name)
            moments = moments_of(state, claim, self._facts_view) if claim is not None else Moments()
            if self.moments.get(name, Moments()) != moments:
                self._earliest = None
                self.moments[name] = moments
        self.stale.clear()

    def earliest(self, state: DisruptionState) -> tuple[datetime, datetime]:
        """(the first moment expiration may take a claim, the first a round may act on one)."""
        self.refresh(state)
        if self._earliest is None:
            values = self.moments.values()
            self._earliest = (
                min((m.expires for m in values), default=NEVER),
                min((m.acts for m in values), default=NEVER),
            )
        return self._earliest

    def drifted(self, state: DisruptionState) -> dict[str, tuple[str, str]]:
        """Claim -> (reason, detail) for every drifted claim no command holds (what ``drift.drifted`` says of
        the state's view)."""
        self.refresh(state)
        busy = state.busy()
        return {
            name: moments.drift
            for name, moments in sorted(self.moments.items())
            if moments.drift is not None and name not in busy
        }


def due_index(state: DisruptionState) -> DueIndex:
    """The state's index (made on first use)."""
    if state.due is None:
        state.due = DueIndex()
    return state.due


def _facts_of(projection: ClusterProjection, event: ev.Event) -> object:
    if isinstance(event, ev.NodePoolsSnapshot):
        return projection.nodepools
    if isinstance(event, ev.NodeClassesSnapshot):
        return projection.nodeclasses
    assert isinstance(event, ev.CatalogSnapshot)
    return projection.catalogs[event.node_class].instance_types


def _facts_view(projection: ClusterProjection) -> ClusterView:
    """What drift reads besides the claim: NodePools, NodeClasses, Nodes, catalog offers."""
    return ClusterView(
        now=NEVER,
        nodes=projection.nodes,
        nodepools=projection.nodepools,
        nodeclasses={key.split("/")[-1]: nc for key, nc in projection.nodeclasses.items()},
        catalog_types=offers(projection),
    )
