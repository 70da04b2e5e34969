"""The scheduler's plain data: frozen dataclasses, no behaviour beyond small derived properties.

Everything the solver reads is one of these types, built by :mod:`tenon.core.objects` from Kubernetes
dictionaries (or by services directly from events). Resources are ``dict[str, int]`` in canonical units
(:mod:`tenon.core.quantities`: millicores for cpu, bytes for memory, counts for pods and extended
resources). Pods carry every scheduling-relevant field of their spec already normalised: the ``requests``
include init containers (max rule), sidecars, ``spec.overhead`` and ``pods: 1``; ``nodeSelector`` is folded
into each required node-affinity term.

Well-known label keys live in :mod:`tenon.core.wellknown`, so all modules spell them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from tenon.core.requirements import LabelSelector, Requirement

ON_DEMAND = "on-demand"
SPOT = "spot"

Resources = dict[str, int]


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def describe(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint none of ``tolerations`` tolerates (PreferNoSchedule is soft)."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tol.tolerates(taint) for tol in tolerations):
            return taint
    return None


@dataclass(frozen=True)
class PodAffinityTerm:
    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()  # empty: the pod's own namespace
    all_namespaces: bool = False  # namespaceSelector: {} selects every namespace


@dataclass(frozen=True)
class TopologySpread:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector
    min_domains: int = 1


@dataclass(frozen=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True)
class PodVolume:
    """A volume of a pod that may bind it to a topology: a PersistentVolumeClaim it names, or a generic
    ephemeral volume (its claim ``<pod>-<volume>``, made from a template naming ``storage_class``)."""

    claim: str
    ephemeral: bool = False
    storage_class: str | None = None  # an ephemeral volume's template's storageClassName


class PodShape:
    """A token the copies of one parsed pod share (:func:`tenon.core.podspec.placed`: the replicas of one
    spec, which differ at most in their name and node), so what the solver works out for one bound pod (its
    request vector, the selectors it matches, the limits it sets) it works out once for all of them. Compared
    by identity: a pod parsed on its own has a shape of its own (equal pods with two shapes cost a repeated
    work-out, never a wrong one)."""

    __slots__ = ()


def by_shape(pods: Iterable[Pod]) -> list[tuple[Pod, int]]:
    """One pod of each shape among ``pods`` with how many there are of it, shapes in the order they come."""
    many: dict[PodShape, int] = {}
    first: dict[PodShape, Pod] = {}
    for pod in pods:
        shape = pod.shape
        if shape in many:
            many[shape] += 1
        else:
            many[shape] = 1
            first[shape] = pod
    return [(first[shape], n) for shape, n in many.items()]


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    requests: Resources = field(default_factory=dict, hash=False)
    # OR of terms; each term an AND of requirements (nodeSelector already folded into every term).
    node_affinity: tuple[tuple[Requirement, ...], ...] = ((),)
    preferred_node_affinity: tuple[tuple[int, tuple[Requirement, ...]], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpread, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    node_name: str = ""
    owner: str = ""  # "Deployment/web" for expanded workloads
    # (weight, term), heaviest first
    preferred_pod_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    preferred_pod_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    volumes: tuple[PodVolume, ...] = ()
    nominated_node: str = ""  # status.nominatedNodeName: the kube-scheduler is placing it (preemption)
    planned_node: str = ""  # tenon.sh/planned-node: the Node whose room it takes first while it fits there

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def limits_nothing(self) -> bool:
        """Whether the pod restricts no node it lands on (no anti-affinity, spread or host port): most bound
        pods, which then only count for the selectors they match."""
        hostname_rules = self.pod_anti_affinity or self.preferred_pod_anti_affinity or self.topology_spread
        return not (hostname_rules or self.host_ports)

    @cached_property
    def label_set(self) -> frozenset[tuple[str, str]]:
        """The labels as a hashable set: what selectors' memos key on (computed once per pod, which the
        scheduler keeps parsed from one batch to the next)."""
        return frozenset(self.labels.items())

    @cached_property
    def shape(self) -> PodShape:
        """The pod without its name and place (see :class:`PodShape`)."""
        return PodShape()

    @cached_property
    def topology_free(self) -> bool:
        """Whether the pod names no topology key (no spread, no pod (anti-)affinity, required or preferred):
        most bound pods, which then only count for the selectors they match."""
        return not (
            self.topology_spread
            or self.pod_affinity
            or self.pod_anti_affinity
            or self.preferred_pod_affinity
            or self.preferred_pod_anti_affinity
        )


@dataclass(frozen=True)
class DaemonSet:
    namespace: str
    name: str
    pod: Pod  # the template as a pod: requests, selectors, tolerations, host ports


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=dict, hash=False)
    capacity: Resources = field(default_factory=dict, hash=False)
    unschedulable: bool = False


@dataclass(frozen=True)
class Offering:
    zone: str | None
    capacity_type: str
    price: float
    available: bool = True
    price_estimated: bool = False  # priced by a model: the provider gave no usable figure (EC2 spot)


@dataclass(frozen=True)
class InstanceType:
    name: str
    capacity: Resources = field(hash=False)
    overhead: Resources = field(default_factory=dict, hash=False)
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    offerings: tuple[Offering, ...] = ()
    taints: tuple[Taint, ...] = ()
    price_estimated: bool = False
    max_new: int | None = None  # how many more may be created (Cluster API max-size minus replicas)
    source: str = ""  # "MachineDeployment default/c3-8", "InstanceCatalog fake-400"

    @property
    def allocatable(self) -> Resources:
        return {name: max(0, amount - self.overhead.get(name, 0)) for name, amount in self.capacity.items()}

    def offering_estimated(self, zone: str | None, capacity_type: str) -> bool:
        """Whether the price of the offering bought in ``zone`` as ``capacity_type`` is an estimate."""
        return any(
            o.price_estimated and o.capacity_type == capacity_type and o.zone in (zone, None)
            for o in self.offerings
        )


@dataclass(frozen=True)
class NodeClassRef:
    group: str
    kind: str
    name: str


@dataclass(frozen=True)
class NodePool:
    name: str
    weight: int = 0
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    requirements: tuple[Requirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    node_class_ref: NodeClassRef | None = None
    limits: Resources = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class NodeClass:
    kind: str  # ClusterAPINodeClass | EC2NodeClass | ...
    name: str
    selector: LabelSelector | None = None  # ClusterAPINodeClass.spec.scalableResourceSelector


@dataclass(frozen=True)
class MachineDeploymentType:
    """An instance type made from a Cluster API MachineDeployment, with the MD's own labels for selection."""

    namespace: str
    name: str
    md_labels: dict[str, str] = field(hash=False)
    instance_type: InstanceType


