"""Instance types: where they come from and how a NodePool finds its own.

Two sources, matching the two kinds of NodeClass the project speaks:

* **Cluster API.** Each MachineDeployment labelled ``node.cluster.x-k8s.io/karpenter-member`` is one instance
  type (:func:`instance_types_from_machine_deployments`). Capacity comes from the cluster-autoscaler
  scale-from-zero annotations ``capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,maxPods,gpu-count,
  gpu-type,ephemeral-disk,labels,taints}`` (``maxPods`` defaults to 110 as cluster-autoscaler does);
  ``cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size`` minus ``spec.replicas`` caps how many more
  may be created; ``tenon.sh/price-per-hour`` is the price. Without ``karpenter.sh/capacity-type`` the type
  offers ``on-demand`` (Karpenter's CAPI provider left it empty, which caused a drift loop in the field). The
  zone is the ``topology.kubernetes.io/zone`` label or ``spec.template.spec.failureDomain``.

  **Unpriced MachineDeployments get an estimate** proportional to their resources (cpu, memory, GPUs at
  fixed reference rates, :data:`REFERENCE_RATES`), scaled to agree with the priced ones in the same set when
  there are any (median ratio). The estimate is flagged ``price_estimated`` and shown in every plan that uses
  it. This is what lets the smallest fitting machine win when nobody priced anything: Karpenter's CAPI
  provider prices everything at 0 and takes the first name, which gave a 3-vCPU pod an 8-vCPU machine.

  A MachineDeployment whose annotations cannot be read is *skipped* with a reason naming it
  (:class:`SkippedObject`) rather than failing the whole input: one broken node group must not stop scaling
  of the others.

* **InstanceCatalog** documents (``tenon.sh/v1alpha1``; format in ``docs/simulate.md``) list types with
  capacity, overhead, labels and priced offerings. They stand in for cloud APIs (EC2NodeClass until the EC2
  launcher reads the EC2 API). Errors in them are input errors (:class:`InputError`).

:func:`instance_types_for_node_pool` resolves a NodePool's ``nodeClassRef`` to its types: Cluster API member
MachineDeployments (filtered by the ClusterAPINodeClass ``scalableResourceSelector`` when one is set) or the
InstanceCatalog named like the NodeClass (or the only catalog given).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tenon.core.fields import Ctx
from tenon.core.model import (
    ON_DEMAND,
    ClusterInput,
    InstanceType,
    MachineDeploymentType,
    NodePool,
    Offering,
    SkippedObject,
    Taint,
)
from tenon.core.quantities import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, show, to_canonical
from tenon.core.requirements import integer
from tenon.core.wellknown import (
    ARCH,
    CAPACITY_PREFIX,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    KARPENTER_MEMBER,
    MAX_SIZE,
    OS,
    PRICE_PER_HOUR,
    ZONE,
)

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TYPE_LABEL = "cluster-api/accelerator"
DEFAULT_MAX_PODS = 110
# Reference on-demand rates per hour used only to *estimate* unpriced machines (order of magnitude of public
# cloud general-purpose list prices): what matters is that price grows with size, so smaller machines win.
REFERENCE_RATES = {CPU: 0.0316 / 1000, MEMORY: 0.0042 / 2**30, GPU_RESOURCE: 0.5}

T = TypeVar("T")


def _default_labels(name: str, labels: dict[str, str]) -> dict[str, str]:
    out = {ARCH: "amd64", OS: "linux", **labels}
    out.setdefault(INSTANCE_TYPE, name)
    return out


def estimate_price(capacity: Mapping[str, int]) -> float:
    return sum(rate * capacity.get(resource, 0) for resource, rate in REFERENCE_RATES.items())


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


def _parse_taints(text: str) -> tuple[Taint, ...]:
    taints = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        head, sep, effect = item.rpartition(":")
        if not sep or effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise ValueError(f"taint {item!r} is not key=value:Effect")
        key, _, value = head.partition("=")
        taints.append(Taint(key, value, effect))
    return tuple(taints)


class FieldProblem(ValueError):
    """A field of an object that cannot be read: ``str()`` is ``field: problem`` (one line)."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}")


def _annotation_field(name: str) -> str:
    return f"metadata.annotations[{name}]"


