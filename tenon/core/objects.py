"""Kubernetes objects (plain dicts, as YAML/JSON decode them) to the scheduler's model.

:func:`parse_object` parses one object, with its source (file, or ``event``) and document index so that every
error can say *where*: an :class:`InputError` names them, the object's kind and ``namespace/name``, and the
field path (``spec.template.spec.containers[0].resources.requests.cpu``). What it returns is a part: a
:class:`ClusterInput` holding only what this object contributes. :func:`assemble` puts parts together
without parsing again (a service parses each object once, when its event arrives, and keeps the part);
:func:`parse_objects` is both in one step, for files.

What each kind contributes:

* ``NodePool`` (``karpenter.sh/v1``): labels, requirements (In/NotIn/Exists/DoesNotExist/Gt/Lt, minValues),
  taints, startupTaints, nodeClassRef, limits, weight.
* ``ClusterAPINodeClass`` / ``EC2NodeClass`` / any ``*NodeClass``: the NodeClass a pool refers to (the CAPI
  one's ``scalableResourceSelector``).
* ``MachineDeployment`` (Cluster API) and ``InstanceCatalog``: instance types, see :mod:`.catalog`.
* ``Pod``; ``Deployment``/``ReplicaSet``/``StatefulSet`` (``spec.replicas``, default 1) and ``Job``
  (``spec.parallelism``, default 1) expand into pods named ``<owner>-<i>`` from their template.
  Pods with ``spec.nodeName`` are bound to that node and count against its room.
* ``DaemonSet``: its template becomes a pod that lands on every compatible new node.
* ``Node``: existing room (``status.allocatable`` minus bound pods).
* ``NodeClaim`` (``karpenter.sh/v1``): in-flight capacity not yet a Node. NodePool, type, zone and capacity
  type come from the labels ``karpenter.sh/nodepool``, ``node.kubernetes.io/instance-type``,
  ``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``; ``spec.requirements``; resources from
  ``status.allocatable`` or, before launch, from the catalog (``status.capacity`` for NodePool limits); the
  pods already destined to it from the annotation ``tenon.sh/nominated-pods`` (comma-separated
  ``namespace/name``). A NodeClaim whose Node (``status.nodeName``) is present is ignored (the Node counts
  instead).
* ``List``: its ``items``. Other kinds are recorded as skipped, not rejected, so a whole
  ``kubectl get -o yaml`` dump can be fed in.

Pod requests follow Kubernetes' ``PodRequests``: the sum of containers, sidecars (init containers with
``restartPolicy: Always``) added, the max rule for ordinary init containers, plus ``spec.overhead``, plus
``pods: 1``. A container with limits but no requests requests its limits, as the API server defaults it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from tenon.core.catalog import estimate_unpriced, instance_types_from_catalog, machine_deployment_type
from tenon.core.errors import InputError
from tenon.core.model import (
    ON_DEMAND,
    ClusterInput,
    DaemonSet,
    HostPort,
    InFlightNodeClaim,
    InstanceType,
    Node,
    NodeClass,
    NodeClassRef,
    NodePool,
    Pod,
    PodAffinityTerm,
    SkippedObject,
    Taint,
    Toleration,
    TopologySpread,
)
from tenon.core.quantities import PODS, QuantityError, to_canonical
from tenon.core.requirements import NODE_OPERATORS, SELECTOR_OPERATORS, LabelSelector, Requirement
from tenon.core.wellknown import (
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    NODEPOOL,
    NOMINATED_PODS,
    ZONE,
)

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")


class _Ctx:
    """Where we are: turns a field path and a problem into an :class:`InputError`."""

    def __init__(self, source: str, index: int, kind: str, name: str):
        self.source, self.index, self.kind, self.name = source, index, kind, name

    def error(self, field: str, problem: str) -> InputError:
        return InputError(self.source, self.index, self.kind, self.name, field, problem)

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(field, f"must be a map, got {type(value).__name__}")
        return value

    def listing(self, value: Any, field: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(field, f"must be a list, got {type(value).__name__}")
        return value

    def integer(self, value: Any, field: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.error(field, f"must be an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise self.error(field, f"must be an integer, got {value!r}") from None
        if minimum is not None and number < minimum:
            raise self.error(field, f"must be at least {minimum}, got {number}")
        return number

    def resources(self, value: Any, field: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, amount in self.mapping(value, field).items():
            try:
                out[str(key)] = to_canonical(str(key), amount)
            except QuantityError as err:
                raise self.error(f"{field}.{key}", str(err)) from None
        return out

    def labels(self, value: Any, field: str) -> dict[str, str]:
        return {str(k): "" if v is None else str(v) for k, v in self.mapping(value, field).items()}


def _requirement(ctx: _Ctx, raw: Any, field: str, operators: tuple[str, ...]) -> Requirement:
    raw = ctx.mapping(raw, field)
    key = raw.get("key")
    if not key or not isinstance(key, str):
        raise ctx.error(f"{field}.key", "is required")
    op = raw.get("operator")
    if op not in operators:
        raise ctx.error(f"{field}.operator", f"{op!r} is not one of {', '.join(operators)}")
    values = tuple(str(v) for v in ctx.listing(raw.get("values"), f"{field}.values"))
    if op in ("In", "NotIn") and not values:
        raise ctx.error(f"{field}.values", f"operator {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise ctx.error(f"{field}.values", f"operator {op} takes no values")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ctx.error(f"{field}.values", f"operator {op} needs exactly one integer value")
        ctx.integer(values[0], f"{field}.values[0]")
    min_values = None
    if raw.get("minValues") is not None:
        min_values = ctx.integer(raw["minValues"], f"{field}.minValues", 1)
        if op == "In" and min_values > len(values):
            raise ctx.error(
                f"{field}.minValues", f"{min_values} is more than the {len(values)} values listed"
            )
    return Requirement(key, str(op), values, min_values)


def _selector(ctx: _Ctx, raw: Any, field: str) -> LabelSelector:
    raw = ctx.mapping(raw, field)
    labels = ctx.labels(raw.get("matchLabels"), f"{field}.matchLabels")
    exprs = tuple(
        _requirement(ctx, e, f"{field}.matchExpressions[{i}]", SELECTOR_OPERATORS)
        for i, e in enumerate(ctx.listing(raw.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    return LabelSelector(tuple(sorted(labels.items())), exprs)


def _taints(ctx: _Ctx, raw: Any, field: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(ctx.listing(raw, field)):
        t = ctx.mapping(t, f"{field}[{i}]")
        if not t.get("key"):
            raise ctx.error(f"{field}[{i}].key", "is required")
        effect = t.get("effect")
        if effect not in TAINT_EFFECTS:
            raise ctx.error(f"{field}[{i}].effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        out.append(Taint(str(t["key"]), str(t.get("value") or ""), str(effect)))
    return tuple(out)


def _tolerations(ctx: _Ctx, raw: Any, field: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(ctx.listing(raw, field)):
        t = ctx.mapping(t, f"{field}[{i}]")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise ctx.error(f"{field}[{i}].operator", f"{op!r} is not Equal or Exists")
        out.append(
            Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or ""))
        )
    return tuple(out)


def _add(into: dict[str, int], extra: Mapping[str, int]) -> None:
    for key, amount in extra.items():
        into[key] = into.get(key, 0) + amount


def _container_requests(ctx: _Ctx, container: Any, field: str) -> dict[str, int]:
    resources = ctx.mapping(ctx.mapping(container, field).get("resources"), f"{field}.resources")
    limits = ctx.resources(resources.get("limits"), f"{field}.resources.limits")
    requests = ctx.resources(resources.get("requests"), f"{field}.resources.requests")
    return {**limits, **requests}


def pod_requests(ctx: _Ctx, spec: Mapping[str, Any], field: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(ctx.listing(spec.get("containers"), f"{field}.containers")):
        _add(total, _container_requests(ctx, c, f"{field}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(ctx.listing(spec.get("initContainers"), f"{field}.initContainers")):
        req = _container_requests(ctx, c, f"{field}.initContainers[{i}]")
        if ctx.mapping(c, f"{field}.initContainers[{i}]").get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            during = dict(sidecars)
        else:
            during = dict(req)
            _add(during, sidecars)
        for key, amount in during.items():
            init_peak[key] = max(init_peak.get(key, 0), amount)
    for key, amount in init_peak.items():
        total[key] = max(total.get(key, 0), amount)
    _add(total, ctx.resources(spec.get("overhead"), f"{field}.overhead"))
    total[PODS] = total.get(PODS, 0) + 1
    return total


def _affinity_terms(ctx: _Ctx, raw: Any, field: str, namespace: str) -> tuple[PodAffinityTerm, ...]:
    out = []
    for i, term in enumerate(ctx.listing(raw, field)):
        path = f"{field}[{i}]"
        term = ctx.mapping(term, path)
        key = term.get("topologyKey")
        if not key:
            raise ctx.error(f"{path}.topologyKey", "is required")
        ns_sel = term.get("namespaceSelector")
        all_ns = isinstance(ns_sel, Mapping) and not ns_sel
        names = tuple(str(n) for n in ctx.listing(term.get("namespaces"), f"{path}.namespaces")) or (
            namespace,
        )
        out.append(
            PodAffinityTerm(
                _selector(ctx, term.get("labelSelector"), f"{path}.labelSelector"), str(key), names, all_ns
            )
        )
    return tuple(out)


def parse_pod_spec(
    ctx: _Ctx, namespace: str, name: str, labels: dict[str, str], spec: Any, field: str, owner: str = ""
) -> Pod:
    spec = ctx.mapping(spec, field)
    selector = ctx.labels(spec.get("nodeSelector"), f"{field}.nodeSelector")
    base = tuple(Requirement(k, "In", (v,)) for k, v in sorted(selector.items()))
    affinity = ctx.mapping(spec.get("affinity"), f"{field}.affinity")
    node_aff = ctx.mapping(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    path = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = ctx.mapping(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), path)
    terms: list[tuple[Requirement, ...]] = []
    for i, term in enumerate(ctx.listing(required.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")):
        tpath = f"{path}.nodeSelectorTerms[{i}]"
        exprs = ctx.listing(ctx.mapping(term, tpath).get("matchExpressions"), f"{tpath}.matchExpressions")
        reqs = tuple(
            _requirement(ctx, e, f"{tpath}.matchExpressions[{j}]", NODE_OPERATORS)
            for j, e in enumerate(exprs)
        )
        terms.append(base + reqs)
    preferred = []
    ppath = f"{field}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, pref in enumerate(
        ctx.listing(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"), ppath)
    ):
        pref = ctx.mapping(pref, f"{ppath}[{i}]")
        weight = ctx.integer(pref.get("weight", 1), f"{ppath}[{i}].weight", 1)
        pterm = ctx.mapping(pref.get("preference"), f"{ppath}[{i}].preference")
        exprs = ctx.listing(pterm.get("matchExpressions"), f"{ppath}[{i}].preference.matchExpressions")
        preferred.append(
            (
                weight,
                tuple(
                    _requirement(ctx, e, f"{ppath}[{i}].preference.matchExpressions[{j}]", NODE_OPERATORS)
                    for j, e in enumerate(exprs)
                ),
            )
        )
    preferred.sort(key=lambda p: -p[0])
    pod_aff = ctx.mapping(affinity.get("podAffinity"), f"{field}.affinity.podAffinity")
    anti = ctx.mapping(affinity.get("podAntiAffinity"), f"{field}.affinity.podAntiAffinity")
    rd = "requiredDuringSchedulingIgnoredDuringExecution"
    spreads = []
    tpath = f"{field}.topologySpreadConstraints"
    for i, tsc in enumerate(ctx.listing(spec.get("topologySpreadConstraints"), tpath)):
        tsc = ctx.mapping(tsc, f"{tpath}[{i}]")
        if not tsc.get("topologyKey"):
            raise ctx.error(f"{tpath}[{i}].topologyKey", "is required")
        when = tsc.get("whenUnsatisfiable") or "DoNotSchedule"
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ctx.error(
                f"{tpath}[{i}].whenUnsatisfiable", f"{when!r} is not DoNotSchedule or ScheduleAnyway"
            )
        sel = _selector(ctx, tsc.get("labelSelector"), f"{tpath}[{i}].labelSelector")
        keys = [str(k) for k in ctx.listing(tsc.get("matchLabelKeys"), f"{tpath}[{i}].matchLabelKeys")]
        if keys:
            extra = tuple((k, labels[k]) for k in keys if k in labels)
            sel = LabelSelector(tuple(sorted(sel.match_labels + extra)), sel.match_expressions)
        spreads.append(
            TopologySpread(
                ctx.integer(tsc.get("maxSkew", 1), f"{tpath}[{i}].maxSkew", 1),
                str(tsc["topologyKey"]),
                when,
                sel,
                ctx.integer(tsc.get("minDomains", 1), f"{tpath}[{i}].minDomains", 1),
            )
        )
    ports = []
    for i, c in enumerate(ctx.listing(spec.get("containers"), f"{field}.containers")):
        cports = ctx.listing(
            ctx.mapping(c, f"{field}.containers[{i}]").get("ports"), f"{field}.containers[{i}].ports"
        )
        for j, p in enumerate(cports):
            p = ctx.mapping(p, f"{field}.containers[{i}].ports[{j}]")
            if p.get("hostPort"):
                port = ctx.integer(p["hostPort"], f"{field}.containers[{i}].ports[{j}].hostPort", 1)
                ports.append(HostPort(port, str(p.get("protocol") or "TCP"), str(p.get("hostIP") or "")))
    return Pod(
        namespace=namespace,
        name=name,
        labels=labels,
        requests=pod_requests(ctx, spec, field),
        node_affinity=tuple(terms) or (base,),
        preferred_node_affinity=tuple(preferred),
        tolerations=_tolerations(ctx, spec.get("tolerations"), f"{field}.tolerations"),
        pod_affinity=_affinity_terms(ctx, pod_aff.get(rd), f"{field}.affinity.podAffinity.{rd}", namespace),
        pod_anti_affinity=_affinity_terms(
            ctx, anti.get(rd), f"{field}.affinity.podAntiAffinity.{rd}", namespace
        ),
        topology_spread=tuple(spreads),
        host_ports=tuple(ports),
        node_name=str(spec.get("nodeName") or ""),
        owner=owner,
    )


def _node_pool(ctx: _Ctx, obj: Mapping[str, Any]) -> NodePool:
    spec = ctx.mapping(obj.get("spec"), "spec")
    template = ctx.mapping(spec.get("template"), "spec.template")
    tspec = ctx.mapping(template.get("spec"), "spec.template.spec")
    labels = ctx.labels(
        ctx.mapping(template.get("metadata"), "spec.template.metadata").get("labels"),
        "spec.template.metadata.labels",
    )
    reqs = tuple(
        _requirement(ctx, r, f"spec.template.spec.requirements[{i}]", NODE_OPERATORS)
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
        taints=_taints(ctx, tspec.get("taints"), "spec.template.spec.taints"),
        startup_taints=_taints(ctx, tspec.get("startupTaints"), "spec.template.spec.startupTaints"),
        node_class_ref=ref,
        limits=ctx.resources(spec.get("limits"), "spec.limits"),
    )


def _node(ctx: _Ctx, obj: Mapping[str, Any]) -> Node:
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
        _taints(ctx, spec.get("taints"), "spec.taints"),
        allocatable,
        capacity,
        bool(spec.get("unschedulable")),
    )


def _node_claim(ctx: _Ctx, obj: Mapping[str, Any]) -> InFlightNodeClaim:
    meta = ctx.mapping(obj.get("metadata"), "metadata")
    labels = ctx.labels(meta.get("labels"), "metadata.labels")
    spec = ctx.mapping(obj.get("spec"), "spec")
    status = ctx.mapping(obj.get("status"), "status")
    for key in (NODEPOOL, INSTANCE_TYPE):
        if not labels.get(key):
            raise ctx.error(f"metadata.labels.{key}", "is required to count an in-flight NodeClaim")
    requirements = tuple(
        _requirement(ctx, r, f"spec.requirements[{i}]", NODE_OPERATORS)
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


NAMESPACED_KINDS = ("Pod", "DaemonSet", "MachineDeployment", *WORKLOAD_KINDS)


def _context(source: str, index: int, obj: Any) -> _Ctx:
    """Where one object is (its kind and name checked first), for the errors of everything below."""
    if not isinstance(obj, Mapping):
        raise InputError(source, index, "", "", "", f"expected a Kubernetes object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not kind or not isinstance(kind, str):
        raise InputError(source, index, "", "", "kind", "is required")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InputError(source, index, kind, "", "metadata.name", "is required")
    name = str(meta["name"])
    if kind in NAMESPACED_KINDS:
        name = f"{meta.get('namespace') or 'default'}/{name}"
    return _Ctx(source, index, kind, name)


def _template(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
    """A workload's ``spec.template`` and its labels."""
    template = ctx.mapping(spec.get("template"), "spec.template")
    labels = ctx.labels(
        ctx.mapping(template.get("metadata"), "spec.template.metadata").get("labels"),
        "spec.template.metadata.labels",
    )
    return template, labels


