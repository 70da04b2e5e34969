"""Existing room: Nodes and in-flight NodeClaims, with their free room, used before anything is bought.

* **Nodes** offer ``status.allocatable`` minus the pods bound to them (cordoned Nodes offer nothing). A
  Node of a NodePool (``karpenter.sh/nodepool``) not yet ``karpenter.sh/initialized=true`` is still starting:
  it is judged without its NodePool's startup taints and the known ephemeral taints
  (:data:`tenon.core.wellknown.EPHEMERAL_TAINTS`: not-ready, unreachable, cloud-provider uninitialized,
  unregistered, ``readiness.k8s.io/*``), as Karpenter judges it, since they go away by themselves: pods wait
  for it instead of buying a second node while the first boots. Initialized (and unmanaged) Nodes come first,
  then starting ones, each by name, as Karpenter orders them.
* **In-flight NodeClaims** (bought, not yet a Node) offer ``status.allocatable``, else their type's
  allocatable after DaemonSets, else ``status.capacity`` minus the DaemonSets that would land there: a claim
  counts even when its instance type is not in the catalog. Their labels come from their requirements and
  their pool's template (:func:`claim_labels`); the pods they were bought for take their room first.

:func:`pool_usage` is what a NodePool's limits are measured against: the capacity of its Nodes and of its
in-flight claims (``status.capacity``, else the type's, else the allocatable).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tenon.core.model import (
    DaemonSet,
    InFlightNodeClaim,
    InstanceType,
    Node,
    NodePool,
    Pod,
    PodShape,
    Taint,
    by_shape,
    untolerated,
)
from tenon.core.requirements import all_allow
from tenon.core.templates import Template, avoided, daemon_pods_for, room_of
from tenon.core.topology import Features, HostnameRules, allows_on_node, scope_of
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    EPHEMERAL_TAINT_PREFIXES,
    EPHEMERAL_TAINTS,
    HOSTNAME,
    INITIALIZED,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE,
)

DEFAULT_MAX_PODS = 110


Refusal = Literal["for good", "for now"]
FOR_GOOD: Refusal = "for good"
FOR_NOW: Refusal = "for now"


@dataclass
class Room:
    """An existing Node or in-flight NodeClaim with its free room and the pods on it."""

    name: str
    kind: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    free: list[int]
    pods: list[Pod] = field(default_factory=list)
    new_pods: list[str] = field(default_factory=list)
    counts: dict[int, int] = field(default_factory=dict)
    limits: dict[int, int] = field(default_factory=dict)

    def domains(self, keys: Sequence[str]) -> dict[str, str | None]:
        return {key: self.labels.get(key) for key in keys}

    def occupy(self, pod: Pod, vec: Sequence[int], rules: HostnameRules) -> None:
        for d, amount in enumerate(vec):
            self.free[d] -= amount
        matches, limits = rules.features(pod)
        for sid in matches:
            self.counts[sid] = self.counts.get(sid, 0) + 1
        for sid, lim in limits:
            if sid >= 0:  # soft limits bind their own pod only
                self.limits[sid] = min(lim, self.limits.get(sid, lim))
        self.pods.append(pod)

    def occupy_existing(self, pods: Sequence[Pod], shapes: ShapeMemo) -> None:
        """``pods`` (already on the node) take their room, the pods of one shape in one step: what one pod
        of a shape takes and counts is worked out once per solve (a cluster's bound pods are mostly
        replicas)."""
        free, counts, limits = self.free, self.counts, self.limits
        for pod, n in by_shape(pods):
            vec, matches, own_limits = shapes.of(pod)
            for d, amount in enumerate(vec):
                free[d] -= amount * n
            for sid in matches:
                counts[sid] = counts.get(sid, 0) + n
            for sid, lim in own_limits:
                if sid >= 0:
                    limits[sid] = min(lim, limits.get(sid, lim))
        self.pods.extend(pods)

    def fits(self, pod: Pod, vec: Sequence[int], rules: HostnameRules) -> bool:
        """Whether ``pod`` may join: room, taints, required node affinity, hostname rules and affinity."""
        return self.refusal(pod, vec, rules) is None

    def refusal(self, pod: Pod, vec: Sequence[int], rules: HostnameRules) -> Refusal | None:
        """Why ``pod`` may not join (None: it may). :data:`FOR_GOOD` when it never will while a solve goes
        on: a room's free room only shrinks, its counts only grow and its limits only tighten, and its taints
        and labels stay; a hostname pod affinity may be met by a pod placed later."""
        if any(a > f for a, f in zip(vec, self.free, strict=True)):
            return FOR_GOOD
        if untolerated(self.taints, pod.tolerations) is not None:
            return FOR_GOOD
        if not any(all_allow(term, self.labels) for term in pod.node_affinity):
            return FOR_GOOD
        matches, limits = rules.features(pod)
        if not allows_on_node(matches, limits, self.counts, self.limits):
            return FOR_GOOD
        for term in pod.pod_affinity:
            if term.topology_key == HOSTNAME and not any(scope_of(term).matches(o) for o in self.pods):
                return FOR_NOW
        return None

    def avoided_by(self, pod: Pod) -> bool:
        """Whether the room has a ``PreferNoSchedule`` taint the pod does not tolerate (tried last)."""
        return avoided(self.taints, pod)


def _vector(requests: Mapping[str, int], names: Sequence[str]) -> list[int]:
    return [requests.get(n, 0) for n in names]


class ShapeMemo:
    """Per pod shape (:class:`~tenon.core.model.PodShape`), for one solve: the request vector, the hostname
    selectors matched and the limits set, worked out for the first pod of the shape."""

    def __init__(self, names: Sequence[str], rules: HostnameRules) -> None:
        self.names = names
        self.rules = rules
        self._found: dict[PodShape, tuple[list[int], Features]] = {}

    def of(self, pod: Pod) -> tuple[list[int], tuple[int, ...], tuple[tuple[int, int], ...]]:
        found = self._found.get(pod.shape)
        if found is None:
            found = self._found[pod.shape] = (_vector(pod.requests, self.names), self.rules.features(pod))
        return found[0], found[1][0], found[1][1]


def _room(alloc: Mapping[str, int], names: Sequence[str]) -> list[int]:
    return [room_of(alloc, n) for n in names]


def _ephemeral(taint: Taint, startup: Sequence[Taint]) -> bool:
    """A taint a starting node sheds by itself: a known ephemeral one or one of its pool's startup taints
    (matched on key and effect, as Kubernetes' ``MatchTaint``)."""
    if (taint.key, taint.effect) in EPHEMERAL_TAINTS or taint.key.startswith(EPHEMERAL_TAINT_PREFIXES):
        return True
    return any(t.key == taint.key and t.effect == taint.effect for t in startup)


def starting(node: Node) -> bool:
    """A NodePool's node not yet initialized."""
    return NODEPOOL in node.labels and node.labels.get(INITIALIZED) != "true"


def node_taints(node: Node, pools: Mapping[str, NodePool]) -> tuple[Taint, ...]:
    """The taints ``node`` is judged by: without ephemeral and startup taints while it is starting."""
    if not starting(node):
        return node.taints
    pool = pools.get(node.labels[NODEPOOL])
    startup = pool.startup_taints if pool is not None else ()
    return tuple(t for t in node.taints if not _ephemeral(t, startup))


def claim_labels(claim: InFlightNodeClaim, tpl: Template | None, pool: NodePool | None) -> dict[str, str]:
    """The labels the node of an in-flight claim will have (see :class:`InFlightNodeClaim`)."""
    labels = {
        **(tpl.labels if tpl else {}),
        **(pool.labels if pool and not tpl else {}),
        **{r.key: r.values[0] for r in claim.requirements if r.operator == "In" and len(r.values) == 1},
        **claim.labels,
        NODEPOOL: claim.node_pool,
        INSTANCE_TYPE: claim.instance_type,
        CAPACITY_TYPE: claim.capacity_type,
    }
    if claim.zone:
        labels[ZONE] = claim.zone
    return labels


class RoomBuilder:
    """Builds the existing room of one solve."""

    def __init__(
        self,
        pools: Mapping[str, NodePool],
        templates: Sequence[Template],
        names: Sequence[str],
        rules: HostnameRules,
        daemon_sets: Sequence[DaemonSet],
    ):
        self.pools = pools
        self.types = {(t.pool.name, t.instance_type.name): t for t in templates if not t.chosen}
        self.names = names
        self.rules = rules
        self.daemon_pods = daemon_sets

    def nodes(self, nodes: Sequence[Node], on_node: Mapping[str, Sequence[Pod]]) -> list[Room]:
        """Schedulable Nodes, initialized first, with the pods bound to them (``on_node``: by node name)
        taking their room."""
        out = []
        shapes = ShapeMemo(self.names, self.rules)
        for node in sorted(nodes, key=lambda n: (starting(n), n.name)):
            alloc = dict(node.allocatable)
            alloc.setdefault("pods", DEFAULT_MAX_PODS)
            room = Room(
                node.name,
                "Node",
                dict(node.labels),
                node_taints(node, self.pools),
                _room(alloc, self.names),
            )
            here = on_node.get(node.name)
            if here:
                room.occupy_existing(here, shapes)
            if not node.unschedulable:
                out.append(room)
        return out

    def claims(self, claims: Sequence[InFlightNodeClaim], by_key: Mapping[str, Pod]) -> list[Room]:
        """In-flight claims with the pods bought for them taking their room; a claim whose room is not
        known (no allocatable, no capacity, type not in the catalog) offers none."""
        out = []
        for claim in sorted(claims, key=lambda c: c.name):
            room = self._claim_room(claim)
            if room is None:
                continue
            for key in claim.pods:
                destined = by_key.get(key)
                if destined is not None:
                    room.occupy(destined, _vector(destined.requests, self.names), self.rules)
            out.append(room)
        return out

    def _claim_room(self, claim: InFlightNodeClaim) -> Room | None:
        tpl = self.types.get((claim.node_pool, claim.instance_type))
        pool = self.pools.get(claim.node_pool)
        labels = claim_labels(claim, tpl, pool)
        taints = tpl.taints if tpl else (pool.taints if pool else ())
        if claim.allocatable is not None:
            free = _room({"pods": DEFAULT_MAX_PODS, **claim.allocatable}, self.names)
        elif tpl is not None:
            return Room(claim.name, "NodeClaim", labels, taints, list(tpl.alloc))
        elif claim.capacity is not None:
            free = _room({"pods": DEFAULT_MAX_PODS, **claim.capacity}, self.names)
        else:
            return None
        offer = [(claim.zone, claim.capacity_type)]
        for ds in daemon_pods_for(labels, taints, offer, self.daemon_pods):
            for d, amount in enumerate(_vector({**ds.pod.requests, "pods": 1}, self.names)):
                free[d] -= amount
        return Room(claim.name, "NodeClaim", labels, taints, free)


def pool_usage(
    pool: NodePool,
    nodes: Sequence[Node],
    claims: Sequence[InFlightNodeClaim],
    types: Sequence[InstanceType],
) -> dict[str, int]:
    """What counts against ``pool``'s limits: its Nodes' capacity (else allocatable) and its in-flight
    claims' ``status.capacity`` (else their type's capacity, else their allocatable), one node each."""
    used: dict[str, int] = defaultdict(int)
    for node in nodes:
        if node.labels.get(NODEPOOL) == pool.name:
            used["nodes"] += 1
            for r, amount in (node.capacity or node.allocatable).items():
                used[r] += amount
    by_name = {t.name: t for t in types}
    node_names = {n.name for n in nodes}
    for claim in claims:
        if claim.node_pool != pool.name or (claim.node_name and claim.node_name in node_names):
            continue
        used["nodes"] += 1
        it = by_name.get(claim.instance_type)
        capacity = claim.capacity or (it.capacity if it else None) or claim.allocatable or {}
        for r, amount in capacity.items():
            used[r] += amount
    return used
