"""The resource registry: every kind the sandbox serves, and how each one is addressed.

A :class:`ResourceType` is one group/version/plural (``apps/v1 deployments``). The registry is the single
source the store (what to keep, which subresources exist), the HTTP layer (path parsing), discovery
(``/api/v1``, ``/apis/{group}/{version}``) and the OpenAPI stub all read, so adding a kind means adding one
line here.

Two versions of one group and plural (Cluster API's ``v1beta1`` and ``v1beta2`` machines) share storage: the
store keys its buckets by :attr:`ResourceType.storage_key` (group and plural) and rewrites ``apiVersion`` on
the way out, which is what a real server with a no-op conversion would do. The sandbox performs no schema
conversion between versions; callers that care use one version consistently.

``selectable_fields`` lists the field-selector paths a kind accepts, as the real server's
``ToSelectableFields`` does (``metadata.name`` and ``metadata.namespace`` are always allowed); an unknown
field is a 400.

Kinds also come from CustomResourceDefinitions (``apiextensions.k8s.io/v1``, served here as a built-in kind):
each store owns a :meth:`Registry.copy`, which defines a CRD's kinds when it is created
(:meth:`Registry.define`) and forgets them when it is deleted (:meth:`Registry.undefine`). Such a
ResourceType carries its :class:`~devtools.sandbox.crds.CustomKind` (schema, CEL rules, printer columns,
scale paths) in ``custom``.
The custom kinds listed below (Karpenter's, Cluster API's) are *stand-ins*: schema-less, accepting any body,
so a bare store serves them as it always did. A CRD for the same group and plural replaces the stand-in
(``tenon sandbox`` installs ``deploy/crds`` at start), and deleting that CRD stops serving the kind, as on a
real cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devtools.sandbox.errors import NotFound

if TYPE_CHECKING:
    from devtools.sandbox.crds import CustomKind

ALWAYS_SELECTABLE: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})
MAIN_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str]
    short_names: tuple[str, ...] = ()
    selectable_fields: frozenset[str] = field(default=frozenset(), compare=False)
    categories: tuple[str, ...] = field(default=(), compare=False)
    verbs: tuple[str, ...] = field(default=MAIN_VERBS, compare=False)
    custom: CustomKind | None = field(default=None, compare=False)  # set for kinds a CRD defines

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @functools.cached_property
    def storage_key(self) -> tuple[str, str]:  # cached: the store asks for it several times per write
        return (self.group, self.plural)

    @property
    def is_custom(self) -> bool:
        """Custom resources (not in kubectl's compiled-in scheme) do not accept strategic merge patch."""
        return self.group not in BUILTIN_GROUPS

    def allows_field(self, path: str) -> bool:
        return path in ALWAYS_SELECTABLE or path in self.selectable_fields


BUILTIN_GROUPS: frozenset[str] = frozenset(
    {"", "apps", "policy", "coordination.k8s.io", "autoscaling", "events.k8s.io", "apiextensions.k8s.io"}
)

_STATUS = frozenset({"status"})
_STATUS_SCALE = frozenset({"status", "scale"})

POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
NODE_FIELDS = frozenset({"spec.unschedulable"})
EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

RESOURCES: tuple[ResourceType, ...] = (
    # core
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        frozenset({"status", "finalize"}),
        ("ns",),
        frozenset({"status.phase"}),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        frozenset({"status", "binding", "eviction"}),
        ("po",),
        POD_FIELDS,
        ("all",),
    ),
    ResourceType("", "v1", "nodes", "Node", False, _STATUS, ("no",), NODE_FIELDS),
    ResourceType("", "v1", "events", "Event", True, frozenset(), ("ev",), EVENT_FIELDS),
    # the old-style binding collection (kubernetes clients' create_namespaced_binding): create only
    ResourceType("", "v1", "bindings", "Binding", True, frozenset(), verbs=("create",)),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        frozenset(),
        ("ev",),
        frozenset(
            {
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "reason",
                "reportingController",
                "type",
            }
        ),
    ),
    # apps
    ResourceType(
        "apps", "v1", "deployments", "Deployment", True, _STATUS_SCALE, ("deploy",), categories=("all",)
    ),
    ResourceType(
        "apps", "v1", "replicasets", "ReplicaSet", True, _STATUS_SCALE, ("rs",), categories=("all",)
    ),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, _STATUS, ("ds",), categories=("all",)),
    # policy, coordination
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, _STATUS, ("pdb",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, frozenset()),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        _STATUS,
        ("crd", "crds"),
        categories=("api-extensions",),
    ),
    # Karpenter
    ResourceType(
        "karpenter.sh", "v1", "nodepools", "NodePool", False, _STATUS_SCALE, (), categories=("karpenter",)
    ),
    ResourceType(
        "karpenter.sh", "v1", "nodeclaims", "NodeClaim", False, _STATUS, (), categories=("karpenter",)
    ),
    ResourceType(
        "karpenter.cluster.x-k8s.io",
        "v1alpha1",
        "clusterapinodeclasses",
        "ClusterAPINodeClass",
        False,
        _STATUS,
        (),
        categories=("karpenter",),
    ),
    ResourceType(
        "karpenter.k8s.aws",
        "v1",
        "ec2nodeclasses",
        "EC2NodeClass",
        False,
        _STATUS,
        ("ec2nc",),
        categories=("karpenter",),
    ),
    # Cluster API (management cluster)
    ResourceType(
        "cluster.x-k8s.io",
        "v1beta1",
        "machinedeployments",
        "MachineDeployment",
        True,
        _STATUS_SCALE,
        ("md",),
        categories=("cluster-api",),
    ),
    ResourceType(
        "cluster.x-k8s.io",
        "v1beta1",
        "machines",
        "Machine",
        True,
        _STATUS,
        ("ma",),
        categories=("cluster-api",),
    ),
    ResourceType(
        "cluster.x-k8s.io",
        "v1beta2",
        "machinedeployments",
        "MachineDeployment",
        True,
        _STATUS_SCALE,
        ("md",),
        categories=("cluster-api",),
    ),
    ResourceType(
        "cluster.x-k8s.io",
        "v1beta2",
        "machines",
        "Machine",
        True,
        _STATUS,
        ("ma",),
        categories=("cluster-api",),
    ),
)

