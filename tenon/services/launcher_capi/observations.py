"""What the launcher sees of Cluster API, as events: MachineDeployments and Machines trimmed to what it
decides on.

The launcher's decisions must replay from the log alone (``tenon replay launcher-capi``), so what it saw of
the management cluster goes into the log first: ``MachineDeploymentObserved`` on
``tenon.capi.machinedeployment.<ns>.<name>`` and ``MachineObserved`` on ``tenon.capi.machine.<ns>.<name>``.
Both carry the object **trimmed to the fields a decision reads**, so that the Cluster API controller rewriting
status or templates is not an event, and a change that matters always is:

* a MachineDeployment: name, namespace, uid, resourceVersion, ``spec.replicas``, ``spec.paused``, and the
  annotations max-size, paused, ``tenon.sh/scaled-up-for`` and ``tenon.sh/scaled-down-for``;
* a Machine: name, namespace, uid, resourceVersion, creation and deletion timestamps, the labels
  ``cluster.x-k8s.io/deployment-name`` and ``karpenter.sh/nodepool``, the annotations ``tenon.sh/nodeclaim``
  (tenon's ownership mark) and ``cluster.x-k8s.io/delete-machine``, and ``spec.providerID``.

Ids derive from the object's uid, resourceVersion and the change (as the pod-watcher's ``NodeObserved``), so
the same observation published twice (by a watch event and by the answer to the launcher's own patch, or by
two leaders) is one event. The observation published right after one of the launcher's own actions on the
object names that action (``after``) and derives its id from it too.

The decider reads the trimmed objects through :class:`MachineDeploymentView` and :class:`MachineView`: plain
values that a bad field cannot make raise (an unreadable number is no number).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from proto.events import KubeObject, MachineDeploymentObserved, MachineObserved, ObservedChange
from proto.registry import LAUNCHER_CAPI
from tenon.core.wellknown import (
    DELETE_MACHINE,
    DEPLOYMENT_NAME,
    MAX_SIZE,
    NODECLAIM,
    NODEPOOL,
    PAUSED,
    SCALED_DOWN_FOR,
    SCALED_UP_FOR,
)
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_capi.catalog import MachineDeploymentKey

PRODUCER = LAUNCHER_CAPI

MACHINE_DEPLOYMENT_ANNOTATIONS = (MAX_SIZE, PAUSED, SCALED_UP_FOR, SCALED_DOWN_FOR)
MACHINE_LABELS = (DEPLOYMENT_NAME, NODEPOOL)
MACHINE_ANNOTATIONS = (NODECLAIM, DELETE_MACHINE)


def ref_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name``: how the launcher's state keys Cluster API objects."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _subset(values: object, keys: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(values, Mapping):
        return {}
    return {k: str(values[k]) for k in keys if k in values and values[k] is not None}


def _trimmed_meta(obj: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in fields if meta.get(k) is not None}


def trim_machine_deployment(md: Mapping[str, Any]) -> KubeObject:
    """The MachineDeployment as a decision reads it (see the module docstring)."""
    meta = _trimmed_meta(md, ("name", "namespace", "uid", "resourceVersion"))
    annotations = _subset((md.get("metadata") or {}).get("annotations"), MACHINE_DEPLOYMENT_ANNOTATIONS)
    if annotations:
        meta["annotations"] = annotations
    spec = md.get("spec") or {}
    return {
        "apiVersion": md.get("apiVersion") or "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": meta,
        "spec": {k: spec[k] for k in ("replicas", "paused") if spec.get(k) is not None},
    }


def trim_machine(machine: Mapping[str, Any]) -> KubeObject:
    """The Machine as a decision reads it (see the module docstring)."""
    fields = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
    meta = _trimmed_meta(machine, fields)
    source = machine.get("metadata") or {}
    for key, wanted in (("labels", MACHINE_LABELS), ("annotations", MACHINE_ANNOTATIONS)):
        kept = _subset(source.get(key), wanted)
        if kept:
            meta[key] = kept
    provider_id = (machine.get("spec") or {}).get("providerID")
    return {
        "apiVersion": machine.get("apiVersion") or "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": meta,
        "spec": {"providerID": provider_id} if provider_id else {},
    }


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or ref_of(obj))


def _key(obj: Mapping[str, Any], change: ObservedChange, after: str | None) -> tuple[object, ...]:
    key: tuple[object, ...] = (_uid(obj), resource_version(obj), change)
    return (*key, after) if after else key


def machine_deployment_observed(
    md: Mapping[str, Any], change: ObservedChange, *, at: datetime | None = None, after: str | None = None
) -> MachineDeploymentObserved:
    """``after``: the launcher's action this observation shows the result of (see :mod:`.state`)."""
    return make_event(
        MachineDeploymentObserved,
        producer=PRODUCER,
        key=_key(md, change, after),
        decided_at=at,
        change=change,
        machine_deployment=trim_machine_deployment(md),
        after=after,
    )


