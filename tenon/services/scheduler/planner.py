"""From a PendingBatch and the projection to NodeClaims (pure): the scheduler's main decision.

Every object is parsed once, when first needed after it changed (:meth:`ClusterProjection.parse` keeps what
the scheduling core read of it; :meth:`ClusterProjection.running_pods` keeps the running pods parsed, by
node), and a plan assembles the parts (:func:`tenon.core.assemble`), so planning a batch costs what the
batch adds, not the cluster's size in parsing:

* NodePools, NodeClasses, DaemonSets as last snapshotted; Nodes and their bound pods as last observed; a Node
  still booting for one of tenon's claims is judged without its startup and ephemeral taints (they go away by
  themselves: otherwise the pods re-offered while it boots would buy another);
* catalogs: a Cluster API catalog contributes its MachineDeployments (``sources``), any other an
  ``InstanceCatalog`` document named like its NodeClass;
* every NodeClaim that accepts pods, given to the core directly as an :class:`InFlightNodeClaim` with the pods
  it was bought for that are still pending: their room is used before anything is bought, so a re-offered pod
  never buys twice; and those pods themselves, so the room they will take is not offered to a newer pod;
* the batch's pods that are still not bound.

An object that cannot be read is left out on its own: an invalid NodePool is reported (the service sets its
``ValidationSucceeded=False`` condition) while the others keep working; an invalid pod is reported
unschedulable with the reason instead of failing the batch.

Claim names are ``<nodepool>-<5 chars>`` derived from the batch event id and the claim's index, so a
redelivered batch names (and ids) its claims identically and the appends deduplicate.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from proto import events as ev
from proto.ids import derive_id
from tenon.core import (
    ClusterInput,
    InFlightNodeClaim,
    Node,
    Plan,
    PlannedNodeClaim,
    Requirement,
    assemble,
    solve,
)
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    NOT_READY_TAINT,
    PLANNED_NODE,
    REGISTERED,
    UNREACHABLE_TAINT,
    UNREGISTERED_TAINT,
    ZONE,
)
from tenon.domain.explain import replan_batch_id
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, Parsed, object_key, parse_for_core
from tenon.runtime.collector import collector_paused
from tenon.services.scheduler.lifecycle import as_registered

PRODUCER = "scheduler"


@dataclass
class BatchOutcome:
    events: list[ev.Event] = field(default_factory=list)
    invalid_nodepools: dict[str, str] = field(default_factory=dict)
    plan: Plan | None = None


def claim_name(nodepool: str, batch_event_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{batch_event_id}/{index}".encode()).digest()
    return f"{nodepool}-{base64.b32encode(digest).decode().lower()[:5]}"


def catalog_documents(catalog: ev.CatalogSnapshot) -> list[KubeObject]:
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


EPHEMERAL_TAINTS = frozenset(
    {
        NOT_READY_TAINT,
        UNREACHABLE_TAINT,
        "node.cloudprovider.kubernetes.io/uninitialized",
        UNREGISTERED_TAINT,
    }
)
"""Taints a node boots with and sheds by itself: a node tenon is still initializing is judged without them."""


@dataclass
class _Inputs:
    """What one plan reads, gathered from the projection."""

    parts: list[ClusterInput] = field(default_factory=list)
    in_flight: list[InFlightNodeClaim] = field(default_factory=list)
    invalid_pools: dict[str, str] = field(default_factory=dict)
    invalid_pods: dict[str, str] = field(default_factory=dict)
    node_names: set[str] = field(default_factory=set)
    """The Nodes read (a claim whose Node is one of them counts as that Node, not as a claim)."""

    def add(self, parsed: Parsed) -> str | None:
        if parsed.part is not None:
            self.parts.append(parsed.part)
        return parsed.problem


def _booting_startup_taints(projection: ClusterProjection) -> dict[str, frozenset[str]]:
    """providerID -> the startup taint keys of its claim, for claims that accept pods and are not yet
    Initialized."""
    booting: dict[str, frozenset[str]] = {}
    for claim in projection.claims.values():
        if claim.accepts_pods and claim.launched and not claim.initialized and claim.planned:
            keys = frozenset(str(t.get("key")) for t in claim.planned.startup_taints)
            booting[claim.launched.provider_id] = keys
    return booting


def _registered_unseen(projection: ClusterProjection) -> dict[str, NodeClaim]:
    """providerID -> claim, for live claims tenon registered: their Node is judged as the registration left
    it until an observation shows it (see :func:`_nodes_and_pods`)."""
    return {
        claim.registered.provider_id: claim
        for claim in projection.claims.values()
        if claim.registered is not None and claim.accepts_pods
    }


def _without_ephemeral_taints(node: KubeObject, startup: frozenset[str]) -> KubeObject:
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in EPHEMERAL_TAINTS | startup]
    return {**node, "spec": {**spec, "taints": taints}}


def _cluster_facts(projection: ClusterProjection, inputs: _Inputs) -> None:
    for name, nodepool in sorted(projection.nodepools.items()):
        problem = inputs.add(projection.parse("NodePool", name, nodepool))
        if problem:
            inputs.invalid_pools[name] = problem
    for name, nodeclass in sorted(projection.nodeclasses.items()):
        inputs.add(projection.parse("NodeClass", name, nodeclass))
    for name, catalog in sorted(projection.catalogs.items()):
        documents = {"apiVersion": "v1", "kind": "List", "items": catalog_documents(catalog)}
        inputs.add(projection.parse("Catalog", name, documents))
    for name, daemonset in sorted(projection.daemonsets.items()):
        inputs.add(projection.parse("DaemonSet", name, daemonset))


@dataclass
class _NodeViews:
    """The claims that change how a Node is read, by providerID (see :func:`_nodes_and_pods`)."""

    booting: dict[str, frozenset[str]]
    registered: dict[str, NodeClaim]


def _node_view(node: KubeObject, claim: NodeClaim | None, startup: frozenset[str] | None) -> KubeObject:
    """``node`` as the registration of ``claim`` left it (when its observation does not show it yet), and
    without the taints it sheds as it boots (``startup``: the startup taints of its claim, while booting)."""
    if claim is not None:
        node = as_registered(claim, node)
    if startup is not None:
        node = _without_ephemeral_taints(node, startup)
    return node


def _read_node(projection: ClusterProjection, name: str, node: KubeObject, views: _NodeViews) -> Parsed:
    provider_id = str((node.get("spec") or {}).get("providerID"))
    startup = views.booting.get(provider_id)
    claim = views.registered.get(provider_id)
    if claim is not None and ((node.get("metadata") or {}).get("labels") or {}).get(REGISTERED) == "true":
        claim = None  # its observation shows the registration
    if startup is None and claim is None:
        return projection.parse("Node", name, node)
    # what the view is made of besides the Node (a claim's Planned is never replaced); a claim booting
    # without startup taints still sheds the ephemeral ones, one not booting sheds none
    planned = claim.planned.id if claim is not None and claim.planned is not None else ""
    booting = None if startup is None else tuple(sorted(startup))
    variant = repr((claim.name if claim else "", planned, booting))
    return projection.parse_node_view(name, variant, lambda: _node_view(node, claim, startup))


def _nodes_and_pods(projection: ClusterProjection, inputs: _Inputs) -> None:
    """Nodes and the pods running on them. A Node whose claim tenon registered but whose observation does not
    show it yet (Registered and Initialized are decided together for a Node already Ready, before its next
    observation) is read as the registration left it: its unregistered taint gone, its pool's labels and
    taints on; read otherwise, the room bought for its pods looked unusable and was bought again. Such views
    are parsed once per version of the Node, as the Nodes are, and the running pods come parsed from the
    projection (:meth:`ClusterProjection.running_pods`): an unchanged cluster costs a look-up per Node."""
    views = _NodeViews(_booting_startup_taints(projection), _registered_unseen(projection))
    nodes: list[Node] = []
    for name, node in sorted(projection.nodes.items()):
        part = _read_node(projection, name, node, views).part
        if part is not None:
            nodes += part.nodes
    inputs.node_names = {node.name for node in nodes}
    inputs.parts.append(ClusterInput(nodes=tuple(nodes), pods=projection.running_pods()))


def _requirements(planned: ev.NodeClaimPlanned) -> tuple[Requirement, ...]:
    """The claim's requirements as the core reads them (those the scheduler itself wrote: well formed)."""
    return tuple(
        Requirement(
            key=str(r.get("key")),
            operator=str(r.get("operator")),
            values=tuple(str(v) for v in r.get("values") or ()),
        )
        for r in planned.requirements
        if r.get("key") and r.get("operator")
    )


