"""What each NodePool's disruption budget counts, kept up to date event by event (pure).

Karpenter counts a pool's claims in its budget until they are gone: its initialized claims until they are
Terminated (a claim whose Node is drained or deleted still holds its machine, and its place in the budget,
until the launcher removes that machine), and as disrupting those whose termination was requested, or whose
Node is deleting, not Ready or gone.

The emptiness queue asks at every decision (:mod:`.queue`), and every method's view asks once per round.
Walking every claim each time made the scale-down quadratic: in the scale run's, every decision walked the
2,400 claims left. So :class:`LoadIndex` keeps each counted claim's part (its pool, its Node, whether it is
disrupting) and each pool's sums: a NodeClaim event refreshes its claim, a Node observation the claims
registered as that Node, and nothing else can change a part. It is derived, never stored: made from a walk on
first use (after a restart, the snapshot's state), then kept by ``evolve``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from proto import events as ev
from tenon.domain.disruption.candidates import node_ready
from tenon.domain.disruption.view import meta
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, object_key

if TYPE_CHECKING:
    from tenon.services.disruption.projection_view import DisruptionState


class PoolLoad(NamedTuple):
    total: int
    """Initialized claims not yet Terminated."""
    disrupting: int
    """Of those: termination requested, or the Node deleting, not Ready or gone."""


def counted(claim: NodeClaim) -> bool:
    """Whether the claim holds a place in its pool's budget."""
    return claim.initialized is not None and claim.planned is not None and not claim.ended


def disrupting(claim: NodeClaim, nodes: dict[str, KubeObject]) -> bool:
    """Whether a counted claim counts as disrupting."""
    node = nodes.get(claim.node_name or "")
    return (
        claim.disruption is not None
        or node is None
        or bool(meta(node).get("deletionTimestamp"))
        or not node_ready(node)
    )


def walked_load(projection: ClusterProjection) -> dict[str, PoolLoad]:
    """Every pool's load from a walk over every claim: what :class:`LoadIndex` must always agree with."""
    counts: dict[str, list[int]] = {}
    for claim in projection.claims.values():
        if counted(claim):
            assert claim.planned is not None
            entry = counts.setdefault(claim.planned.nodepool, [0, 0])
            entry[0] += 1
            entry[1] += disrupting(claim, projection.nodes)
    return {pool: PoolLoad(total, busy) for pool, (total, busy) in counts.items()}


@dataclass
class LoadIndex:
    """Each counted claim's part and each pool's sums (see the module docstring)."""

    parts: dict[str, tuple[str, str | None, bool]] = field(default_factory=dict)
    """Counted claim -> (its pool, its Node's name, whether it is disrupting)."""
    on_node: dict[str, set[str]] = field(default_factory=dict)
    """Node name -> the counted claims registered as it."""
    sums: dict[str, list[int]] = field(default_factory=dict)
    """Pool -> [counted claims, of those disrupting]."""

    @classmethod
    def walk(cls, projection: ClusterProjection) -> LoadIndex:
        index = cls()
        for name in projection.claims:
            index.refresh(projection, name)
        return index

    def load(self) -> dict[str, PoolLoad]:
        return {pool: PoolLoad(total, busy) for pool, (total, busy) in self.sums.items() if total}

    def folded(self, projection: ClusterProjection, event: ev.Event, *, pruned: bool) -> None:
        """Bring the parts the folded ``event`` may have changed up to date (``pruned``: the projection
        forgot claims meanwhile)."""
        if isinstance(event, ev.NodeClaimEvent):
            self.refresh(projection, event.nodeclaim)
        elif isinstance(event, ev.NodeObserved):
            for name in list(self.on_node.get(object_key(event.node), ())):
                self.refresh(projection, name)
        if pruned:
            for name in [n for n in self.parts if n not in projection.claims]:
                self.refresh(projection, name)

    def refresh(self, projection: ClusterProjection, name: str) -> None:
        """The claim's part as the projection now says."""
        old = self.parts.pop(name, None)
        if old is not None:
            pool, node, busy = old
            self.sums[pool][0] -= 1
            self.sums[pool][1] -= busy
            if node is not None:
                self.on_node[node].discard(name)
                if not self.on_node[node]:
                    del self.on_node[node]
        claim = projection.claims.get(name)
        if claim is None or not counted(claim):
            return
        assert claim.planned is not None
        pool, node, busy = claim.planned.nodepool, claim.node_name, disrupting(claim, projection.nodes)
        self.parts[name] = (pool, node, busy)
        sums = self.sums.setdefault(pool, [0, 0])
        sums[0] += 1
        sums[1] += busy
        if node is not None:
            self.on_node.setdefault(node, set()).add(name)


def load_index(state: DisruptionState) -> LoadIndex:
    """The state's index (made on first use)."""
    if state.load is None:
        state.load = LoadIndex.walk(state.projection)
    return state.load


def pool_load(state: DisruptionState) -> dict[str, PoolLoad]:
    """NodePool -> its load, as Karpenter's budgets count it (see the module docstring)."""
    return load_index(state).load()


def budget_load(state: DisruptionState, busy: set[str]) -> dict[str, tuple[int, int]]:
    """:func:`pool_load`, with the ``busy`` claims (candidates of commands under way) counted as disrupting
    too: what a view's budgets count (:attr:`ClusterView.budget_load`), so every method and the emptiness
    queue count the same claims."""
    load = {pool: (entry.total, entry.disrupting) for pool, entry in pool_load(state).items()}
    nodes = state.projection.nodes
    for name in busy:
        claim = state.projection.claims.get(name)
        if claim is not None and counted(claim) and not disrupting(claim, nodes):
            assert claim.planned is not None
            total, busy_count = load[claim.planned.nodepool]
            load[claim.planned.nodepool] = (total, busy_count + 1)
    return load
