"""tenon's scheduling core: a pure library that decides which machines to buy for pending pods.

Plain data in, decisions out: no I/O, no clock, no randomness; the same input always gives the same plan.
The scheduler service wraps it; ``tenon simulate`` runs it on YAML files (what-if before changing a NodePool).

Public API (stable names, importable from ``tenon.core``; everything else is internal, except the modules
:mod:`tenon.core.quantities` and :mod:`tenon.core.wellknown`):

Parsing, once, at the edge
    ``parse_object(source: str, index: int, obj: dict | None) -> ClusterInput``
        What one Kubernetes object contributes (a part: a ``ClusterInput`` holding only its model objects).
        Understands NodePool, ClusterAPINodeClass/EC2NodeClass, MachineDeployment, InstanceCatalog, Pod,
        Deployment/ReplicaSet/StatefulSet/Job (expanded into pods ``<owner>-<i>``), DaemonSet, Node,
        ``karpenter.sh/v1`` NodeClaim (in-flight capacity: labels, ``spec.requirements``,
        ``status.allocatable``/``capacity``/``nodeName``; the pods it was bought for in the annotation
        ``tenon.sh/nominated-pods``), PersistentVolumeClaim, PersistentVolume, StorageClass and ``List``;
        other kinds are recorded as skipped (a MachineDeployment that cannot be read too, with the field in
        ``SkippedObject.field``). Raises :class:`InputError`, one line naming file (``source``), document
        (``index``), kind/name and field.
    ``parse_pod(source: str, index: int, obj: dict) -> Pod``
        One Pod object (what ``parse_object`` contributes for it, without the part around it): for a service
        that keeps many running pods parsed. The replicas of one spec share what the solver derives from it.
    ``assemble(parts: Iterable[ClusterInput], in_flight: Iterable[InFlightNodeClaim] = ()) -> ClusterInput``
        Parts put together in order, without parsing anything again; in-flight claims may be given directly
        as :class:`InFlightNodeClaim`. Unpriced MachineDeployments are estimated against the whole set; a
        claim whose ``node_name`` is one of the Nodes is left out (the Node counts).
    ``parse_objects(documents: Iterable[tuple[str, int, dict]]) -> ClusterInput``
        ``assemble(parse_object(*d) for d in documents)``: what ``tenon simulate`` and the bench read.
    ``MAX_PODS``
        The most pods one object may expand into (a workload's replicas); a reader of many objects bounds
        their sum the same way (``tenon simulate`` does).
    ``machine_deployment_types(mds) -> tuple[list[MachineDeploymentType], list[SkippedObject]]``,
    ``instance_types_from_machine_deployments(mds) -> tuple[list[InstanceType], list[SkippedObject]]``
        Cluster API MachineDeployments to instance types (capacity annotations, max size, price or an explicit
        estimate); unreadable ones are skipped with a reason naming them.
    ``instance_types_from_catalog(doc, source, index) -> tuple[InstanceType, ...]``
        An ``InstanceCatalog`` document to instance types.
    ``instance_types_for_node_pool(inputs, pool) -> tuple[tuple[InstanceType, ...], str]``
        The instance types a NodePool may launch (its Cluster API NodeClass's MachineDeployments, else the
        InstanceCatalog named like its NodeClass, else the only one), or ``()`` and why there are none.

Solving
    ``solve(inputs: ClusterInput) -> Plan``
        Existing room first (Nodes, then in-flight claims), then the cheapest set of new NodeClaims.
        ``Plan.to_json()`` is the ``-o json`` contract of ``tenon simulate`` (see :mod:`tenon.core.plan`):
        ``nodeClaims`` (``nodePool``, ``instanceType``, ``zone``, ``capacityType``, ``pricePerHour``,
        ``pods``, ``fallbacks``, ``requirements``, ``priceEstimated``, ``explanation``), ``existingNodes``,
        ``unschedulable`` (``pod``, ``reason``, ``reasons`` per NodePool), ``totalPricePerHour``,
        ``skipped``, ``nominated`` (pods the kube-scheduler is already placing).

The model (frozen dataclasses): :class:`ClusterInput` and what it holds (:class:`NodePool`,
:class:`NodeClass`, :class:`InstanceType`, :class:`MachineDeploymentType`, :class:`Pod`, :class:`DaemonSet`,
:class:`Node`, :class:`InFlightNodeClaim`, :class:`SkippedObject`), :class:`Requirement` and
:class:`LabelSelector`; the output :class:`Plan`, :class:`PlannedNodeClaim`, :class:`Unschedulable`,
:class:`NominatedPod`; the error :class:`InputError` (and ``one_line(text)``, which escapes what could break a
message over lines, as ``InputError`` does to its own).

Module map: :mod:`.quantities` (Kubernetes quantities), :mod:`.requirements` (node requirements, label
selectors), :mod:`.model` (the frozen data), :mod:`.fields` (reading fields with errors that say where),
:mod:`.podspec` (a pod spec to a pod), :mod:`.objects` (dicts to model), :mod:`.catalog` (instance types),
:mod:`.templates` (NodePool x type, DaemonSet overhead, open keys, pod feasibility), :mod:`.volumes` (volume
topology), :mod:`.rooms` (existing Nodes and in-flight claims, limits usage), :mod:`.topology` (domains of
any key, per placement, and hostname rules), :mod:`.units` (pods that share a node, classes),
:mod:`.packing` (cost-aware packing), :mod:`.newnodes` (one pool's nodes: limits, shared max sizes,
minValues, claims), :mod:`.relax` (Karpenter's preference ladder), :mod:`.solver` (the pipeline),
:mod:`.plan` (output), :mod:`.explain` (why each type won or lost), :mod:`.catalogs_generated` (the fake-400
and kwok-144 catalogs from their published formulas), :mod:`.wellknown` (label, annotation and taint names).
"""

from tenon.core.catalog import (
    instance_types_for_node_pool,
    instance_types_from_catalog,
    instance_types_from_machine_deployments,
    machine_deployment_types,
)
from tenon.core.errors import InputError, one_line
from tenon.core.model import (
    ClusterInput,
    DaemonSet,
    InFlightNodeClaim,
    InstanceType,
    MachineDeploymentType,
    Node,
    NodeClass,
    NodePool,
    Pod,
    SkippedObject,
)
from tenon.core.objects import MAX_PODS, assemble, parse_object, parse_objects, parse_pod
from tenon.core.plan import NominatedPod, Plan, PlannedNodeClaim, Unschedulable
from tenon.core.requirements import LabelSelector, Requirement
from tenon.core.solver import solve

__all__ = [
    "MAX_PODS",
    "ClusterInput",
    "DaemonSet",
    "InFlightNodeClaim",
    "InputError",
    "InstanceType",
    "LabelSelector",
    "MachineDeploymentType",
    "Node",
    "NodeClass",
    "NodePool",
    "NominatedPod",
    "Plan",
    "PlannedNodeClaim",
    "Pod",
    "Requirement",
    "SkippedObject",
    "Unschedulable",
    "assemble",
    "instance_types_for_node_pool",
    "instance_types_from_catalog",
    "instance_types_from_machine_deployments",
    "machine_deployment_types",
    "one_line",
    "parse_object",
    "parse_objects",
    "parse_pod",
    "solve",
]