def _in_flight(claim: NodeClaim, node_name: str | None, pending: tuple[str, ...]) -> InFlightNodeClaim:
    """The claim's room as the core should count it: the type it was launched as, else the one its launcher
    is trying now (a fallback after a failed launch), else its first choice."""
    assert claim.planned is not None
    planned = claim.planned
    choice = claim.current_choice or planned.choice
    instance_type, zone, capacity_type = choice.instance_type, choice.zone, choice.capacity_type
    if claim.launched is not None:
        instance_type = claim.launched.instance_type
        zone = claim.launched.zone or zone
        capacity_type = claim.launched.capacity_type or capacity_type
    labels = {
        **planned.labels,
        NODEPOOL: planned.nodepool,
        INSTANCE_TYPE: instance_type,
        CAPACITY_TYPE: capacity_type,
    }
    if zone:
        labels[ZONE] = zone
    return InFlightNodeClaim(
        name=claim.name,
        node_pool=planned.nodepool,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        labels=labels,
        pods=pending,
        requirements=_requirements(planned),
        node_name=node_name or "",
    )


def _claims(projection: ClusterProjection, offered: set[str], now: datetime, inputs: _Inputs) -> None:
    for _, claim in sorted(projection.claims.items()):
        if not claim.accepts_pods or claim.planned is None:
            continue
        node_name = claim.registered.node if claim.registered else None
        if node_name is None and claim.launched:
            found = projection.node_by_provider_id(claim.launched.provider_id)
            node_name = str((found.get("metadata") or {}).get("name")) if found else None
        still_pending = tuple(p for p in claim.planned.pods if projection.still_pending(p, now))
        if node_name not in inputs.node_names:  # else its Node counts instead (assemble would drop it)
            inputs.in_flight.append(_in_flight(claim, node_name, still_pending))
        # the pods it was bought for hold its room until they land, even when they are not in this batch
        for key in still_pending:
            waiting = projection.pending.get(key)
            if waiting is None or key in offered:
                continue
            if node_name and node_name in projection.nodes:
                bound = {**waiting, "spec": {**(waiting.get("spec") or {}), "nodeName": node_name}}
                inputs.add(parse_for_core("Pod", bound))
            else:
                inputs.add(projection.parse("Pending", key, waiting))