def _workload_pods(ctx: _Ctx, obj: Mapping[str, Any], namespace: str, name: str) -> tuple[Pod, ...]:
    """A Deployment/ReplicaSet/StatefulSet (``spec.replicas``) or Job (``spec.parallelism``) as its pods."""
    spec = ctx.mapping(obj.get("spec"), "spec")
    field = "spec.parallelism" if ctx.kind == "Job" else "spec.replicas"
    count = ctx.integer(spec.get(field.split(".")[1], 1), field, 0)
    template, labels = _template(ctx, spec)
    owner = f"{ctx.kind}/{name}"
    spec_field = "spec.template.spec"
    return tuple(
        parse_pod_spec(ctx, namespace, f"{name}-{i}", labels, template.get("spec"), spec_field, owner=owner)
        for i in range(count)
    )


def _daemon_set(ctx: _Ctx, obj: Mapping[str, Any], namespace: str, name: str) -> DaemonSet:
    template, labels = _template(ctx, ctx.mapping(obj.get("spec"), "spec"))
    pod = parse_pod_spec(
        ctx, namespace, name, labels, template.get("spec"), "spec.template.spec", owner=f"DaemonSet/{name}"
    )
    return DaemonSet(namespace, name, pod)


def _node_class(ctx: _Ctx, obj: Mapping[str, Any], name: str) -> NodeClass:
    spec = ctx.mapping(obj.get("spec"), "spec")
    sel = spec.get("scalableResourceSelector")
    return NodeClass(
        ctx.kind, name, None if sel is None else _selector(ctx, sel, "spec.scalableResourceSelector")
    )


