"""From a PendingBatch and the projection to NodeClaims (pure): the scheduler's main decision.

The projection is turned back into the Kubernetes objects the scheduling core understands (it parses the
same documents ``tenon simulate`` reads), so the live service, the what-if tool and the bench all exercise one
code path:

* NodePools, NodeClasses, DaemonSets as last snapshotted; Nodes and their bound pods as last observed;
* catalogs: a Cluster API catalog contributes its MachineDeployments (``sources``), any other an
  ``InstanceCatalog`` document named like its NodeClass;
* every *live* NodeClaim (planned, launched, registered but not yet initialised as a Node the projection knows)
  as a ``karpenter.sh/v1`` NodeClaim whose ``tenon.sh/nominated-pods`` lists the pods it was bought for: their
  room is used before anything is bought, so a re-offered pod never buys twice; and the pods it was bought for
  that are still pending, so that the room they will take is not offered to a newer pod;
* the batch's pods that are still not bound.

Each object is validated on its own first. An invalid NodePool is left out (and reported, so the service can
set its ``ValidationSucceeded=False`` condition) while the others keep working; an invalid pod is reported
unschedulable with the parse error instead of failing the batch.

Claim names are ``<nodepool>-<5 chars>`` derived from the batch event id and the claim's index, so a
redelivered batch names (and ids) its claims identically and the appends deduplicate.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from proto import events as ev
from proto.ids import derive_id
from tenon.core import InputError, Plan, PlannedNodeClaim, parse_objects, solve
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    NOMINATED_PODS,
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNREGISTERED_TAINT,
    ZONE,
)
from tenon.domain.projection import ClusterProjection, KubeObject, object_key

PRODUCER = "scheduler"


@dataclass
class BatchOutcome:
    events: list[ev.Event] = field(default_factory=list)
    invalid_nodepools: dict[str, str] = field(default_factory=dict)
    plan: Plan | None = None


def claim_name(nodepool: str, batch_event_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{batch_event_id}/{index}".encode()).digest()
    return f"{nodepool}-{base64.b32encode(digest).decode().lower()[:5]}"


def nodeclaim_document(
    state_name: str, planned: ev.NodeClaimPlanned, node_name: str | None, nominated: tuple[str, ...]
) -> KubeObject:
    """A live claim as the scheduling core reads in-flight capacity; ``nominated`` are the pods it was bought
    for that are still pending (one that landed elsewhere must not hold room here too)."""
    labels = dict(planned.labels)
    labels.setdefault(NODEPOOL, planned.nodepool)
    labels.setdefault(INSTANCE_TYPE, planned.choice.instance_type)
    labels.setdefault(CAPACITY_TYPE, planned.choice.capacity_type)
    if planned.choice.zone:
        labels.setdefault(ZONE, planned.choice.zone)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": state_name,
            "labels": labels,
            "annotations": {NOMINATED_PODS: ",".join(nominated)},
        },
        "status": {"nodeName": node_name} if node_name else {},
    }


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


def _booting_claims_by_provider_id(projection: ClusterProjection) -> dict[str | None, frozenset[str]]:
    """providerID -> the startup taint keys of its claim, for live claims not yet Initialized."""
    booting: dict[str | None, frozenset[str]] = {}
    for claim in projection.claims.values():
        if claim.accepts_pods and claim.launched and not claim.initialized and claim.planned:
            booting[claim.launched.provider_id] = frozenset(
                str(t.get("key")) for t in claim.planned.startup_taints
            )
    return booting


def _without_ephemeral_taints(node: KubeObject, startup: frozenset[str]) -> KubeObject:
    """The node as it will be once initialized: otherwise pods re-offered while it boots would buy another."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in EPHEMERAL_TAINTS | startup]
    return {**node, "spec": {**spec, "taints": taints}}


def _problem(source: str, index: int, obj: KubeObject) -> str | None:
    try:
        parse_objects([(source, index, obj)])
    except InputError as exc:
        return str(exc)
    return None