# The version a group's discovery document names as preferred.
PREFERRED_VERSION: dict[str, str] = {"cluster.x-k8s.io": "v1beta2"}


CRD_STORAGE_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


class Registry:
    """Look-ups over the served kinds (by path segments, kind, short name); CRDs add and remove kinds."""

    def __init__(self, resources: Iterable[ResourceType] = RESOURCES) -> None:
        self._builtin: tuple[ResourceType, ...] = tuple(resources)
        self._defined: dict[str, tuple[ResourceType, ...]] = {}
        self.generation = 0  # bumped by every change, so caches (OpenAPI, discovery) know to rebuild
        self._index()

    def copy(self) -> Registry:
        """A registry of its own for one store (CRDs change one cluster, not every store)."""
        twin = Registry(self._builtin)
        for name, types in self._defined.items():
            twin.define(name, types)
        return twin

    def define(self, crd_name: str, types: Iterable[ResourceType]) -> None:
        """Serve a CRD's kinds, replacing the CRD's earlier definition and, for good, any stand-in of the same
        kind (deleting the CRD later stops serving the kind, as on a real cluster)."""
        self._defined[crd_name] = tuple(types)
        keys = {rt.storage_key for rt in self._defined[crd_name]}
        self._builtin = tuple(rt for rt in self._builtin if not (rt.is_custom and rt.storage_key in keys))
        self._index()

    def undefine(self, crd_name: str) -> tuple[ResourceType, ...]:
        """Stop serving a CRD's kinds; returns them (empty when the CRD defined nothing)."""
        removed = self._defined.pop(crd_name, ())
        if removed:
            self._index()
        return removed

    def defined(self, crd_name: str) -> tuple[ResourceType, ...]:
        return self._defined.get(crd_name, ())

    def crd_of(self, storage_key: tuple[str, str]) -> str | None:
        """The name of the CRD serving this group and plural, if a CRD does."""
        return next((n for n, ts in self._defined.items() if ts and ts[0].storage_key == storage_key), None)

    def _index(self) -> None:
        self.resources: tuple[ResourceType, ...] = (
            *self._builtin,
            *(rt for types in self._defined.values() for rt in types),
        )
        self.generation += 1
        self._by_plural: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        self._by_group_version: dict[tuple[str, str], list[ResourceType]] = {}
        self._groups: dict[str, list[str]] = {}
        for rt in self.resources:
            self._by_plural[(rt.group, rt.version, rt.plural)] = rt
            self._by_kind[(rt.api_version, rt.kind.lower())] = rt
            self._by_kind.setdefault((rt.api_version, rt.plural), rt)
            self._by_kind.setdefault((rt.api_version, rt.singular), rt)
            for short in rt.short_names:
                self._by_kind.setdefault((rt.api_version, short), rt)
            self._by_group_version.setdefault((rt.group, rt.version), []).append(rt)
            if rt.group and rt.version not in self._groups.setdefault(rt.group, []):
                self._groups[rt.group].append(rt.version)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_plural.get((group, version, plural))

    def resource(self, api_version: str, kind_or_plural: str) -> ResourceType:
        """``resource("v1", "Pod")`` or ``resource("apps/v1", "deployments")``; NotFound for anything else."""
        rt = self._by_kind.get((api_version, kind_or_plural.lower()))
        if rt is None:
            raise NotFound(
                f'the server could not find the requested resource: {api_version} "{kind_or_plural}"'
            )
        return rt

    def groups(self) -> dict[str, list[str]]:
        """Group name -> served versions (core group excluded), in registry order."""
        return self._groups

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return self._by_group_version.get((group, version), [])

    def preferred_version(self, group: str) -> str:
        versions = self._groups.get(group, [])
        return PREFERRED_VERSION.get(group, versions[0] if versions else "")


DEFAULT_REGISTRY = Registry()
