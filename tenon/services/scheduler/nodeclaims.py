"""The ``karpenter.sh/v1`` NodeClaim object a claim's state maps to (pure), so ``kubectl get nodeclaims``
tells the same story as the event log: type, NodePool, providerID, node, and the Launched / Registered /
Initialized / Ready conditions with their transition times."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tenon.core.wellknown import BATCH, INSTANCE_TYPE, NOMINATED_PODS, PRICE_PER_HOUR, TERMINATION_FINALIZER
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection

CONDITIONS = ("Launched", "Registered", "Initialized", "Ready")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_class_ref(projection: ClusterProjection, claim: NodeClaim) -> dict[str, Any]:
    assert claim.planned is not None
    nodepool = projection.nodepools.get(claim.planned.nodepool) or {}
    ref = ((((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")) or {}
    return {
        "group": ref.get("group", "karpenter.cluster.x-k8s.io"),
        "kind": ref.get("kind", "ClusterAPINodeClass"),
        "name": ref.get("name", claim.planned.node_class),
    }


def nodeclaim_spec(projection: ClusterProjection, claim: NodeClaim) -> dict[str, Any]:
    """metadata + spec of the NodeClaim, as created when the claim is planned."""
    planned = claim.planned
    assert planned is not None
    types = [planned.choice.instance_type, *(f.instance_type for f in planned.fallbacks)]
    requirements = [r for r in planned.requirements if r.get("key") != INSTANCE_TYPE]
    requirements.append({"key": INSTANCE_TYPE, "operator": "In", "values": types})
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": claim.name,
            "labels": dict(planned.labels),
            # held until the claim is Terminated: a user's delete becomes a graceful termination, not a leak
            "finalizers": [TERMINATION_FINALIZER],
            "annotations": {
                NOMINATED_PODS: ",".join(planned.pods),
                PRICE_PER_HOUR: str(planned.choice.price_per_hour),
                BATCH: planned.batch_id or "",
            },
        },
        "spec": {
            "nodeClassRef": _node_class_ref(projection, claim),
            "requirements": requirements,
            "resources": {"requests": dict(planned.explanation.get("requests") or {})},
            "taints": list(planned.taints),
            "startupTaints": list(planned.startup_taints),
        },
    }


def nodeclaim_status(projection: ClusterProjection, claim: NodeClaim) -> dict[str, Any]:
    """The status subresource for the claim's current state."""
    assert claim.planned is not None
    status: dict[str, Any] = {}
    reached = {
        "Launched": claim.launched.decided_at if claim.launched else None,
        "Registered": claim.registered.decided_at if claim.registered else None,
        "Initialized": claim.initialized.decided_at if claim.initialized else None,
        "Ready": claim.initialized.decided_at if claim.initialized else None,
    }
    conditions = []
    for kind in CONDITIONS:
        when = reached[kind]
        if when is not None:
            conditions.append(
                {
                    "type": kind,
                    "status": "True",
                    "reason": kind,
                    "message": "",
                    "lastTransitionTime": _iso(when),
                }
            )
        else:
            reason, message = "Pending", ""
            if kind == "Launched" and claim.launch_failures:
                reason, message = "LaunchFailed", claim.launch_failures[-1].reason
            conditions.append(
                {
                    "type": kind,
                    "status": "Unknown",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": _iso(claim.planned.decided_at),
                }
            )
    status["conditions"] = conditions
    if claim.launched:
        status["providerID"] = claim.launched.provider_id
    if claim.registered:
        status["nodeName"] = claim.registered.node
        node = projection.nodes.get(claim.registered.node)
        if node:
            node_status = node.get("status") or {}
            status["capacity"] = node_status.get("capacity", {})
            status["allocatable"] = node_status.get("allocatable", {})
    return status
