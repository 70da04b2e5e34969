"""Node templates: every (NodePool, instance type) a new node could be, and which pods may use which.

A :class:`Template` is what a new NodeClaim would look like if launched from one NodePool with one instance
type: its labels (the type's, the pool's template labels and single-value requirements, ``karpenter.sh/
nodepool``), its taints (pool and type), its priced offerings that the pool's requirements allow (zone and
capacity type filtered), and its **allocatable after DaemonSets**: the type's capacity minus kubelet/system
overhead minus the requests of every DaemonSet whose pod would land on such a node (tolerates its taints,
matches its labels). DaemonSet host ports are kept so pods using the same port are kept off.

:func:`pod_feasibility` answers, for one pod and every template, which offerings (``(zone, capacity type)``
keys) the pod accepts there, honouring the node-affinity OR-terms, ``nodeSelector``, tolerations, host ports
and whether the pod fits at all. Preferred node affinity is applied greedily, heaviest term first, and only
while at least one template stays feasible: preferred is honoured when possible, relaxed when not. When a pod
has no feasible template in a pool, :func:`pool_rejection` says why in words a user can act on.

Zone, capacity type and hostname are the labels that vary between offerings of one template, so they are
matched per offering rather than against the fixed label set.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    CAPACITY_TYPE,
    HOSTNAME,
    NODEPOOL,
    ZONE,
)

OfferKey = tuple[str | None, str]  # (zone, capacity type)
VARIABLE_KEYS = (ZONE, CAPACITY_TYPE, HOSTNAME)


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

    def price_for(self, keys: frozenset[OfferKey] | None) -> tuple[float, OfferKey] | None:
        """Cheapest offering among ``keys`` (``None``: any), deterministic on ties."""
        best: tuple[float, OfferKey] | None = None
        for key, price in self.offerings.items():
            if keys is not None and key not in keys:
                continue
            cand = (price, key)
            if best is None or (cand[0], str(cand[1])) < (best[0], str(best[1])):
                best = cand
        return best


def offers_allowed(
    term: Sequence[Requirement], labels: dict[str, str], offerings: dict[OfferKey, float] | Sequence[OfferKey]
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
            if req.operator in ("In", "DoesNotExist", "Gt", "Lt"):
                return set()
        elif not req.allows(labels.get(req.key)):
            return set()
        if not allowed:
            return allowed
    return allowed


def _pool_allows_type(
    pool: NodePool, it: InstanceType
) -> tuple[dict[str, str], dict[OfferKey, float]] | None:
    labels = {**it.labels}
    for req in pool.requirements:
        if req.key in VARIABLE_KEYS:
            continue
        value = it.labels.get(req.key)
        if value is None and req.key not in it.labels:
            # A key the instance type does not describe is a label the pool puts on its nodes.
            if req.operator == "In" and len(req.values) == 1:
                labels[req.key] = req.values[0]
            continue
        if not req.allows(value):
            return None
    labels.update(pool.labels)
    labels[NODEPOOL] = pool.name
    offers: dict[OfferKey, float] = {}
    for off in it.offerings:
        if not off.available:
            continue
        key = (off.zone, off.capacity_type)
        if offers_allowed([r for r in pool.requirements if r.key in (ZONE, CAPACITY_TYPE)], labels, [key]):
            offers[key] = min(off.price, offers.get(key, off.price))
    return (labels, offers) if offers else None


def daemon_pods_for(
    labels: dict[str, str],
    taints: tuple[Taint, ...],
    offers: Sequence[OfferKey],
    daemon_sets: Sequence[DaemonSet],
) -> list[DaemonSet]:
    out = []
    for ds in daemon_sets:
        if untolerated(taints, ds.pod.tolerations) is not None:
            continue
        if any(offers_allowed(term, labels, offers) for term in ds.pod.node_affinity):
            out.append(ds)
    return out


def build_templates(
    pools: Sequence[tuple[NodePool, Sequence[InstanceType]]],
    daemon_sets: Sequence[DaemonSet],
    resource_names: Sequence[str],
) -> list[Template]:
    """Templates for the pools in priority order (weight descending, then name)."""
    out: list[Template] = []
    for rank, (pool, types) in enumerate(pools):
        for it in types:
            allowed = _pool_allows_type(pool, it)
            if allowed is None:
                continue
            labels, offers = allowed
            taints = pool.taints + it.taints
            daemons = daemon_pods_for(labels, taints, list(offers), daemon_sets)
            dreq: dict[str, int] = {}
            ports: set[tuple[int, str]] = set()
            for ds in daemons:
                for key, amount in ds.pod.requests.items():
                    if key != "pods":
                        dreq[key] = dreq.get(key, 0) + amount
                dreq["pods"] = dreq.get("pods", 0) + 1
                ports.update((p.port, p.protocol) for p in ds.pod.host_ports)
            alloc = it.allocatable
            vector = tuple(alloc.get(r, 0) - dreq.get(r, 0) for r in resource_names)
            if min(vector, default=0) < 0:
                vector = tuple(max(0, v) for v in vector)
            tpl = Template(
                len(out),
                pool,
                rank,
                it,
                labels,
                taints,
                offers,
                vector,
                dict(it.capacity),
                dreq,
                frozenset(ports),
            )
            tpl.min_price = min(offers.values())
            out.append(tpl)
    return out


def fits(req: tuple[int, ...], alloc: tuple[int, ...]) -> bool:
    return all(r <= a for r, a in zip(req, alloc, strict=True))


def _term_offers(pod: Pod, tpl: Template) -> set[OfferKey]:
    allowed: set[OfferKey] = set()
    for term in pod.node_affinity:
        allowed |= offers_allowed(term, tpl.labels, tpl.offerings)
    return allowed


def pod_feasibility(
    pod: Pod, req: tuple[int, ...], templates: Sequence[Template]
) -> dict[int, frozenset[OfferKey]]:
    """Template index -> offerings this pod accepts there (only templates where it may run and fits)."""
    ports = {(p.port, p.protocol) for p in pod.host_ports}
    feasible: dict[int, set[OfferKey]] = {}
    for tpl in templates:
        if untolerated(tpl.taints, pod.tolerations) is not None:
            continue
        if ports & tpl.daemon_ports or not fits(req, tpl.alloc):
            continue
        offers = _term_offers(pod, tpl)
        if offers:
            feasible[tpl.index] = offers
    for _weight, term in pod.preferred_node_affinity:
        narrowed: dict[int, set[OfferKey]] = {}
        for index, offers in feasible.items():
            kept = offers_allowed(term, templates[index].labels, list(offers))
            if kept:
                narrowed[index] = kept
        if narrowed:
            feasible = narrowed
    return {index: frozenset(offers) for index, offers in feasible.items()}


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
    return (
        f"no instance type has {format_resources(need)} free after DaemonSets "
        f"(largest: {format_resources(room)})"
    )


def all_offer_keys(templates: Sequence[Template]) -> set[OfferKey]:
    keys: set[OfferKey] = set()
    for tpl in templates:
        keys.update(tpl.offerings)
    return keys


def host_port_ids(ports: Sequence[HostPort]) -> list[tuple[int, str]]:
    return [(p.port, p.protocol) for p in ports]