def _machine_deployment(obj: Mapping[str, Any]) -> ClusterInput:
    found = machine_deployment_type(dict(obj))
    if isinstance(found, SkippedObject):
        return ClusterInput(skipped=(found,))
    return ClusterInput(machine_deployments=() if found is None else (found,))


def _read_object(ctx: _Ctx, obj: Mapping[str, Any]) -> ClusterInput:
    """One object (not a List), by kind; kinds the scheduler does not use are skipped."""
    kind = ctx.kind
    meta = obj["metadata"]
    namespace = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    labels = ctx.labels(meta.get("labels"), "metadata.labels")
    if kind == "NodePool":
        return ClusterInput(node_pools=(_node_pool(ctx, obj),))
    if kind.endswith("NodeClass"):
        return ClusterInput(node_classes=(_node_class(ctx, obj, name),))
    if kind == "InstanceCatalog":
        return ClusterInput(catalogs={name: instance_types_from_catalog(obj, ctx.source, ctx.index)})
    if kind == "MachineDeployment":
        return _machine_deployment(obj)
    if kind == "Pod":
        return ClusterInput(pods=(parse_pod_spec(ctx, namespace, name, labels, obj.get("spec"), "spec"),))
    if kind in WORKLOAD_KINDS:
        return ClusterInput(pods=_workload_pods(ctx, obj, namespace, name))
    if kind == "DaemonSet":
        return ClusterInput(daemon_sets=(_daemon_set(ctx, obj, namespace, name),))
    if kind == "Node":
        return ClusterInput(nodes=(_node(ctx, obj),))
    if kind == "NodeClaim":
        return ClusterInput(in_flight=(_node_claim(ctx, obj),))
    where = f"{ctx.source} document {ctx.index}"
    return ClusterInput(skipped=(SkippedObject(where, kind, ctx.name, "kind not used by the scheduler"),))