def _parse_offered(projection: ClusterProjection, pod: KubeObject) -> Parsed:
    """A pod of the batch as the core reads it. One marked with the Node it takes first
    (:data:`PLANNED_NODE`, set in this plan's input only) is parsed apart from the pending pod's cache: the
    cache entry is the pod as the log has it, which other readers parse too (the service's nomination check
    reads it on its tick, while a long plan runs in a worker thread), and a plan of the scale run that found
    that entry there planned such pods as if unmarked, where its replay, with no service around it, did
    not."""
    if PLANNED_NODE in ((pod.get("metadata") or {}).get("annotations") or {}):
        return parse_for_core("Pending", pod)
    return projection.parse("Pending", object_key(pod), pod)


def cluster_input(
    projection: ClusterProjection, pods: list[KubeObject], now: datetime
) -> tuple[ClusterInput, dict[str, str], dict[str, str]]:
    """(what the core solves, invalid NodePools -> reason, invalid pods of the batch -> reason)."""
    with collector_paused():
        return _cluster_input(projection, pods, now)


def _cluster_input(
    projection: ClusterProjection, pods: list[KubeObject], now: datetime
) -> tuple[ClusterInput, dict[str, str], dict[str, str]]:
    inputs = _Inputs()
    _cluster_facts(projection, inputs)
    _nodes_and_pods(projection, inputs)
    offered = {object_key(pod) for pod in pods}
    _claims(projection, offered, now, inputs)
    for pod in pods:
        problem = inputs.add(_parse_offered(projection, pod))
        if problem:
            inputs.invalid_pods[object_key(pod)] = problem
    return assemble(inputs.parts, inputs.in_flight), inputs.invalid_pools, inputs.invalid_pods


def _choice(nc: PlannedNodeClaim, instance_type: str, price: float | None) -> ev.InstanceChoice:
    return ev.InstanceChoice(
        instance_type=instance_type,
        zone=nc.zone,
        capacity_type=nc.capacity_type,
        price_per_hour=round(price if price is not None else nc.price, 6),
        price_estimated=nc.price_estimated,
    )


