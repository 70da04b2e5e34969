"""Least data: the parts of a Pod, a Node or a DaemonSet that scheduling reads, and nothing else.

The event log keeps what the pod-watcher publishes for days, and everyone who may read the log reads it. So
pods are not recorded whole: a container's ``env`` holds passwords and tokens, ``args`` and ``command`` hold
more, annotations hold whatever tools put there (``kubectl.kubernetes.io/last-applied-configuration`` is a
copy of the whole manifest, env values included). What a scheduling, disruption or explanation decision reads
is kept; everything else is dropped by construction (an allow-list: a field Kubernetes adds tomorrow stays
out until someone decides tenon needs it).

Kept for a pod
--------------
``metadata``: name, namespace, uid, resourceVersion, creationTimestamp, deletionTimestamp, labels,
ownerReferences (kind, name, uid, controller), and only the annotations tenon reads
(:data:`READ_ANNOTATIONS`). ``spec``: nodeName, schedulerName, priority, priorityClassName,
preemptionPolicy, nodeSelector, affinity, tolerations, topologySpreadConstraints, schedulingGates, overhead,
runtimeClassName, hostNetwork; per container and init container its name, resources (requests, limits),
restartPolicy (a sidecar's requests count for the whole pod) and host ports; volumes by name with their
claim (``persistentVolumeClaim.claimName``; an ``ephemeral`` volume's storage class and size). ``status``:
phase, nominatedNodeName, conditions (type, status, reason, message, lastTransitionTime).

Kept for a node
---------------
``metadata``: name, uid, resourceVersion, creationTimestamp, deletionTimestamp, labels, finalizers (the
scheduler adds tenon's termination finalizer with a merge patch of the whole list, so it must know the
others), ownerReferences and the annotations tenon reads. ``spec``: taints, unschedulable, providerID.
``status``: capacity, allocatable, conditions (without heartbeats). Never addresses, images, daemon
endpoints or node info (kernel, container runtime versions).

A DaemonSet keeps its metadata like a pod, its selector and its pod template reduced like a pod's spec: its
pods land on every new node, so their requests and constraints count; their environment does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tenon.core.wellknown import DO_NOT_DISRUPT

KubeObject = dict[str, Any]

READ_ANNOTATIONS = frozenset({DO_NOT_DISRUPT})
"""The annotations tenon reads on pods and nodes (:mod:`tenon.core.wellknown`); all others stay out."""

_POD_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_NODE_META = (*_POD_META, "finalizers")
_POD_SPEC = (
    "nodeName",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
    "overhead",
    "runtimeClassName",
    "hostNetwork",
)
_OWNER = ("apiVersion", "kind", "name", "uid", "controller")
_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
_PORT = ("name", "containerPort", "hostPort", "protocol", "hostIP")


def _pick(source: Any, keys: Iterable[str]) -> dict[str, Any]:
    """The keys of ``source`` that are present (and not None), or nothing if it is not an object. Objects are
    as JSON decodes them, so an object is a ``dict`` (an ABC check costs a third of a view, made for every
    pod batched or bound); whatever else is where an object should be is left out, never raised on."""
    if not isinstance(source, dict):
        return {}
    return {key: source[key] for key in keys if source.get(key) is not None}


def _each(items: Any, view: Callable[[Mapping[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    return [view(item) for item in items or () if isinstance(item, dict)] if isinstance(items, list) else []


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value not in (None, {}, []):
        target[key] = value


def _metadata(meta: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    out = _pick(meta, keys)
    if not isinstance(meta, dict):
        return out
    _put(out, "labels", meta.get("labels") if isinstance(meta.get("labels"), dict) else None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        _put(out, "annotations", {k: v for k, v in annotations.items() if k in READ_ANNOTATIONS})
    _put(out, "ownerReferences", _each(meta.get("ownerReferences"), lambda ref: _pick(ref, _OWNER)))
    return out


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(container, ("name", "restartPolicy"))
    resources = container.get("resources")
    _put(out, "resources", _pick(resources, ("requests", "limits")))
    ports = [
        port for port in _each(container.get("ports"), lambda p: _pick(p, _PORT)) if port.get("hostPort")
    ]
    _put(out, "ports", ports)
    return out


def _volume(volume: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(volume, ("name",))
    claim = _pick(volume.get("persistentVolumeClaim"), ("claimName", "readOnly"))
    _put(out, "persistentVolumeClaim", claim)
    ephemeral = volume.get("ephemeral")
    if isinstance(ephemeral, dict):
        template = ephemeral.get("volumeClaimTemplate")
        spec = template.get("spec") if isinstance(template, dict) else None
        kept = _pick(spec, ("storageClassName", "accessModes"))
        _put(
            kept, "resources", _pick(spec.get("resources") if isinstance(spec, dict) else None, ("requests",))
        )
        out["ephemeral"] = {"volumeClaimTemplate": {"spec": kept}}
    return out


def pod_spec_view(spec: Any) -> dict[str, Any]:
    """What scheduling reads from a pod spec (a pod's, or a DaemonSet's template's)."""
    out = _pick(spec, _POD_SPEC)
    if not isinstance(spec, dict):
        return out
    _put(out, "containers", _each(spec.get("containers"), _container))
    _put(out, "initContainers", _each(spec.get("initContainers"), _container))
    volumes = [v for v in _each(spec.get("volumes"), _volume) if len(v) > 1]  # only volumes with a claim
    _put(out, "volumes", volumes)
    return out


def _conditions(status: Any) -> list[dict[str, Any]]:
    listed = status.get("conditions") if isinstance(status, dict) else None
    return _each(listed, lambda condition: _pick(condition, _CONDITION))


def pod_view(pod: Mapping[str, Any]) -> KubeObject:
    """A pod as the pod-watcher records it (see the module docstring)."""
    out: KubeObject = _pick(pod, ("apiVersion", "kind"))
    out["metadata"] = _metadata(pod.get("metadata"), _POD_META)
    out["spec"] = pod_spec_view(pod.get("spec"))
    status = _pick(pod.get("status"), ("phase", "nominatedNodeName"))
    _put(status, "conditions", _conditions(pod.get("status")))
    out["status"] = status
    return out


def node_view(node: Mapping[str, Any]) -> KubeObject:
    """A Node as the pod-watcher records it (see the module docstring)."""
    out: KubeObject = _pick(node, ("apiVersion", "kind"))
    out["metadata"] = _metadata(node.get("metadata"), _NODE_META)
    out["spec"] = _pick(node.get("spec"), ("taints", "unschedulable", "providerID"))
    status = _pick(node.get("status"), ("capacity", "allocatable"))
    _put(status, "conditions", _conditions(node.get("status")))
    out["status"] = status
    return out


def pdb_view(pdb: Mapping[str, Any]) -> KubeObject:
    """A PodDisruptionBudget as the pod-watcher records it: whom it covers and what it allows now."""
    out: KubeObject = _pick(pdb, ("apiVersion", "kind"))
    out["metadata"] = _metadata(pdb.get("metadata"), _POD_META)
    out["spec"] = _pick(
        pdb.get("spec"), ("selector", "minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy")
    )
    out["status"] = _pick(
        pdb.get("status"), ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
    )
    return out


def daemonset_view(daemonset: Mapping[str, Any]) -> KubeObject:
    """A DaemonSet as the pod-watcher records it: its pods' scheduling needs, not their configuration."""
    out: KubeObject = _pick(daemonset, ("apiVersion", "kind"))
    out["metadata"] = _metadata(daemonset.get("metadata"), _POD_META)
    spec = daemonset.get("spec")
    kept = _pick(spec, ("selector",))
    template = spec.get("template") if isinstance(spec, dict) else None
    if isinstance(template, dict):
        kept["template"] = {
            "metadata": _metadata(template.get("metadata"), ()),
            "spec": pod_spec_view(template.get("spec")),
        }
    out["spec"] = kept
    return out