class _Annotations:
    """A MachineDeployment's annotations; one that cannot be read raises :class:`FieldProblem` naming it."""

    def __init__(self, raw: Any):
        if raw is not None and not isinstance(raw, Mapping):
            raise FieldProblem("metadata.annotations", f"must be a map, got {type(raw).__name__}")
        self._raw: Mapping[str, Any] = raw or {}

    def get(self, name: str) -> str | None:
        value = self._raw.get(name)
        return None if value is None else str(value)

    def parsed(self, name: str, parse: Callable[[str], T]) -> T | None:
        """``parse`` of the annotation (``None`` when absent); a ``ValueError`` names the annotation."""
        raw = self.get(name)
        if raw is None:
            return None
        try:
            return parse(raw)
        except ValueError as err:  # QuantityError is a ValueError
            raise FieldProblem(_annotation_field(name), str(err)) from None

    def quantity(self, field: str, resource: str) -> int | None:
        """A ``capacity.cluster-autoscaler.kubernetes.io/<field>`` quantity in ``resource``'s units."""
        return self.parsed(CAPACITY_PREFIX + field, lambda raw: to_canonical(resource, raw))


def _md_capacity(annotations: _Annotations) -> dict[str, int]:
    """cpu and memory (required, more than 0: a machine without either can run nothing, and must not be
    bought for pods that ask for neither), ephemeral disk, and max pods (110 when absent, as
    cluster-autoscaler)."""
    capacity: dict[str, int] = {}
    for field, resource in ((CPU, CPU), (MEMORY, MEMORY), ("ephemeral-disk", EPHEMERAL_STORAGE)):
        amount = annotations.quantity(field, resource)
        if amount is not None:
            capacity[resource] = amount
        elif resource in (CPU, MEMORY):
            raise FieldProblem(_annotation_field(CAPACITY_PREFIX + field), "is missing")
        if resource in (CPU, MEMORY) and not capacity[resource]:
            raise FieldProblem(_annotation_field(CAPACITY_PREFIX + field), "must be more than 0")
    max_pods = annotations.quantity("maxPods", PODS)
    capacity[PODS] = DEFAULT_MAX_PODS if max_pods is None else max_pods
    return capacity


def _md_gpus(annotations: _Annotations, capacity: dict[str, int], labels: dict[str, str]) -> None:
    """GPUs into ``capacity``, their type (when given) as the accelerator label."""
    gpus = annotations.quantity("gpu-count", GPU_RESOURCE)
    if gpus:
        capacity[GPU_RESOURCE] = gpus
        gpu_type = annotations.get(CAPACITY_PREFIX + "gpu-type")
        if gpu_type:
            labels[GPU_TYPE_LABEL] = gpu_type


def _node_labels_from_template(template_labels: Mapping[str, Any]) -> dict[str, str]:
    """The Machine template's labels a node of this group is known to carry (zone, type, arch, os, roles)."""
    return {
        key: str(value)
        for key, value in template_labels.items()
        if key in (ZONE, CAPACITY_TYPE, INSTANCE_TYPE, ARCH, OS) or key.startswith("node-role.kubernetes.io")
    }


def _max_size(raw_max: str) -> int:
    """The group's max size: a non-negative integer in ASCII digits."""
    number = integer(raw_max.strip())
    if number is None:
        raise ValueError(f"{show(raw_max)} is not an integer")
    if number < 0:
        raise ValueError(f"must be at least 0, got {number}")
    return number


def _replicas(spec: Mapping[str, Any]) -> int:
    raw = spec.get("replicas")
    number = 0 if raw is None else (raw if isinstance(raw, int) and not isinstance(raw, bool) else None)
    if number is None or number < 0:
        raise FieldProblem("spec.replicas", f"must be a non-negative integer, got {show(raw)}")
    return number


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)


def price_value(raw: object) -> float:
    """A price per hour: a finite, non-negative number (a JSON/YAML number or ASCII decimal text).

    ``inf``, ``NaN``, full-width digits (``"１"``) and words are refused, so no price can make a plan's
    total infinite or its JSON invalid; NaN is called what it is.
    """
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"{show(raw)} is not a number")
    if isinstance(raw, str):
        if not _DECIMAL.fullmatch(raw.strip()):
            what = "not a number (NaN)" if raw.strip().lower() == "nan" else "not a number"
            raise ValueError(f"{show(raw)} is {what}")
        raw = float(raw)
    price = float(raw)
    if math.isnan(price):
        raise ValueError("is not a number (NaN)")
    if not math.isfinite(price):
        raise ValueError(f"{show(raw)} is not finite")
    if price < 0:
        raise ValueError(f"{show(raw)} is negative")
    return price


