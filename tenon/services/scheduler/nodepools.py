"""NodePool status (pure): what each pool uses now and whether its spec is valid.

``status.resources`` sums the capacity of the pool's Nodes (label ``karpenter.sh/nodepool``), plus ``nodes``;
``status.conditions`` carries ``ValidationSucceeded`` (False with the parser's message, which names the field,
when the spec is invalid: that pool is left out of every plan while the others keep working; False too when a
disruption field is invalid, budgets and schedules included, naming it: its disruptions stop, never silently)
and ``Ready``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tenon.core import InputError, parse_objects
from tenon.core.quantities import QuantityError, format_quantity, to_canonical
from tenon.core.wellknown import NODEPOOL
from tenon.domain.disruption.budgets import disruption_problems
from tenon.domain.projection import ClusterProjection


def validation_problem(nodepool: dict[str, Any]) -> str | None:
    """The first problem of the spec: what scheduling cannot read, then the disruption fields (budgets,
    schedules, durations: an invalid budget stops the pool's disruptions, which must not be silent)."""
    try:
        parse_objects([("NodePool", 0, nodepool)])
    except InputError as exc:
        return str(exc)
    problems = disruption_problems(nodepool)
    if problems:
        return f"NodePool {(nodepool.get('metadata') or {}).get('name')}: {problems[0]}"
    return None


def resources_in_use(projection: ClusterProjection, name: str) -> dict[str, str]:
    totals: dict[str, int] = {}
    nodes = 0
    for node in projection.nodes.values():
        if ((node.get("metadata") or {}).get("labels") or {}).get(NODEPOOL) != name:
            continue
        nodes += 1
        for resource, value in ((node.get("status") or {}).get("capacity") or {}).items():
            try:
                totals[resource] = totals.get(resource, 0) + to_canonical(resource, value)
            except (QuantityError, ValueError):
                continue
    out = {resource: format_quantity(resource, value) for resource, value in sorted(totals.items())}
    out["nodes"] = str(nodes)
    return out


def nodepool_status(projection: ClusterProjection, name: str, now: datetime) -> dict[str, Any]:
    nodepool = projection.nodepools[name]
    problem = validation_problem(nodepool)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = (nodepool.get("metadata") or {}).get("generation", 1)
    validation = {
        "type": "ValidationSucceeded",
        "status": "False" if problem else "True",
        "reason": "InvalidSpec" if problem else "ValidationSucceeded",
        "message": problem or "",
        "observedGeneration": generation,
        "lastTransitionTime": stamp,
    }
    ready = {
        "type": "Ready",
        "status": "False" if problem else "True",
        "reason": "ValidationFailed" if problem else "Ready",
        "message": "the NodePool's spec is invalid; see ValidationSucceeded" if problem else "",
        "observedGeneration": generation,
        "lastTransitionTime": stamp,
    }
    previous = {c.get("type"): c for c in ((nodepool.get("status") or {}).get("conditions") or [])}
    for condition in (validation, ready):
        before = previous.get(condition["type"])
        if (
            before is not None
            and before.get("status") == condition["status"]
            and before.get("lastTransitionTime")
        ):
            condition["lastTransitionTime"] = before[
                "lastTransitionTime"
            ]  # no transition: keep when it happened
    return {"resources": resources_in_use(projection, name), "conditions": [validation, ready]}