def cluster_documents(
    projection: ClusterProjection, pods: list[KubeObject], now: datetime, *, validate: bool = True
) -> tuple[list[tuple[str, int, Any]], dict[str, str], dict[str, str]]:
    """(documents, invalid NodePools -> reason, invalid pods -> reason). Without ``validate`` every object
    is taken as it is (the fast path, when the whole set is known to parse)."""
    documents: list[tuple[str, int, Any]] = []
    invalid_pools: dict[str, str] = {}
    invalid_pods: dict[str, str] = {}

    def _validate(source: str, index: int, obj: KubeObject) -> str | None:
        return _problem(source, index, obj) if validate else None

    def add(source: str, obj: KubeObject) -> None:
        documents.append((source, len(documents), obj))

    for name, nodepool in sorted(projection.nodepools.items()):
        problem = _validate("NodePool", 0, nodepool)
        if problem:
            invalid_pools[name] = problem
        else:
            add("NodePool", nodepool)
    for _, nodeclass in sorted(projection.nodeclasses.items()):
        add("NodeClass", nodeclass)
    for _, catalog in sorted(projection.catalogs.items()):
        for obj in catalog_documents(catalog):
            add(f"catalog {catalog.node_class}", obj)
    for _, daemonset in sorted(projection.daemonsets.items()):
        if _validate("DaemonSet", 0, daemonset) is None:
            add("DaemonSet", daemonset)
    booting = _booting_claims_by_provider_id(projection)
    for _, node in sorted(projection.nodes.items()):
        claim_startup = booting.get((node.get("spec") or {}).get("providerID"))
        if claim_startup is not None:
            node = _without_ephemeral_taints(node, claim_startup)
        if _validate("Node", 0, node) is None:
            add("Node", node)
    for _, pod in sorted(projection.bound_pods.items()):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if _validate("Pod", 0, pod) is None:
            add("Pod", pod)
    node_names_by_provider = {
        (node.get("spec") or {}).get("providerID"): name for name, node in projection.nodes.items()
    }
    offered = {object_key(pod) for pod in pods}
    for name, claim in sorted(projection.claims.items()):
        if not claim.accepts_pods or claim.planned is None:
            continue
        node_name = claim.registered.node if claim.registered else None
        if node_name is None and claim.launched:
            node_name = node_names_by_provider.get(claim.launched.provider_id)
        still_pending = tuple(p for p in claim.planned.pods if projection.still_pending(p, now))
        add("NodeClaim", nodeclaim_document(name, claim.planned, node_name, still_pending))
        # the pods it was bought for hold its room until they land, even when they are not in this batch
        for key in claim.planned.pods:
            waiting = projection.pending.get(key)
            if waiting is None or key in offered or not projection.still_pending(key, now):
                continue
            if node_name and node_name in projection.nodes:
                waiting = {**waiting, "spec": {**(waiting.get("spec") or {}), "nodeName": node_name}}
            if _validate("NodeClaim pods", 0, waiting) is None:
                add("NodeClaim pods", waiting)
    for pod in pods:
        problem = _validate("PendingBatch", 0, pod)
        if problem:
            invalid_pods[object_key(pod)] = problem
        else:
            add("PendingBatch", pod)
    return documents, invalid_pools, invalid_pods


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
    """Decide for ``pods`` (the still-unbound ones) against the projection; ``cause`` is the answered event."""
    pods = [p for p in pods if object_key(p) not in projection.bound_pods]
    if not pods:
        return BatchOutcome()
    # parse everything at once; only when that fails, object by object to leave out exactly what is invalid
    documents, invalid_pools, invalid_pods = cluster_documents(
        projection, pods, cause.decided_at, validate=False
    )
    try:
        inputs = parse_objects(documents)
    except InputError:
        documents, invalid_pools, invalid_pods = cluster_documents(projection, pods, cause.decided_at)
        inputs = parse_objects(documents)
    outcome = BatchOutcome(invalid_nodepools=invalid_pools)
    plan = solve(inputs)
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
    return plan_pods(projection, abandoned, pods, f"replan-{abandoned.nodeclaim}")
