"""Kubernetes objects (plain dicts, as YAML/JSON decode them) to the scheduler's model.

:func:`parse_object` parses one object, with its source (file, or ``event``) and document index so that every
error can say *where*: an :class:`InputError` names them, the object's kind and ``namespace/name``, and the
field path (``spec.template.spec.containers[0].resources.requests.cpu``). What it returns is a part: a
:class:`ClusterInput` holding only what this object contributes. :func:`assemble` puts parts together
without parsing again (a service parses each object once, when its event arrives, and keeps the part);
:func:`parse_objects` is both in one step, for files.

What each kind contributes:

* ``NodePool`` (``karpenter.sh/v1``): labels, requirements (In/NotIn/Exists/DoesNotExist/Gt/Lt/Gte/Lte,
  minValues), taints, startupTaints, nodeClassRef, limits, weight.
* ``ClusterAPINodeClass`` / ``EC2NodeClass`` / any ``*NodeClass``: the NodeClass a pool refers to (the CAPI
  one's ``scalableResourceSelector``).
* ``MachineDeployment`` (Cluster API) and ``InstanceCatalog``: instance types, see :mod:`.catalog`. A
  MachineDeployment that cannot be read is skipped with the field that is wrong (one broken node group must
  not stop the others live; ``tenon simulate`` refuses it).
* ``Pod`` (pending, or bound with ``spec.nodeName``; ``status.nominatedNodeName`` marks one the
  kube-scheduler is placing; the annotation ``tenon.sh/planned-node``, one whose Node's room it takes first
  while it fits there); ``Deployment``/``ReplicaSet``/``StatefulSet`` (``spec.replicas``, default 1)
  and ``Job`` (``spec.parallelism``, default 1) expand into pods named ``<owner>-<i>`` from their template,
  at most :data:`MAX_PODS` in a part (a larger count is refused with the field, never expanded).
  See :mod:`.podspec` for what is read of a pod.
* ``DaemonSet``: its template becomes a pod that lands on every compatible new node.
* ``Node``: existing room (``status.allocatable`` minus bound pods).
* ``NodeClaim`` (``karpenter.sh/v1``): in-flight capacity not yet a Node. NodePool, type, zone and capacity
  type come from the labels ``karpenter.sh/nodepool``, ``node.kubernetes.io/instance-type``,
  ``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``; ``spec.requirements``; resources from
  ``status.allocatable`` or, before launch, from the catalog (``status.capacity`` for NodePool limits); the
  pods already destined to it from the annotation ``tenon.sh/nominated-pods`` (comma-separated
  ``namespace/name``). A NodeClaim whose Node (``status.nodeName``) is present is ignored (the Node counts
  instead).
* ``PersistentVolumeClaim``, ``PersistentVolume``, ``StorageClass``: volume topology (:mod:`.volumes`).
* ``List``: its ``items`` (Lists nested at most :data:`MAX_LIST_DEPTH` deep). Other kinds are recorded as
  skipped, not rejected, so a whole ``kubectl get -o yaml`` dump can be fed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from tenon.core.catalog import estimate_unpriced, instance_types_from_catalog, machine_deployment_type
from tenon.core.errors import InputError
from tenon.core.fields import Ctx, requirement, selector, shown, taints
from tenon.core.model import (
    ON_DEMAND,
    ClusterInput,
    DaemonSet,
    InFlightNodeClaim,
    InstanceType,
    Node,
    NodeClass,
    NodeClassRef,
    NodePool,
    PersistentVolume,
    Pod,
    SkippedObject,
    StorageClass,
    VolumeClaim,
)
from tenon.core.podspec import SpecCache, derived, node_selector_terms, parse_pod_spec, placed
from tenon.core.requirements import KARPENTER_OPERATORS, Requirement
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    DEFAULT_STORAGE_CLASS,
    HOSTNAME,
    INSTANCE_TYPE,
    NODEPOOL,
    NOMINATED_PODS,
    PLANNED_NODE,
    ZONE,
)

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
MAX_PODS = 200_000
"""Pods one object may expand into: ten times the largest batch the bench plans. ``replicas: 1000000000`` is
refused with its field rather than expanded (it would take minutes and gigabytes before anything is said)."""
MAX_LIST_DEPTH = 8
_SPECS = SpecCache()


def _node_pool(ctx: Ctx, obj: Mapping[str, Any]) -> NodePool:
    spec = ctx.mapping(obj.get("spec"), "spec")
    template = ctx.mapping(spec.get("template"), "spec.template")
    tspec = ctx.mapping(template.get("spec"), "spec.template.spec")
    labels = ctx.labels(
        ctx.mapping(template.get("metadata"), "spec.template.metadata").get("labels"),
        "spec.template.metadata.labels",
    )
    reqs = tuple(
        requirement(ctx, r, f"spec.template.spec.requirements[{i}]", KARPENTER_OPERATORS)
        for i, r in enumerate(ctx.listing(tspec.get("requirements"), "spec.template.spec.requirements"))
    )
    ref = None
    if tspec.get("nodeClassRef") is not None:
        raw = ctx.mapping(tspec.get("nodeClassRef"), "spec.template.spec.nodeClassRef")
        if not raw.get("kind") or not raw.get("name"):
            raise ctx.error("spec.template.spec.nodeClassRef", "needs kind and name")
        ref = NodeClassRef(str(raw.get("group") or ""), str(raw["kind"]), str(raw["name"]))
    weight = ctx.integer(spec.get("weight", 0), "spec.weight", 0)
    if weight > 100:
        raise ctx.error("spec.weight", f"must be at most 100, got {weight}")
    return NodePool(
        name=ctx.name,
        weight=weight,
        labels=labels,
        requirements=reqs,
        taints=taints(ctx, tspec.get("taints"), "spec.template.spec.taints"),
        startup_taints=taints(ctx, tspec.get("startupTaints"), "spec.template.spec.startupTaints"),
        node_class_ref=ref,
        limits=ctx.resources(spec.get("limits"), "spec.limits"),
    )


def _node(ctx: Ctx, obj: Mapping[str, Any]) -> Node:
    meta = ctx.mapping(obj.get("metadata"), "metadata")
    spec = ctx.mapping(obj.get("spec"), "spec")
    status = ctx.mapping(obj.get("status"), "status")
    capacity = ctx.resources(status.get("capacity"), "status.capacity")
    allocatable = ctx.resources(status.get("allocatable"), "status.allocatable") or dict(capacity)
    if not allocatable:
        raise ctx.error("status.allocatable", "a Node needs status.allocatable (or status.capacity)")
    labels = ctx.labels(meta.get("labels"), "metadata.labels")
    labels.setdefault(HOSTNAME, ctx.name)
    return Node(
        ctx.name,
        labels,
        taints(ctx, spec.get("taints"), "spec.taints"),
        allocatable,
        capacity,
        bool(spec.get("unschedulable")),
    )


def _node_claim(ctx: Ctx, obj: Mapping[str, Any]) -> InFlightNodeClaim:
    meta = ctx.mapping(obj.get("metadata"), "metadata")
    labels = ctx.labels(meta.get("labels"), "metadata.labels")
    spec = ctx.mapping(obj.get("spec"), "spec")
    status = ctx.mapping(obj.get("status"), "status")
    for key in (NODEPOOL, INSTANCE_TYPE):
        if not labels.get(key):
            raise ctx.error(f"metadata.labels.{key}", "is required to count an in-flight NodeClaim")
    requirements = tuple(
        requirement(ctx, r, f"spec.requirements[{i}]", KARPENTER_OPERATORS)
        for i, r in enumerate(ctx.listing(spec.get("requirements"), "spec.requirements"))
    )
    allocatable = ctx.resources(status.get("allocatable"), "status.allocatable") or None
    capacity = ctx.resources(status.get("capacity"), "status.capacity") or None
    annotations = ctx.labels(meta.get("annotations"), "metadata.annotations")
    pods = tuple(p.strip() for p in annotations.get(NOMINATED_PODS, "").split(",") if p.strip())
    return InFlightNodeClaim(
        ctx.name,
        labels[NODEPOOL],
        labels[INSTANCE_TYPE],
        labels.get(ZONE),
        labels.get(CAPACITY_TYPE, ON_DEMAND),
        labels,
        allocatable,
        pods,
        capacity=capacity,
        requirements=requirements,
        node_name=str(status.get("nodeName") or ""),
    )


NAMESPACED_KINDS = ("Pod", "DaemonSet", "MachineDeployment", "PersistentVolumeClaim", *WORKLOAD_KINDS)


def _context(source: str, index: int, obj: Any) -> Ctx:
    """Where one object is (its kind and name checked first), for the errors of everything below."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise InputError(source, index, "", "", "", f"expected a Kubernetes object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not kind or not isinstance(kind, str):
        raise InputError(source, index, "", "", "kind", "is required")
    meta = obj.get("metadata")
    if (type(meta) is not dict and not isinstance(meta, Mapping)) or not meta.get("name"):
        raise InputError(source, index, kind, "", "metadata.name", "is required")
    name = meta["name"]
    namespace = meta.get("namespace") or "default"
    if not isinstance(name, str) or not isinstance(namespace, str):
        field = "metadata.name" if not isinstance(name, str) else "metadata.namespace"
        raise InputError(source, index, kind, "", field, "must be a string")
    if kind in NAMESPACED_KINDS:
        name = f"{namespace}/{name}"
    return Ctx(source, index, kind, name)