def plan_pods(
    projection: ClusterProjection,
    cause: ev.Event,
    pods: list[KubeObject],
    batch_id: str,
) -> BatchOutcome:
    """Decide for ``pods`` (the still-unbound ones) against the projection; ``cause`` is the answered
    event."""
    pods = [p for p in pods if object_key(p) not in projection.bound_pods]
    if not pods:
        return BatchOutcome()
    with collector_paused():
        inputs, invalid_pools, invalid_pods = cluster_input(projection, pods, cause.decided_at)
        plan = solve(inputs)
    outcome = BatchOutcome(invalid_nodepools=invalid_pools)
    outcome.plan = plan
    claims: list[str] = []
    for index, nc in enumerate(plan.node_claims):
        name = claim_name(nc.node_pool, cause.id, index)
        claims.append(name)
        nodepool = projection.nodepools.get(nc.node_pool, {})
        template = ((nodepool.get("spec") or {}).get("template")) or {}
        tspec = template.get("spec") or {}
        prices = {c.instance_type: c.price for c in nc.considered}
        labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
        labels.update(
            {
                NODEPOOL: nc.node_pool,
                INSTANCE_TYPE: nc.instance_type,
                CAPACITY_TYPE: nc.capacity_type,
            }
        )
        if nc.zone:
            labels[ZONE] = nc.zone
        explanation = nc.to_json()["explanation"]
        explanation["requests"] = dict(nc.requests)
        outcome.events.append(
            ev.NodeClaimPlanned(
                id=derive_id(PRODUCER, "NodeClaimPlanned", cause.id, index),
                decided_at=cause.decided_at,
                producer=PRODUCER,
                causation_id=cause.id,
                correlation_id=name,
                nodeclaim=name,
                nodepool=nc.node_pool,
                node_class=str((tspec.get("nodeClassRef") or {}).get("name", "")),
                choice=_choice(nc, nc.instance_type, nc.price),
                fallbacks=tuple(_choice(nc, t, prices.get(t)) for t in nc.fallbacks),
                pods=nc.pods,
                requirements=tuple(r.to_json() for r in nc.requirements),
                labels=labels,
                taints=tuple(tspec.get("taints") or ()),
                startup_taints=tuple(tspec.get("startupTaints") or ()),
                batch_id=batch_id,
                explanation=explanation,
            )
        )
    unschedulable = [
        ev.UnschedulablePod(pod=u.pod, reason=u.reason, reasons=dict(u.reasons)) for u in plan.unschedulable
    ]
    unschedulable += [
        ev.UnschedulablePod(pod=key, reason=f"invalid pod: {why}")
        for key, why in sorted(invalid_pods.items())
    ]
    outcome.events.append(
        ev.BatchPlanned(
            id=derive_id(PRODUCER, "BatchPlanned", cause.id),
            decided_at=cause.decided_at,
            producer=PRODUCER,
            causation_id=cause.id,
            correlation_id=batch_id,
            batch_id=batch_id,
            nodeclaims=tuple(claims),
            existing=tuple(
                ev.PodPlacement(
                    pod=pod,
                    node=placement.name,
                    kind="NodeClaim" if placement.kind == "NodeClaim" else "Node",
                )
                for placement in plan.existing
                for pod in placement.pods
            ),
            unschedulable=tuple(unschedulable),
            total_price_per_hour=round(plan.total_price, 6),
            skipped=tuple(plan.skipped)
            + tuple(f"NodePool {name} left out: {why}" for name, why in sorted(invalid_pools.items())),
        )
    )
    return outcome


def plan_batch(projection: ClusterProjection, batch: ev.PendingBatch) -> BatchOutcome:
    return plan_pods(projection, batch, list(batch.pods), batch.batch_id)


def replan_abandoned(projection: ClusterProjection, abandoned: ev.NodeClaimAbandoned) -> BatchOutcome:
    """The pods an abandoned claim was for go back to the scheduler (those still pending)."""
    claim = projection.claims.get(abandoned.nodeclaim)
    if claim is None or claim.planned is None:
        return BatchOutcome()
    pods = [projection.pending[p] for p in claim.planned.pods if p in projection.pending]
    return plan_pods(projection, abandoned, pods, replan_batch_id(abandoned.nodeclaim))