def _map(raw: Any, field: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise FieldProblem(field, f"must be a map, got {type(raw).__name__}")
    return raw


def _md_type(md: Mapping[str, Any]) -> MachineDeploymentType:
    """One MachineDeployment as an instance type; unpriced (``price_estimated``, price 0) until estimated."""
    meta = _map(md.get("metadata"), "metadata")
    annotations = _Annotations(meta.get("annotations"))
    spec = _map(md.get("spec"), "spec")
    template = _map(spec.get("template"), "spec.template")
    capacity = _md_capacity(annotations)
    labels: dict[str, str] = {}
    _md_gpus(annotations, capacity, labels)
    template_labels = _map(_map(template.get("metadata"), "spec.template.metadata").get("labels"), "labels")
    labels.update(_node_labels_from_template(template_labels))
    labels.update(annotations.parsed(CAPACITY_PREFIX + "labels", _parse_labels) or {})
    taints = annotations.parsed(CAPACITY_PREFIX + "taints", _parse_taints) or ()
    max_size = annotations.parsed(MAX_SIZE, _max_size)
    max_new = None if max_size is None else max(0, max_size - _replicas(spec))
    price = annotations.parsed(PRICE_PER_HOUR, price_value)
    md_name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    type_name = labels.get(INSTANCE_TYPE) or md_name
    zone = labels.get(ZONE) or _map(template.get("spec"), "spec.template.spec").get("failureDomain") or None
    if zone:
        labels[ZONE] = str(zone)
    capacity_type = labels.pop(CAPACITY_TYPE, ON_DEMAND)
    instance_type = InstanceType(
        name=type_name,
        capacity=capacity,
        labels=_default_labels(type_name, labels),
        offerings=(Offering(str(zone) if zone else None, capacity_type, price or 0.0, max_new != 0),),
        taints=taints,
        price_estimated=price is None,
        max_new=max_new,
        source=f"MachineDeployment {namespace}/{md_name}",
    )
    md_labels = {str(k): str(v) for k, v in _map(meta.get("labels"), "metadata.labels").items()}
    return MachineDeploymentType(namespace, md_name, md_labels, instance_type)


def machine_deployment_type(
    md: Mapping[str, Any], source: str = "cluster"
) -> MachineDeploymentType | SkippedObject | None:
    """One MachineDeployment as an instance type (with its MD labels), or why it is skipped (the reason names
    the annotation or field, which ``field`` holds too); ``None`` when it is not a member
    (``node.cluster.x-k8s.io/karpenter-member``). An unpriced one is estimated alone: see
    :func:`estimate_unpriced` for a set."""
    meta = md.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    if not isinstance(labels, Mapping) or KARPENTER_MEMBER not in labels:
        return None
    try:
        return estimate_unpriced([_md_type(md)])[0]
    except FieldProblem as err:
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
        reason = f"annotation {err.field[len('metadata.annotations[') : -1]}: {err.problem}"
        if not err.field.startswith("metadata.annotations["):
            reason = str(err)
        return SkippedObject(source, "MachineDeployment", name, reason, err.field)


def estimate_unpriced(types: Sequence[MachineDeploymentType]) -> list[MachineDeploymentType]:
    """``types`` with every unpriced one (``price_estimated``) priced by estimate, scaled to agree with the
    priced ones of the set (median ratio). Depends only on the set: applying it again changes nothing."""
    priced = [
        mdt.instance_type.offerings[0].price / estimate_price(mdt.instance_type.capacity)
        for mdt in types
        if not mdt.instance_type.price_estimated and estimate_price(mdt.instance_type.capacity) > 0
    ]
    scale = statistics.median(priced) if priced and statistics.median(priced) > 0 else 1.0
    return [_with_estimate(mdt, scale) if mdt.instance_type.price_estimated else mdt for mdt in types]


def _with_estimate(mdt: MachineDeploymentType, scale: float) -> MachineDeploymentType:
    it = mdt.instance_type
    estimate = round(scale * estimate_price(it.capacity), 6)
    offerings = tuple(Offering(o.zone, o.capacity_type, estimate, o.available) for o in it.offerings)
    return replace(mdt, instance_type=replace(it, offerings=offerings))


def machine_deployment_types(
    mds: Iterable[Mapping[str, Any]],
) -> tuple[list[MachineDeploymentType], list[SkippedObject]]:
    """Member MachineDeployments as instance types (with their MD labels), plus the ones skipped and why."""
    types: list[MachineDeploymentType] = []
    skipped: list[SkippedObject] = []
    for md in mds:
        found = machine_deployment_type(md)
        if isinstance(found, SkippedObject):
            skipped.append(found)
        elif found is not None:
            types.append(found)
    return estimate_unpriced(types), skipped


def instance_types_from_machine_deployments(
    mds: Iterable[Mapping[str, Any]],
) -> tuple[list[InstanceType], list[SkippedObject]]:
    """Cluster API MachineDeployments (as dicts) to instance types; unreadable ones are skipped, with why."""
    types, skipped = machine_deployment_types(mds)
    return [t.instance_type for t in types], skipped


def _catalog_offering(ctx: Ctx, raw: Any, path: str) -> Offering:
    off = ctx.mapping(raw, path)
    if "price" not in off:
        raise ctx.error(f"{path}.price", "each offering needs a price")
    try:
        price = price_value(off["price"])
    except ValueError as err:
        raise ctx.error(f"{path}.price", str(err)) from None
    zone = off.get("zone")
    if zone is not None and not isinstance(zone, str):
        raise ctx.error(f"{path}.zone", f"must be a string, got {type(zone).__name__}")
    available = off.get("available", True)
    if not isinstance(available, bool):
        raise ctx.error(f"{path}.available", f"must be true or false, got {show(available)}")
    estimated = off.get("priceEstimated", False)
    if not isinstance(estimated, bool):
        raise ctx.error(f"{path}.priceEstimated", f"must be true or false, got {show(estimated)}")
    return Offering(zone or None, str(off.get("capacityType") or ON_DEMAND), price, available, estimated)


def _catalog_type(ctx: Ctx, entry: Any, path: str, catalog: str) -> InstanceType:
    entry = ctx.mapping(entry, path)
    name = entry.get("name")
    if not name or not isinstance(name, str):
        raise ctx.error(f"{path}.name", "every instance type needs a name")
    capacity = ctx.resources(entry.get("capacity"), f"{path}.capacity")
    for resource in (CPU, MEMORY):
        if resource not in capacity:
            raise ctx.error(f"{path}.capacity.{resource}", "is required")
        if not capacity[resource]:
            raise ctx.error(f"{path}.capacity.{resource}", "must be more than 0")
    offerings = ctx.listing(entry.get("offerings"), f"{path}.offerings")
    return InstanceType(
        name=name,
        capacity=capacity,
        overhead=ctx.resources(entry.get("overhead"), f"{path}.overhead"),
        labels=_default_labels(name, ctx.labels(entry.get("labels"), f"{path}.labels")),
        offerings=tuple(_catalog_offering(ctx, o, f"{path}.offerings[{j}]") for j, o in enumerate(offerings)),
        source=f"InstanceCatalog {catalog}",
    )


def instance_types_from_catalog(
    doc: Mapping[str, Any], source: str = "catalog", index: int | None = None
) -> tuple[InstanceType, ...]:
    """An ``InstanceCatalog`` document to instance types; raises :class:`InputError` naming the field.

    cpu and memory are required and more than 0; prices are finite and non-negative (:func:`price_value`).
    """
    meta = doc.get("metadata")
    name = str((meta if isinstance(meta, Mapping) else {}).get("name") or "")
    ctx = Ctx(source, index, "InstanceCatalog", name)
    types = ctx.mapping(doc.get("spec"), "spec").get("instanceTypes")
    if not isinstance(types, list):
        raise ctx.error("spec.instanceTypes", "must be a list of instance types")
    return tuple(_catalog_type(ctx, entry, f"spec.instanceTypes[{i}]", name) for i, entry in enumerate(types))


def instance_types_for_node_pool(
    inputs: ClusterInput, pool: NodePool
) -> tuple[tuple[InstanceType, ...], str]:
    """The instance types a NodePool may launch, or ``()`` and the reason there are none."""
    ref = pool.node_class_ref
    if (ref is None and inputs.machine_deployments and not inputs.catalogs) or (
        ref is not None and ref.kind == "ClusterAPINodeClass"
    ):
        selector = None
        for node_class in inputs.node_classes:
            if ref is not None and node_class.kind == ref.kind and node_class.name == ref.name:
                selector = node_class.selector
        types = tuple(
            mdt.instance_type
            for mdt in inputs.machine_deployments
            if selector is None or selector.matches(mdt.md_labels)
        )
        return types, "" if types else "no Cluster API MachineDeployment is a member of this NodeClass"
    if ref is not None and ref.name in inputs.catalogs:
        return inputs.catalogs[ref.name], ""
    if len(inputs.catalogs) == 1:
        return next(iter(inputs.catalogs.values())), ""
    wanted = ref.name if ref is not None else "(no nodeClassRef)"
    return (), f"no InstanceCatalog named {wanted} (have: {', '.join(sorted(inputs.catalogs)) or 'none'})"
