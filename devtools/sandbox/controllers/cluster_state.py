"""The simulated scheduler's view of the cluster: nodes, the pods on each node, and the pods still waiting.

This is plain data kept up to date from watch events (``upsert_node``, ``remove_node``, ``upsert_pod``,
``remove_pod``); it does no I/O. It is built to make the hot questions cheap at 1,000 nodes and 10,000 pods:

* ``NodeInfo`` keeps, per node, the parsed labels, the effective taints, allocatable, the **running sum of
  requests** of the non-terminal pods bound to it and their count, so the resource-fit check is O(1);
* pods are indexed by node and by namespace, and the (few) pods carrying required pod anti-affinity are kept
  in their own set, so the inter-pod affinity and topology spread checks look only at the namespace's pods
  rather than at every pod in the cluster;
* ``assume(pod, node)`` books a pod on a node the moment the scheduler decides, before the binding's watch
  event arrives (the real scheduler's "assumed pods"), so the next decision in the same cycle sees it.
* waiting pods with ``status.nominatedNodeName`` are indexed by that node (``nominated``): the real
  scheduler's nominator, which reads the field from its pod informer whoever set it (its own preemption, or
  an autoscaler saying where it made room: KEP-5278), so their requests are held on the node against other
  pods of no higher priority.

A pod counts on its node while it is bound and not terminal, including while it is terminating: a
terminating pod still holds its resources until the kubelet removes it (the reference's NodeResourcesFit
rule).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from devtools.sandbox.controllers.predicates import (
    is_terminal,
    node_allocatable,
    node_labels,
    node_taints,
    pod_key,
    pod_requests,
)
from devtools.sandbox.controllers.resource_lists import add_into, subtract_into

log = logging.getLogger(__name__)


@dataclass
class NodeInfo:
    name: str
    node: dict[str, Any]
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    unschedulable: bool
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    pod_keys: set[str] = field(default_factory=set)
    used_ports: Counter[tuple[str, int]] = field(default_factory=Counter)  # (protocol, hostPort) in use

    @property
    def pod_count(self) -> int:
        return len(self.pod_keys)


@dataclass
class PodEntry:
    """A pod the cache knows about, with its parsed requests (parsed once, on arrival)."""

    key: str
    pod: dict[str, Any]
    requests: dict[str, int]
    node_name: str | None  # the node whose totals include this pod, if any
    host_ports: tuple[tuple[str, int], ...] = ()
    cache: dict[str, Any] = field(default_factory=dict)  # derived data (parsed terms), reset on update
    nominated_to: str | None = None  # waiting with ``status.nominatedNodeName``: the node holding its room


def _same_version(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    meta_a, meta_b = a.get("metadata") or {}, b.get("metadata") or {}
    version = meta_a.get("resourceVersion")
    return (
        bool(version) and version == meta_b.get("resourceVersion") and meta_a.get("uid") == meta_b.get("uid")
    )


def _topology_signature(entry: PodEntry) -> tuple[Any, ...]:
    """What topology-derived counts depend on: where the pod counts, its labels, whether it is leaving."""
    meta = entry.pod.get("metadata") or {}
    return (
        entry.node_name,
        tuple(sorted((meta.get("labels") or {}).items())),
        bool(meta.get("deletionTimestamp")),
        meta.get("namespace"),
        has_required_anti_affinity(entry.pod),
    )


def nominated_node(pod: Mapping[str, Any]) -> str | None:
    """``status.nominatedNodeName``, if set."""
    return str((pod.get("status") or {}).get("nominatedNodeName") or "") or None


def host_ports(pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The ``(protocol, hostPort)`` pairs a pod's containers claim on their node (NodePorts plugin)."""
    spec = pod.get("spec") or {}
    claimed: list[tuple[str, int]] = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                claimed.append((str(port.get("protocol") or "TCP"), int(port["hostPort"])))
    return tuple(claimed)


def has_required_anti_affinity(pod: Mapping[str, Any]) -> bool:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


