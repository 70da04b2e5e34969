"""The disruption service's state, and the :class:`~tenon.domain.disruption.view.ClusterView` its methods
decide on, built from it (pure).

The state is the cluster projection (the same fold as the scheduler's) plus what only disruption keeps:
its commands under way (folded from its own ``DisruptionDecision`` events, so a restart resumes them),
per claim, the hashes of its NodePool template and NodeClass at the moment its ``NodeClaimPlanned`` was
folded (what the scheduler planned it from: drift compares them with the hashes now), and the interruption
notices of the machines it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from proto import events as ev
from tenon.core import ClusterInput, InFlightNodeClaim, assemble
from tenon.core.wellknown import CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE
from tenon.domain.disruption.drift import nodeclass_hash, template_hash
from tenon.domain.disruption.view import ClaimFacts, ClusterView, spec
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, decode_projection, encode_projection
from tenon.services.disruption.interruption import Interruptions
from tenon.services.disruption.load import LoadIndex, budget_load

if TYPE_CHECKING:
    from tenon.services.disruption.due import DueIndex


class Command(msgspec.Struct, kw_only=True):
    """A command under way: proposed (settling) or confirmed (replacements launching)."""

    id: str
    method: str
    stage: str
    candidates: tuple[str, ...]
    replacements: tuple[ev.ReplacementClaim, ...] = ()
    decided_at: datetime
    savings: float = 0.0
    reason: str = ""
    budget: str = ""
    settles_until: datetime | None = None
    """A proposal is judged again from then on."""


@dataclass
class DisruptionState:
    projection: ClusterProjection = field(default_factory=ClusterProjection)
    commands: dict[str, Command] = field(default_factory=dict)
    hashes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    version: int = 0
    """Counts folded events: an unchanged version and clock-free inputs mean an unchanged round."""
    interruptions: Interruptions = field(default_factory=Interruptions)
    """The interruption notices of machines tenon runs (:mod:`.interruption`)."""
    due: DueIndex | None = field(default=None, compare=False, repr=False)
    """When a tick could next have something to do (:mod:`.due`): derived, made on first use, never
    stored."""
    load: LoadIndex | None = field(default=None, compare=False, repr=False)
    """What each pool's budget counts, kept event by event (:mod:`.load`): derived, made on first use, never
    stored."""

    def busy(self) -> set[str]:
        """Claims that are candidates of a command under way."""
        return {name for command in self.commands.values() for name in command.candidates}


class _Stored(msgspec.Struct):
    projection: bytes
    commands: dict[str, Command]
    hashes: dict[str, tuple[str | None, str | None]]
    version: int
    notices: dict[str, ev.InterruptionNotice] = {}


def encode_state(state: DisruptionState) -> bytes:
    return msgspec.msgpack.encode(
        _Stored(
            encode_projection(state.projection),
            state.commands,
            state.hashes,
            state.version,
            state.interruptions.notices,
        )
    )


def decode_state(data: bytes) -> DisruptionState:
    stored = msgspec.msgpack.decode(data, type=_Stored)
    return DisruptionState(
        decode_projection(stored.projection),
        stored.commands,
        stored.hashes,
        stored.version,
        Interruptions(dict(stored.notices)),
    )


def hashes_at_plan(
    projection: ClusterProjection, planned: ev.NodeClaimPlanned
) -> tuple[str | None, str | None]:
    pool = projection.nodepools.get(planned.nodepool)
    nodeclass = next(
        (nc for key, nc in projection.nodeclasses.items() if key.split("/")[-1] == planned.node_class), None
    )
    return (
        template_hash(pool) if pool is not None else None,
        nodeclass_hash(nodeclass) if nodeclass is not None else None,
    )


# --- the view ----------------------------------------------------------------------------------------------


def _price(claim: NodeClaim) -> tuple[str, str | None, str, float]:
    assert claim.planned is not None
    kind = claim.instance_type or claim.planned.choice.instance_type
    for option in claim.attempts:
        if option.instance_type == kind:
            return kind, option.zone, option.capacity_type, option.price_per_hour
    return (
        kind,
        claim.planned.choice.zone,
        claim.planned.choice.capacity_type,
        claim.planned.choice.price_per_hour,
    )


def claim_facts(state: DisruptionState, claim: NodeClaim, now: datetime, busy: set[str]) -> ClaimFacts | None:
    planned = claim.planned
    if planned is None or not claim.live:
        return None
    node = claim.registered.node if claim.registered else None
    kind, zone, capacity, price = _price(claim)
    if claim.launched is not None:
        zone = claim.launched.zone or zone
        capacity = claim.launched.capacity_type or capacity
    pool_hash, class_hash = state.hashes.get(claim.name, (None, None))
    labels = {**planned.labels, NODEPOOL: planned.nodepool, INSTANCE_TYPE: kind, CAPACITY_TYPE: capacity}
    if zone:
        labels[ZONE] = zone
    return ClaimFacts(
        name=claim.name,
        nodepool=planned.nodepool,
        node=node if node in state.projection.nodes else None,
        instance_type=kind,
        zone=zone,
        capacity_type=capacity,
        price=price,
        created_at=planned.decided_at,
        initialized_at=claim.initialized.decided_at if claim.initialized else None,
        labels=labels,
        node_class=planned.node_class,
        nodepool_hash=pool_hash,
        nodeclass_hash=class_hash,
        disrupting=claim.disruption is not None or claim.name in busy,
        waiting_for_pods=any(state.projection.still_pending(p, now) for p in planned.pods),
    )


def catalog_documents(catalog: ev.CatalogSnapshot) -> list[KubeObject]:
    """A catalog as the core reads it (the scheduler reads it the same way)."""
    if catalog.provider == "cluster-api":
        return [dict(source) for source in catalog.sources]
    return [
        {
            "apiVersion": "tenon.sh/v1alpha1",
            "kind": "InstanceCatalog",
            "metadata": {"name": catalog.node_class},
            "spec": {"instanceTypes": list(catalog.instance_types)},
        }
    ]


def offers(projection: ClusterProjection) -> dict[str, set[str]]:
    """NodePool -> what its catalogs offer now: bare type names and ``type/zone/capacityType`` offers."""
    by_class: dict[str, set[str]] = {}
    for name, catalog in projection.catalogs.items():
        found: set[str] = set()
        for entry in catalog.instance_types:
            kind = str(entry.get("name"))
            found.add(kind)
            for offer in entry.get("offerings") or []:
                if isinstance(offer, dict):
                    found.add(f"{kind}/{offer.get('zone') or ''}/{offer.get('capacityType', 'on-demand')}")
        by_class[name] = found
    out = {}
    for pool_name, pool in projection.nodepools.items():
        ref = (spec(pool).get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
        offered = by_class.get(str(ref.get("name")))
        if offered:
            out[pool_name] = offered
    return out


def _in_flight(claim: NodeClaim) -> InFlightNodeClaim:
    assert claim.planned is not None
    kind, zone, capacity, _ = _price(claim)
    return InFlightNodeClaim(
        name=claim.name,
        node_pool=claim.planned.nodepool,
        instance_type=kind,
        zone=zone,
        capacity_type=capacity,
        labels=dict(claim.planned.labels),
    )


def _parts(projection: ClusterProjection, now: datetime) -> list[ClusterInput]:
    found: list[tuple[str, str, KubeObject]] = []
    found += [("NodePool", n, o) for n, o in sorted(projection.nodepools.items())]
    found += [("NodeClass", n, o) for n, o in sorted(projection.nodeclasses.items())]
    found += [
        ("Catalog", n, {"apiVersion": "v1", "kind": "List", "items": catalog_documents(c)})
        for n, c in sorted(projection.catalogs.items())
    ]
    found += [("DaemonSet", n, o) for n, o in sorted(projection.daemonsets.items())]
    found += [("Node", n, o) for n, o in sorted(projection.nodes.items())]
    found += [
        ("Pod", k, p)
        for k, p in sorted(projection.bound_pods.items())
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    found += [
        ("Pending", k, p) for k, p in sorted(projection.pending.items()) if projection.still_pending(k, now)
    ]
    parsed = (projection.parse(kind, key, obj) for kind, key, obj in found)
    return [p.part for p in parsed if p.part is not None]


def core_input(projection: ClusterProjection, now: datetime) -> ClusterInput:
    """The cluster as the scheduling core reads it (each object parsed once, cached in the projection)."""
    in_flight = [
        _in_flight(c)
        for _, c in sorted(projection.claims.items())
        if c.accepts_pods and c.planned is not None and c.registered is None
    ]
    return assemble(_parts(projection, now), in_flight)


def build_view(
    state: DisruptionState,
    now: datetime,
    *,
    settling: frozenset[str] = frozenset(),
    with_core: bool = True,
    claims: Iterable[str] | None = None,
    taken: frozenset[str] = frozenset(),
) -> ClusterView:
    """The view at ``now``; claims of commands under way are busy, except those in ``settling`` (the
    candidates of a proposal being judged again), and so are those in ``taken`` (named by decisions not
    folded yet). Without ``with_core`` it has no scheduling core's input (what only consolidation's
    repacking reads, and most of the cost): enough to tell candidates and empty ones; with ``claims``, only
    those claims are in it (to judge a few)."""
    projection = state.projection
    busy = (state.busy() - settling) | taken
    view = ClusterView(
        now=now,
        nodes=projection.nodes,
        nodepools=projection.nodepools,
        nodeclasses={key.split("/")[-1]: nc for key, nc in projection.nodeclasses.items()},
        last_pod_event=projection.last_pod_activity,
        catalog_types=offers(projection),
        core=core_input(projection, now) if with_core else None,
        pdbs=list(projection.pdbs.values()),
        budget_load=budget_load(state, busy),
    )
    view.pods_by_node = {node: list(pods.values()) for node, pods in projection.pods_by_node.items() if node}
    view.pending_pods = [p for k, p in projection.pending.items() if projection.still_pending(k, now)]
    names = projection.claims if claims is None else [n for n in claims if n in projection.claims]
    for name in names:
        facts = claim_facts(state, projection.claims[name], now, busy)
        if facts is not None:
            view.claims[name] = facts
    return view
