"""tenon's scheduling core: a pure library that decides which machines to buy for pending pods.

Plain data in, decisions out: no I/O, no clock, no randomness; the same input always gives the same plan.
The scheduler service wraps it; ``tenon simulate`` runs it on YAML files (what-if before changing a NodePool).

Public API (stable names; everything else is internal):

``parse_objects(documents: Iterable[tuple[str, int, dict]]) -> ClusterInput``
    Kubernetes objects as dicts, each with its source (file name, or ``"event"``) and document index.
    Understands NodePool, ClusterAPINodeClass/EC2NodeClass, MachineDeployment, InstanceCatalog, Pod,
    Deployment/ReplicaSet/StatefulSet/Job (expanded into pods ``<owner>-<i>``), DaemonSet, Node, and
    ``karpenter.sh/v1`` NodeClaim (in-flight capacity, so nothing is bought twice for the same pods; pods
    already destined to it are listed in the annotation ``tenon.sh/nominated-pods``). Raises
    :class:`InputError`, whose ``str()`` names file, document, kind/name and field.

``solve(inputs: ClusterInput) -> Plan``
    Existing room first, then the cheapest set of new NodeClaims. ``Plan.to_json()`` is the ``-o json``
    contract of ``tenon simulate`` (see :mod:`tenon.core.plan`): ``nodeClaims`` (``nodePool``,
    ``instanceType``, ``zone``, ``capacityType``, ``pricePerHour``, ``pods``, ``fallbacks``, ``requirements``,
    ``priceEstimated``, ``explanation``), ``existingNodes``, ``unschedulable`` (``pod``, ``reason``,
    ``reasons`` per NodePool), ``totalPricePerHour``.

``instance_types_from_machine_deployments(mds: list[dict]) -> tuple[list[InstanceType], list[SkippedObject]]``
    Cluster API MachineDeployments to instance types (capacity annotations, max size, price or an explicit
    estimate); unreadable ones are skipped with a reason naming them.

``instance_types_from_catalog(doc, source, index) -> tuple[InstanceType, ...]``
    An ``InstanceCatalog`` document to instance types.

Module map: :mod:`.quantities` (Kubernetes quantities), :mod:`.requirements` (node requirements, label
selectors), :mod:`.model` (the frozen data), :mod:`.objects` (dicts to model), :mod:`.catalog` (instance
types), :mod:`.templates` (NodePool x type, DaemonSet overhead, pod feasibility), :mod:`.topology` (domains
and hostname rules), :mod:`.packing` (cost-aware packing), :mod:`.solver` (the pipeline), :mod:`.plan`
(output), :mod:`.explain` (why each type won or lost), :mod:`.catalogs_generated` (the fake-400 and kwok-144
catalogs from their published formulas).
"""

from tenon.core.catalog import instance_types_from_catalog, instance_types_from_machine_deployments
from tenon.core.errors import InputError
from tenon.core.model import ClusterInput, InFlightNodeClaim, InstanceType, Pod, SkippedObject
from tenon.core.objects import parse_objects
from tenon.core.plan import Plan, PlannedNodeClaim, Unschedulable
from tenon.core.solver import solve

__all__ = [
    "ClusterInput",
    "InFlightNodeClaim",
    "InputError",
    "InstanceType",
    "Plan",
    "PlannedNodeClaim",
    "Pod",
    "SkippedObject",
    "Unschedulable",
    "instance_types_from_catalog",
    "instance_types_from_machine_deployments",
    "parse_objects",
    "solve",
]
