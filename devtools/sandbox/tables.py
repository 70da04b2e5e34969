"""Server-side printing: ``meta.k8s.io/v1 Table`` answers for ``kubectl get``.

kubectl asks for lists and watches with ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...``. The
real server renders the columns a person expects (a pod's STATUS and NODE, a node's Ready state); without
that kubectl falls back to ``NAME AGE``, which hides exactly what a user trying tenon wants to see: pods
Pending, nodes NotReady, NodeClaims without a node. So the sandbox renders tables for the kinds it serves,
with the upstream column sets (kube's printers for built-in kinds, the CRDs' ``additionalPrinterColumns`` for
Karpenter and Cluster API). Columns with ``priority: 1`` appear with ``-o wide``.

A kind a CustomResourceDefinition defines is printed as the API server prints it: ``NAME``, then the CRD's
``additionalPrinterColumns`` read with their JSONPath (a ``date`` column as an age, a missing value as
``null``), or ``NAME`` and ``AGE`` when the CRD lists none. The hand-written Karpenter and Cluster API
printers below serve the store's stand-ins for those kinds, used when their CRDs are not installed.

Cells are computed from plain object dicts; ages use the real ``HumanDuration`` format (``45s``, ``3m12s``,
``5h``, ``2d3h``). Each row carries the object's metadata as ``PartialObjectMetadata`` (the default
``includeObject=Metadata``), the full object for ``includeObject=Object``, or nothing for ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devtools.sandbox.crds import PrinterColumn
from devtools.sandbox.resources import ResourceType

Obj = dict[str, Any]


@dataclass(frozen=True)
class Column:
    name: str
    priority: int = 0
    type: str = "string"
    format: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": "",
            "priority": self.priority,
        }


def wants_table(accept: str | None) -> bool:
    """True when the client's preferred representation is a Table (its first Accept entry)."""
    if not accept:
        return False
    first = accept.split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def _age(obj: Obj, now: float) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration(now - created)


def _get(obj: Any, *path: str, default: Any = None) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(part)
        if obj is None:
            return default
    return obj


def _condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    for cond in _get(obj, "status", "conditions", default=[]) or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def _none(value: Any) -> Any:
    return "<none>" if value in (None, "", []) else value


# -- built-in kinds ------------------------------------------------------------------------------------------