def machine_observed(
    machine: Mapping[str, Any],
    change: ObservedChange,
    *,
    at: datetime | None = None,
    after: str | None = None,
) -> MachineObserved:
    trimmed = trim_machine(machine)
    claim = (trimmed["metadata"].get("annotations") or {}).get(NODECLAIM)
    return make_event(
        MachineObserved,
        producer=PRODUCER,
        key=_key(machine, change, after),
        correlation_id=claim,
        decided_at=at,
        change=change,
        machine=trimmed,
        after=after,
    )


# --- views: the values decisions read -----------------------------------------------------------------------


def _whole_number(value: object) -> int | None:
    """A non-negative whole number from an int or a string of ASCII digits; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value.strip()):
        return int(value.strip())
    return None


def _name_list(value: object) -> tuple[str, ...]:
    return tuple(part for part in str(value or "").split(",") if part)


class MachineDeploymentView(msgspec.Struct, frozen=True):
    """A member MachineDeployment as a decision reads it."""

    namespace: str
    name: str
    replicas: int
    resource_version: str = ""
    uid: str = ""
    max_size: int | None = None
    """The cluster-autoscaler max-size annotation (None: missing or unreadable, no limit; the catalog says
    why)."""
    paused: bool = False
    scaled_up_for: tuple[str, ...] = ()
    scaled_down_for: tuple[str, ...] = ()

    @property
    def key(self) -> MachineDeploymentKey:
        return MachineDeploymentKey(self.namespace, self.name)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def content(self) -> MachineDeploymentView:
        """Everything but the version: two views with the same content decide the same."""
        return msgspec.structs.replace(self, resource_version="")


def machine_deployment_view(md: Mapping[str, Any]) -> MachineDeploymentView:
    meta = md.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = md.get("spec") or {}
    return MachineDeploymentView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        replicas=_whole_number(spec.get("replicas")) or 0,
        resource_version=str(meta.get("resourceVersion") or ""),
        uid=str(meta.get("uid") or ""),
        max_size=_whole_number(annotations.get(MAX_SIZE)),
        paused=spec.get("paused") is True or PAUSED in annotations,
        scaled_up_for=_name_list(annotations.get(SCALED_UP_FOR)),
        scaled_down_for=_name_list(annotations.get(SCALED_DOWN_FOR)),
    )


class MachineView(msgspec.Struct, frozen=True):
    """A Machine as a decision reads it; ``bound_since`` is when the launcher first saw it bound to
    ``claim``."""

    namespace: str
    name: str
    deployment: str | None = None
    claim: str | None = None
    provider_id: str | None = None
    deleting: bool = False
    marked: bool = False
    """Annotated ``cluster.x-k8s.io/delete-machine``: Cluster API removes it first when its MD shrinks."""
    created: str = ""
    resource_version: str = ""
    uid: str = ""
    nodepool: str | None = None
    bound_since: datetime | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def md(self) -> MachineDeploymentKey | None:
        return MachineDeploymentKey(self.namespace, self.deployment) if self.deployment else None

    def content(self) -> MachineView:
        """Everything a watch can change that a decision reads (not the version, not ``bound_since``)."""
        return msgspec.structs.replace(self, resource_version="", bound_since=None)


def machine_view(machine: Mapping[str, Any], *, bound_since: datetime | None = None) -> MachineView:
    meta = machine.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    claim = annotations.get(NODECLAIM) or None
    return MachineView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        deployment=labels.get(DEPLOYMENT_NAME) or None,
        claim=str(claim) if claim else None,
        provider_id=(machine.get("spec") or {}).get("providerID") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        marked=DELETE_MACHINE in annotations,
        created=str(meta.get("creationTimestamp") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        uid=str(meta.get("uid") or ""),
        nodepool=labels.get(NODEPOOL) or None,
        bound_since=bound_since if claim else None,
    )
