"""``karpenter_pods_state``: one series per pod, as Karpenter's pod metrics controller keeps it.

The pod-watcher sees every pod and every Node, so it keeps the gauge: a pod's series (value 1) carries its
name, namespace, owner (the owner reference as a path, like Karpenter's ``ownerSelfLink``), phase, whether it
is scheduled and ready, and what its Node says of where it runs (node, nodepool, zone, arch, capacity type,
instance type, ``managed``: the Node belongs to a NodePool). A change to the pod or its Node replaces the
series; a deleted pod's is removed, so the gauge counts the pods that exist now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tenon.core.wellknown import ARCH, CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE
from tenon.runtime.observability import metrics

Labels = tuple[str, ...]
"""Values in :data:`metrics.POD_STATE_LABELS` order."""


class PodStates:
    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], _Pod] = {}
        """What each pod's series needs of the pod (not the pod: the watcher keeps no copy of every pod)."""
        self._on_node: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
        self._node_labels: dict[str, Mapping[str, str]] = {}

    def pod(self, pod: Mapping[str, Any], deleted: bool = False) -> None:
        key = _key(pod)
        seen = None if deleted else _Pod.of(pod)
        if seen is not None and self._pods.get(key) == seen:
            return  # its series is current: most changes of a pod are not in it (its Node's are, via node())
        old = self._pods.pop(key, None)
        if old is not None:
            self._on_node[old.node].discard(key)
        if seen is None:
            self._set(key, None)
            return
        self._pods[key] = seen
        self._on_node[seen.node].add(key)
        self._set(key, self._labels(seen))

    def relisted(self, pods: Iterable[Mapping[str, Any]]) -> None:
        listed = {_key(p): p for p in pods}
        for namespace, name in set(self._pods) - set(listed):
            self.pod({"metadata": {"namespace": namespace, "name": name}}, deleted=True)
        for pod in listed.values():
            self.pod(pod)

    def node(self, node: Mapping[str, Any], deleted: bool = False) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        labels = {} if deleted else dict((node.get("metadata") or {}).get("labels") or {})
        if self._node_labels.get(name) == labels:
            return
        self._node_labels[name] = labels
        for key in list(self._on_node.get(name, ())):
            self._set(key, self._labels(self._pods[key]))

    def _labels(self, pod: _Pod) -> Labels:
        on = self._node_labels.get(pod.node, {})
        return (
            pod.name,
            pod.namespace,
            pod.owner,
            pod.node,
            pod.scheduled,
            on.get(NODEPOOL, ""),
            on.get(ZONE, ""),
            on.get(ARCH, ""),
            on.get(CAPACITY_TYPE, ""),
            on.get(INSTANCE_TYPE, ""),
            pod.phase,
            pod.ready,
            "true" if NODEPOOL in on else "false",
        )

    def _set(self, key: tuple[str, str], labels: Labels | None) -> None:
        metrics.PODS_STATE.set(key, labels)


@dataclass(frozen=True)
class _Pod:
    name: str
    namespace: str
    owner: str
    node: str
    scheduled: str
    phase: str
    ready: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> _Pod:
        metadata = pod.get("metadata") or {}
        status = pod.get("status") or {}
        return cls(
            name=str(metadata.get("name") or ""),
            namespace=str(metadata.get("namespace") or ""),
            owner=_owner(metadata),
            node=_node_of(pod),
            scheduled=_condition(status, "PodScheduled"),
            phase=str(status.get("phase") or ""),
            ready=_condition(status, "Ready"),
        )


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _owner(metadata: Mapping[str, Any]) -> str:
    """The first owner reference as an API path (Karpenter's ``ownerSelfLink``), "" for a pod nobody owns."""
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, Mapping):
            api = str(ref.get("apiVersion") or "v1")
            prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
            kind = str(ref.get("kind") or "").lower()
            return f"{prefix}/namespaces/{metadata.get('namespace') or ''}/{kind}s/{ref.get('name') or ''}"
    return ""


def _condition(status: Mapping[str, Any], kind: str) -> str:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return str(condition.get("status") or "Unknown").lower()
    return "false"
