"""The cluster as disruption sees it (pure data), and the facts it reads off pods, Nodes and PDBs.

Two adapters build a :class:`ClusterView`: the disruption service's from its projection of the event log, and
``tenon simulate --disruption`` from files; every method decides on this view alone, so the what-if tool and
the service cannot disagree.

Pod facts are Karpenter's (``pkg/utils/pod``): a pod is *reschedulable* (it must find room elsewhere before
its node goes) when it is active (or a terminating StatefulSet pod) and neither a DaemonSet pod nor a mirror
pod (owned by its Node: a static pod); *evictable* when active, not a mirror pod, not tolerating
``karpenter.sh/disrupted`` and without an active ``karpenter.sh/do-not-disrupt``. ``do-not-disrupt`` is
``"true"`` or a duration (``"30m"``: active until the pod has run that long; without a start time it holds);
any other value is treated as absent, as Karpenter does. The eviction cost of a pod is Karpenter's
``1 + pod-deletion-cost / 2^27 + priority / 2^25``, clamped to [-10, 10].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tenon.core import ClusterInput
from tenon.core.wellknown import DISRUPTED_TAINT, DO_NOT_DISRUPT
from tenon.domain.disruption.durations import DurationError, parse_duration

KubeObject = dict[str, Any]

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""Kubernetes' annotation (to move into tenon.core.wellknown, which is not this module's to edit)."""


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = obj.get("metadata")
    # a dict first: the Mapping ABC's check costs several times more, and a round reads every pod's often
    return found if isinstance(found, dict) or isinstance(found, Mapping) else {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = obj.get("spec")
    return found if isinstance(found, dict) or isinstance(found, Mapping) else {}


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{meta(pod).get('namespace') or 'default'}/{meta(pod).get('name')}"


def _owned_by(pod: Mapping[str, Any], kind: str) -> bool:
    owners = meta(pod).get("ownerReferences") or []
    return any(isinstance(o, Mapping) and o.get("kind") == kind for o in owners)


def is_daemon(pod: Mapping[str, Any]) -> bool:
    return _owned_by(pod, "DaemonSet")


def is_mirror(pod: Mapping[str, Any]) -> bool:
    """A static pod's mirror: the kubelet owns it, the API cannot evict it."""
    return _owned_by(pod, "Node")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def is_active(pod: Mapping[str, Any]) -> bool:
    return not is_terminal(pod) and not is_terminating(pod)


def is_reschedulable(pod: Mapping[str, Any]) -> bool:
    moving = is_active(pod) or (_owned_by(pod, "StatefulSet") and is_terminating(pod))
    return moving and not is_daemon(pod) and not is_mirror(pod)


def tolerates_disrupted(pod: Mapping[str, Any]) -> bool:
    for toleration in spec(pod).get("tolerations") or []:
        if not isinstance(toleration, Mapping) or toleration.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
        if (not key and operator == "Exists") or (key == DISRUPTED_TAINT and operator == "Exists"):
            return True
        if key == DISRUPTED_TAINT and not toleration.get("value"):
            return True
    return False


def pod_started(pod: Mapping[str, Any]) -> datetime | None:
    """``status.startTime``, if the pod has one (``karpenter.sh/do-not-disrupt`` durations count from it)."""
    raw = (pod.get("status") or {}).get("startTime")
    if isinstance(raw, datetime):
        return raw
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


def do_not_disrupt_until(obj: Mapping[str, Any], since: datetime | None) -> datetime | bool | None:
    """The object's ``karpenter.sh/do-not-disrupt``: True (for good), the moment it ends (a duration counted
    from ``since``; True when ``since`` is unknown), or False (absent or unreadable)."""
    value = (meta(obj).get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if str(value).strip().lower() == "true":
        return True
    try:
        duration = parse_duration(str(value))
    except DurationError:
        return False
    if duration is None or duration <= timedelta(0):
        return False
    return True if since is None else since + duration


def do_not_disrupt_active(obj: Mapping[str, Any], since: datetime | None, now: datetime) -> bool:
    until = do_not_disrupt_until(obj, since)
    return until is True or (isinstance(until, datetime) and now < until)


def pod_do_not_disrupt(pod: Mapping[str, Any], now: datetime) -> bool:
    """Active ``do-not-disrupt`` on an active pod (a finished pod blocks nothing)."""
    return is_active(pod) and do_not_disrupt_active(pod, pod_started(pod), now)


def is_evictable(pod: Mapping[str, Any], now: datetime) -> bool:
    return (
        is_active(pod)
        and not is_mirror(pod)
        and not tolerates_disrupted(pod)
        and not do_not_disrupt_active(pod, pod_started(pod), now)
    )


def eviction_cost(pod: Mapping[str, Any]) -> float:
    cost = 1.0
    raw = (meta(pod).get("annotations") or {}).get(POD_DELETION_COST)
    try:
        deletion = float(raw) if raw is not None else 0.0
    except (TypeError, ValueError):
        deletion = 0.0
    if math.isfinite(deletion):
        cost += deletion / 2**27
    priority = spec(pod).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        cost += priority / 2**25
    return min(10.0, max(-10.0, cost))


@dataclass(frozen=True)
class ClaimFacts:
    """One NodeClaim as disruption needs it (from the event log, or from a NodeClaim object in a file)."""

    name: str
    nodepool: str
    node: str | None
    instance_type: str
    zone: str | None
    capacity_type: str
    price: float
    created_at: datetime
    initialized_at: datetime | None
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    node_class: str = ""
    nodepool_hash: str | None = None
    """The NodePool template's hash when the claim was made (None: unknown, no static drift is judged)."""
    nodeclass_hash: str | None = None
    disrupting: bool = False
    """Its termination was requested, or it is a candidate of a command under way: not a candidate again."""
    waiting_for_pods: bool = False
    """Bought for pods still pending (Karpenter's "nominated"): not disrupted while they are on their way."""


@dataclass
class ClusterView:
    now: datetime
    nodes: dict[str, KubeObject] = field(default_factory=dict)
    pods_by_node: dict[str, list[KubeObject]] = field(default_factory=dict)
    pending_pods: list[KubeObject] = field(default_factory=list)
    nodepools: dict[str, KubeObject] = field(default_factory=dict)
    nodeclasses: dict[str, KubeObject] = field(default_factory=dict)
    claims: dict[str, ClaimFacts] = field(default_factory=dict)
    pdbs: list[KubeObject] = field(default_factory=list)
    last_pod_event: dict[str, datetime] = field(default_factory=dict)
    """Node -> when a pod last arrived or left (consolidateAfter counts from it, or from initialization)."""
    catalog_types: dict[str, set[str]] = field(default_factory=dict)
    """NodePool -> the instance types its catalogs offer now, as ``type/zone/capacityType`` offers and bare
    type names (instance type drift); a pool absent here has no catalog known (nothing is judged)."""
    core: ClusterInput | None = None
    """The whole cluster as the scheduling core reads it (NodePools, classes, catalogs, DaemonSets, Nodes,
    bound and pending pods), for repacking; None when the view has none (no consolidation then)."""
    budget_load: dict[str, tuple[int, int]] | None = None
    """NodePool -> (its nodes the budgets count, those of them being disrupted), as the log tells it: a claim
    counts until it is Terminated, its Node drained or gone included (:func:`.candidates.pool_counts`).
    None: counted from ``claims`` and ``nodes`` (a view without a log, as ``tenon simulate`` builds)."""
    hashes: dict[str, tuple[KubeObject, str]] = field(default_factory=dict, compare=False, repr=False)
    """The hashes drift compares claims with, by kind and name, each beside the object it was worked out
    from: once per view while that object stays, not once per claim (a pool of 2,300 claims hashed its
    template 2,300 times)."""

    def pods_on(self, node: str | None) -> list[KubeObject]:
        return [p for p in self.pods_by_node.get(node or "", []) if not is_terminal(p)]

    def claim_of_node(self) -> dict[str, ClaimFacts]:
        return {c.node: c for c in self.claims.values() if c.node}


def matches_selector(selector: Any, labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against ``labels``; None selects
    nothing."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, Mapping) or not _expression(expression, labels):
            return False
    return True


def _expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[str(key)] in values
    if operator == "NotIn":
        return not present or labels[str(key)] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return False


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta(pod).get("labels") or {}).items()}


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta(node).get("labels") or {}).items()}


def pdbs_of(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    namespace = meta(pod).get("namespace") or "default"
    labels = pod_labels(pod)
    return [
        pdb
        for pdb in pdbs
        if (meta(pdb).get("namespace") or "default") == namespace
        and matches_selector(spec(pdb).get("selector"), labels)
    ]
