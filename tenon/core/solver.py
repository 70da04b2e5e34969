"""``solve(ClusterInput) -> Plan``: the scheduling pipeline, pure and deterministic.

Steps, each in its own module:

1. **Volumes** (:mod:`.volumes`): a pod's bound volumes and WaitForFirstConsumer classes add node terms.
2. **Templates** (:mod:`.templates`): every (NodePool, instance type) a new node could be, NodePools by weight
   then name, allocatable after DaemonSets. Each pending pod gets its *feasibility*: the templates and
   offerings it accepts (taints, node affinity, nodeSelector, host ports, fit), soft rules honoured when
   possible (``PreferNoSchedule`` pools last, preferred node affinity). Identical pod specs share it.
3. **Placement, pod by pod** (:mod:`.rooms`, :mod:`.topology`): pods merely counted by a spread first, then
   pods with only preferences, spreads and anti-affinity, affinity last, first-fit-decreasing within each:
   each goes onto existing room when some takes it (Nodes, initialized first, starting ones judged without
   their startup and ephemeral taints, then in-flight NodeClaims: taints, labels, fit, hostname rules), else
   it is pinned to the domain of every topology key its rules name (any key but the hostname) that its new
   node must be in; either way judged against the pods placed before it, as the kube-scheduler judges it.
   Preferred node affinity is relaxed before a spread is given up. Pods the kube-scheduler is already
   placing (``status.nominatedNodeName``) are not provisioned for; their room on the nominated Node is taken.
4. **Units** (:mod:`.units`): pods bound together by hostname pod affinity become one item (cut to what fits
   one node when larger).
5. **Packing** (:mod:`.packing`, :mod:`.newnodes`): per NodePool in priority order, the rest are grouped
   into classes and packed into new nodes at the lowest price, within limits, shared max sizes and
   ``minValues``; pods a pool cannot take spill to the next pool.
6. **Plan** (:mod:`.plan`, :mod:`.explain`): every new node with its cheaper-first fallbacks, the
   requirements the launcher must honour, and why each type won or lost. Pods that cannot run get a reason
   per NodePool.

A pod that cannot run has its soft constraints relaxed one step (:mod:`.relax`, Karpenter's ladder) and the
plan is made again; so is one that was pinned to a domain and then found no room (the spreads it was counted
in would be wrong), set aside with its reason. No I/O, no clocks, no randomness: the same input gives the
same plan (lists are sorted before output), whatever order the bound pods come in.

Bound pods, most of a large cluster's input, are sorted out once for every round of a solve, and what each
takes, matches and limits is worked out once per shape (:class:`~tenon.core.model.PodShape`: the replicas of
one spec), so they cost a pass, not a parse-sized work-out each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from tenon.core.catalog import instance_types_for_node_pool
from tenon.core.model import ClusterInput, InstanceType, NodePool, Pod, PodShape, Toleration
from tenon.core.newnodes import ClaimMaker, MinValuesSplitter, pack_pool
from tenon.core.packing import Bin, PackClass
from tenon.core.plan import ExistingPlacement, NominatedPod, Plan, PlannedNodeClaim, Unschedulable
from tenon.core.quantities import CPU, MEMORY, PODS
from tenon.core.relax import relax
from tenon.core.requirements import all_allow
from tenon.core.room_scan import RoomScan
from tenon.core.rooms import FOR_GOOD, Room, RoomBuilder, pool_usage
from tenon.core.templates import (
    OFFER_KEYS,
    OfferKey,
    Template,
    build_templates,
    fits,
    offers_allowed,
    pool_rejection,
    preferred,
    required_feasibility,
    rules_feasibility,
    wanted_values,
)
from tenon.core.topology import DomainOutcome, DomainRules, HostnameRules, domain_keys, pin_pod, scope_of
from tenon.core.units import (
    Feasibility,
    Fitting,
    Item,
    PendingClasses,
    PinnedFeasibility,
    cut_to_fit,
    hostname_affinity_groups,
)
from tenon.core.volumes import with_volume_topology
from tenon.core.wellknown import CAPACITY_TYPE, HOSTNAME, ZONE

MAX_ROUNDS = 12  # solves: relaxing soft constraints and setting aside pinned pods that found no room


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
    return any(req.key in OFFER_KEYS for term in terms for req in term)


def _domains_of(template: Template, offers: Iterable[OfferKey], key: str) -> set[str]:
    """The domains of ``key`` a node of ``template`` bought with one of ``offers`` is in."""
    if key == ZONE:
        return {z for z, _ in offers if z}
    if key == CAPACITY_TYPE:
        return {ct for _, ct in offers}
    value = template.labels.get(key)
    return set() if value is None else {value}


class _Running:
    """The bound pods of one solve, sorted out in one pass for all its rounds (a round relaxes or sets aside
    pending pods only): by node; one of each shape with hostname rules of its own (the first by key, all by
    key, so the plan does not depend on the order the pods came in: registering a pod of a shape registered
    already adds nothing); those naming a topology key; and the keys of the other pods."""

    def __init__(self, pods: Iterable[Pod]) -> None:
        self.on_node: dict[str, list[Pod]] = defaultdict(list)
        self.topology: list[Pod] = []
        self.unbound: list[str] = []
        restricting: dict[PodShape, Pod] = {}  # the first pod of each shape by key: what registers its rules
        for pod in pods:
            if not pod.node_name:
                self.unbound.append(pod.key)
                continue
            self.on_node[pod.node_name].append(pod)
            if not pod.limits_nothing:
                first = restricting.get(pod.shape)
                if first is None or pod.key < first.key:
                    restricting[pod.shape] = pod
            if not pod.topology_free:
                self.topology.append(pod)
        self.restricting = sorted(restricting.values(), key=lambda p: p.key)


class _Solve:
    """One attempt at a plan (see :func:`solve`) for the pods of ``by_key`` (the bound ones sorted out in
    ``running``): the pods of ``excluded`` are left out with their reasons; afterwards ``unschedulable`` holds
    every pod that cannot run and ``pinned`` those pinned to a domain."""

    def __init__(
        self,
        inputs: ClusterInput,
        excluded: dict[str, dict[str, str]],
        running: _Running,
        by_key: dict[str, Pod],
    ):
        self.inputs = inputs
        self.running = running
        self.pools: list[NodePool] = sorted(inputs.node_pools, key=lambda p: (-p.weight, p.name))
        self.pool_types: dict[str, tuple[InstanceType, ...]] = {}
        self.pool_problem: dict[str, str] = {}
        for pool in self.pools:
            types, problem = instance_types_for_node_pool(inputs, pool)
            self.pool_types[pool.name], self.pool_problem[pool.name] = types, problem
        destined = {key for claim in inputs.in_flight for key in claim.pods}
        self.by_key = by_key
        unbound = [by_key[key] for key in running.unbound]
        waiting = [p for p in unbound if p.key not in destined]
        self.nominated = [p for p in waiting if p.nominated_node]
        self.pending = [p for p in waiting if not p.nominated_node]
        self.destined = [p for p in unbound if p.key in destined]
        extra = sorted({r for p in self.pending for r in p.requests} - {CPU, MEMORY, PODS})
        self.names: list[str] = [CPU, MEMORY, PODS, *extra]
        self._templates()
        vectors: dict[PodShape, tuple[int, ...]] = {}  # the replicas of a spec request the same
        self.vec: dict[str, tuple[int, ...]] = {}
        for p in self.pending:
            found = vectors.get(p.shape)
            if found is None:
                found = vectors[p.shape] = _vector(p.requests, self.names)
            self.vec[p.key] = found
        self._feasibility()
        self.unschedulable: dict[str, dict[str, str]] = dict(excluded)
        self.pinned: set[str] = set()
        self.pins: dict[str, dict[str, str]] = {}
        self.claims = ClaimMaker(self.names)
        self.narrow = PinnedFeasibility(self.templates)
        self._okeys_cache: dict[int, tuple[Feasibility, frozenset[OfferKey]]] = {}
        self._eligible_cache: dict[tuple[object, ...], list[str]] = {}
        self._counted_cache: dict[tuple[object, ...], list[str]] = {}
        self.rooms: list[Room] = []
        self._open = RoomScan([], 0)
        """The rooms that can still take the smallest request of the batch, in ``rooms`` order: what
        :meth:`_room_for` scans (a full Node stays full for the whole solve)."""
        self._avoiding_order: dict[tuple[Toleration, ...], RoomScan] = {}  # the open rooms, in another order
        self._refused: dict[tuple[object, ...], set[int]] = {}
        """What a pod looks like to a room (requests, tolerations, node affinity, hostname features) -> the
        rooms (by id) that refused such a pod for good in this solve."""
        self._smallest: list[int] = []
        self.rules = HostnameRules()
        # pods destined to an in-flight claim (or nominated to a Node) occupy its room, so their hostname
        # rules count there too (of the bound pods, only those with rules of their own register anything)
        self.rules.register(self.pending + running.restricting + self.destined + self.nominated)

    def _templates(self) -> None:
        misfits: dict[str, str] = {}
        self.templates = build_templates(
            [(p, self.pool_types[p.name]) for p in self.pools],
            self.inputs.daemon_sets,
            self.names,
            misfits,
            wanted_values(self.pending, self.inputs.daemon_sets),
        )
        for name, why in misfits.items():
            self.pool_problem[name] = self.pool_problem[name] or why
        self.pool_templates: dict[str, list[Template]] = defaultdict(list)
        for tpl in self.templates:
            self.pool_templates[tpl.pool.name].append(tpl)

    def _feasibility(self) -> None:
        """Per pending pod: the templates its hard rules allow, and those its soft rules prefer."""
        by_shape: dict[PodShape, tuple[Feasibility, Feasibility]] = {}  # the replicas of one spec
        cache: dict[tuple[object, ...], tuple[Feasibility, Feasibility]] = {}  # specs alike in what counts
        by_rules: dict[tuple[object, ...], Feasibility] = {}  # specs differing in their requests alone
        self.required: dict[str, Feasibility] = {}
        self.feasible: dict[str, Feasibility] = {}
        for pod in self.pending:
            found = by_shape.get(pod.shape)
            if found is None:
                key = _spec_key(pod)
                if key not in cache:
                    rules_key = (pod.node_affinity, pod.tolerations, pod.host_ports)
                    allowed = by_rules.get(rules_key)
                    if allowed is None:
                        allowed = by_rules[rules_key] = rules_feasibility(pod, self.templates)
                    hard = required_feasibility(pod, self.vec[pod.key], self.templates, allowed)
                    cache[key] = (hard, preferred(pod, hard, self.templates))
                found = by_shape[pod.shape] = cache[key]
            self.required[pod.key], self.feasible[pod.key] = found

    # -- main ------------------------------------------------------------------------------------------------
    def run(self) -> Plan:
        rooms = self.rooms = self._rooms()
        # of the bound pods, only those naming a topology key have keys or selectors to register
        named = [*self.pending, *self.running.topology, *self.destined, *self.nominated]
        self.domains = DomainRules(domain_keys(named), named)
        if self.domains.keys:  # else nothing is counted per domain
            for room in rooms:
                self.domains.count_existing(room.pods, room.domains(self.domains.keys))
        left = self._place(rooms)
        claims = self._pack_new([p for p in left if p.key not in self.unschedulable], self.pins)
        existing = tuple(
            ExistingPlacement(r.name, r.kind, tuple(sorted(r.new_pods))) for r in rooms if r.new_pods
        )
        unsched = tuple(Unschedulable(key, reasons) for key, reasons in sorted(self.unschedulable.items()))
        skipped = tuple(s.describe() for s in self.inputs.skipped)
        nominated = tuple(
            NominatedPod(p.key, p.nominated_node) for p in sorted(self.nominated, key=lambda p: p.key)
        )
        return Plan(tuple(claims), existing, unsched, skipped, nominated)

    def _rooms(self) -> list[Room]:
        builder = RoomBuilder(
            {p.name: p for p in self.pools}, self.templates, self.names, self.rules, self.inputs.daemon_sets
        )
        nodes = builder.nodes(self.inputs.nodes, self.running.on_node)
        by_name = {r.name: r for r in nodes}
        for pod in self.nominated:  # the kube-scheduler is placing it there: its room is taken
            room = by_name.get(pod.nominated_node)
            if room is not None:
                room.occupy(pod, _vector(pod.requests, self.names), self.rules)
        return nodes + builder.claims(self.inputs.in_flight, self.by_key)

    # -- existing room ---------------------------------------------------------------------------------------
    def _place(self, rooms: Sequence[Room]) -> list[Pod]:
        """Each pod in turn, first-fit-decreasing within its rank (pods merely counted by a spread first,
        pods with only preferences next, spreads and anti-affinity, affinity last): onto existing room when
        one takes it, else pinned to the domains its new node must be in; judged, either way, against the
        pods placed before it. The pods left for new nodes."""
        domains = self.domains
        todo = [p for p in self.pending if p.key not in self.unschedulable]
        rank = {p.key: domains.rank(p) if domains.keys else 0 for p in todo}
        todo.sort(key=lambda p: (rank[p.key], -self.vec[p.key][0], -self.vec[p.key][1], p.key))
        if not todo:
            return []
        avoiding = any(r.taints for r in rooms)
        self._smallest = [min(column) for column in zip(*(self.vec[p.key] for p in todo), strict=True)]
        self._open = RoomScan([r for r in rooms if self._takes_smallest(r)], len(self.names))
        outcome = DomainOutcome({}, {}, set())
        left: list[Pod] = []
        planned_there = self._planned_rooms(todo, rooms)
        for pod in todo:
            if pod.key in planned_there:
                continue
            room = self._room_for(pod, avoiding) if rooms else None
            if room is not None:
                self._put(pod, room)
                continue
            left.append(pod)
            # pods that can run nowhere are not pinned: counting them would count pods that never arrive
            if domains.keys and self.required[pod.key] and domains.concerned(pod):
                pin_pod(domains, pod, self._eligible, self._counted_in, outcome)
        self._pinned_outcome(outcome)
        return left

    def _planned_rooms(self, todo: Sequence[Pod], rooms: Sequence[Room]) -> dict[str, Room]:
        """The pods offered again whose Node (``planned_node``: planned for it, nominated to it) still takes
        them, each in that Node's room, before any other pod is placed: the kube-scheduler places a pod by
        its nomination first, so the plan must not give that room to another pod (which would then find it
        taken and wait, planned there again and again). Judged in placement order, against the pods placed
        before them; one that no longer fits there is placed as any pending pod."""
        by_name = {r.name: r for r in rooms if r.kind != "NodeClaim"}
        found: dict[str, Room] = {}
        for pod in todo:
            room = by_name.get(pod.planned_node) if pod.planned_node else None
            if room is None or not self._takes(pod, room):
                continue
            self._put(pod, room)
            found[pod.key] = room
        return found

    def _put(self, pod: Pod, room: Room) -> None:
        """``pod`` placed in ``room``: its room, hostname rules and domain counts taken."""
        room.occupy(pod, self.vec[pod.key], self.rules)
        room.new_pods.append(pod.key)
        self._shrunk(room)
        self.domains.count(pod, room.domains(self.domains.keys))

    def _takes(self, pod: Pod, room: Room) -> bool:
        """Whether ``room`` takes ``pod`` now: its free room, then what :meth:`_room_for` asks of a room."""
        vec = self.vec[pod.key]
        if any(f < v for f, v in zip(room.free, vec, strict=True)):
            return False
        if room.refusal(pod, vec, self.rules) is not None:
            return False
        keys = self.domains.keys
        if not keys:
            return True
        counted = {key: self._counted_in(pod, key) for key in keys}
        return self.domains.allows(pod, room.domains(keys), counted)

    def _pinned_outcome(self, outcome: DomainOutcome) -> None:
        for key, reason in outcome.failures.items():
            self.unschedulable[key] = {"*": reason}
        for key in outcome.relaxed:
            self.feasible[key] = self.required[key]
        self.pinned = set(outcome.pins)
        self.pins = outcome.pins

    def _takes_smallest(self, room: Room) -> bool:
        return all(f >= m for f, m in zip(room.free, self._smallest, strict=True))

    def _shrunk(self, room: Room) -> None:
        """``room`` took a pod: the scans know its room is smaller; once it cannot take the smallest request
        of the batch, they drop it (a full Node stays full for the whole solve)."""
        keep = self._takes_smallest(room)
        for scan in (self._open, *self._avoiding_order.values()):
            if keep:
                scan.shrunk(room)
            else:
                scan.drop(room)

    def _room_for(self, pod: Pod, avoiding: bool) -> Room | None:
        """The first room ``pod`` may join, rooms with a ``PreferNoSchedule`` taint it does not tolerate
        last (:class:`~tenon.core.room_scan.RoomScan`: a room without the free room the pod asks for is
        not tried)."""
        scan = self._open
        if avoiding:  # the order depends on the pod's tolerations alone: sorted once for each set of them
            found = self._avoiding_order.get(pod.tolerations)
            if found is None:
                ordered = sorted(self._open.rooms(), key=lambda r: r.avoided_by(pod))
                found = self._avoiding_order[pod.tolerations] = RoomScan(ordered, len(self.names))
            scan = found
        vec = self.vec[pod.key]
        keys = self.domains.keys
        counted = {key: self._counted_in(pod, key) for key in keys}
        # the domains' counts do not change while one pod looks for its room: one answer per set of domains
        # (a zone spread's pods were judged once per Node, 460,000 times for 6,000 pods on 1,000 Nodes)
        allowed: dict[tuple[str | None, ...], bool] = {}
        # the rooms that refused a pod like this one for good (see Room.refusal): not tried again (the
        # replicas of a hostname anti-affinity were tried on every Node one of them had taken)
        matches, limits = self.rules.features(pod)
        refused = self._refused.setdefault(
            (tuple(vec), pod.tolerations, pod.node_affinity, matches, limits), set()
        )

        def takes(room: Room) -> bool:
            if id(room) in refused:
                return False
            why = room.refusal(pod, vec, self.rules)
            if why is not None:
                if why == FOR_GOOD:
                    refused.add(id(room))
                return False
            if not keys:
                return True
            domains = room.domains(keys)
            where = tuple(domains.values())
            found = allowed.get(where)
            if found is None:
                found = allowed[where] = self.domains.allows(pod, domains, counted)
            return found

        return scan.first(vec, takes)

    # -- domains ---------------------------------------------------------------------------------------------
    def _eligible(self, pod: Pod, key: str, pins: dict[str, str], relaxed: bool) -> list[str]:
        """The domains of ``key`` the pod's new node could be in, given its pins so far."""
        feasible = self.required[pod.key] if relaxed else self.feasible[pod.key]
        cache_key = (id(feasible), key, tuple(sorted(pins.items())))
        found = self._eligible_cache.get(cache_key)
        if found is None:
            domains: set[str] = set()
            for index, offers in self.narrow.narrow(feasible, pins).items():
                domains |= _domains_of(self.templates[index], offers, key)
            found = self._eligible_cache[cache_key] = sorted(domains)
        return found

    def _counted_in(self, pod: Pod, key: str) -> list[str]:
        """The domains a spread of ``pod`` on ``key`` takes its minimum over: every domain with a node (new
        or existing) matching its node affinity, tainted or not (Kubernetes' default policies)."""
        cache_key = (pod.node_affinity, key)
        found = self._counted_cache.get(cache_key)
        if found is None:
            domains: set[str] = set()
            for tpl in self.templates:
                offers: set[OfferKey] = set()
                for term in pod.node_affinity:
                    offers |= offers_allowed(term, tpl.labels, tpl.offerings, tpl.open_keys)
                if offers:
                    domains |= _domains_of(tpl, offers, key)
            for room in self.rooms:
                value = room.labels.get(key)
                if value is not None and any(all_allow(term, room.labels) for term in pod.node_affinity):
                    domains.add(value)
            found = self._counted_cache[cache_key] = sorted(domains)
        return found

    # -- units -----------------------------------------------------------------------------------------------
    def _items(self, left: Sequence[Pod], pins: dict[str, dict[str, str]]) -> list[Item]:
        """Units (hostname pod affinity) and single pods, each with vector, offers, features, templates.

        A unit that cannot be placed as a whole is cut to what fits one node, the rest unschedulable.
        """
        items = []
        fitting = Fitting(lambda pod: self._unit([pod], pins), self.templates)
        for members in hostname_affinity_groups(left, fitting):
            members.sort(key=lambda p: p.key)
            item = self._item(members, pins)
            if isinstance(item, str):
                for pod in members:
                    self.unschedulable[pod.key] = {"*": item}
            else:
                items.append(item)
        return items

    def _unit(
        self, members: list[Pod], pins: dict[str, dict[str, str]]
    ) -> tuple[tuple[int, ...], Feasibility]:
        """The unit's summed requests and the templates (with offerings) every member accepts and it fits."""
        if len(members) == 1:
            pod = members[0]
            return self.vec[pod.key], self.narrow.narrow(self.feasible[pod.key], pins.get(pod.key, {}))
        vec = tuple(map(sum, zip(*(self.vec[p.key] for p in members), strict=True)))
        feasible = dict(self.narrow.narrow(self.feasible[members[0].key], pins.get(members[0].key, {})))
        for pod in members[1:]:
            f = self.narrow.narrow(self.feasible[pod.key], pins.get(pod.key, {}))
            feasible = {i: feasible[i] & f[i] for i in feasible if i in f and feasible[i] & f[i]}
        return vec, {i: o for i, o in feasible.items() if fits(vec, self.templates[i].alloc)}

    def _item(self, members: list[Pod], pins: dict[str, dict[str, str]]) -> Item | str:
        """One packing item for pods that must share a node, or why they cannot."""
        if self._hostname_affinity_unmet(members) and not (
            len(members) == 1 and self._self_affine(members[0])
        ):
            return "required pod affinity on hostname: no node runs a matching pod with room for it"
        vec, feasible = self._unit(members, pins)
        if len(members) > 1 and not feasible:
            members = self._cut(members, pins)
            vec, feasible = self._unit(members, pins)
        matches, limits = self._unit_features(members)
        if len(members) > 1 and any(matches.count(sid) > lim for sid, lim in limits if sid >= 0):
            return "its pod affinity and anti-affinity (or a hostname spread) contradict each other"
        okeys = None
        if any(
            (pod.key in pins and pins[pod.key].keys() & set(OFFER_KEYS)) or _restricts_offers(pod)
            for pod in members
        ):
            cached = self._okeys_cache.get(id(feasible))
            if cached is None:
                cached = (feasible, frozenset(k for offs in feasible.values() for k in offs))
                self._okeys_cache[id(feasible)] = cached
            okeys = cached[1]
        return (members, vec, okeys, matches, limits, feasible)

    def _cut(self, members: list[Pod], pins: dict[str, dict[str, str]]) -> list[Pod]:
        """What the kube-scheduler would place of a unit too large for one node (Karpenter's "self pod
        affinity" case: the first pods fill one node, the rest cannot join it nor start another)."""
        union: Feasibility = {}
        for pod in members:
            for i, offers in self.narrow.narrow(self.feasible[pod.key], pins.get(pod.key, {})).items():
                union[i] = union.get(i, frozenset()) | offers
        common = {
            i: o
            for i, o in union.items()
            if all(i in self.narrow.narrow(self.feasible[p.key], pins.get(p.key, {})) for p in members)
        }
        kept, rest = cut_to_fit(members, self.vec, common, self.templates)
        for pod in rest:
            self.unschedulable[pod.key] = {
                "*": "required pod affinity on hostname: the node of its matching pods has no room for it"
            }
        return kept or members[:1]

    def _unit_features(self, members: list[Pod]) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """Hostname selector ids the unit matches (once per member matching each: the unit counts as that
        many pods), and the smallest limit its members set on each."""
        if len(members) == 1:
            return self.rules.features(members[0])
        matches: list[int] = []
        limits: dict[int, int] = {}
        for pod in members:
            m, lims = self.rules.features(pod)
            matches += m
            for sid, lim in lims:
                limits[sid] = min(lim, limits.get(sid, lim))
        return tuple(sorted(matches)), tuple(sorted(limits.items()))

    @staticmethod
    def _hostname_affinity_unmet(members: list[Pod]) -> bool:
        """Whether some member's hostname pod affinity matches no pod of the unit."""
        return any(pod.pod_affinity for pod in members) and any(
            term.topology_key == HOSTNAME and not any(scope_of(term).matches(o) for o in members)
            for pod in members
            for term in pod.pod_affinity
        )

    @staticmethod
    def _self_affine(pod: Pod) -> bool:
        return all(scope_of(t).matches(pod) for t in pod.pod_affinity if t.topology_key == HOSTNAME)

    # -- new nodes -------------------------------------------------------------------------------------------
    def _pack_new(self, left: Sequence[Pod], pins: dict[str, dict[str, str]]) -> list[PlannedNodeClaim]:
        """New NodeClaims for the pods left, pool by pool in priority order; what a pool cannot take spills
        to the next one, and what no pool takes is unschedulable with each pool's reason."""
        pending = PendingClasses(self._items(left, pins))
        type_caps = self._type_caps()
        claims: list[tuple[tuple[object, ...], PlannedNodeClaim]] = []
        for rank, pool in enumerate(self.pools):
            tpls = self.pool_templates.get(pool.name, [])
            tpl_ids = frozenset(t.index for t in tpls)
            here = [k for k in pending.keys if not tpl_ids.isdisjoint(pending.shape[k][4])]
            if not here:
                continue
            pack_classes = pending.pack_classes(here, tpl_ids)
            usage = pool_usage(pool, self.inputs.nodes, self.inputs.in_flight, self.pool_types[pool.name])
            remaining = {r: limit - usage.get(r, 0) for r, limit in pool.limits.items()}
            packer, bins = pack_pool(self.names, tpls, pack_classes, remaining, type_caps)
            bins = MinValuesSplitter(pool, tpls, packer, pack_classes).bins(bins)
            type_caps.update(packer.budget.type_caps)  # shared by every pool: one max size for all
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

    def _claim_for_bin(
        self,
        pool: NodePool,
        tpls: Sequence[Template],
        b: Bin,
        pack_classes: Sequence[PackClass],
        taken: dict[int, int],
    ) -> PlannedNodeClaim | None:
        """The claim for one bin, its pods taken in order from their classes (``taken`` counts them); ``None``
        when the claim cannot be made, its pods then unschedulable in this pool."""
        pods_here: list[str] = []
        for ci, n in sorted(b.contents.items()):
            start = taken[ci]
            for unit in pack_classes[ci].members[start : start + n]:
                pods_here.extend(unit)
            taken[ci] += n
        claim = self.claims.claim(pool, tpls, b, pods_here, pack_classes)
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


def solve(inputs: ClusterInput) -> Plan:
    """The plan for ``inputs``: new NodeClaims, pods on existing room, unschedulable pods with reasons.

    A pod that cannot run is tried again with its next soft constraint relaxed
    (:func:`tenon.core.relax.relax`); a pod pinned to a domain that then found no room (a full existing
    node, a limit) is set aside with its reason, since the spreads it was counted in could end unbalanced.
    The plan is made again until neither happens (at most :data:`MAX_ROUNDS` times).
    """
    inputs, failures = with_volume_topology(inputs)
    excluded = {key: {"*": reason} for key, reason in failures.items()}
    pods = {p.key: p for p in inputs.pods}
    running = _Running(pods.values())
    plan = Plan()
    for _ in range(MAX_ROUNDS):
        attempt = _Solve(replace(inputs, pods=tuple(pods.values())), excluded, running, dict(pods))
        plan = attempt.run()
        changed = False
        for key, reasons in attempt.unschedulable.items():
            if key in excluded:
                continue
            relaxed = relax(pods[key])
            if relaxed is not None:
                pods[key] = relaxed
                changed = True
            elif key in attempt.pinned:
                excluded[key] = reasons
                changed = True
        if not changed:
            break
    return plan
