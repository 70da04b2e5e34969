"""Pure Kubernetes matching rules shared by the sandbox's controllers: requests, taints, selectors, readiness.

Everything here takes plain API objects (dicts as the store holds them) and returns plain answers; there is
no I/O and no state. The scheduler (``scheduler.py`` + ``scheduling_filters.py``), the DaemonSet controller,
the PDB controller and the kubelet all need the same answers to "what does this pod request", "does this
pod tolerate that taint", "does this label selector match", so they live in one place and are written after
the real implementations:

* **Pod requests** (``component-helpers/resource/helpers.go`` ``PodRequests``): the sum of regular
  containers plus restartable init containers (sidecars, ``restartPolicy: Always``), then the element-wise
  max against each regular init container's request plus the sidecars declared before it; pod-level
  ``spec.resources.requests`` override cpu/memory when set; ``spec.overhead`` is added last.
* **Tolerations** (``k8s.io/api/core/v1/toleration.go`` ``ToleratesTaint``): an empty effect matches every
  effect; an empty key with ``Exists`` matches every taint; ``Exists`` ignores the value; ``Equal`` (or no
  operator) compares it.
* **Label selectors** (``metav1.LabelSelector``): ``matchLabels`` AND ``matchExpressions`` with In, NotIn,
  Exists, DoesNotExist. An *empty* selector matches everything; a *missing* one matches nothing where the
  API says so (pod affinity terms), which is the caller's choice via ``none_matches``.
* **Node selector terms** (``nodeSelectorTerms``): terms ORed, expressions ANDed, operators In, NotIn,
  Exists, DoesNotExist, Gt, Lt (integers); ``matchFields`` supports ``metadata.name`` only.

Malformed input raises ``ValueError`` naming the object and field (e.g. an unknown selector operator).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from devtools.sandbox.controllers.resource_lists import add_into, max_into, resource_list
from tenon.core.wellknown import NOT_READY_TAINT

NOT_READY_NO_SCHEDULE = {"key": NOT_READY_TAINT, "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

Obj = dict[str, Any]


def object_ref(obj: Mapping[str, Any]) -> str:
    """``kind namespace/name`` for error messages."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "object").lower()
    name = meta.get("name", "?")
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


