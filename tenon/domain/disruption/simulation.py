"""Repacking through the scheduling core (pure): what happens to the pods of some nodes if those nodes go.

Karpenter's ``SimulateScheduling``: the candidates' reschedulable pods become pending, together with every
pod already pending and the pods of nodes already being disrupted; the rest of the cluster stays as it is
(Nodes not yet initialized offer no room, in-flight claims do); :func:`tenon.core.solve` places them, existing
room first, then the cheapest new nodes. The candidates can go when every one of *their* pods finds a place
(pending pods that stay pending block nothing) and none of them lands on a claim that is not a Node yet.
New nodes holding a candidate's pod are the **replacements**; new nodes only for pods that were pending
anyway are the scheduler's business, not this move's.

The cluster is read once (:class:`Repacker`); each simulation swaps the candidates' Nodes and pods out of it,
so a round's simulations cost the core's solve, not parsing. When no pod has a rule that counts other pods
(topology spread, pod affinity), Nodes without room for even the smallest pod that moves are offered to the
core as full: they could take none, and the core's placement then looks at the few that could.

Before a solve, :meth:`Repacker.price_floor` bounds from requests alone what the replacements of a valid move
cost at least, so that a move that cannot save is refused without one (in ``make bench``'s full cluster, all
eight probes of a round). It is a bin-packing lower bound (the dual of covering the moving pods with nodes):
each pod is charged, on each instance type that could hold it, the type's cheapest price times a dual
feasible function of its share of the type's CPU (or memory), the cheapest charge kept. Fekete and
Schepers' ``u(k)`` takes a share to a multiple of ``1/k`` so that no set of pods one node holds sums above 1:
a ``c-8`` holds ten 790m pods, each charged a tenth of its price where its CPU share is 9.9 %. What the
staying Nodes' free room could absorb is taken off at the highest charge per unit. Only pods the core places
count (not pods nominated to a Node or bought for a claim in flight, which it leaves where they are).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from tenon.core import ClusterInput, Node, PlannedNodeClaim, Pod, instance_types_for_node_pool, solve
from tenon.domain.disruption.candidates import Candidate
from tenon.domain.disruption.view import ClusterView, is_reschedulable, pod_key


@dataclass(frozen=True)
class Outcome:
    feasible: bool
    why: str = ""
    replacements: tuple[PlannedNodeClaim, ...] = ()
    destinations: dict[str, str] = field(default_factory=dict, hash=False)
    """Moved pod -> the existing Node it lands on, or ``new:<index>`` (an index into ``replacements``)."""

    @property
    def price(self) -> float:
        return sum(r.price for r in self.replacements)


class Repacker:
    def __init__(self, view: ClusterView) -> None:
        if view.core is None:
            raise ValueError("the view has no scheduling input: nothing can be repacked")
        self.core: ClusterInput = view.core
        leaving = {c.node for c in view.claims.values() if c.disrupting and c.node}
        booting = {c.node for c in view.claims.values() if c.node and c.initialized_at is None}
        moving = {
            pod_key(p)
            for node in leaving
            for p in view.pods_by_node.get(str(node), [])
            if is_reschedulable(p)
        }
        self.nodes = tuple(
            dataclasses.replace(n, unschedulable=True) if n.name in booting else n
            for n in self.core.nodes
            if n.name not in leaving
        )
        self.pods: tuple[Pod, ...] = tuple(
            (dataclasses.replace(p, node_name="") if p.key in moving else p)
            for p in self.core.pods
            if p.node_name not in leaving or p.key in moving
        )
        self.solves = 0
        self.free = _free_room(self.nodes, self.pods)
        self.placement_free = not any(_placement_rules(p) for p in self.pods)
        self.waiting = [p for p in self.pods if not p.node_name]
        destined = {key for claim in self.core.in_flight for key in claim.pods}
        self.placed_by_key = {p.key: p for p in self.pods if p.key not in destined and not p.nominated_node}
        """The pods the core would place if they were pending (not those it leaves where they are going)."""
        self.new_types = _new_node_types(self.core)

    def _nodes(self, names: set[str], moving: Sequence[Pod]) -> tuple[Node, ...]:
        """The Nodes that stay; when no pod has a placement rule that counts other pods (spread, pod
        affinity), those without room for even the smallest moving or waiting pod are offered as full (they
        could take none of them, and the core's placement then looks at fewer nodes)."""
        kept = [n for n in self.nodes if n.name not in names]
        if not self.placement_free or not moving:
            return tuple(kept)
        least = [min(p.requests.get(r, 0) for p in [*moving, *self.waiting]) for r in ("cpu", "memory")]
        out = []
        for n in kept:
            free = self.free.get(n.name)
            full = free is not None and (free[0] < least[0] or free[1] < least[1] or free[2] < 1)
            out.append(dataclasses.replace(n, unschedulable=True) if full and not n.unschedulable else n)
        return tuple(out)

    def price_floor(self, candidates: Sequence[Candidate]) -> float:
        """The least the replacements of any valid move of ``candidates`` cost (0 when nothing is known):
        the module's bound on their reschedulable pods, by CPU and by memory, the higher one."""
        names = {c.node_name for c in candidates}
        moving = [
            pod
            for c in candidates
            for p in c.reschedulable
            if (pod := self.placed_by_key.get(pod_key(p))) is not None
        ]
        if not moving or not self.new_types:
            return 0.0
        shapes = Counter((p.requests.get("cpu", 0), p.requests.get("memory", 0)) for p in moving)
        least = (min(cpu for cpu, _ in shapes), min(memory for _, memory in shapes))
        open_room = [
            free
            for n in self.nodes
            if n.name not in names
            and not n.unschedulable
            and (free := self.free[n.name])[0] >= least[0]
            and free[1] >= least[1]
            and free[2] >= 1
        ]
        return max(0.0, *(_dimension_floor(shapes, open_room, self.new_types, d) for d in (0, 1)))

    def simulate(self, candidates: Sequence[Candidate]) -> Outcome:
        names = {c.node_name for c in candidates}
        movable = {pod_key(p) for c in candidates for p in c.reschedulable}
        pods = [
            (dataclasses.replace(p, node_name="") if p.key in movable else p)
            for p in self.pods
            if p.node_name not in names or p.key in movable
        ]
        moving = [p for p in pods if p.key in movable]
        inputs = dataclasses.replace(self.core, nodes=self._nodes(names, moving), pods=tuple(pods))
        self.solves += 1
        plan = solve(inputs)
        for unschedulable in plan.unschedulable:
            if unschedulable.pod in movable:
                return Outcome(False, f"pod {unschedulable.pod} cannot run elsewhere: {unschedulable.reason}")
        destinations: dict[str, str] = {}
        for placement in plan.existing:
            for pod in placement.pods:
                if pod not in movable:
                    continue
                if placement.kind != "Node":
                    return Outcome(
                        False, f"pod {pod} would go to NodeClaim {placement.name}, not initialized"
                    )
                destinations[pod] = placement.name
        replacements = tuple(nc for nc in plan.node_claims if any(p in movable for p in nc.pods))
        for index, claim in enumerate(replacements):
            for pod in claim.pods:
                if pod in movable:
                    destinations[pod] = f"new:{index}"
        return Outcome(True, replacements=replacements, destinations=destinations)


def _new_node_types(core: ClusterInput) -> list[tuple[tuple[int, int], float]]:
    """(allocatable cpu and memory, cheapest available price) of each instance type a NodePool may launch:
    DaemonSets and offerings a pool's requirements leave out only make the nodes the core launches smaller
    and dearer, which keeps the floor below their price."""
    out = []
    for pool in core.node_pools:
        for t in instance_types_for_node_pool(core, pool)[0]:
            prices = [o.price for o in t.offerings if o.available]
            if prices:
                out.append(((t.allocatable.get("cpu", 0), t.allocatable.get("memory", 0)), min(prices)))
    return out


def _dual_share(size: int, room: int, k: int) -> float:
    """Fekete and Schepers' dual feasible function ``u(k)`` of the share ``size / room``: the share itself
    when ``(k + 1)`` times it is whole, else ``floor((k + 1) * share) / k``; any sizes one room holds sum to
    at most 1."""
    if (k + 1) * size % room == 0:
        return size / room
    return ((k + 1) * size // room) / k


def _dimension_floor(
    shapes: Counter[tuple[int, int]],
    open_room: Sequence[tuple[int, int, int]],
    types: Sequence[tuple[tuple[int, int], float]],
    d: int,
) -> float:
    """The floor by resource ``d`` (0: CPU, 1: memory) of placing ``shapes`` (requests -> how many pods) on
    new nodes of ``types`` beside the staying Nodes' ``open_room``; the higher of two dual functions': the
    plain share, and each type's ``u(k)`` with ``k`` the most pods of the smallest request it holds."""
    smallest = min((size[d] for size in shapes if size[d] > 0), default=0)
    if not smallest:
        return 0.0
    bounds = []
    for rounded in (False, True):
        charge = {}
        for shape in shapes:
            charges = [
                price
                * (_dual_share(shape[d], room[d], room[d] // smallest) if rounded else shape[d] / room[d])
                for room, price in types
                if shape[0] <= room[0] and shape[1] <= room[1] and room[d] > 0
            ]
            charge[shape] = min(charges, default=0.0)
        total = math.fsum(charge[shape] * count for shape, count in shapes.items())
        # a staying Node takes pods of at most its free room: worth that room at the highest charge per unit
        rate = max(charge[shape] / shape[d] for shape in shapes if shape[d] > 0)
        bounds.append(total - rate * sum(free[d] for free in open_room))
    return max(bounds)


def _placement_rules(pod: Pod) -> bool:
    return bool(
        pod.topology_spread
        or pod.pod_affinity
        or pod.pod_anti_affinity
        or pod.preferred_pod_affinity
        or pod.preferred_pod_anti_affinity
    )


def _free_room(nodes: Sequence[Node], pods: Sequence[Pod]) -> dict[str, tuple[int, int, int]]:
    """Node -> (free cpu, memory, pod slots) after its bound pods' requests."""
    used: dict[str, list[int]] = {}
    for pod in pods:
        if pod.node_name:
            entry = used.setdefault(pod.node_name, [0, 0, 0])
            entry[0] += pod.requests.get("cpu", 0)
            entry[1] += pod.requests.get("memory", 0)
            entry[2] += 1
    free = {}
    for node in nodes:
        cpu, memory, count = used.get(node.name, [0, 0, 0])
        slots = node.allocatable.get("pods", 110)
        free[node.name] = (
            node.allocatable.get("cpu", 0) - cpu,
            node.allocatable.get("memory", 0) - memory,
            slots - count,
        )
    return free