def _pod_cells(obj: Obj, now: float) -> list[Any]:
    containers = _get(obj, "spec", "containers", default=[]) or []
    statuses = _get(obj, "status", "containerStatuses", default=[]) or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0) or 0) for s in statuses)
    phase = _get(obj, "status", "phase", default="Unknown")
    reason = _get(obj, "status", "reason")
    status = reason or phase
    for s in statuses:
        waiting = _get(s, "state", "waiting", "reason")
        if waiting:
            status = waiting
    if _get(obj, "metadata", "deletionTimestamp"):
        status = "Terminating"
    gates = _get(obj, "spec", "readinessGates", default=[]) or []
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(containers)}",
        status,
        restarts,
        _age(obj, now),
        _none(_get(obj, "status", "podIP")),
        _none(_get(obj, "spec", "nodeName")),
        _none(_get(obj, "status", "nominatedNodeName")),
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _node_cells(obj: Obj, now: float) -> list[Any]:
    ready = _condition(obj, "Ready")
    state = {"True": "Ready", "False": "NotReady"}.get((ready or {}).get("status", ""), "Unknown")
    if _get(obj, "spec", "unschedulable"):
        state += ",SchedulingDisabled"
    labels = _get(obj, "metadata", "labels", default={}) or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    addresses = _get(obj, "status", "addresses", default=[]) or []

    def address(kind: str) -> str:
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    info = _get(obj, "status", "nodeInfo", default={}) or {}
    return [
        obj["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        _age(obj, now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _deployment_cells(obj: Obj, now: float) -> list[Any]:
    st = obj.get("status") or {}
    replicas = _get(obj, "spec", "replicas", default=0)
    return [
        obj["metadata"]["name"],
        f"{st.get('readyReplicas', 0)}/{replicas}",
        st.get("updatedReplicas", 0),
        st.get("availableReplicas", 0),
        _age(obj, now),
    ]


def _replicaset_cells(obj: Obj, now: float) -> list[Any]:
    st = obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        _get(obj, "spec", "replicas", default=0),
        st.get("replicas", 0),
        st.get("readyReplicas", 0),
        _age(obj, now),
    ]


def _daemonset_cells(obj: Obj, now: float) -> list[Any]:
    st = obj.get("status") or {}
    selector = _get(obj, "spec", "template", "spec", "nodeSelector", default={}) or {}
    return [
        obj["metadata"]["name"],
        st.get("desiredNumberScheduled", 0),
        st.get("currentNumberScheduled", 0),
        st.get("numberReady", 0),
        st.get("updatedNumberScheduled", 0),
        st.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
        _age(obj, now),
    ]


def _pdb_cells(obj: Obj, now: float) -> list[Any]:
    spec = obj.get("spec") or {}
    return [
        obj["metadata"]["name"],
        spec.get("minAvailable", "N/A"),
        spec.get("maxUnavailable", "N/A"),
        _get(obj, "status", "disruptionsAllowed", default=0),
        _age(obj, now),
    ]


def _namespace_cells(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _get(obj, "status", "phase", default="Active"), _age(obj, now)]


def _lease_cells(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _none(_get(obj, "spec", "holderIdentity")), _age(obj, now)]


def _event_cells(obj: Obj, now: float) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _get(obj, "metadata", "creationTimestamp")
    seen = _age({"metadata": {"creationTimestamp": last}}, now) if last else "<unknown>"
    return [
        seen,
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        obj.get("message", ""),
    ]


# -- custom resources (their CRDs' additionalPrinterColumns) ----------------------------------------------


def _nodeclaim_cells(obj: Obj, now: float) -> list[Any]:
    labels = _get(obj, "metadata", "labels", default={}) or {}
    return [
        obj["metadata"]["name"],
        labels.get("node.kubernetes.io/instance-type", ""),
        labels.get("karpenter.sh/capacity-type", ""),
        labels.get("topology.kubernetes.io/zone", ""),
        _get(obj, "status", "nodeName", default=""),
        (_condition(obj, "Ready") or {}).get("status", ""),
        _age(obj, now),
        _get(obj, "status", "providerID", default=""),
        labels.get("karpenter.sh/nodepool", ""),
        _get(obj, "spec", "nodeClassRef", "name", default=""),
    ]


def _nodepool_cells(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        _get(obj, "spec", "template", "spec", "nodeClassRef", "name", default=""),
        _get(obj, "status", "resources", "nodes", default="0"),
        (_condition(obj, "Ready") or {}).get("status", ""),
        _age(obj, now),
        _get(obj, "spec", "weight", default=""),
        _get(obj, "status", "resources", "cpu", default=""),
        _get(obj, "status", "resources", "memory", default=""),
    ]


def _nodeclass_cells(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], (_condition(obj, "Ready") or {}).get("status", ""), _age(obj, now)]


def _machine_cells(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        _get(obj, "spec", "clusterName", default=""),
        _get(obj, "status", "nodeRef", "name", default=""),
        _get(obj, "spec", "providerID", default=""),
        _get(obj, "status", "phase", default=""),
        _age(obj, now),
        _get(obj, "spec", "version", default=""),
    ]


def _machinedeployment_cells(obj: Obj, now: float) -> list[Any]:
    st = obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        _get(obj, "spec", "clusterName", default=""),
        st.get("replicas", 0),
        st.get("readyReplicas", 0),
        st.get("updatedReplicas", 0),
        st.get("unavailableReplicas", 0),
        st.get("phase", ""),
        _age(obj, now),
        _get(obj, "spec", "template", "spec", "version", default=""),
    ]


