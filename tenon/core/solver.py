"""``solve(ClusterInput) -> Plan``: the scheduling pipeline, pure and deterministic.

Steps, each in its own module:

1. **Templates** (:mod:`.templates`): every (NodePool, instance type) a new node could be, NodePools by weight
   then name, allocatable after DaemonSets. Each pending pod gets its *feasibility*: the templates and
   offerings it accepts (taints, node affinity, nodeSelector, preferred affinity when possible, host ports,
   fit). Identical pod specs share the computation.
2. **Domains** (:mod:`.topology`): zone and capacity-type spread/affinity/anti-affinity pin pods to domains.
3. **Existing room first**: pods go first-fit-decreasing onto existing Nodes, then in-flight NodeClaims (the
   room of capacity already bought), checking taints, labels, pins, fit, hostname rules and hostname affinity.
4. **Units**: pods bound together by required pod affinity on hostname become one item.
5. **Packing** (:mod:`.packing`): per NodePool in priority order, the rest are grouped into classes and packed
   into new nodes at the lowest price; pods a pool cannot take (limits, max size) spill to the next pool.
6. **Plan** (:mod:`.plan`, :mod:`.explain`): every new node with its cheaper-first fallbacks, the
   requirements the launcher must honour, and why each type won or lost; ``minValues`` is checked on the
   fallback list. Pods that cannot run get a reason per NodePool.

No I/O, no clocks, no randomness: the same input gives the same plan (lists are sorted before output).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenon.core.catalog import instance_types_for_node_pool
from tenon.core.explain import MAX_FALLBACKS, explain_choice
from tenon.core.model import (
    ClusterInput,
    InFlightNodeClaim,
    InstanceType,
    NodePool,
    Pod,
    Taint,
    untolerated,
)
from tenon.core.packing import Bin, Budget, PackClass, Packer, dual_weights
from tenon.core.plan import Considered, ExistingPlacement, Plan, PlannedNodeClaim, Unschedulable
from tenon.core.quantities import CPU, MEMORY, PODS, format_quantity
from tenon.core.requirements import Requirement, all_allow
from tenon.core.templates import (
    OfferKey,
    Template,
    build_templates,
    fits,
    offers_allowed,
    pod_feasibility,
    pool_rejection,
)
from tenon.core.topology import (
    HostnameRules,
    ScopedSelector,
    allows_on_node,
    assign_domains,
    term_scope,
)
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE,
)

DEFAULT_MAX_PODS = 110
MAX_ROUNDS = 5  # solves, when pinned pods fail and must be set aside (see solve)
SMALL_PODS = 400  # up to this many pods and ...
SMALL_CLASSES = 16  # ... this many distinct pod classes, a NodePool gets the full portfolio (packing.py)


@dataclass
class _Room:
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


def _vector(requests: dict[str, int], names: Sequence[str]) -> tuple[int, ...]:
    return tuple(requests.get(n, 0) for n in names)


def _spec_key(pod: Pod) -> tuple[object, ...]:
    return (
        tuple(sorted(pod.requests.items())),
        pod.node_affinity,
        pod.preferred_node_affinity,
        pod.tolerations,
        pod.host_ports,
    )


def _restricts_offers(pod: Pod) -> bool:
    terms = list(pod.node_affinity) + [t for _, t in pod.preferred_node_affinity]
    return any(req.key in (ZONE, CAPACITY_TYPE) for term in terms for req in term)


def _offer_domains(offer_sets: Iterable[Iterable[OfferKey]]) -> tuple[set[str], set[str]]:
    """The zones (when set) and capacity types of some offerings."""
    zones: set[str] = set()
    cts: set[str] = set()
    for offers in offer_sets:
        for zone, ct in offers:
            if zone:
                zones.add(zone)
            cts.add(ct)
    return zones, cts


def _add_room_domains(room: _Room, zones: set[str], cts: set[str]) -> None:
    if room.labels.get(ZONE):
        zones.add(room.labels[ZONE])
    if room.labels.get(CAPACITY_TYPE):
        cts.add(room.labels[CAPACITY_TYPE])


_Item = tuple[
    list[Pod],  # the pods that must share a node (one, without hostname pod affinity)
    tuple[int, ...],  # their summed requests
    frozenset[OfferKey] | None,  # offerings allowed (None: any)
    tuple[int, ...],  # hostname selector ids matched
    tuple[tuple[int, int], ...],  # hostname limits set
    dict[int, frozenset[OfferKey]],  # template index -> offerings accepted there
]


def _hostname_affinity_groups(pods: Sequence[Pod]) -> dict[str, list[Pod]]:
    """Pods bound together by required pod affinity on hostname (transitively), by a representative key."""
    parent = {p.key: p.key for p in pods}

    def find(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for pod in pods:
        for term in pod.pod_affinity:
            if term.topology_key != HOSTNAME:
                continue
            sel: ScopedSelector = term_scope(term.selector, term.namespaces, term.all_namespaces)
            for other in pods:
                if other is not pod and sel.matches(other):
                    parent[find(other.key)] = find(pod.key)
    groups: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        groups[find(pod.key)].append(pod)
    return groups


class _PinnedFeasibility:
    """A pod's feasible templates and offerings narrowed to the zone/capacity type it is pinned to."""

    def __init__(self, feasible: dict[str, dict[int, frozenset[OfferKey]]], pins: dict[str, dict[str, str]]):
        self.feasible = feasible
        self.pins = pins
        # pods of one spec share their feasibility: narrowed once per (feasibility, pin)
        self._cache: dict[tuple[int, tuple[tuple[str, str], ...]], dict[int, frozenset[OfferKey]]] = {}

    def of(self, pod: Pod) -> dict[int, frozenset[OfferKey]]:
        f = self.feasible[pod.key]
        pin = self.pins.get(pod.key, {})
        if not pin:
            return f
        key = (id(f), tuple(sorted(pin.items())))
        found = self._cache.get(key)
        if found is None:
            found = {}
            for i, offs in f.items():
                kept = frozenset(
                    k
                    for k in offs
                    if (ZONE not in pin or k[0] == pin[ZONE])
                    and (CAPACITY_TYPE not in pin or k[1] == pin[CAPACITY_TYPE])
                )
                if kept:
                    found[i] = kept
            self._cache[key] = found
        return found