# ---------------------------------------------------------------------------------------------- requests
def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    return resource_list((container.get("resources") or {}).get("requests"), f"{where}.resources.requests")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod asks the scheduler for, in scheduler units (cpu millicores, bytes, counts)."""
    spec = pod.get("spec") or {}
    where = f"pod {pod_key(pod)}: spec"
    total: dict[str, int] = {}
    for i, container in enumerate(spec.get("containers") or []):
        add_into(total, _container_requests(container, f"{where}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        request = _container_requests(container, f"{where}.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            add_into(sidecars, request)
            add_into(total, request)
        else:
            max_into(init_max, add_into(dict(request), sidecars))
    max_into(total, init_max)
    pod_level = resource_list((spec.get("resources") or {}).get("requests"), f"{where}.resources.requests")
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    add_into(total, resource_list(spec.get("overhead"), f"{where}.overhead"))
    return {name: amount for name, amount in total.items() if amount}


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def get_condition(obj: Mapping[str, Any], cond_type: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == cond_type:
            return condition  # type: ignore[no-any-return]
    return None


def condition_true(obj: Mapping[str, Any], cond_type: str) -> bool:
    condition = get_condition(obj, cond_type)
    return condition is not None and condition.get("status") == "True"


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """Ready as the disruption controller counts it: Running, Ready=True, not being deleted."""
    return (
        (pod.get("status") or {}).get("phase") == "Running"
        and condition_true(pod, "Ready")
        and not is_terminating(pod)
    )


def node_is_ready(node: Mapping[str, Any]) -> bool:
    return condition_true(node, "Ready")


# ------------------------------------------------------------------------------------------------ taints
def node_taints(node: Mapping[str, Any]) -> list[Obj]:
    """The node's taints as the scheduler sees them.

    A node that has no ``Ready`` condition at all has not been registered by a kubelet yet; the real node
    lifecycle controller would add ``node.kubernetes.io/not-ready:NoSchedule`` to it, so it is added here
    too. That closes the window in which a node created straight through the API (before the simulated
    kubelet has marked it NotReady) would look schedulable.
    """
    taints = list((node.get("spec") or {}).get("taints") or [])
    if get_condition(node, "Ready") is None and not any(t.get("key") == NOT_READY_TAINT for t in taints):
        taints.append(dict(NOT_READY_NO_SCHEDULE))
    return taints


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    tolerations: Sequence[Mapping[str, Any]] | None,
    taints: Iterable[Mapping[str, Any]],
    effects: frozenset[str] = SCHEDULING_EFFECTS,
) -> Mapping[str, Any] | None:
    """The first taint with one of ``effects`` that no toleration tolerates, or None."""
    tolerations = tolerations or []
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# --------------------------------------------------------------------------------------------- selectors
def match_label_selector(
    selector: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None,
    *,
    none_matches: bool = False,
    where: str = "labelSelector",
) -> bool:
    """Does a ``metav1.LabelSelector`` match ``labels``? An empty selector matches everything."""
    if selector is None:
        return none_matches
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        key = expr.get("key")
        operator = expr.get("operator")
        values = expr.get("values") or []
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            raise ValueError(f"{where}.matchExpressions[{i}].operator: unknown operator {operator!r}")
        if not ok:
            return False
    return True


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _node_requirement_matches(expr: Mapping[str, Any], value: str | None, where: str) -> bool:
    operator = expr.get("operator")
    values = expr.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        actual = _int_or_none(value)
        bound = _int_or_none(values[0]) if len(values) == 1 else None
        if bound is None:
            raise ValueError(f"{where}.values: {operator} needs exactly one integer value, got {values!r}")
        if actual is None:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    raise ValueError(f"{where}.operator: unknown operator {operator!r}")


def node_selector_term_matches(
    term: Mapping[str, Any], node_name: str, labels: Mapping[str, str], where: str = "nodeSelectorTerm"
) -> bool:
    """A ``NodeSelectorTerm``: all expressions and fields must match. An empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not expressions and not field_exprs:
        return False
    for i, expr in enumerate(expressions):
        if not _node_requirement_matches(
            expr, labels.get(expr.get("key", "")), f"{where}.matchExpressions[{i}]"
        ):
            return False
    for i, expr in enumerate(field_exprs):
        if expr.get("key") != "metadata.name":
            raise ValueError(
                f"{where}.matchFields[{i}].key: only metadata.name is supported, got {expr.get('key')!r}"
            )
        if not _node_requirement_matches(expr, node_name, f"{where}.matchFields[{i}]"):
            return False
    return True


def node_matches_pod(pod: Mapping[str, Any], node_name: str, labels: Mapping[str, str]) -> bool:
    """``spec.nodeSelector`` AND the required node affinity (terms ORed)."""
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    where = f"pod {pod_key(pod)}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = required.get("nodeSelectorTerms") or []
    return any(
        node_selector_term_matches(term, node_name, labels, f"{where}.nodeSelectorTerms[{i}]")
        for i, term in enumerate(terms)
    )


NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def validate_node_affinity(pod: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the field if the required node affinity cannot be evaluated.

    The scheduler's PreFilter step: a malformed term is reported whether or not any node would reach it.
    """
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return
    where = f"pod {pod_key(pod)}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        for field_name in ("matchExpressions", "matchFields"):
            for j, expr in enumerate(term.get(field_name) or []):
                at = f"{where}.nodeSelectorTerms[{i}].{field_name}[{j}]"
                operator = expr.get("operator")
                if operator not in NODE_OPERATORS:
                    raise ValueError(f"{at}.operator: unknown operator {operator!r}")
                values = expr.get("values") or []
                if operator in ("Gt", "Lt") and (len(values) != 1 or _int_or_none(values[0]) is None):
                    raise ValueError(
                        f"{at}.values: {operator} needs exactly one integer value, got {values!r}"
                    )
                if field_name == "matchFields" and expr.get("key") != "metadata.name":
                    raise ValueError(f"{at}.key: only metadata.name is supported, got {expr.get('key')!r}")


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """Allocatable (falling back to capacity, as the kubelet reports when nothing is reserved)."""
    status = node.get("status") or {}
    values = status.get("allocatable") or status.get("capacity") or {}
    return resource_list(values, f"node {(node.get('metadata') or {}).get('name')}: status.allocatable")
