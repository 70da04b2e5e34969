"""What a Kubernetes object carried in an event must be: what any kube-apiserver guarantees of the objects it
serves, for the parts tenon indexes and folds by.

Observations (a Node, a bound pod, a Machine, the NodePools of a snapshot) are copied from an API server by
the service that owns them, so an object that breaks these rules did not come from one: a forged or corrupted
event. :func:`object_refusal` says why in one line, and :func:`proto.registry.refusal` refuses the whole
event with it (it goes to the dead letters), before any decider folds it: a name that is a list or a node name
that is a number must never reach a projection's indexes or a snapshot.

The checks are shallow on purpose: the shape of ``metadata`` (a map; ``name`` a non-empty string;
``namespace``, and the keys and values of ``labels`` and ``annotations``, strings), ``spec`` and ``status``
maps, and the strings tenon keys by (``spec.nodeName``, ``spec.providerID``). Whether a pod can be scheduled
(a request of ``1e5000`` CPUs) is the scheduling core's question, answered per pod with the field named: one
such pod never sinks its batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proto import events as ev

OBJECT_FIELDS: dict[type[ev.Event], tuple[str, ...]] = {
    ev.PendingBatch: ("pods",),
    ev.NodeObserved: ("node",),
    ev.BoundPodObserved: ("pod",),
    ev.NodePoolsSnapshot: ("nodepools",),
    ev.NodeClassesSnapshot: ("nodeclasses",),
    ev.DaemonSetsSnapshot: ("daemonsets",),
    ev.PodDisruptionBudgetsSnapshot: ("pdbs",),
    ev.CatalogSnapshot: ("sources",),
    ev.MachineDeploymentObserved: ("machine_deployment",),
    ev.MachineObserved: ("machine",),
}
"""Event type -> its fields that hold Kubernetes objects (one object, or a tuple of them)."""

_KEYED_SPEC_FIELDS = ("nodeName", "providerID")


def event_refusal(event: ev.Event) -> str | None:
    """Why one of ``event``'s Kubernetes objects cannot have come from an API server (None: none)."""
    for name in OBJECT_FIELDS.get(type(event), ()):
        value = getattr(event, name)
        objects = value if isinstance(value, tuple) else (value,)
        for index, obj in enumerate(objects):
            reason = object_refusal(obj)
            if reason is not None:
                where = f"{name}[{index}]" if isinstance(value, tuple) else name
                return f"{type(event).__name__}.{where}: {reason}"
    return None


def object_refusal(obj: Any) -> str | None:
    """Why ``obj`` is not a Kubernetes object as an API server serves it, in one line (None: it is)."""
    if not isinstance(obj, Mapping):
        return f"not an object but {_shown(obj)}"
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return f"metadata must be a map, got {_shown(metadata)}"
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return f"metadata.name must be a non-empty string, got {_shown(name)}"
    return (
        _optional_text(metadata, "namespace", "metadata")
        or _string_map(metadata, "labels")
        or _string_map(metadata, "annotations")
        or _optional_map(obj, "spec")
        or _optional_map(obj, "status")
        or _keyed_spec_fields(obj)
    )


def _keyed_spec_fields(obj: Mapping[str, Any]) -> str | None:
    spec = obj.get("spec") or {}
    for key in _KEYED_SPEC_FIELDS:
        reason = _optional_text(spec, key, "spec")
        if reason:
            return reason
    return None


def _optional_text(parent: Mapping[str, Any], key: str, path: str) -> str | None:
    value = parent.get(key)
    if value is None or isinstance(value, str):
        return None
    return f"{path}.{key} must be a string, got {_shown(value)}"


def _optional_map(parent: Mapping[str, Any], key: str) -> str | None:
    value = parent.get(key)
    if value is None or isinstance(value, Mapping):
        return None
    return f"{key} must be a map, got {_shown(value)}"


def _string_map(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"metadata.{key} must be a map, got {_shown(value)}"
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return f"metadata.{key}.{k} must be a string, got {_shown(v)}"
    return None


def _shown(value: Any) -> str:
    """A value in an error: its type and a short form (never a whole structure)."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"
