"""Drift (pure): a claim no longer what its NodePool, its NodeClass or its catalog would make now, replaced
as Karpenter's ``Drift`` method replaces it.

Reasons, checked in Karpenter's order:

* ``NodePoolDrifted``: the hash of the NodePool's template as the claim was made differs from the template's
  hash now. The hash covers ``metadata.labels`` and ``annotations``, ``spec.taints``, ``startupTaints``,
  ``nodeClassRef``, ``kubelet``, ``expireAfter`` and ``terminationGracePeriod`` (empty fields and absent
  ones hash alike; taints are a set); like Karpenter's ``nodepool-hash`` it leaves out ``requirements``,
  which the next reason judges more finely, and everything outside the template (budgets, limits, weight);
* ``RequirementsDrifted``: a label of the claim no longer satisfies a requirement of the template (adding an
  instance type to a requirement drifts nothing; removing the claim's own does);
* ``NodeClassDrifted``: the hash of the NodeClass's ``spec`` differs from when the claim was made;
* ``InstanceTypeNotFound``: the pool's catalog no longer offers the claim's instance type, or not in its zone
  and capacity type.

The method: drifted candidates (ordered oldest first, empty ones before the others, as Karpenter), each in
its own command; a candidate's pods are repacked (:mod:`.simulation`) and every new node needed is a
replacement, launched and Initialized before the drifted node is drained; no price test (drift is about
correctness, not cost). Drift is *eventual*: with a ``terminationGracePeriod`` on the pool, pod blocks do
not hold it back (the grace period bounds the drain instead). Budgets for ``Drifted`` apply.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from tenon.domain.disruption.budgets import Allowance
from tenon.domain.disruption.candidates import Blocked, Candidate
from tenon.domain.disruption.commands import Command, replacement_of
from tenon.domain.disruption.simulation import Repacker
from tenon.domain.disruption.view import ClaimFacts, ClusterView, KubeObject, meta, spec

REASON = "Drifted"
HASHED_SPEC_FIELDS = (
    "taints",
    "startupTaints",
    "nodeClassRef",
    "kubelet",
    "expireAfter",
    "terminationGracePeriod",
)


def _canonical(value: Any) -> Any:
    """Empty values dropped (absent and empty hash alike), maps sorted."""
    if isinstance(value, Mapping):
        kept = {str(k): _canonical(v) for k, v in value.items() if v not in (None, "", [], {})}
        return dict(sorted(kept.items()))
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def _digest(value: Any) -> str:
    text = json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def template_hash(nodepool: Mapping[str, Any]) -> str:
    template = spec(nodepool).get("template")
    template = template if isinstance(template, Mapping) else {}
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    tspec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
    hashed: dict[str, Any] = {
        "labels": (tmeta or {}).get("labels"),
        "annotations": (tmeta or {}).get("annotations"),
    }
    for name in HASHED_SPEC_FIELDS:
        value = (tspec or {}).get(name)
        if name in ("taints", "startupTaints") and isinstance(value, list):
            value = sorted((_canonical(t) for t in value), key=lambda t: json.dumps(t, sort_keys=True))
        hashed[name] = value
    return _digest(hashed)


def nodeclass_hash(nodeclass: Mapping[str, Any]) -> str:
    return _digest(spec(nodeclass))


def _satisfies(labels: Mapping[str, str], requirement: Mapping[str, Any]) -> bool:
    key = str(requirement.get("key"))
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if key not in labels:
        return (
            operator != "Exists" or True
        )  # loose, as Karpenter's Compatible: an absent label drifts nothing
    value = labels[key]
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "DoesNotExist":
        return False
    if operator in ("Gt", "Lt") and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return True


def requirements_drifted(nodepool: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    template = spec(nodepool).get("template")
    tspec = template.get("spec") if isinstance(template, Mapping) else None
    for requirement in (tspec or {}).get("requirements") or [] if isinstance(tspec, Mapping) else []:
        if isinstance(requirement, Mapping) and not _satisfies(labels, requirement):
            return (
                f"label {requirement.get('key')}={labels.get(str(requirement.get('key')))} no longer allowed"
            )
    return None


def drift_reason(view: ClusterView, claim: ClaimFacts) -> tuple[str, str] | None:
    """(reason, detail) when the claim drifted, else None."""
    nodepool = view.nodepools.get(claim.nodepool)
    if nodepool is None:
        return None
    if claim.nodepool_hash is not None and claim.nodepool_hash != _hash_of(
        view, f"NodePool/{claim.nodepool}", nodepool, template_hash
    ):
        return "NodePoolDrifted", f"NodePool {claim.nodepool}'s template changed"
    labels = dict(claim.labels)
    node = view.nodes.get(claim.node or "")
    if node is not None:
        labels.update({str(k): str(v) for k, v in (meta(node).get("labels") or {}).items()})
    detail = requirements_drifted(nodepool, labels)
    if detail is not None:
        return "RequirementsDrifted", detail
    nodeclass = view.nodeclasses.get(claim.node_class)
    if claim.nodeclass_hash is not None and nodeclass is not None:
        if claim.nodeclass_hash != _hash_of(view, f"NodeClass/{claim.node_class}", nodeclass, nodeclass_hash):
            return "NodeClassDrifted", f"NodeClass {claim.node_class} changed"
    offered = view.catalog_types.get(claim.nodepool)
    if offered is not None:
        if claim.instance_type not in offered:
            return "InstanceTypeNotFound", f"instance type {claim.instance_type} is no longer offered"
        offer = f"{claim.instance_type}/{claim.zone or ''}/{claim.capacity_type}"
        if any("/" in o for o in offered) and offer not in offered:
            return (
                "InstanceTypeNotFound",
                f"{claim.capacity_type} {claim.instance_type} is no longer offered in {claim.zone}",
            )
    return None


def _hash_of(view: ClusterView, key: str, obj: KubeObject, digest: Callable[[KubeObject], str]) -> str:
    """``digest(obj)``, kept in the view under ``key`` while ``obj`` is the object there."""
    found = view.hashes.get(key)
    if found is None or found[0] is not obj:
        found = view.hashes[key] = (obj, digest(obj))
    return found[1]


def drifted(view: ClusterView) -> dict[str, tuple[str, str]]:
    """Every live, registered claim that drifted: claim -> (reason, detail), what its Drifted condition
    says."""
    found: dict[str, tuple[str, str]] = {}
    for name, claim in sorted(view.claims.items()):
        if claim.node is None or claim.disrupting:
            continue
        reason = drift_reason(view, claim)
        if reason is not None:
            found[name] = reason
    return found


def decide(
    view: ClusterView,
    candidates: list[Candidate],
    budgets: Mapping[str, Allowance],
    repacker: Repacker | None,
    reasons: Mapping[str, tuple[str, str]],
) -> tuple[Command | None, list[Blocked]]:
    """The first drifted candidate that can go (with its replacements), and the drifted ones that cannot."""
    ordered = sorted(
        (c for c in candidates if c.name in reasons),
        key=lambda c: (not c.empty, c.claim.created_at, c.name),
    )
    blocked: list[Blocked] = []
    for candidate in ordered:
        allowance = budgets.get(candidate.pool)
        if allowance is None or allowance.allowed <= 0:
            why = f"budget: {allowance.budget}" if allowance else f"NodePool {candidate.pool} not found"
            blocked.append(Blocked(candidate.name, candidate.node_name, why))
            continue
        replacements: tuple[Any, ...] = ()
        destinations: dict[str, str] = {}
        if not candidate.empty:
            if repacker is None:
                blocked.append(Blocked(candidate.name, candidate.node_name, "no catalog to repack its pods"))
                continue
            outcome = repacker.simulate([candidate])
            if not outcome.feasible:
                blocked.append(Blocked(candidate.name, candidate.node_name, outcome.why))
                continue
            replacements = tuple(replacement_of(r) for r in outcome.replacements)
            destinations = outcome.destinations
        reason, detail = reasons[candidate.name]
        command = Command(
            method="drift",
            reason=REASON,
            candidates=(candidate,),
            why={candidate.name: f"{reason}: {detail}"},
            replacements=replacements,
            destinations=destinations,
            budget=allowance.budget,
            detail=f"{reason}: {detail}",
            blocked=tuple(blocked),
        )
        return command, blocked
    return None, blocked