def _template(ctx: Ctx, spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
    """A workload's ``spec.template`` and its labels."""
    template = ctx.mapping(spec.get("template"), "spec.template")
    labels = ctx.labels(
        ctx.mapping(template.get("metadata"), "spec.template.metadata").get("labels"),
        "spec.template.metadata.labels",
    )
    return template, labels


def _workload_pods(ctx: Ctx, obj: Mapping[str, Any], namespace: str, name: str) -> tuple[Pod, ...]:
    """A Deployment/ReplicaSet/StatefulSet (``spec.replicas``) or Job (``spec.parallelism``) as its pods: the
    template parsed once, each replica named ``<name>-<i>``."""
    spec = ctx.mapping(obj.get("spec"), "spec")
    field = "spec.parallelism" if ctx.kind == "Job" else "spec.replicas"
    count = ctx.integer(spec.get(field.split(".")[1], 1), field, 0)
    if count > MAX_PODS:
        raise ctx.error(field, f"{count} is more pods than tenon plans at once (at most {MAX_PODS:,})")
    template, labels = _template(ctx, spec)
    if not count:
        return ()
    owner = f"{ctx.kind}/{name}"
    pod = derived(
        parse_pod_spec(ctx, namespace, f"{name}-0", labels, template.get("spec"), "spec.template.spec", owner)
    )
    return (pod, *(placed(pod, f"{name}-{i}") for i in range(1, count)))


def _daemon_set(ctx: Ctx, obj: Mapping[str, Any], namespace: str, name: str) -> DaemonSet:
    template, labels = _template(ctx, ctx.mapping(obj.get("spec"), "spec"))
    pod = parse_pod_spec(
        ctx, namespace, name, labels, template.get("spec"), "spec.template.spec", owner=f"DaemonSet/{name}"
    )
    return DaemonSet(namespace, name, pod)


def _pod(ctx: Ctx, obj: Mapping[str, Any], namespace: str, name: str, labels: dict[str, str]) -> Pod:
    status = ctx.mapping(obj.get("status"), "status")
    nominated = status.get("nominatedNodeName")
    extra = {"nominated": str(nominated)} if nominated else {}
    annotations = ctx.mapping(
        ctx.mapping(obj.get("metadata"), "metadata").get("annotations"), "metadata.annotations"
    )
    planned = ctx.text(annotations.get(PLANNED_NODE), f"metadata.annotations.{PLANNED_NODE}")
    if planned and not nominated:
        extra["planned"] = planned
    return _SPECS.pod(ctx, namespace, name, labels, obj.get("spec"), "spec", **extra)


def _node_class(ctx: Ctx, obj: Mapping[str, Any], name: str) -> NodeClass:
    spec = ctx.mapping(obj.get("spec"), "spec")
    sel = spec.get("scalableResourceSelector")
    return NodeClass(
        ctx.kind, name, None if sel is None else selector(ctx, sel, "spec.scalableResourceSelector")
    )


def _machine_deployment(ctx: Ctx, obj: Mapping[str, Any]) -> ClusterInput:
    found = machine_deployment_type(obj, f"{ctx.source} document {ctx.index}")
    if isinstance(found, SkippedObject):
        return ClusterInput(skipped=(found,))
    return ClusterInput(machine_deployments=() if found is None else (found,))


def _deleting(meta: Mapping[str, Any]) -> bool:
    return bool(meta.get("deletionTimestamp"))


def _volume_claim(ctx: Ctx, obj: Mapping[str, Any], namespace: str, name: str) -> VolumeClaim:
    spec = ctx.mapping(obj.get("spec"), "spec")
    status = ctx.mapping(obj.get("status"), "status")
    sc = spec.get("storageClassName")
    return VolumeClaim(
        namespace,
        name,
        None if sc is None else str(sc),
        str(spec.get("volumeName") or ""),
        str(status.get("phase") or ""),
        _deleting(ctx.mapping(obj.get("metadata"), "metadata")),
    )


def _volume(ctx: Ctx, obj: Mapping[str, Any], name: str) -> PersistentVolume:
    spec = ctx.mapping(obj.get("spec"), "spec")
    affinity = ctx.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    required = ctx.mapping(affinity.get("required"), "spec.nodeAffinity.required")
    terms = node_selector_terms(
        ctx, required.get("nodeSelectorTerms"), "spec.nodeAffinity.required.nodeSelectorTerms"
    )
    driver = ctx.text(ctx.mapping(spec.get("csi"), "spec.csi").get("driver"), "spec.csi.driver")
    return PersistentVolume(name, terms, _deleting(ctx.mapping(obj.get("metadata"), "metadata")), driver)


def _storage_class(ctx: Ctx, obj: Mapping[str, Any], name: str) -> StorageClass:
    annotations = ctx.labels(
        ctx.mapping(obj.get("metadata"), "metadata").get("annotations"), "metadata.annotations"
    )
    mode = obj.get("volumeBindingMode") or "Immediate"
    if mode not in ("Immediate", "WaitForFirstConsumer"):
        raise ctx.error("volumeBindingMode", f"{shown(mode)} is not Immediate or WaitForFirstConsumer")
    terms = []
    for i, term in enumerate(ctx.listing(obj.get("allowedTopologies"), "allowedTopologies")):
        path = f"allowedTopologies[{i}].matchLabelExpressions"
        exprs = ctx.listing(ctx.mapping(term, f"allowedTopologies[{i}]").get("matchLabelExpressions"), path)
        reqs = []
        for j, expr in enumerate(exprs):
            expr = ctx.mapping(expr, f"{path}[{j}]")
            key = expr.get("key")
            if not key or not isinstance(key, str):
                raise ctx.error(f"{path}[{j}].key", "is required")
            values = tuple(str(v) for v in ctx.listing(expr.get("values"), f"{path}[{j}].values"))
            reqs.append(Requirement(key, "In", values))
        terms.append(tuple(reqs))
    default = annotations.get(DEFAULT_STORAGE_CLASS) == "true"
    provisioner = ctx.text(obj.get("provisioner"), "provisioner")
    return StorageClass(name, mode == "WaitForFirstConsumer", tuple(terms), default, provisioner)


_NO_PART = ClusterInput().__dict__


def _pod_part(pod: Pod) -> ClusterInput:
    """``ClusterInput(pods=(pod,))``, made as a copy of an empty part with the pod set: a frozen dataclass's
    ``__init__`` sets its twelve fields one call at a time (a seventh of parsing a pod of a spec parsed
    already)."""
    part: ClusterInput = object.__new__(ClusterInput)
    fields = part.__dict__
    fields.update(_NO_PART)
    fields["catalogs"] = {}  # not shared between parts
    fields["pods"] = (pod,)
    return part


def _read_object(ctx: Ctx, obj: Mapping[str, Any]) -> ClusterInput:
    """One object (not a List), by kind; kinds the scheduler does not use are skipped."""
    kind = ctx.kind
    meta = obj["metadata"]
    namespace = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    if kind == "Pod":
        labels = ctx.labels(meta.get("labels"), "metadata.labels")
        return _pod_part(_pod(ctx, obj, namespace, name, labels))
    if kind in WORKLOAD_KINDS:
        return ClusterInput(pods=_workload_pods(ctx, obj, namespace, name))
    reader = _READERS.get(kind)
    if reader is not None:
        return reader(ctx, obj, namespace, name)
    if kind.endswith("NodeClass"):
        return ClusterInput(node_classes=(_node_class(ctx, obj, name),))
    where = f"{ctx.source} document {ctx.index}"
    return ClusterInput(skipped=(SkippedObject(where, kind, ctx.name, "kind not used by the scheduler"),))


_READERS = {
    "NodePool": lambda ctx, obj, ns, name: ClusterInput(node_pools=(_node_pool(ctx, obj),)),
    "InstanceCatalog": lambda ctx, obj, ns, name: ClusterInput(
        catalogs={name: instance_types_from_catalog(obj, ctx.source, ctx.index)}
    ),
    "MachineDeployment": lambda ctx, obj, ns, name: _machine_deployment(ctx, obj),
    "DaemonSet": lambda ctx, obj, ns, name: ClusterInput(daemon_sets=(_daemon_set(ctx, obj, ns, name),)),
    "Node": lambda ctx, obj, ns, name: ClusterInput(nodes=(_node(ctx, obj),)),
    "NodeClaim": lambda ctx, obj, ns, name: ClusterInput(in_flight=(_node_claim(ctx, obj),)),
    "PersistentVolumeClaim": lambda ctx, obj, ns, name: ClusterInput(
        volume_claims=(_volume_claim(ctx, obj, ns, name),)
    ),
    "PersistentVolume": lambda ctx, obj, ns, name: ClusterInput(volumes=(_volume(ctx, obj, name),)),
    "StorageClass": lambda ctx, obj, ns, name: ClusterInput(
        storage_classes=(_storage_class(ctx, obj, name),)
    ),
}


def parse_pod(source: str, index: int, obj: Any) -> Pod:
    """One Pod object as the scheduler reads it: what :func:`parse_object` gives for it, without the part
    around it (a service that keeps the running pods parsed keeps them as pods). Raises :class:`InputError`
    as :func:`parse_object` does, and for an object of another kind."""
    ctx = _context(source, index, obj)
    if ctx.kind != "Pod":
        raise InputError(source, index, ctx.kind, ctx.name, "kind", "expected a Pod")
    meta = obj["metadata"]
    labels = ctx.labels(meta.get("labels"), "metadata.labels")
    return _pod(ctx, obj, str(meta.get("namespace") or "default"), str(meta["name"]), labels)


def parse_object(source: str, index: int, obj: Any, _depth: int = 0) -> ClusterInput:
    """What one Kubernetes object (a ``List``: its items) contributes to a :class:`ClusterInput`, parsed once.

    ``source`` and ``index`` (file or ``"event"``, document number) are for errors only: an invalid object
    raises :class:`InputError` naming them, its kind and name, and the field. ``None`` (an empty YAML
    document) contributes nothing. Put parts together with :func:`assemble`.
    """
    if obj is None:
        return ClusterInput()
    if (type(obj) is dict or isinstance(obj, Mapping)) and obj.get("kind") == "List":
        items = obj.get("items")
        if not isinstance(items, list):
            raise InputError(source, index, "List", "", "items", "must be a list")
        if _depth >= MAX_LIST_DEPTH:
            raise InputError(
                source, index, "List", "", "items", f"Lists nested more than {MAX_LIST_DEPTH} deep"
            )
        return assemble(parse_object(source, index, item, _depth + 1) for item in items)
    return _read_object(_context(source, index, obj), obj)


_PART_FIELDS = (
    "node_pools",
    "node_classes",
    "machine_deployments",
    "pods",
    "daemon_sets",
    "nodes",
    "skipped",
    "volume_claims",
    "volumes",
    "storage_classes",
)


def assemble(parts: Iterable[ClusterInput], in_flight: Iterable[InFlightNodeClaim] = ()) -> ClusterInput:
    """One :class:`ClusterInput` from parts (:func:`parse_object`), in order, and in-flight claims.

    Catalogs are merged by name (a later one wins). Unpriced MachineDeployments are estimated against the
    priced ones of the whole set; MachineDeployments skipped come after the other skipped objects. An
    in-flight claim whose ``node_name`` is one of the Nodes is left out: the Node counts instead.
    """
    merged: dict[str, list[Any]] = {name: [] for name in _PART_FIELDS}
    catalogs: dict[str, tuple[InstanceType, ...]] = {}
    claims: list[InFlightNodeClaim] = []
    for part in parts:
        for name in _PART_FIELDS:
            found = getattr(part, name)
            if found:
                merged[name] += found
        catalogs.update(part.catalogs)
        claims += part.in_flight
    claims += in_flight
    node_names = {n.name for n in merged["nodes"]}
    skipped = sorted(merged["skipped"], key=lambda s: s.kind == "MachineDeployment")
    return ClusterInput(
        node_pools=tuple(merged["node_pools"]),
        node_classes=tuple(merged["node_classes"]),
        catalogs=catalogs,
        machine_deployments=tuple(estimate_unpriced(merged["machine_deployments"])),
        pods=tuple(merged["pods"]),
        daemon_sets=tuple(merged["daemon_sets"]),
        nodes=tuple(merged["nodes"]),
        in_flight=tuple(c for c in claims if not (c.node_name and c.node_name in node_names)),
        skipped=tuple(skipped),
        volume_claims=tuple(merged["volume_claims"]),
        volumes=tuple(merged["volumes"]),
        storage_classes=tuple(merged["storage_classes"]),
    )


def parse_objects(documents: Iterable[tuple[str, int, Any]]) -> ClusterInput:
    """Kubernetes objects to a :class:`ClusterInput`; raises :class:`InputError` on invalid input.

    The same as :func:`assemble` of :func:`parse_object` of each document.
    """
    return assemble(parse_object(source, index, obj) for source, index, obj in documents)


def with_pods(inputs: ClusterInput, pods: Iterable[Pod]) -> ClusterInput:
    """A copy of ``inputs`` with other pods (what-if runs, benches)."""
    return replace(inputs, pods=tuple(pods))
