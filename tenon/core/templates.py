"""Node templates: every (NodePool, instance type) a new node could be, and which pods may use which.

A :class:`Template` is what a new NodeClaim would look like if launched from one NodePool with one instance
type: its labels (the type's, the pool's template labels and single-value requirements, ``karpenter.sh/
nodepool``), its taints (pool and type), its priced offerings that the pool's requirements allow (zone and
capacity type filtered), and its **allocatable after DaemonSets**: the type's capacity minus kubelet/system
overhead minus the requests of every DaemonSet whose pod would land on such a node (tolerates its taints,
matches its labels). DaemonSet host ports are kept so pods using the same port are kept off. A type its
DaemonSets alone overflow is no template at all.

The pool's template labels are requirements too (``In [value]``), as Karpenter makes them: a pool labelled
``topology.kubernetes.io/zone: z1`` launches in z1 only, and a type labelled otherwise is not the pool's.

**Open keys.** A pool requirement on a label the instance type does not describe (``team In [a, b]``,
``team Exists``) is a label the pool puts on its nodes, its value chosen at launch. With one value the label
is simply set. With several (or, for ``Exists``/``NotIn``, unboundedly many) the template stays *open* on that
key, and, for the values the pending pods ask for (:func:`wanted_values`), one variant of the template per
value carries that label: a pod needing ``team=b`` gets a node labelled ``team=b``, as Karpenter narrows a
claim's requirements to what its pods need. An open template satisfies a pod's ``Exists`` on the key (and
``NotIn`` when the values are unbounded); any other requirement needs a variant. At most
:data:`MAX_VARIANTS` variants per type.

:func:`pod_feasibility` answers, for one pod and every template, which offerings (``(zone, capacity type)``
keys) the pod accepts there, honouring the node-affinity OR-terms, ``nodeSelector``, tolerations, host ports
and whether the pod fits at all. Then, as Karpenter relaxes them in this order (a pool tainted
``PreferNoSchedule`` is tolerated only after every preference was dropped): templates without an untolerated
``PreferNoSchedule`` taint are kept when there are any, and preferred node affinity is applied greedily,
heaviest term first, only while at least one template stays feasible: preferred is honoured when possible,
relaxed when not. When a pod has no feasible template in a pool, :func:`pool_rejection` says why in words a
user can act on.

Zone, capacity type and hostname are the labels that vary between offerings of one template, so they are
matched per offering rather than against the fixed label set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tenon.core.model import (
    DaemonSet,
    HostPort,
    InstanceType,
    NodePool,
    Pod,
    Taint,
    untolerated,
)
from tenon.core.quantities import format_resources
from tenon.core.requirements import Requirement
from tenon.core.wellknown import (
    ATTACHABLE_VOLUMES,
    CAPACITY_TYPE,
    HOSTNAME,
    NODEPOOL,
    ZONE,
)

OfferKey = tuple[str | None, str]  # (zone, capacity type)
VARIABLE_KEYS = (ZONE, CAPACITY_TYPE, HOSTNAME)
OFFER_KEYS = (ZONE, CAPACITY_TYPE)
MAX_VARIANTS = 64
OpenKeys = Mapping[str, tuple[str, ...] | None]
"""Label key -> the values a node may get (``None``: any value the pool's requirements allow)."""
Wanted = dict[str, tuple[frozenset[str], bool]]
"""Label key -> the ``In`` values pods name for it, and whether they need every value (other operators,
topology on the key)."""


@dataclass
class Template:
    index: int
    pool: NodePool
    pool_rank: int
    instance_type: InstanceType
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    offerings: dict[OfferKey, float]  # allowed & available offering -> price
    alloc: tuple[int, ...]  # allocatable after overhead and DaemonSets, over the solve's resource names
    capacity: dict[str, int]
    daemon_requests: dict[str, int]
    daemon_ports: frozenset[tuple[int, str]]
    min_price: float = 0.0
    names: list[str] = field(default_factory=list)
    open_keys: OpenKeys = field(default_factory=dict)
    chosen: tuple[tuple[str, str], ...] = ()
    """Open keys this variant set a value for (the claim's requirements say so)."""
    _prices: dict[frozenset[OfferKey] | None, tuple[float, OfferKey] | None] = field(
        default_factory=dict, repr=False, compare=False
    )
    """:meth:`price_for` by the offerings asked for: a packer asks for a few sets thousands of times."""

    def price_for(self, keys: frozenset[OfferKey] | None) -> tuple[float, OfferKey] | None:
        """Cheapest offering among ``keys`` (``None``: any), deterministic on ties."""
        if keys in self._prices:
            return self._prices[keys]
        found = self._prices[keys] = self._cheapest(keys)
        return found

    def _cheapest(self, keys: frozenset[OfferKey] | None) -> tuple[float, OfferKey] | None:
        best: tuple[float, OfferKey] | None = None
        for key, price in self.offerings.items():
            if keys is not None and key not in keys:
                continue
            cand = (price, key)
            if best is None or (cand[0], str(cand[1])) < (best[0], str(best[1])):
                best = cand
        return best


def _open_allows(req: Requirement, values: tuple[str, ...] | None) -> bool:
    """Whether a node whose label ``req.key`` is still to be chosen (among ``values``) surely satisfies
    ``req`` whatever is chosen: ``Exists``, or ``NotIn`` when any value may be chosen."""
    return req.operator == "Exists" or (req.operator == "NotIn" and values is None)


def offers_allowed(
    term: Sequence[Requirement],
    labels: Mapping[str, str],
    offerings: Mapping[OfferKey, float] | Iterable[OfferKey],
    open_keys: OpenKeys | None = None,
) -> set[OfferKey]:
    """Offerings of a node with fixed ``labels`` that satisfy every requirement of ``term``."""
    allowed = set(offerings)
    for req in term:
        if req.key == ZONE:
            allowed = {k for k in allowed if req.allows(k[0])}
        elif req.key == CAPACITY_TYPE:
            allowed = {k for k in allowed if req.allows(k[1])}
        elif req.key == HOSTNAME:
            # A new node's name is unknown: only requirements a fresh name satisfies pass.
            if req.operator in ("In", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"):
                return set()
        elif open_keys and req.key in open_keys:
            if not _open_allows(req, open_keys[req.key]):
                return set()
        elif not req.allows(labels.get(req.key)):
            return set()
        if not allowed:
            return allowed
    return allowed


def pool_requirements(pool: NodePool) -> tuple[Requirement, ...]:
    """The pool's requirements with its template labels as ``In [value]`` requirements (as Karpenter does)."""
    from_labels = tuple(Requirement(k, "In", (v,)) for k, v in sorted(pool.labels.items()) if k != HOSTNAME)
    return pool.requirements + from_labels


def _key_values(reqs: Sequence[Requirement]) -> tuple[str, ...] | bool | None:
    """What requirements on a key the type does not describe leave: ``False`` (unsatisfiable), ``True``
    (the label is absent), the values allowed (``In``), or ``None`` (any value they allow)."""
    if any(r.operator == "DoesNotExist" for r in reqs):
        return all(r.allows(None) for r in reqs)
    listed = [set(r.values) for r in reqs if r.operator == "In"]
    if not listed:
        return None
    values = tuple(sorted(v for v in set.intersection(*listed) if all(r.allows(v) for r in reqs)))
    return values or False


def _type_labels(
    reqs: Sequence[Requirement], it: InstanceType
) -> tuple[dict[str, str], dict[str, tuple[str, ...] | None], dict[str, list[Requirement]]] | None:
    """The labels a node of this type gets from the pool (``None``: the pool excludes the type), the keys
    left open, and the pool's requirements per open key."""
    labels = dict(it.labels)
    by_key: dict[str, list[Requirement]] = {}
    for req in reqs:
        if req.key not in VARIABLE_KEYS:
            by_key.setdefault(req.key, []).append(req)
    open_keys: dict[str, tuple[str, ...] | None] = {}
    for key, key_reqs in by_key.items():
        if key in it.labels:
            if not all(r.allows(it.labels[key]) for r in key_reqs):
                return None
            continue
        values = _key_values(key_reqs)
        if values is False:
            return None
        if isinstance(values, tuple) and len(values) == 1:
            labels[key] = values[0]
        elif values is not True:
            open_keys[key] = values  # type: ignore[assignment]
    return labels, open_keys, by_key


def _offerings(
    reqs: Sequence[Requirement], it: InstanceType, labels: dict[str, str]
) -> dict[OfferKey, float]:
    offer_reqs = [r for r in reqs if r.key in OFFER_KEYS]
    offers: dict[OfferKey, float] = {}
    for off in it.offerings:
        if not off.available:
            continue
        key = (off.zone, off.capacity_type)
        if offers_allowed(offer_reqs, labels, [key]):
            offers[key] = min(off.price, offers.get(key, off.price))
    return offers


_Variant = tuple[dict[str, str], dict[str, tuple[str, ...] | None], tuple[tuple[str, str], ...]]


def _choices(key_reqs: Sequence[Requirement], values: tuple[str, ...] | None, wanted: Wanted) -> list[str]:
    """The values of an open key worth a variant: those pods name (all of a finite set when they need it)."""
    named, every = wanted.get(key_reqs[0].key, (frozenset(), False))
    pool = set(named) | (set(values) if every and values is not None else set())
    return sorted(v for v in pool if (values is None or v in values) and all(r.allows(v) for r in key_reqs))


def type_variants(
    pool: NodePool, it: InstanceType, wanted: Wanted
) -> list[tuple[_Variant, dict[OfferKey, float]]]:
    """The nodes ``pool`` may launch of type ``it`` (labels, open keys, values chosen) with their offerings;
    empty when the pool excludes the type or allows none of its offerings."""
    reqs = pool_requirements(pool)
    found = _type_labels(reqs, it)
    if found is None:
        return []
    labels, open_keys, by_key = found
    labels[NODEPOOL] = pool.name
    offers = _offerings(reqs, it, labels)
    if not offers:
        return []
    variants: list[_Variant] = [(labels, open_keys, ())]
    for key, values in open_keys.items():
        grown: list[_Variant] = []
        for var_labels, var_open, chosen in variants:
            grown.append((var_labels, var_open, chosen))
            rest = {k: v for k, v in var_open.items() if k != key}
            for value in _choices(by_key[key], values, wanted):
                grown.append(({**var_labels, key: value}, rest, (*chosen, (key, value))))
        variants = grown[:MAX_VARIANTS]
    return [(variant, offers) for variant in variants]


def wanted_values(pods: Iterable[Pod], daemon_sets: Iterable[DaemonSet] = ()) -> Wanted:
    """Per label key (not zone, capacity type or hostname): the ``In`` values pods and DaemonSets name for
    it, and whether some pod needs every value (another operator, a topology constraint on the key)."""
    named: dict[str, set[str]] = {}
    every: set[str] = set()
    for pod in [*{pod.shape: pod for pod in pods}.values(), *(ds.pod for ds in daemon_sets)]:  # one a spec
        for term in [*pod.node_affinity, *(t for _, t in pod.preferred_node_affinity)]:
            for req in term:
                if req.key in VARIABLE_KEYS or req.operator in ("Exists", "DoesNotExist"):
                    continue
                if req.operator == "In":
                    named.setdefault(req.key, set()).update(req.values)
                else:
                    every.add(req.key)
        every.update(t.topology_key for t in pod.topology_spread)
        every.update(t.topology_key for t in [*pod.pod_affinity, *pod.pod_anti_affinity])
        every.update(
            t.topology_key for _, t in [*pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity]
        )
    keys = (set(named) | every) - set(VARIABLE_KEYS)
    return {k: (frozenset(named.get(k, ())), k in every) for k in keys}


def daemon_pods_for(
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    offers: Sequence[OfferKey],
    daemon_sets: Sequence[DaemonSet],
    open_keys: OpenKeys | None = None,
) -> list[DaemonSet]:
    out = []
    for ds in daemon_sets:
        if untolerated(taints, ds.pod.tolerations) is not None:
            continue
        if any(offers_allowed(term, labels, offers, open_keys) for term in ds.pod.node_affinity):
            out.append(ds)
    return out


def _daemon_overhead(daemons: Sequence[DaemonSet]) -> tuple[dict[str, int], frozenset[tuple[int, str]]]:
    """What the DaemonSets landing on a node request in all (every resource, one pod each) and their ports."""
    dreq: dict[str, int] = {}
    ports: set[tuple[int, str]] = set()
    for ds in daemons:
        for key, amount in ds.pod.requests.items():
            if key != "pods":
                dreq[key] = dreq.get(key, 0) + amount
        dreq["pods"] = dreq.get("pods", 0) + 1
        ports.update((p.port, p.protocol) for p in ds.pod.host_ports)
    return dreq, frozenset(ports)


UNLIMITED = 10**12
"""Room for a resource nobody limits: volume attachments of a driver a type does not list."""


def room_of(alloc: Mapping[str, int], resource: str) -> int:
    """How much of ``resource`` a node with allocatable ``alloc`` has: none when it does not list it, except
    volume attachments, which only a listed limit bounds."""
    return alloc.get(resource, UNLIMITED if resource.startswith(ATTACHABLE_VOLUMES) else 0)


def daemon_overflow(alloc: Mapping[str, int], dreq: Mapping[str, int]) -> dict[str, int]:
    """The resources the DaemonSets ask more of than the type has (empty: they fit)."""
    return {name: amount for name, amount in dreq.items() if amount > alloc.get(name, 0)}


def _misfit_reason(dropped: Sequence[dict[str, int]]) -> str:
    need = {k: v for k, v in min(dropped, key=lambda d: sorted(d.items())).items() if k != "pods"}
    return (
        f"every instance type is too small for the DaemonSets that would run on it "
        f"(they request {format_resources(need)})"
    )


def build_templates(
    pools: Sequence[tuple[NodePool, Sequence[InstanceType]]],
    daemon_sets: Sequence[DaemonSet],
    resource_names: Sequence[str],
    misfits: dict[str, str] | None = None,
    wanted: Wanted | None = None,
) -> list[Template]:
    """Templates for the pools in priority order (weight descending, then name).

    A type whose DaemonSets alone do not fit it (every resource they request, init containers by the max
    rule, one pod each) is no template at all, as in Karpenter, where daemon overhead is part of every fit:
    nothing may be planned onto a node its DaemonSets overflow. ``misfits`` (when given) gets, per pool
    whose every type was dropped so, what the DaemonSets ask for. ``wanted`` (:func:`wanted_values`) says
    which variants of open keys to make.
    """
    out: list[Template] = []
    for rank, (pool, types) in enumerate(pools):
        dropped: list[dict[str, int]] = []
        kept = len(out)
        for it in types:
            for (labels, open_keys, chosen), offers in type_variants(pool, it, wanted or {}):
                taints = pool.taints + it.taints
                daemons = daemon_pods_for(labels, taints, list(offers), daemon_sets, open_keys)
                dreq, ports = _daemon_overhead(daemons)
                alloc = it.allocatable
                if daemon_overflow(alloc, dreq):
                    dropped.append(dreq)
                    continue
                vector = tuple(room_of(alloc, r) - dreq.get(r, 0) for r in resource_names)
                tpl = Template(
                    len(out), pool, rank, it, labels, taints, offers, vector, dict(it.capacity), dreq, ports
                )
                tpl.min_price = min(offers.values())
                tpl.open_keys, tpl.chosen = open_keys, chosen
                out.append(tpl)
        if dropped and len(out) == kept and misfits is not None:
            misfits[pool.name] = _misfit_reason(dropped)
    return out


def fits(req: tuple[int, ...], alloc: tuple[int, ...]) -> bool:
    return all(r <= a for r, a in zip(req, alloc, strict=True))


def term_offers(terms: Iterable[Sequence[Requirement]], tpl: Template) -> set[OfferKey]:
    """The offerings of ``tpl`` some term (an OR of ANDs, as required node affinity) accepts."""
    allowed: set[OfferKey] = set()
    for term in terms:
        allowed |= offers_allowed(term, tpl.labels, tpl.offerings, tpl.open_keys)
    return allowed


def _term_offers(pod: Pod, tpl: Template) -> set[OfferKey]:
    return term_offers(pod.node_affinity, tpl)


def avoided(taints: tuple[Taint, ...], pod: Pod) -> bool:
    """Whether a node with ``taints`` has a ``PreferNoSchedule`` taint the pod does not tolerate."""
    return any(
        t.effect == "PreferNoSchedule" and not any(tol.tolerates(t) for tol in pod.tolerations)
        for t in taints
    )


def required_feasibility(
    pod: Pod,
    req: tuple[int, ...],
    templates: Sequence[Template],
    allowed: dict[int, frozenset[OfferKey]] | None = None,
) -> dict[int, frozenset[OfferKey]]:
    """Template index -> offerings this pod may use there by its hard rules alone (taints, required node
    affinity, host ports, fit); ``PreferNoSchedule`` taints and preferences are not looked at. ``allowed``:
    what :func:`rules_feasibility` gives for the pod, when the caller has it."""
    if allowed is None:
        allowed = rules_feasibility(pod, templates)
    return {index: offers for index, offers in allowed.items() if fits(req, templates[index].alloc)}


def rules_feasibility(pod: Pod, templates: Sequence[Template]) -> dict[int, frozenset[OfferKey]]:
    """Template index -> offerings the pod's tolerations, host ports and required node affinity allow there,
    whatever it requests (pods alike in those three share it)."""
    ports = {(p.port, p.protocol) for p in pod.host_ports}
    feasible: dict[int, frozenset[OfferKey]] = {}
    for tpl in templates:
        if untolerated(tpl.taints, pod.tolerations) is not None or ports & tpl.daemon_ports:
            continue
        offers = _term_offers(pod, tpl)
        if offers:
            feasible[tpl.index] = frozenset(offers)
    return feasible


def preferred(
    pod: Pod, feasible: dict[int, frozenset[OfferKey]], templates: Sequence[Template]
) -> dict[int, frozenset[OfferKey]]:
    """``feasible`` narrowed by the pod's soft rules, each kept only while some template stays: templates
    without an untolerated ``PreferNoSchedule`` taint first, then preferred node affinity, heaviest first."""
    if any(t.effect == "PreferNoSchedule" for i in feasible for t in templates[i].taints):
        calm = {i: o for i, o in feasible.items() if not avoided(templates[i].taints, pod)}
        if calm:
            feasible = calm
    for _weight, term in pod.preferred_node_affinity:
        narrowed: dict[int, frozenset[OfferKey]] = {}
        for index, offers in feasible.items():
            kept = offers_allowed(term, templates[index].labels, offers, templates[index].open_keys)
            if kept:
                narrowed[index] = frozenset(kept)
        if narrowed:
            feasible = narrowed
    return feasible


def pod_feasibility(
    pod: Pod, req: tuple[int, ...], templates: Sequence[Template]
) -> dict[int, frozenset[OfferKey]]:
    """Template index -> offerings this pod accepts there (only templates where it may run and fits),
    soft rules honoured when possible (:func:`preferred`)."""
    return preferred(pod, required_feasibility(pod, req, templates), templates)


def pool_rejection(
    pod: Pod,
    req: tuple[int, ...],
    resource_names: Sequence[str],
    pool: NodePool,
    pool_types: Sequence[InstanceType],
    pool_templates: Sequence[Template],
    problem: str,
) -> str:
    """Why ``pod`` cannot get a new node from ``pool`` at all (before limits), in words."""
    if problem:
        return problem
    if not pool_types:
        return "the NodePool has no instance types"
    if not pool_templates:
        return "no instance type satisfies the NodePool's requirements or has an available offering"
    taint = untolerated(pool_templates[0].taints, pod.tolerations)
    if taint is not None and all(untolerated(t.taints, pod.tolerations) for t in pool_templates):
        return f"taint {taint.describe()} not tolerated"
    matching = [t for t in pool_templates if _term_offers(pod, t)]
    if not matching:
        terms = [" and ".join(r.describe() for r in term) for term in pod.node_affinity if term]
        return "no instance type satisfies the pod's node requirements" + (
            f" ({' or '.join(terms)})" if terms else ""
        )
    ports = {(p.port, p.protocol) for p in pod.host_ports}
    if ports and all(ports & t.daemon_ports for t in matching):
        return f"host port {sorted(ports)[0][0]} is taken by a DaemonSet on every node"
    need = {
        name: amount for name, amount in zip(resource_names, req, strict=True) if amount and name != "pods"
    }
    largest = max(matching, key=lambda t: t.alloc)
    room = {name: amount for name, amount in zip(resource_names, largest.alloc, strict=True) if name in need}
    after = " after DaemonSets" if any(t.daemon_requests for t in matching) else ""
    return f"no instance type has {format_resources(need)} free{after} (largest: {format_resources(room)})"


def all_offer_keys(templates: Sequence[Template]) -> set[OfferKey]:
    keys: set[OfferKey] = set()
    for tpl in templates:
        keys.update(tpl.offerings)
    return keys


def host_port_ids(ports: Sequence[HostPort]) -> list[tuple[int, str]]:
    return [(p.port, p.protocol) for p in ports]