_ClassKey = tuple[object, ...]  # everything that matters for packing: vector, offers, features, templates


class _PendingClasses:
    """Items not packed yet, grouped into classes of identical items, with what each pool said about them."""

    def __init__(self, items: Sequence[_Item]):
        self.classes: dict[_ClassKey, list[list[str]]] = defaultdict(list)  # class -> pod keys per item
        self.shape: dict[_ClassKey, tuple[Any, ...]] = {}  # class -> (vec, okeys, matches, limits, feasible)
        for members, vec, okeys, matches, limits, feasible in items:
            key = (vec, okeys, matches, limits, frozenset(feasible))
            self.classes[key].append([p.key for p in members])
            self.shape[key] = (vec, okeys, matches, limits, feasible)
        self.keys = sorted(self.classes, key=lambda k: min(m[0] for m in self.classes[k]))
        self.tried: dict[_ClassKey, dict[str, str]] = {k: {} for k in self.keys}  # class -> pool -> why not

    def pack_classes(self, here: Sequence[_ClassKey], tpl_ids: frozenset[int]) -> list[PackClass]:
        """The classes ``here`` as the packer takes them, limited to one pool's templates ``tpl_ids``."""
        out = []
        interned: dict[frozenset[int], frozenset[int]] = {}
        for i, k in enumerate(here):
            vec, okeys, matches, limits, feasible = self.shape[k]
            tset = frozenset(feasible) & tpl_ids
            members = list(self.classes[k])
            out.append(
                PackClass(
                    i, vec, len(members), okeys, matches, limits, interned.setdefault(tset, tset), members
                )
            )
        return out

    def keep_leftovers(
        self, pool: str, here: Sequence[_ClassKey], packed: Sequence[PackClass], taken: dict[int, int]
    ) -> None:
        """What ``pool`` did not take stays pending for the next pool, and so do classes it could not use."""
        leftover: dict[_ClassKey, list[list[str]]] = {}
        for ci, c in enumerate(packed):
            rest = c.members[taken[ci] :]
            if rest:
                leftover[here[ci]] = rest
                self.tried[here[ci]].setdefault(pool, "NodePool could not take it")
        next_keys = []
        for k in self.keys:
            if k in leftover:
                self.classes[k] = leftover[k]
                next_keys.append(k)
            elif k not in here:
                next_keys.append(k)
        self.keys = next_keys