class ClusterState:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodEntry] = {}
        self.pods_by_namespace: dict[str, set[str]] = {}
        self.anti_affinity_pods: set[str] = set()
        self.bad_objects: dict[str, str] = {}  # key -> why the cache could not use it
        self.awaiting_node: dict[str, set[str]] = {}  # node name -> pods bound to it before it is known
        self.next_start_index = 0  # where the next pod's node search starts (kube-scheduler's rotation)
        self._node_list: list[NodeInfo] | None = None
        # Derived indexes (``topology_index.TopologyIndex``) rebuild when ``topology_version`` moves, which
        # happens when a bound pod's node, labels or termination change or a node's labels/taints change;
        # pods booked by ``assume`` since then are listed in ``booked`` so they can be applied incrementally.
        self.topology_version = 0
        self.booked: list[tuple[PodEntry, NodeInfo]] = []
        self.derived: dict[str, Any] = {}
        self.nominated: dict[str, dict[str, PodEntry]] = {}  # node name -> waiting pods nominated to it
        self._nominated_load: dict[str, dict[int, tuple[int, dict[str, int]]]] = {}
        """node -> priority -> how many pods of at least that priority are nominated to the node and what
        they request: every pod tried on a node with nominations needs it (:meth:`nominated_load`)."""

    def _skip(self, key: str, err: ValueError) -> None:
        """Leave out an object the cache cannot use, saying why once per distinct reason."""
        if self.bad_objects.get(key) != str(err):
            log.warning("sandbox scheduler: ignoring %s: %s", key, err)
        self.bad_objects[key] = str(err)

    def _bump(self) -> None:
        self.topology_version += 1
        self.booked = []

    # ------------------------------------------------------------------------------------------- nodes
    def upsert_node(self, node: dict[str, Any]) -> NodeInfo | None:
        name = node["metadata"]["name"]
        try:
            allocatable = node_allocatable(node)
        except ValueError as err:  # InvalidResources: admission refuses these; log and skip
            self._skip(f"node/{name}", err)
            self.remove_node(name)
            return None
        self.bad_objects.pop(f"node/{name}", None)
        info = self.nodes.get(name)
        if info is None:
            info = NodeInfo(name, node, {}, [], False, {})
            self.nodes[name] = info
            self._node_list = None
            self._bump()
            # pods bound before the node arrived (or after it was re-created) count again
            for key in self.awaiting_node.pop(name, set()):
                entry = self.pods.get(key)
                if entry is not None and entry.node_name is None and self._counts_on_node(entry.pod) == name:
                    self._attach(entry, name)
        info.node = node
        labels, taints = node_labels(node), node_taints(node)
        if labels != info.labels or taints != info.taints:
            self._bump()
        info.labels = labels
        info.taints = taints
        info.unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        info.allocatable = allocatable
        return info

    def remove_node(self, name: str) -> None:
        info = self.nodes.pop(name, None)
        if info is None:
            return
        self._node_list = None
        self._bump()
        for key in info.pod_keys:
            entry = self.pods.get(key)
            if entry is not None:
                entry.node_name = None
                self.awaiting_node.setdefault(name, set()).add(key)

    def node_list(self) -> list[NodeInfo]:
        """The nodes in a stable order (insertion), cached until a node is added or removed."""
        if self._node_list is None:
            self._node_list = list(self.nodes.values())
        return self._node_list

    # -------------------------------------------------------------------------------------------- pods
    @staticmethod
    def _counts_on_node(pod: Mapping[str, Any]) -> str | None:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or is_terminal(pod):
            return None
        return str(node_name)

    def _attach(self, entry: PodEntry, node_name: str) -> None:
        info = self.nodes.get(node_name)
        if info is None:
            self.awaiting_node.setdefault(node_name, set()).add(entry.key)
            return
        add_into(info.requested, entry.requests)
        info.pod_keys.add(entry.key)
        info.used_ports.update(entry.host_ports)
        entry.node_name = node_name

    def _detach(self, entry: PodEntry) -> None:
        target = self._counts_on_node(entry.pod)
        if target is not None and target in self.awaiting_node:
            self.awaiting_node[target].discard(entry.key)
            if not self.awaiting_node[target]:
                del self.awaiting_node[target]
        if entry.node_name is None:
            return
        info = self.nodes.get(entry.node_name)
        if info is not None and entry.key in info.pod_keys:
            subtract_into(info.requested, entry.requests)
            info.pod_keys.discard(entry.key)
            info.used_ports.subtract(entry.host_ports)
            for port in entry.host_ports:
                if info.used_ports[port] <= 0:
                    del info.used_ports[port]
        entry.node_name = None

    def upsert_pod(self, pod: dict[str, Any], *, booking: bool = False) -> PodEntry | None:
        """Add or update a pod from a watch event (or, with ``booking``, from :meth:`assume`)."""
        key = pod_key(pod)
        known = self.pods.get(key)
        if known is not None and (known.pod is pod or _same_version(known.pod, pod)):
            return known  # a resync replay or a duplicate event: nothing changed
        before = _topology_signature(known) if known is not None else None
        try:
            requests = pod_requests(pod)
        except ValueError as err:  # InvalidResources or a malformed field: log and skip the pod
            self._skip(f"pod/{key}", err)
            self.remove_pod(key)
            return None
        self.bad_objects.pop(f"pod/{key}", None)
        entry = self.pods.get(key)
        if entry is None:
            entry = PodEntry(key, pod, requests, None, host_ports(pod))
            self.pods[key] = entry
            self.pods_by_namespace.setdefault(key.split("/", 1)[0], set()).add(key)
        else:
            self._detach(entry)
            entry.pod = pod
            entry.requests = requests
            entry.host_ports = host_ports(pod)
            entry.cache = {}
        target = self._counts_on_node(pod)
        if target is not None:
            self._attach(entry, target)
        if entry.nominated_to is not None:
            self._nominated_load.pop(entry.nominated_to, None)  # its requests or priority may have changed
        self._nominate(entry, None if target is not None or is_terminal(pod) else nominated_node(pod))
        if has_required_anti_affinity(pod) and target is not None:
            self.anti_affinity_pods.add(key)
        else:
            self.anti_affinity_pods.discard(key)
        after = _topology_signature(entry)
        if before != after and ((before is not None and before[0] is not None) or after[0] is not None):
            info = self.nodes.get(entry.node_name) if entry.node_name else None
            if booking and info is not None and (before is None or before[0] is None):
                self.booked.append((entry, info))
            else:
                self._bump()
        return entry

    def remove_pod(self, key: str) -> None:
        entry = self.pods.pop(key, None)
        if entry is None:
            return
        if entry.node_name is not None:
            self._bump()
        self._detach(entry)
        self._nominate(entry, None)
        namespace = key.split("/", 1)[0]
        keys = self.pods_by_namespace.get(namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.pods_by_namespace[namespace]
        self.anti_affinity_pods.discard(key)

    def _nominate(self, entry: PodEntry, node_name: str | None) -> None:
        """Index ``entry`` as nominated to ``node_name`` (None: to no node)."""
        if entry.nominated_to == node_name:
            return
        if entry.nominated_to is not None:
            held = self.nominated.get(entry.nominated_to, {})
            held.pop(entry.key, None)
            if not held:
                self.nominated.pop(entry.nominated_to, None)
            self._nominated_load.pop(entry.nominated_to, None)
        if node_name is not None:
            self.nominated.setdefault(node_name, {})[entry.key] = entry
            self._nominated_load.pop(node_name, None)
        entry.nominated_to = node_name

    def nominated_load(self, node_name: str, priority: int) -> tuple[int, dict[str, int]]:
        """How many waiting pods of at least ``priority`` are nominated to the node, and their requests
        summed (the room the framework's ``RunFilterPluginsWithNominatedPods`` counts as taken)."""
        by_priority = self._nominated_load.setdefault(node_name, {})
        cached = by_priority.get(priority)
        if cached is None:
            count, sums = 0, dict[str, int]()
            for entry in self.nominated.get(node_name, {}).values():
                if int((entry.pod.get("spec") or {}).get("priority") or 0) >= priority:
                    count += 1
                    for name, amount in entry.requests.items():
                        sums[name] = sums.get(name, 0) + amount
            cached = by_priority[priority] = (count, sums)
        return cached

    def assume(self, key: str, node_name: str) -> None:
        """Book a pod on ``node_name`` now, ahead of the watch event that will confirm the binding."""
        entry = self.pods.get(key)
        if entry is None:
            return
        pod = dict(entry.pod)
        pod["spec"] = {**(pod.get("spec") or {}), "nodeName": node_name}
        # no resourceVersion: this is our guess, and the binding's watch event must replace it
        pod["metadata"] = {**(pod.get("metadata") or {}), "resourceVersion": ""}
        self.upsert_pod(pod, booking=True)

    # ------------------------------------------------------------------------------------------ queries
    def bound_pods_in_namespaces(
        self, namespaces: Collection[str] | None
    ) -> Iterator[tuple[PodEntry, NodeInfo]]:
        """Pods bound to a known node in the given namespaces (all namespaces if ``None``)."""
        if namespaces is None:
            keys: Any = self.pods.keys()
        else:
            keys = [k for ns in namespaces for k in self.pods_by_namespace.get(ns, ())]
        for key in keys:
            entry = self.pods[key]
            if entry.node_name is not None:
                info = self.nodes.get(entry.node_name)
                if info is not None:
                    yield entry, info
