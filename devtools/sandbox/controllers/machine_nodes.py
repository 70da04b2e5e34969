"""What Node a Cluster API Machine becomes, and which Machines a scale-down removes (pure logic, no I/O).

**The Node** (:func:`node_for_machine`) is built from the Machine and its MachineDeployment the way the
field's autoscalers read a node group, so what tenon predicts from a MachineDeployment is what it gets:

* name = the Machine's name; ``spec.providerID`` = the Machine's;
* labels: ``capacity.cluster-autoscaler.kubernetes.io/labels`` (``k=v,k=v``) on the MachineDeployment, over
  the template labels Cluster API syncs to nodes (prefixes ``node-role.kubernetes.io``,
  ``node-restriction.kubernetes.io``, ``node.cluster.x-k8s.io``), plus ``node.kubernetes.io/instance-type``
  (labels annotation, else the MachineDeployment's or template's label, else the infrastructure template's
  name, else the MachineDeployment's name), ``kubernetes.io/hostname`` (the name),
  ``topology.kubernetes.io/zone`` (the Machine's ``spec.failureDomain``) and ``kubernetes.io/os``/``arch``
  (linux/amd64 unless the labels annotation says otherwise);
* capacity = allocatable from ``capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,maxPods,ephemeral-disk,
  gpu-count}`` (``gpu-type`` names the GPU resource, default ``nvidia.com/gpu``; ``maxPods`` defaults to 110
  as in cluster-autoscaler; cpu and memory default to 2 and 4Gi when absent);
* taints: the template's ``spec.taints`` and the ``capacity.cluster-autoscaler.kubernetes.io/taints``
  annotation (``key=value:Effect,...``), plus ``karpenter.sh/unregistered:NoExecute`` when the nodes register
  through Karpenter: the MachineDeployment or Machine is labelled ``node.cluster.x-k8s.io/karpenter-member``,
  unless the annotation ``sandbox.tenon.sh/register-through-karpenter`` says ``"false"`` (or ``"true"`` to
  force it);
* annotations Cluster API puts on nodes (``cluster.x-k8s.io/machine``, ``owner-name``, ``cluster-name``,
  ``cluster-namespace``).

A malformed annotation raises ``ValueError`` naming the MachineDeployment and the annotation.

**Scale-down order** (:func:`deletion_order`) follows ``machineset_deletion_order.go``: Machines already
deleting, then those annotated ``cluster.x-k8s.io/delete-machine`` (any value), then unhealthy ones (no
``nodeRef`` yet), then the delete policy (``spec.deletion.order`` in v1beta2,
``spec.strategy.rollingUpdate.deletePolicy`` or ``spec.deletePolicy`` in v1beta1): ``Oldest``, ``Newest``,
or ``Random`` (the default; here a stable hash of the name, so runs are reproducible). Ties go by name.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tenon.core.quantities import QuantityError, parse_quantity
from tenon.core.wellknown import (
    ARCH,
    CAPACITY_PREFIX,
    DELETE_MACHINE,
    HOSTNAME,
    INSTANCE_TYPE,
    KARPENTER_MEMBER,
    OS,
    UNREGISTERED_TAINT,
    ZONE,
)

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
REGISTER_THROUGH_KARPENTER = "sandbox.tenon.sh/register-through-karpenter"
UNREGISTERED_NO_EXECUTE = {"key": UNREGISTERED_TAINT, "effect": "NoExecute"}
SYNCED_LABEL_PREFIXES = ("node-role.kubernetes.io", "node-restriction.kubernetes.io", "node.cluster.x-k8s.io")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _md_ref(md: dict[str, Any] | None, machine: dict[str, Any]) -> str:
    obj = md or machine
    meta = obj.get("metadata") or {}
    kind = "machinedeployment" if md is not None else "machine"
    return f"{kind} {meta.get('namespace')}/{meta.get('name')}"


def parse_labels_annotation(text: str, where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{where}: expected key=value pairs separated by commas, got {part!r}")
        labels[key.strip()] = value.strip()
    return labels


def parse_taints_annotation(text: str, where: str) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        head, sep, effect = part.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS:
            raise ValueError(
                f"{where}: expected key=value:Effect (Effect one of {', '.join(TAINT_EFFECTS)}), got {part!r}"
            )
        key, _, value = head.partition("=")
        if not key:
            raise ValueError(f"{where}: taint {part!r} has no key")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    return taints


def registers_through_karpenter(md: dict[str, Any] | None, machine: dict[str, Any]) -> bool:
    for obj in (md, machine):
        if obj is None:
            continue
        override = ((obj.get("metadata") or {}).get("annotations") or {}).get(REGISTER_THROUGH_KARPENTER)
        if override is not None:
            return override.strip().lower() == "true"
    for obj in (md, machine):
        if obj is not None and KARPENTER_MEMBER in ((obj.get("metadata") or {}).get("labels") or {}):
            return True
    return False


def _quantity(annotations: dict[str, str], name: str, default: str | None, where: str) -> str | None:
    value = annotations.get(CAPACITY_PREFIX + name, default)
    if value is None:
        return None
    try:
        parse_quantity(value)
    except QuantityError as err:
        raise ValueError(f"{where}: annotation {CAPACITY_PREFIX}{name}: {err}") from None
    return str(value).strip()


def node_for_machine(machine: dict[str, Any], md: dict[str, Any] | None) -> dict[str, Any]:
    """The Node object (before kubelet registration) for ``machine`` of MachineDeployment ``md``."""
    meta = machine.get("metadata") or {}
    spec = machine.get("spec") or {}
    where = _md_ref(md, machine)
    source = md if md is not None else machine
    annotations = dict((source.get("metadata") or {}).get("annotations") or {})
    template = ((md or {}).get("spec") or {}).get("template") or {}
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    md_labels = ((md or {}).get("metadata") or {}).get("labels") or {}
    labels = {
        k: v
        for k, v in {**template_labels, **(meta.get("labels") or {})}.items()
        if any(
            k == p or k.startswith(p + "/") or k.split("/")[0].endswith("." + p)
            for p in SYNCED_LABEL_PREFIXES
        )
    }
    labels.update(
        parse_labels_annotation(
            annotations.get(CAPACITY_PREFIX + "labels", ""), f"{where}: annotation {CAPACITY_PREFIX}labels"
        )
    )
    infra_name = (spec.get("infrastructureRef") or {}).get("name")
    instance_type = (
        labels.get(INSTANCE_TYPE)
        or md_labels.get(INSTANCE_TYPE)
        or template_labels.get(INSTANCE_TYPE)
        or infra_name
        or ((md or {}).get("metadata") or {}).get("name")
        or meta.get("name")
    )
    name = meta["name"]
    labels[INSTANCE_TYPE] = str(instance_type)
    labels[HOSTNAME] = name
    if spec.get("failureDomain"):
        labels[ZONE] = str(spec["failureDomain"])
    labels.setdefault(OS, "linux")
    labels.setdefault(ARCH, "amd64")
    capacity: dict[str, str] = {}
    for resource, annotation, default in (
        ("cpu", "cpu", "2"),
        ("memory", "memory", "4Gi"),
        ("pods", "maxPods", "110"),
        ("ephemeral-storage", "ephemeral-disk", None),
    ):
        value = _quantity(annotations, annotation, default, where)
        if value is not None:
            capacity[resource] = value
    gpus = _quantity(annotations, "gpu-count", None, where)
    if gpus is not None and parse_quantity(gpus) > 0:
        capacity[annotations.get(CAPACITY_PREFIX + "gpu-type") or "nvidia.com/gpu"] = gpus
    taints: list[dict[str, Any]] = []
    for i, taint in enumerate((template.get("spec") or {}).get("taints") or spec.get("taints") or []):
        if not taint.get("key") or taint.get("effect") not in TAINT_EFFECTS:
            raise ValueError(
                f"{where}: spec.template.spec.taints[{i}]: needs a key and an effect in {TAINT_EFFECTS}"
            )
        taints.append({k: taint[k] for k in ("key", "value", "effect") if taint.get(k)})
    taints.extend(
        parse_taints_annotation(
            annotations.get(CAPACITY_PREFIX + "taints", ""), f"{where}: annotation {CAPACITY_PREFIX}taints"
        )
    )
    if registers_through_karpenter(md, machine) and not any(t["key"] == UNREGISTERED_TAINT for t in taints):
        taints.append(dict(UNREGISTERED_NO_EXECUTE))
    cluster = spec.get("clusterName") or (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL) or ""
    node_annotations = {
        "cluster.x-k8s.io/machine": name,
        "cluster.x-k8s.io/cluster-name": cluster,
        "cluster.x-k8s.io/cluster-namespace": meta.get("namespace") or "default",
    }
    if md is not None:
        node_annotations["cluster.x-k8s.io/owner-kind"] = "MachineDeployment"
        node_annotations["cluster.x-k8s.io/owner-name"] = md["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": node_annotations},
        "spec": {"providerID": spec.get("providerID"), "taints": taints},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def delete_policy(md: dict[str, Any]) -> str:
    spec = md.get("spec") or {}
    policy = (
        (spec.get("deletion") or {}).get("order")
        or ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("deletePolicy")
        or spec.get("deletePolicy")
        or "Random"
    )
    return str(policy)


def deletion_order(machines: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    """``machines`` sorted so that the first ones are deleted first on scale-down."""

    def rank(machine: dict[str, Any]) -> tuple[int, str, str]:
        meta = machine.get("metadata") or {}
        name = str(meta.get("name"))
        created = str(meta.get("creationTimestamp") or "")
        if meta.get("deletionTimestamp"):
            priority = 0
        elif DELETE_MACHINE in (meta.get("annotations") or {}):
            priority = 1
        elif not (machine.get("status") or {}).get("nodeRef"):
            priority = 2
        else:
            priority = 3
        if policy == "Oldest":
            tiebreak = created
        elif policy == "Newest":
            tiebreak = "".join(chr(0x10FFFF - ord(ch)) for ch in created)
        else:
            tiebreak = hashlib.sha256(name.encode()).hexdigest()
        return (priority, tiebreak, name)

    return sorted(machines, key=rank)