def _claim_labels(claim: InFlightNodeClaim, tpl: Template | None) -> dict[str, str]:
    """The labels the node of an in-flight claim will have (see :class:`InFlightNodeClaim`)."""
    labels = {
        **(tpl.labels if tpl else {}),
        **{r.key: r.values[0] for r in claim.requirements if r.operator == "In" and len(r.values) == 1},
        **claim.labels,
        NODEPOOL: claim.node_pool,
        INSTANCE_TYPE: claim.instance_type,
        CAPACITY_TYPE: claim.capacity_type,
    }
    if claim.zone:
        labels[ZONE] = claim.zone
    return labels


class _Solve:
    def __init__(self, inputs: ClusterInput, excluded: dict[str, dict[str, str]] | None = None):
        self.inputs = inputs
        self.pools: list[NodePool] = sorted(inputs.node_pools, key=lambda p: (-p.weight, p.name))
        self.pool_types: dict[str, tuple[InstanceType, ...]] = {}
        self.pool_problem: dict[str, str] = {}
        for pool in self.pools:
            types, problem = instance_types_for_node_pool(inputs, pool)
            self.pool_types[pool.name], self.pool_problem[pool.name] = types, problem
        destined = {key for claim in inputs.in_flight for key in claim.pods}
        self.by_key = {p.key: p for p in inputs.pods}
        self.bound = [p for p in inputs.pods if p.node_name]
        self.pending = [p for p in inputs.pods if not p.node_name and p.key not in destined]
        extra = sorted({r for p in self.pending for r in p.requests} - {CPU, MEMORY, PODS})
        self.names: list[str] = [CPU, MEMORY, PODS, *extra]
        self.templates = build_templates(
            [(p, self.pool_types[p.name]) for p in self.pools], inputs.daemon_sets, self.names
        )
        self.pool_templates: dict[str, list[Template]] = defaultdict(list)
        for tpl in self.templates:
            self.pool_templates[tpl.pool.name].append(tpl)
        self.vec = {p.key: _vector(p.requests, self.names) for p in self.pending}
        cache: dict[tuple[object, ...], dict[int, frozenset[OfferKey]]] = {}
        self.feasible: dict[str, dict[int, frozenset[OfferKey]]] = {}
        for pod in self.pending:
            key = _spec_key(pod)
            if key not in cache:
                cache[key] = pod_feasibility(pod, self.vec[pod.key], self.templates)
            self.feasible[pod.key] = cache[key]
        self.unschedulable: dict[str, dict[str, str]] = dict(excluded or {})
        self.pinned: set[str] = set()
        # by feasibility; the dict is kept with its answer so that its id() is never reused for another one
        self._okeys_cache: dict[int, tuple[dict[int, frozenset[OfferKey]], frozenset[OfferKey]]] = {}
        self._explained: dict[tuple[object, ...], tuple[str, list[str], list[Considered]]] = {}
        self._sorted_templates: dict[str, list[Template]] = {}
        self._formatted: dict[tuple[int, ...], dict[str, str]] = {}
        self._feasible_by_spec = cache
        self.rules = HostnameRules()
        # pods destined to an in-flight claim occupy its room, so their hostname rules count there too
        destined_pods = [p for p in inputs.pods if not p.node_name and p.key in destined]
        self.rules.register(list(self.pending) + self.bound + destined_pods)

    # -- existing room -------------------------------------------------------------------------------------
    def rooms(self) -> list[_Room]:
        out: list[_Room] = []
        on_node: dict[str, list[Pod]] = defaultdict(list)
        for pod in self.bound:
            on_node[pod.node_name].append(pod)
        for node in sorted(self.inputs.nodes, key=lambda n: n.name):
            alloc = dict(node.allocatable)
            alloc.setdefault(PODS, DEFAULT_MAX_PODS)
            free = list(_vector(alloc, self.names))
            room = _Room(node.name, "Node", dict(node.labels), node.taints, free)
            for pod in on_node.get(node.name, []):
                self._occupy(room, pod, _vector(pod.requests, self.names))
            if not node.unschedulable:
                out.append(room)
        types = {(t.pool.name, t.instance_type.name): t for t in self.templates}
        for claim in sorted(self.inputs.in_flight, key=lambda c: c.name):
            tpl = types.get((claim.node_pool, claim.instance_type))
            if claim.allocatable is not None:
                free = list(_vector(claim.allocatable, self.names))
            elif tpl is not None:
                free = list(tpl.alloc)
            else:
                continue
            room = _Room(claim.name, "NodeClaim", _claim_labels(claim, tpl), tpl.taints if tpl else (), free)
            for key in claim.pods:
                destined = self.by_key.get(key)
                if destined is not None:
                    self._occupy(room, destined, _vector(destined.requests, self.names))
            out.append(room)
        return out

    def _occupy(self, room: _Room, pod: Pod, vec: tuple[int, ...]) -> None:
        for d, amount in enumerate(vec):
            room.free[d] -= amount
        matches, limits = self.rules.features(pod)
        for sid in matches:
            room.counts[sid] = room.counts.get(sid, 0) + 1
        for sid, lim in limits:
            room.limits[sid] = min(lim, room.limits.get(sid, lim))
        room.pods.append(pod)

    def _fits_room(self, pod: Pod, vec: tuple[int, ...], pins: dict[str, str], room: _Room) -> bool:
        if any(a > f for a, f in zip(vec, room.free, strict=True)):
            return False
        if untolerated(room.taints, pod.tolerations) is not None:
            return False
        if not any(all_allow(term, room.labels) for term in pod.node_affinity):
            return False
        if any(room.labels.get(k) != v for k, v in pins.items()):
            return False
        matches, limits = self.rules.features(pod)
        if not allows_on_node(matches, limits, room.counts, room.limits):
            return False
        for term in pod.pod_affinity:
            if term.topology_key == HOSTNAME:
                sel = term_scope(term.selector, term.namespaces, term.all_namespaces)
                if not any(sel.matches(other) for other in room.pods):
                    return False
        return True

    # -- main ------------------------------------------------------------------------------------------------
    def run(self) -> Plan:
        rooms = self.rooms()
        pins = self._assign_domains(rooms)
        todo = [p for p in self.pending if p.key not in self.unschedulable]
        todo.sort(key=lambda p: (-self.vec[p.key][0], -self.vec[p.key][1], p.key))
        left: list[Pod] = []
        for pod in todo:
            for room in rooms:
                if self._fits_room(pod, self.vec[pod.key], pins.get(pod.key, {}), room):
                    self._occupy(room, pod, self.vec[pod.key])
                    room.new_pods.append(pod.key)
                    break
            else:
                left.append(pod)
        claims = self._pack_new(left, pins)
        existing = tuple(
            ExistingPlacement(r.name, r.kind, tuple(sorted(r.new_pods))) for r in rooms if r.new_pods
        )
        unsched = tuple(Unschedulable(key, reasons) for key, reasons in sorted(self.unschedulable.items()))
        skipped = tuple(s.describe() for s in self.inputs.skipped)
        return Plan(tuple(claims), existing, unsched, skipped)

    def _assign_domains(self, rooms: Sequence[_Room]) -> dict[str, dict[str, str]]:
        offered: dict[int, tuple[set[str], set[str]]] = {}
        domains_of = {pod.key: self._domains_of(pod, rooms, offered) for pod in self.pending}
        placed = [
            (pod, {ZONE: r.labels.get(ZONE, ""), CAPACITY_TYPE: r.labels.get(CAPACITY_TYPE, "")})
            for r in rooms
            for pod in r.pods
        ]
        outcome = assign_domains(
            self._placeable(rooms),
            domains_of,
            [(p, {k: v for k, v in d.items() if v}) for p, d in placed],
            self._spread_domains_by_pod(rooms),
        )
        for key, reason in outcome.failures.items():
            self.unschedulable[key] = {"*": reason}
        self.pinned = set(outcome.pins)
        return outcome.pins

    def _domains_of(
        self, pod: Pod, rooms: Sequence[_Room], offered: dict[int, tuple[set[str], set[str]]]
    ) -> dict[str, set[str]]:
        """The zones and capacity types ``pod`` could land in: its feasible offerings, the rooms it may use.

        ``offered`` caches the offerings' domains per feasibility (pods of one spec share it).
        """
        feasible = self.feasible[pod.key]
        if id(feasible) not in offered:
            offered[id(feasible)] = _offer_domains(offers for offers in feasible.values())
        zones, cts = set(offered[id(feasible)][0]), set(offered[id(feasible)][1])
        for room in rooms:
            if untolerated(room.taints, pod.tolerations) is None and any(
                all_allow(term, room.labels) for term in pod.node_affinity
            ):
                _add_room_domains(room, zones, cts)
        return {ZONE: zones, CAPACITY_TYPE: cts}

    def _spread_domains_by_pod(self, rooms: Sequence[_Room]) -> dict[str, dict[str, set[str]]]:
        """For pods with a zone/capacity-type spread: the domains it counts (equal node affinity, shared)."""
        spread_domains_of: dict[str, dict[str, set[str]]] = {}
        by_affinity: dict[tuple[tuple[Requirement, ...], ...], dict[str, set[str]]] = {}
        for pod in self.pending:
            if not any(t.topology_key in (ZONE, CAPACITY_TYPE) for t in pod.topology_spread):
                continue
            if pod.node_affinity not in by_affinity:
                by_affinity[pod.node_affinity] = self._spread_domains(pod, rooms)
            spread_domains_of[pod.key] = by_affinity[pod.node_affinity]
        return spread_domains_of

    def _placeable(self, rooms: Sequence[_Room]) -> list[Pod]:
        """Pending pods that can run somewhere: pinning the others would count pods that never arrive."""
        return [
            p
            for p in self.pending
            if p.key not in self.unschedulable
            and (self.feasible[p.key] or any(self._fits_room(p, self.vec[p.key], {}, r) for r in rooms))
        ]

    def _spread_domains(self, pod: Pod, rooms: Sequence[_Room]) -> dict[str, set[str]]:
        """Domains a zone/capacity-type spread counts: nodes matching the pod's node affinity, tainted too."""
        zones: set[str] = set()
        cts: set[str] = set()
        for tpl in self.templates:
            for term in pod.node_affinity:
                zs, cs = _offer_domains([offers_allowed(term, tpl.labels, tpl.offerings)])
                zones |= zs
                cts |= cs
        for room in rooms:
            if any(all_allow(term, room.labels) for term in pod.node_affinity):
                _add_room_domains(room, zones, cts)
        return {ZONE: zones, CAPACITY_TYPE: cts}

    def _items(self, left: Sequence[Pod], pins: dict[str, dict[str, str]]) -> list[_Item]:
        """Units (hostname pod affinity) and single pods, each with vector, offers, features, templates.

        A unit that cannot be placed as a whole is marked unschedulable (with why) instead.
        """
        pinned = _PinnedFeasibility(self.feasible, pins)
        items = []
        for members in _hostname_affinity_groups(left).values():
            members.sort(key=lambda p: p.key)
            item = self._item(members, pins, pinned)
            if isinstance(item, str):
                for pod in members:
                    self.unschedulable[pod.key] = {"*": item}
            else:
                items.append(item)
        return items

    def _item(
        self, members: list[Pod], pins: dict[str, dict[str, str]], pinned: _PinnedFeasibility
    ) -> _Item | str:
        """One packing item for pods that must share a node, or why they cannot."""
        restricted = any(pod.key in pins or _restricts_offers(pod) for pod in members)
        vec, feasible = self._unit_feasibility(members, pinned)
        matches, limits = self._unit_features(members)
        if self._hostname_affinity_unmet(members) and not (
            len(members) == 1 and self._self_affine(members[0])
        ):
            return "required pod affinity on hostname: no node runs a matching pod with room for it"
        okeys = None
        if restricted:
            cached = self._okeys_cache.get(id(feasible))
            if cached is None:
                cached = (feasible, frozenset(k for offs in feasible.values() for k in offs))
                self._okeys_cache[id(feasible)] = cached
            okeys = cached[1]
        if len(members) > 1 and not feasible:
            return (
                f"pods that must share a node (pod affinity on hostname: "
                f"{', '.join(p.key for p in members)}) do not fit together on any instance type"
            )
        if len(members) > 1:
            counted = {sid: sum(1 for p in members if sid in self.rules.features(p)[0]) for sid in matches}
            if any(counted.get(sid, 0) > lim for sid, lim in limits):
                return "its pod affinity and anti-affinity contradict each other"
        return (members, vec, okeys, matches, limits, feasible)

    def _unit_feasibility(
        self, members: list[Pod], pinned: _PinnedFeasibility
    ) -> tuple[tuple[int, ...], dict[int, frozenset[OfferKey]]]:
        """The unit's summed requests and the templates (with offerings) every member accepts and it fits."""
        if len(members) == 1:
            return self.vec[members[0].key], pinned.of(members[0])
        vec = tuple(map(sum, zip(*(self.vec[p.key] for p in members), strict=True)))
        feasible = dict(pinned.of(members[0]))
        for pod in members[1:]:
            f = pinned.of(pod)
            feasible = {i: feasible[i] & f[i] for i in feasible if i in f and feasible[i] & f[i]}
        return vec, {i: o for i, o in feasible.items() if fits(vec, self.templates[i].alloc)}

    def _unit_features(self, members: list[Pod]) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """Hostname selector ids the unit matches, and the smallest limit its members set on each."""
        if len(members) == 1:
            return self.rules.features(members[0])
        matches: set[int] = set()
        limits: dict[int, int] = {}
        for pod in members:
            m, lims = self.rules.features(pod)
            matches.update(m)
            for sid, lim in lims:
                limits[sid] = min(lim, limits.get(sid, lim))
        return tuple(sorted(matches)), tuple(sorted(limits.items()))

    @staticmethod
    def _hostname_affinity_unmet(members: list[Pod]) -> bool:
        """Whether some member's hostname pod affinity matches no pod of the unit."""
        return any(pod.pod_affinity for pod in members) and any(
            term.topology_key == HOSTNAME
            and not any(
                term_scope(term.selector, term.namespaces, term.all_namespaces).matches(o) for o in members
            )
            for pod in members
            for term in pod.pod_affinity
        )

    def _self_affine(self, pod: Pod) -> bool:
        return all(
            term_scope(t.selector, t.namespaces, t.all_namespaces).matches(pod)
            for t in pod.pod_affinity
            if t.topology_key == HOSTNAME
        )

    def _pool_usage(self, pool: NodePool) -> dict[str, int]:
        used: dict[str, int] = defaultdict(int)
        for node in self.inputs.nodes:
            if node.labels.get(NODEPOOL) == pool.name:
                used["nodes"] += 1
                for r, amount in (node.capacity or node.allocatable).items():
                    used[r] += amount
        types = {t.name: t for t in self.pool_types.get(pool.name, ())}
        node_names = {n.name for n in self.inputs.nodes}
        for claim in self.inputs.in_flight:
            if claim.node_pool == pool.name and claim.name not in node_names:
                used["nodes"] += 1
                it = types.get(claim.instance_type)
                for r, amount in (claim.capacity or (it.capacity if it else claim.allocatable or {})).items():
                    used[r] += amount
        return used

    def _pack_new(self, left: Sequence[Pod], pins: dict[str, dict[str, str]]) -> list[PlannedNodeClaim]:
        """New NodeClaims for the pods left, pool by pool in priority order; what a pool cannot take spills
        to the next one, and what no pool takes is unschedulable with each pool's reason."""
        pending = _PendingClasses(self._items(left, pins))
        type_caps = self._type_caps()
        claims: list[tuple[tuple[object, ...], PlannedNodeClaim]] = []
        for rank, pool in enumerate(self.pools):
            tpls = self.pool_templates.get(pool.name, [])
            tpl_ids = frozenset(t.index for t in tpls)
            here = [k for k in pending.keys if pending.shape[k][4].keys() & tpl_ids]
            if not here:
                continue
            pack_classes = pending.pack_classes(here, tpl_ids)
            packer, bins = self._pack_pool(pool, tpls, pack_classes, type_caps)
            for ci, reason in packer.failed.items():
                pending.tried[here[ci]][pool.name] = reason
            taken: dict[int, int] = defaultdict(int)
            for b in bins:
                claim = self._claim_for_bin(pool, tpls, b, pack_classes, taken)
                if claim is not None:
                    claims.append(((rank, -b.price, claim.instance_type, claim.pods), claim))
            pending.keep_leftovers(pool.name, here, pack_classes, taken)
        for k in pending.keys:
            for unit in pending.classes[k]:
                for pod_key in unit:
                    self.unschedulable[pod_key] = self._reasons(self.by_key[pod_key], pending.tried[k])
        claims.sort(key=lambda item: item[0])
        return [c for _, c in claims]

    def _type_caps(self) -> dict[str, int]:
        """How many more of each capped instance type (Cluster API max size) may be created, by source."""
        type_caps: dict[str, int] = {}
        for pool in self.pools:
            for it in self.pool_types[pool.name]:
                if it.max_new is not None:
                    type_caps[it.source] = it.max_new
        return type_caps

    def _pack_pool(
        self,
        pool: NodePool,
        tpls: Sequence[Template],
        pack_classes: list[PackClass],
        type_caps: dict[str, int],
    ) -> tuple[Packer, list[Bin]]:
        """The bins one NodePool buys for these classes, within its limits; most expensive first."""
        usage = self._pool_usage(pool)
        remaining = {r: limit - usage.get(r, 0) for r, limit in pool.limits.items()}
        budget = Budget(self.names, remaining, type_caps)
        demand = [0] * len(self.names)
        for c in pack_classes:
            for d, amount in enumerate(c.req):
                demand[d] += amount * c.count
        weights = dual_weights(tpls, demand, 0, 1)
        n_pods = sum(len(c.members) for c in pack_classes)
        # The portfolio and deep repacking pay off on small problems and cost too much on large ones.
        small = n_pods <= SMALL_PODS and len(pack_classes) <= SMALL_CLASSES
        packer = Packer(
            tpls,
            budget,
            weights,
            max_candidates=24,
            improve_budget=2500 if small else 60,
            portfolio=small,
        )
        bins = packer.pack(pack_classes, lookahead=True)
        bins = packer.improve(
            bins,
            [PackClass(c.index, c.req, 0, c.okeys, c.matches, c.limits, c.templates) for c in pack_classes],
        )
        bins.sort(key=lambda b: (-b.price, b.template.instance_type.name, sorted(b.contents.items())))
        return packer, bins

    def _claim_for_bin(
        self,
        pool: NodePool,
        tpls: Sequence[Template],
        b: Bin,
        pack_classes: Sequence[PackClass],
        taken: dict[int, int],
    ) -> PlannedNodeClaim | None:
        """The claim for one bin, its pods taken in order from their classes (``taken`` counts them); ``None``
        when the claim cannot be made (minValues), its pods then unschedulable in this pool."""
        pods_here: list[str] = []
        for ci, n in sorted(b.contents.items()):
            start = taken[ci]
            for unit in pack_classes[ci].members[start : start + n]:
                pods_here.extend(unit)
            taken[ci] += n
        claim = self._claim(pool, tpls, b, pods_here, pack_classes)
        if isinstance(claim, str):
            for pod_key in pods_here:
                self.unschedulable[pod_key] = {pool.name: claim}
            return None
        return claim

    def _reasons(self, pod: Pod, tried: dict[str, str]) -> dict[str, str]:
        if not self.pools:
            return {"*": "no NodePool"}
        out = {}
        vec = self.vec[pod.key]
        for pool in self.pools:
            if pool.name in tried:
                out[pool.name] = tried[pool.name]
            else:
                out[pool.name] = pool_rejection(
                    pod,
                    vec,
                    self.names,
                    pool,
                    self.pool_types[pool.name],
                    self.pool_templates.get(pool.name, []),
                    self.pool_problem[pool.name],
                )
        return out

    def _claim(
        self, pool: NodePool, tpls: Sequence[Template], b: Bin, pods: list[str], classes: Sequence[PackClass]
    ) -> PlannedNodeClaim | str:
        allowed: frozenset[int] | None = None
        for ci in b.contents:
            allowed = classes[ci].templates if allowed is None else allowed & classes[ci].templates
        assert allowed is not None
        want = max([MAX_FALLBACKS] + [len(tpls) for r in pool.requirements if r.min_values])
        memo_key = (b.template.index, tuple(b.used), b.okeys, allowed, b.offer)
        cached = self._explained.get(memo_key)
        if cached is None:
            ordered = self._sorted_templates.get(pool.name)
            if ordered is None:
                ordered = sorted(tpls, key=lambda t: (t.min_price, t.instance_type.name))
                self._sorted_templates[pool.name] = ordered
            cached = explain_choice(
                b.template,
                b.price,
                b.used,
                b.okeys,
                allowed,
                ordered,
                self.names,
                Budget(self.names, {}, {}),
                want,
                b.offer,
            )
            self._explained[memo_key] = cached
        because, fallbacks, considered = cached
        flexible = [b.template.instance_type.name, *fallbacks]
        keep = MAX_FALLBACKS
        for req in pool.requirements:
            if req.min_values:
                by_name = {t.instance_type.name: t for t in tpls}
                values = {by_name[n].labels.get(req.key) for n in flexible} - {None}
                if len(values) < req.min_values:
                    return (
                        f"minValues {req.min_values} for {req.key} not met: only {len(values)} "
                        f"value(s) among the instance types that fit"
                    )
                keep = max(keep, len(flexible))
        fallbacks = fallbacks[:keep]
        zone, ct = b.offer
        reqs = [r for r in pool.requirements if r.key not in (INSTANCE_TYPE, ZONE, CAPACITY_TYPE, NODEPOOL)]
        reqs += [
            Requirement(NODEPOOL, "In", (pool.name,)),
            Requirement(INSTANCE_TYPE, "In", tuple([b.template.instance_type.name, *fallbacks])),
        ]
        if zone:
            reqs.append(Requirement(ZONE, "In", (zone,)))
        reqs.append(Requirement(CAPACITY_TYPE, "In", (ct,)))
        totals = list(b.used)
        for d, name in enumerate(self.names):
            totals[d] += b.template.daemon_requests.get(name, 0)
        requests = self._formatted.get(tuple(totals))
        if requests is None:
            requests = {n: format_quantity(n, v) for n, v in zip(self.names, totals, strict=True) if v}
            self._formatted[tuple(totals)] = requests
        return PlannedNodeClaim(
            node_pool=pool.name,
            instance_type=b.template.instance_type.name,
            zone=zone,
            capacity_type=ct,
            price=b.price,
            price_estimated=b.template.instance_type.price_estimated,
            pods=tuple(sorted(pods)),
            fallbacks=tuple(fallbacks),
            requirements=tuple(reqs),
            requests=requests,
            chosen_because=because,
            considered=tuple(considered),
        )


def solve(inputs: ClusterInput) -> Plan:
    """The plan for ``inputs``: new NodeClaims, pods on existing room, unschedulable pods with reasons.

    Domains are pinned before packing, counting every pinned pod. If a pinned pod then finds no room (a full
    existing node, a limit), the spreads it was counted in could end unbalanced; the solve is repeated with
    such pods set aside (they stay unschedulable, with their reason) until no pinned pod fails.
    """
    excluded: dict[str, dict[str, str]] = {}
    for _ in range(MAX_ROUNDS):
        attempt = _Solve(inputs, excluded)
        plan = attempt.run()
        failed = {k: r for k, r in attempt.unschedulable.items() if k in attempt.pinned and k not in excluded}
        if not failed:
            break
        excluded.update(failed)
    return plan