def parse_object(source: str, index: int, obj: Any) -> ClusterInput:
    """What one Kubernetes object (a ``List``: its items) contributes to a :class:`ClusterInput`, parsed once.

    ``source`` and ``index`` (file or ``"event"``, document number) are for errors only: an invalid object
    raises :class:`InputError` naming them, its kind and name, and the field. ``None`` (an empty YAML
    document) contributes nothing. Put parts together with :func:`assemble`.
    """
    if obj is None:
        return ClusterInput()
    if isinstance(obj, Mapping) and obj.get("kind") == "List":
        items = obj.get("items")
        if not isinstance(items, list):
            raise InputError(source, index, "List", "", "items", "must be a list")
        return assemble(parse_object(source, index, item) for item in items)
    return _read_object(_context(source, index, obj), obj)


_PART_FIELDS = (
    "node_pools",
    "node_classes",
    "machine_deployments",
    "pods",
    "daemon_sets",
    "nodes",
    "skipped",
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
    )


def parse_objects(documents: Iterable[tuple[str, int, Any]]) -> ClusterInput:
    """Kubernetes objects to a :class:`ClusterInput`; raises :class:`InputError` on invalid input.

    The same as :func:`assemble` of :func:`parse_object` of each document.
    """
    return assemble(parse_object(source, index, obj) for source, index, obj in documents)


def with_pods(inputs: ClusterInput, pods: Iterable[Pod]) -> ClusterInput:
    """A copy of ``inputs`` with other pods (what-if runs, benches)."""
    return replace(inputs, pods=tuple(pods))
