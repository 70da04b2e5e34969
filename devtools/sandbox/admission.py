"""Admission for the sandbox: defaulting and validation of objects before the store keeps them.

The real API server rejects objects its clients could not parse back; kubernetes-asyncio's deserializer raises
on a missing required field (OwnerReference ``apiVersion/kind/name/uid``, Taint ``key/effect``, Condition
``type/status``, Container ``name``, Event ``involvedObject``) or a timestamp that is not RFC 3339. So the
sandbox validates every write against those rules and answers 422 ``Invalid`` naming the object and field,
instead of storing something that would later break a watcher far from the cause. Resource quantities
(pod and workload template requests, limits and overhead; node capacity and allocatable) are checked as the
kube-apiserver checks them, by :mod:`devtools.sandbox.resource_validation`, every problem of an object
reported in one answer.

Custom resources (kinds a CustomResourceDefinition defines) are checked against their CRD's structural
schema and CEL rules (:mod:`devtools.sandbox.structural`, :mod:`devtools.sandbox.cel_validation`), every
problem in one 422 worded as the API server words it; the CEL rules run once the schema holds (a rule over
a mistyped value would only add noise). A CRD itself is checked by :func:`devtools.sandbox.crds.crd_errors`
and gets the API server's defaults and status.

Defaulting copies the handful of defaults the rest of the system relies on: pods get ``schedulerName``,
``restartPolicy``, ``terminationGracePeriodSeconds`` and the DefaultTolerationSeconds admission's
``not-ready``/``unreachable`` NoExecute tolerations, and a container's limit stands for its missing request
(``SetDefaults_Pod``); Deployments, ReplicaSets and MachineDeployments get ``replicas: 1``.

A new pod's ``spec.priority`` is what the Priority admission plugin computes (:func:`admit_priority`): the
value of its ``priorityClassName``, or 0 without one. The sandbox serves no PriorityClass objects, only the
two every kube-apiserver creates (:data:`SYSTEM_PRIORITY_CLASSES`); another class name, or a priority that is
not the computed one, is refused with the plugin's 403. A node agent's DaemonSet that names
``system-node-critical`` has its pods scheduled ahead of any backlog of workload pods, as on a real cluster.

Functions here are pure: plain dicts in, a new or validated dict out, :class:`Invalid` on bad input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from devtools.sandbox import crds, resource_validation
from devtools.sandbox.cel_validation import rule_errors
from devtools.sandbox.errors import Forbidden, Invalid
from devtools.sandbox.resource_validation import FieldError
from devtools.sandbox.resources import ResourceType
from devtools.sandbox.structural import ABSENT

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NS_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TIME_FIELDS = ("lastTransitionTime", "lastHeartbeatTime", "lastProbeTime", "lastUpdateTime")
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})

DEFAULT_TOLERATIONS: tuple[dict[str, Any], ...] = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
_REPLICATED = frozenset({"deployments", "replicasets", "machinedeployments"})


def _who(rt: ResourceType, obj: dict[str, Any]) -> str:
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind  # the API server's qualified kind
    return f'{kind} "{name}"'


_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
)


def _cause(field: str, problem: str) -> dict[str, str]:
    reason = next((r for prefix, r in _CAUSE_REASONS if problem.startswith(prefix)), "FieldValueInvalid")
    return {"reason": reason, "message": problem, "field": field}


def _invalid(rt: ResourceType, obj: dict[str, Any], field: str, problem: str) -> Invalid:
    return _invalid_all(rt, obj, [(field, problem)])


def _invalid_all(rt: ResourceType, obj: dict[str, Any], errors: list[FieldError]) -> Invalid:
    """One 422 for every problem found, worded as the API server words an aggregate of field errors."""
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    listed = [f"{field}: {problem}" for field, problem in errors]
    summary = listed[0] if len(listed) == 1 else f"[{', '.join(listed)}]"
    return Invalid(
        f"{_who(rt, obj)} is invalid: {summary}",
        details={
            "name": meta.get("name", ""),
            "group": rt.group,
            "kind": rt.kind,
            "causes": [_cause(field, problem) for field, problem in errors],
        },
    )


_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _NAME_RE.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME_RE.match(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE_RE.match(value))


def is_rfc3339(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
"""The PriorityClasses a kube-apiserver creates at start (``scheduling.k8s.io/v1``), by name."""


def admit_priority(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A new pod with the ``spec.priority`` the Priority admission plugin computes; :class:`Forbidden` for a
    class the sandbox does not serve, or a priority given in the spec that is not the computed one."""
    if not (rt.group == "" and rt.plural == "pods") or not isinstance(obj.get("spec"), dict):
        return obj
    spec = obj["spec"]
    name = (obj.get("metadata") or {}).get("name") or ""
    class_name = spec.get("priorityClassName")
    computed = 0
    if class_name:
        if class_name not in SYSTEM_PRIORITY_CLASSES:
            raise Forbidden(f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found')
        computed = SYSTEM_PRIORITY_CLASSES[class_name]
    given = spec.get("priority")
    if given is not None and given != computed:
        raise Forbidden(
            f'pods "{name}" is forbidden: the integer value of priority ({given}) must not be provided in '
            f"pod spec; priority admission controller computed {computed} from the given PriorityClass name"
        )
    return {**obj, "spec": {**spec, "priority": computed}}


def apply_defaults(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` with server-side defaults filled in (copies the parts it changes)."""
    if rt.group == "" and rt.plural == "pods":
        spec = dict(obj.get("spec") or {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("priority", 0)
        tolerations = list(spec.get("tolerations") or [])
        for default in DEFAULT_TOLERATIONS:
            if not any(
                (t.get("key") == default["key"] and t.get("effect") in (None, "", "NoExecute"))
                or (not t.get("key") and t.get("operator") == "Exists")
                for t in tolerations
            ):
                tolerations.append(dict(default))
        spec["tolerations"] = tolerations
        obj = {**obj, "spec": resource_validation.default_requests_from_limits(spec)}
    elif rt.plural in _REPLICATED and isinstance(obj.get("spec"), dict) and "replicas" not in obj["spec"]:
        obj = {**obj, "spec": {**obj["spec"], "replicas": 1}}
    elif (rt.group, rt.plural) == (crds.GROUP, "customresourcedefinitions"):
        obj = crds.with_defaults(obj)
    return obj


def validate(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """Raise :class:`Invalid` if the object would break clients or violate the kind's basic rules.

    ``old`` is the stored version an update replaces: a part it shares unchanged (the very same object, as a
    status write shares the spec and the labels) passed these checks when it was stored and is not checked
    again. The parts skipped so are those only admitted writes set: the name, the labels, the conditions and
    the spec of a pod or node.
    """
    old_meta: dict[str, Any] = old["metadata"] if old is not None else {}
    _validate_name(rt, obj, old_meta.get("name"))
    meta = obj["metadata"]
    labels = meta.get("labels")
    if old is None or labels is not old_meta.get("labels"):
        _validate_string_map(rt, obj, labels, "labels")
    _validate_string_map(rt, obj, meta.get("annotations"), "annotations")
    _validate_finalizers(rt, obj, meta.get("finalizers"))
    _validate_owner_references(rt, obj, meta.get("ownerReferences"))
    for key in ("spec", "status"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], dict):
            raise _invalid(rt, obj, key, "Invalid value: must be an object")
    _validate_conditions(rt, obj, old)
    spec_rules = _SPEC_RULES.get((rt.group, rt.plural))
    if spec_rules is not None and (old is None or obj.get("spec") is not old.get("spec")):
        spec_rules(rt, obj)
    kind_rules = _KIND_RULES.get((rt.group, rt.plural))
    if kind_rules is not None:
        kind_rules(rt, obj)
    if rt.group and rt.plural in _REPLICATED:
        _validate_replicas(rt, obj)
    _validate_resources(rt, obj, old)
    if rt.custom is not None:
        _validate_custom(rt, obj, old)


def _validate_custom(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """A custom resource against its CRD's schema, then its CEL rules (ratcheting what ``old`` had)."""
    schema = rt.custom.schema if rt.custom is not None else None
    if schema is None:
        return
    errors = schema.validate(obj, old)
    if not errors and schema.root.has_rules:
        errors = rule_errors(schema.root, obj, "", old if old is not None else ABSENT)
    if errors:
        raise _invalid_all(rt, obj, errors)


def _validate_crd(rt: ResourceType, obj: dict[str, Any]) -> None:
    errors = crds.crd_errors(obj)
    if errors:
        raise _invalid_all(rt, obj, errors)


def _validate_name(rt: ResourceType, obj: dict[str, Any], stored_name: str | None) -> None:
    """``stored_name``: the name of the stored object an update replaces, valid since its create."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise _invalid(rt, obj, "metadata", "Required value: metadata must be an object")
    name = meta.get("name")
    if stored_name is not None and name == stored_name:
        return
    if not isinstance(name, str) or not name:
        raise _invalid(rt, obj, "metadata.name", "Required value: name or generateName is required")
    if len(name) > 253 or not _NAME_RE.match(name):
        raise _invalid(
            rt,
            obj,
            "metadata.name",
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    if rt.plural == "namespaces" and (len(name) > 63 or not _NS_RE.match(name)):
        raise _invalid(
            rt, obj, "metadata.name", f'Invalid value: "{name}": a namespace name must be an RFC 1123 label'
        )


def _validate_string_map(rt: ResourceType, obj: dict[str, Any], values: Any, map_field: str) -> None:
    """``metadata.labels`` / ``metadata.annotations``: strings only, and label syntax for labels."""
    if values is None:
        return
    if not isinstance(values, dict):
        raise _invalid(rt, obj, f"metadata.{map_field}", "Invalid value: must be a map of string to string")
    for key, value in values.items():
        if not isinstance(value, str):
            raise _invalid(rt, obj, f"metadata.{map_field}[{key}]", "Invalid value: values must be strings")
        if map_field == "labels":
            _validate_label(rt, obj, key, value)


def _validate_label(rt: ResourceType, obj: dict[str, Any], key: str, value: str) -> None:
    if not is_label_key(key):
        raise _invalid(
            rt,
            obj,
            f"metadata.labels[{key}]",
            f'Invalid value: "{key}": a label key is an optional DNS-subdomain prefix and "/" '
            "followed by a name of at most 63 alphanumeric characters, '-', '_' or '.'",
        )
    if not is_label_value(value):
        raise _invalid(
            rt,
            obj,
            f"metadata.labels[{key}]",
            f'Invalid value: "{value}": a label value must be at most 63 alphanumeric '
            "characters, '-', '_' or '.', starting and ending with an alphanumeric",
        )


def _validate_finalizers(rt: ResourceType, obj: dict[str, Any], finalizers: Any) -> None:
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) and f for f in finalizers)
    ):
        raise _invalid(rt, obj, "metadata.finalizers", "Invalid value: must be a list of non-empty strings")


def _validate_owner_references(rt: ResourceType, obj: dict[str, Any], owners: Any) -> None:
    if owners is None:
        return
    if not isinstance(owners, list):
        raise _invalid(rt, obj, "metadata.ownerReferences", "Invalid value: must be a list")
    for i, ref in enumerate(owners):
        for required in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(required):
                raise _invalid(rt, obj, f"metadata.ownerReferences[{i}].{required}", "Required value")


def _validate_replicas(rt: ResourceType, obj: dict[str, Any]) -> None:
    replicas = (obj.get("spec") or {}).get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
        raise _invalid(
            rt, obj, "spec.replicas", f"Invalid value: {replicas!r}: must be a non-negative integer"
        )


def _validate_node(rt: ResourceType, obj: dict[str, Any]) -> None:
    _validate_taints(rt, obj, (obj.get("spec") or {}).get("taints"), "spec.taints")


def _validate_event(rt: ResourceType, obj: dict[str, Any]) -> None:
    if not isinstance(obj.get("involvedObject"), dict):
        raise _invalid(rt, obj, "involvedObject", "Required value")


# Where a kind keeps the quantities admission checks (the part of the object), and how to find their problems.
_RESOURCE_PARTS: dict[tuple[str, str], tuple[str, Callable[[Any], list[FieldError]]]] = {
    ("", "pods"): ("spec", resource_validation.pod_errors),
    ("", "nodes"): ("status", resource_validation.node_errors),
    ("apps", "deployments"): ("spec", resource_validation.template_errors),
    ("apps", "replicasets"): ("spec", resource_validation.template_errors),
    ("apps", "daemonsets"): ("spec", resource_validation.template_errors),
}


def _validate_resources(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Requests, limits, overhead, capacity: every problem of the object in one 422."""
    found = _RESOURCE_PARTS.get((rt.group, rt.plural))
    if found is None:
        return
    part, problems_of = found
    value = obj.get(part)
    if old is not None and value is old.get(part):
        return  # the stored part itself, admitted before (a status write keeps the spec object)
    errors = problems_of(value)
    if errors:
        raise _invalid_all(rt, obj, errors)


def _validate_conditions(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    status = obj.get("status")
    if not isinstance(status, dict) or status.get("conditions") is None:
        return
    conditions = status["conditions"]
    old_status = old.get("status") if old is not None else None
    if isinstance(old_status, dict) and conditions is old_status.get("conditions"):
        return  # the stored list itself (a status patch that leaves the conditions alone)
    if not isinstance(conditions, list):
        raise _invalid(rt, obj, "status.conditions", "Invalid value: must be a list")
    for i, cond in enumerate(conditions):
        if not isinstance(cond, dict):
            raise _invalid(rt, obj, f"status.conditions[{i}]", "Invalid value: must be an object")
        for required in ("type", "status"):
            if not cond.get(required):
                raise _invalid(rt, obj, f"status.conditions[{i}].{required}", "Required value")
        for time_field in _TIME_FIELDS:
            if cond.get(time_field) is not None and not is_rfc3339(cond[time_field]):
                raise _invalid(
                    rt,
                    obj,
                    f"status.conditions[{i}].{time_field}",
                    f'Invalid value: "{cond[time_field]}": must be an RFC 3339 timestamp',
                )


def _validate_taints(rt: ResourceType, obj: dict[str, Any], taints: Any, field: str) -> None:
    if taints is None:
        return
    if not isinstance(taints, list):
        raise _invalid(rt, obj, field, "Invalid value: must be a list")
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not taint.get("key"):
            raise _invalid(rt, obj, f"{field}[{i}].key", "Required value")
        if taint.get("effect") not in _TAINT_EFFECTS:
            raise _invalid(
                rt,
                obj,
                f"{field}[{i}].effect",
                f'Unsupported value: "{taint.get("effect")}": supported values: '
                + ", ".join(f'"{e}"' for e in sorted(_TAINT_EFFECTS)),
            )


def _validate_pod(rt: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(rt, obj, "spec", "Required value")
    for list_field in ("containers", "initContainers"):
        containers = spec.get(list_field)
        if list_field == "containers" and not containers:
            raise _invalid(rt, obj, "spec.containers", "Required value")
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise _invalid(rt, obj, f"spec.{list_field}", "Invalid value: must be a list")
        for i, container in enumerate(containers):
            if not isinstance(container, dict) or not container.get("name"):
                raise _invalid(rt, obj, f"spec.{list_field}[{i}].name", "Required value")


# Rules that read only the spec: an update keeping the stored spec object passed them already.
_SPEC_RULES: dict[tuple[str, str], Callable[[ResourceType, dict[str, Any]], None]] = {
    ("", "pods"): _validate_pod,
    ("", "nodes"): _validate_node,
}
_KIND_RULES: dict[tuple[str, str], Callable[[ResourceType, dict[str, Any]], None]] = {
    ("", "events"): _validate_event,
    (crds.GROUP, "customresourcedefinitions"): _validate_crd,
}


# Pod spec fields an update may change (the rest of a pod's spec is immutable once created).
_MUTABLE_POD_SPEC = frozenset(
    {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"}
)


def check_pod_spec_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Pod updates may change only images, a few scalar fields and tolerations (nodeName needs binding)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}

    def comparable(spec: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
        for list_field in ("containers", "initContainers"):
            if isinstance(out.get(list_field), list):
                out[list_field] = [
                    {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                    for c in out[list_field]
                ]
        return out

    if comparable(old_spec) != comparable(new_spec):
        changed = sorted(
            k
            for k in set(old_spec) | set(new_spec)
            if k not in _MUTABLE_POD_SPEC and old_spec.get(k) != new_spec.get(k)
        )
        raise _invalid(
            rt,
            new,
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
            f"(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
            f"(changed: {', '.join(changed) or 'containers'}; use the binding subresource to set "
            "spec.nodeName)",
        )