@dataclass(frozen=True)
class InFlightNodeClaim:
    """Capacity already decided (a NodeClaim) that is not yet a Node: use its room before buying more.

    Its labels are the template's of (NodePool, instance type), then a label for each single-value ``In``
    requirement, then ``labels``, then the pool, type, zone and capacity type given here. ``capacity``
    (else the type's, else ``allocatable``) counts against the NodePool's limits. ``pods`` are the pods it
    was bought for that are still pending: their room on it is taken, and they are not planned again. A
    claim whose ``node_name`` is a Node of the same input is not counted: the Node is.
    """

    name: str
    node_pool: str
    instance_type: str
    zone: str | None
    capacity_type: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    allocatable: Resources | None = field(default=None, hash=False)  # None: from the catalog's type
    pods: tuple[str, ...] = ()  # ns/name of pods already destined to it
    capacity: Resources | None = field(default=None, hash=False)  # None: from the catalog's type
    requirements: tuple[Requirement, ...] = ()
    node_name: str = ""  # the Node it became, once known


@dataclass(frozen=True)
class VolumeClaim:
    """A PersistentVolumeClaim as scheduling reads it: bound (``volume_name``) or to be provisioned by its
    StorageClass (``None``: the default class; ``""``: none)."""

    namespace: str
    name: str
    storage_class: str | None = None
    volume_name: str = ""
    phase: str = ""  # Pending | Bound | Lost
    deleting: bool = False


@dataclass(frozen=True)
class PersistentVolume:
    """A PersistentVolume's required node affinity (OR of terms, each an AND) and whether it is going."""

    name: str
    node_affinity: tuple[tuple[Requirement, ...], ...] = ()
    deleting: bool = False
    driver: str = ""  # spec.csi.driver: whose attach limit it counts against


@dataclass(frozen=True)
class StorageClass:
    name: str
    wait_for_first_consumer: bool = False  # volumeBindingMode WaitForFirstConsumer (else Immediate)
    allowed_topologies: tuple[tuple[Requirement, ...], ...] = ()  # OR of terms; empty: anywhere
    default: bool = False  # storageclass.kubernetes.io/is-default-class
    provisioner: str = ""  # the CSI driver that makes its volumes


@dataclass(frozen=True)
class SkippedObject:
    source: str
    kind: str
    name: str
    reason: str
    field: str = ""
    """For an object skipped because part of it cannot be read (not merely a kind scheduling does not use):
    the field, so a strict reader (``tenon simulate``) can refuse the input naming it."""

    def describe(self) -> str:
        return f"{self.source}: {self.kind} {self.name} skipped: {self.reason}"


@dataclass(frozen=True)
class ClusterInput:
    """Everything one solve reads. Pods with ``node_name`` are bound; the others are pending.

    Also what one object contributes (:func:`tenon.core.objects.parse_object`): such parts are put together
    by :func:`tenon.core.objects.assemble`.
    """

    node_pools: tuple[NodePool, ...] = ()
    node_classes: tuple[NodeClass, ...] = ()
    catalogs: dict[str, tuple[InstanceType, ...]] = field(default_factory=dict, hash=False)
    machine_deployments: tuple[MachineDeploymentType, ...] = ()
    pods: tuple[Pod, ...] = ()
    daemon_sets: tuple[DaemonSet, ...] = ()
    nodes: tuple[Node, ...] = ()
    in_flight: tuple[InFlightNodeClaim, ...] = ()
    skipped: tuple[SkippedObject, ...] = ()
    volume_claims: tuple[VolumeClaim, ...] = ()
    volumes: tuple[PersistentVolume, ...] = ()
    storage_classes: tuple[StorageClass, ...] = ()