def _default_cells(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


def _crd_cells(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _get(obj, "metadata", "creationTimestamp", default="")]


def _cell(column: PrinterColumn, obj: Obj, now: float) -> Any:
    found = [v for v in column.path.find(obj) if v is not None]
    if not found:
        return None
    if column.type == "date":
        return _age({"metadata": {"creationTimestamp": found[0]}}, now)
    if len(found) == 1:
        return found[0]
    return ",".join(str(v) for v in found)


def _custom_printer(columns: tuple[PrinterColumn, ...]) -> Printer:
    definitions = (
        Column("Name", format="name"),
        *(Column(c.name, c.priority, c.type if c.type != "date" else "string", c.format) for c in columns),
    )

    def cells(obj: Obj, now: float) -> list[Any]:
        return [obj["metadata"]["name"], *(_cell(c, obj, now) for c in columns)]

    return definitions, cells


def _cols(*names: str, wide: Iterable[str] = ()) -> tuple[Column, ...]:
    first = [Column(n, format="name" if n == "Name" else "") for n in names]
    return (*first, *(Column(n, priority=1) for n in wide))


Printer = tuple[tuple[Column, ...], Callable[[Obj, float], list[Any]]]

PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "pods"): (
        _cols(
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            wide=("IP", "Node", "Nominated Node", "Readiness Gates"),
        ),
        _pod_cells,
    ),
    ("", "nodes"): (
        _cols(
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            wide=("Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"),
        ),
        _node_cells,
    ),
    ("", "namespaces"): (_cols("Name", "Status", "Age"), _namespace_cells),
    ("", "events"): (_cols("Last Seen", "Type", "Reason", "Object", "Message"), _event_cells),
    ("apps", "deployments"): (_cols("Name", "Ready", "Up-to-date", "Available", "Age"), _deployment_cells),
    ("apps", "replicasets"): (_cols("Name", "Desired", "Current", "Ready", "Age"), _replicaset_cells),
    ("apps", "daemonsets"): (
        _cols("Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age"),
        _daemonset_cells,
    ),
    ("policy", "poddisruptionbudgets"): (
        _cols("Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"),
        _pdb_cells,
    ),
    ("coordination.k8s.io", "leases"): (_cols("Name", "Holder", "Age"), _lease_cells),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (_cols("Name", "Created At"), _crd_cells),
    ("karpenter.sh", "nodeclaims"): (
        _cols(
            "Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age", wide=("ID", "NodePool", "NodeClass")
        ),
        _nodeclaim_cells,
    ),
    ("karpenter.sh", "nodepools"): (
        _cols("Name", "NodeClass", "Nodes", "Ready", "Age", wide=("Weight", "CPU", "Memory")),
        _nodepool_cells,
    ),
    ("karpenter.k8s.aws", "ec2nodeclasses"): (_cols("Name", "Ready", "Age"), _nodeclass_cells),
    ("karpenter.cluster.x-k8s.io", "clusterapinodeclasses"): (
        _cols("Name", "Ready", "Age"),
        _nodeclass_cells,
    ),
    ("cluster.x-k8s.io", "machines"): (
        _cols("Name", "Cluster", "NodeName", "ProviderID", "Phase", "Age", "Version"),
        _machine_cells,
    ),
    ("cluster.x-k8s.io", "machinedeployments"): (
        _cols("Name", "Cluster", "Replicas", "Ready", "Updated", "Unavailable", "Phase", "Age", "Version"),
        _machinedeployment_cells,
    ),
}
DEFAULT_PRINTER: Printer = (_cols("Name", "Age"), _default_cells)


def _row(rt: ResourceType, obj: Obj, cells: list[Any], include_object: str) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": cells}
    if include_object == "Object":
        row["object"] = (
            obj if obj.get("apiVersion") == rt.api_version else {**obj, "apiVersion": rt.api_version}
        )
    elif include_object != "None":
        meta = obj.get("metadata") or {}
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {
                k: meta[k]
                for k in (
                    "name",
                    "namespace",
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "labels",
                    "annotations",
                    "deletionTimestamp",
                    "ownerReferences",
                )
                if k in meta
            },
        }
    return row


def render_table(
    rt: ResourceType,
    objects: Iterable[Obj],
    *,
    include_object: str = "Metadata",
    with_columns: bool = True,
    list_metadata: dict[str, Any] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1 Table`` of ``objects``; ``with_columns=False`` for watch events after the first."""
    columns, cells = _printer(rt)
    moment = time.time() if now is None else now
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_metadata or {}}
    if with_columns:
        table["columnDefinitions"] = [c.definition() for c in columns]
    table["rows"] = [_row(rt, obj, _fit(cells(obj, moment), len(columns)), include_object) for obj in objects]
    return table


def _printer(rt: ResourceType) -> Printer:
    if rt.custom is None:
        return PRINTERS.get(rt.storage_key, DEFAULT_PRINTER)
    if rt.custom.columns is None:
        return DEFAULT_PRINTER
    return _custom_printer(rt.custom.columns)


def _fit(cells: list[Any], width: int) -> list[Any]:
    return (cells + [""] * width)[:width]
