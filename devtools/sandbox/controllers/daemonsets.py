"""DaemonSet -> one pod per eligible node, placed through the scheduler as the real controller does.

A node is eligible for a DaemonSet when the pod template's ``nodeSelector`` and required node affinity match
it and the template's tolerations, plus the ones the DaemonSet controller always adds, tolerate all of its
``NoSchedule``/``NoExecute`` taints (``daemon/util`` ``AddOrUpdateDaemonPodTolerations`` and the
controller's ``predicates``). The added tolerations are ``not-ready`` and ``unreachable`` (``NoExecute``),
``disk-pressure``, ``memory-pressure``, ``pid-pressure`` and ``unschedulable`` (``NoSchedule``), plus
``network-unavailable`` for host-network pods. So a fresh node gets its DaemonSet pods once the not-ready
``NoSchedule`` taint is gone (it became Ready), and a node still carrying ``karpenter.sh/unregistered`` gets
none until it registers, unless the template tolerates everything, as CNI DaemonSets do.

Each pod is created unbound, pinned with required node affinity ``matchFields metadata.name In [node]`` (the
controller's ``ReplaceDaemonSetPodNodeNameNodeAffinity``), and the simulated scheduler binds it, so resource
fit still applies. Pods on nodes that are gone or no longer eligible are deleted. The status reports
``desiredNumberScheduled``, ``currentNumberScheduled``, ``numberMisscheduled``, ``numberReady``,
``numberAvailable``, ``updatedNumberScheduled`` and ``observedGeneration``. Template updates are not rolled
out to existing pods (``OnDelete`` behaviour).
"""

from __future__ import annotations

import time
from typing import Any

from devtools.sandbox.controllers.informer import (
    InformerFactory,
    InformerUser,
    StoreLike,
    WorkQueue,
    object_key,
    run_worker,
)
from devtools.sandbox.controllers.ownership import OwnerIndex, controller_ref, owner_reference
from devtools.sandbox.controllers.predicates import (
    is_terminal,
    is_terminating,
    node_labels,
    node_matches_pod,
    node_taints,
    pod_is_ready,
    untolerated_taint,
)
from devtools.sandbox.errors import NotFound
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.profiles import TimingProfile

DAEMON_TOLERATIONS: tuple[dict[str, Any], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
POD_EVENT_BATCH = 0.05  # seconds a pod event may wait, so that a burst of pod changes causes one sync
RECONCILE_SHARE = 0.1
"""At most about this share of the sandbox's one thread goes to reconciling a DaemonSet: after an event, its
sync waits ten times what its last one took (:data:`POD_EVENT_BATCH` at least). A sync walks every node and
every pod of the set (20 ms at 2,300 nodes), and its pods' events asked for one every 50 ms: a fifth of the
sandbox's CPU in the scale run's large waves."""
NETWORK_UNAVAILABLE = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def daemon_tolerations(template_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The template's tolerations plus those the DaemonSet controller always adds (not copied)."""
    tolerations = list(template_spec.get("tolerations") or [])
    extra = list(DAEMON_TOLERATIONS) + ([NETWORK_UNAVAILABLE] if template_spec.get("hostNetwork") else [])
    for toleration in extra:
        if not any(
            t.get("key") == toleration["key"] and t.get("effect") == toleration["effect"] for t in tolerations
        ):
            tolerations.append(dict(toleration))
    return tolerations


def daemon_pod_spec(template_spec: dict[str, Any], node_name: str) -> dict[str, Any]:
    """The pod spec for ``node_name``: default tolerations added, pinned to the node by affinity."""
    spec = json_copy(template_spec)
    spec["tolerations"] = daemon_tolerations(spec)
    affinity = spec.setdefault("affinity", {})
    affinity["nodeAffinity"] = {
        **(affinity.get("nodeAffinity") or {}),
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
    }
    return spec


def should_run(
    template_spec: dict[str, Any], node: dict[str, Any], tolerations: list[dict[str, Any]] | None = None
) -> bool:
    """Does a DaemonSet with this pod template belong on ``node``? (``tolerations``: the template's
    :func:`daemon_tolerations`, computed once for many nodes.)"""
    name = node["metadata"]["name"]
    probe = {"spec": template_spec}
    if not node_matches_pod(probe, name, node_labels(node)):
        return False
    if tolerations is None:
        tolerations = daemon_tolerations(template_spec)
    return untolerated_taint(tolerations, node_taints(node)) is None


def pod_node(pod: dict[str, Any]) -> str | None:
    """The node a daemon pod is for: where it is bound, else the node its affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchFields") or []:
            if expr.get("key") == "metadata.name" and expr.get("operator") == "In" and expr.get("values"):
                return str(expr["values"][0])
    return None


class DaemonSetController(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.ds_rt = store.resource("apps/v1", "DaemonSet")
        self.pods_rt = store.resource("v1", "Pod")
        self.nodes_rt = store.resource("v1", "Node")
        self.daemonsets = self.informers.informer(self.ds_rt, "daemonsets")
        self.nodes = self.informers.informer(self.nodes_rt, "nodes")
        self.pods = self.informers.informer(self.pods_rt, "pods")
        self.pods_by_owner = OwnerIndex("DaemonSet")
        self._took: dict[str, float] = {}
        """DaemonSet key -> seconds its last sync took (:data:`RECONCILE_SHARE`)."""
        self._ds_key_by_uid: dict[str, str] = {}
        self._eligible: dict[tuple[str, str], tuple[tuple[str, str], bool]] = {}
        """(DaemonSet uid, node) -> (their resourceVersions, :func:`should_run`): a sync looks at every node,
        and most did not change since the last one (the answer is a pure function of the two objects)."""
        self.daemonsets.add_handler(self._on_daemonset)
        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.queue = WorkQueue()

    def _on_daemonset(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        uid = obj["metadata"].get("uid")
        if event_type == "DELETED":
            self._ds_key_by_uid.pop(uid, None)
            return
        self._ds_key_by_uid[uid] = object_key(obj)
        self.queue.add(object_key(obj))

    def _on_node(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event_type == "DELETED":
            name = obj["metadata"]["name"]
            for known in [k for k in self._eligible if k[1] == name]:
                del self._eligible[known]
        if old is not None and event_type == "MODIFIED":
            before = (old["metadata"].get("labels"), (old.get("spec") or {}).get("taints"))
            after = (obj["metadata"].get("labels"), (obj.get("spec") or {}).get("taints"))
            if before == after:
                return
        for key in self._ds_key_by_uid.values():
            self.queue.add(key, self._wait(key))  # a wave of nodes joining or going: one sync, not one each

    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event_type != "DELETED" and controller_ref(obj) is None:
            return
        owner = self.pods_by_owner.handle(object_key(obj), obj, event_type == "DELETED")
        if owner is not None and owner in self._ds_key_by_uid:
            key = self._ds_key_by_uid[owner]
            self.queue.add(key, self._wait(key))

    def _wait(self, key: str) -> float:
        return max(POD_EVENT_BATCH, self._took.get(key, 0.0) / RECONCILE_SHARE)

    def reconcile(self, key: str) -> float | None:
        started = time.perf_counter()
        try:
            return self._reconcile(key)
        finally:
            self._took[key] = time.perf_counter() - started

    def _reconcile(self, key: str) -> float | None:
        ds = self.daemonsets.objects.get(key)
        if ds is None or is_terminating(ds):
            return None
        meta = ds["metadata"]
        template = (ds.get("spec") or {}).get("template") or {}
        template_spec = template.get("spec") or {}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod_key in self.pods_by_owner.dependents(meta["uid"]):
            pod = self.pods.objects.get(pod_key)
            if pod is None or is_terminating(pod) or is_terminal(pod):
                continue
            by_node.setdefault(pod_node(pod) or "", []).append(pod)
        tolerations = daemon_tolerations(template_spec)
        wanted = {
            name
            for name, node in self.nodes.objects.items()
            if self._should_run(ds, template_spec, tolerations, node)
        }
        for node_name in sorted(wanted - set(by_node)):
            self._create_pod(ds, template, node_name)
        for node_name, pods in by_node.items():
            extra = pods if node_name not in wanted else pods[1:]
            for pod in extra:
                try:
                    last = self.store.delete(
                        self.pods_rt, pod["metadata"]["name"], pod["metadata"].get("namespace")
                    )
                except NotFound:
                    last = None
                self.pods.observe_write(object_key(pod), last)
        placed = [pods[0] for name, pods in by_node.items() if name in wanted]
        scheduled = [p for p in placed if (p.get("spec") or {}).get("nodeName")]
        ready = sum(1 for p in scheduled if pod_is_ready(p))
        status = {
            "desiredNumberScheduled": len(wanted),
            "currentNumberScheduled": len(scheduled),
            "numberMisscheduled": sum(len(pods) for name, pods in by_node.items() if name not in wanted),
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": max(0, len(wanted) - ready),
            "updatedNumberScheduled": len(scheduled),
            "observedGeneration": meta.get("generation", 1),
        }
        current = ds.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            fresh = json_copy(ds)
            fresh["status"] = {**current, **status}
            updated = self.store.update(self.ds_rt, fresh, subresource="status")
            self.daemonsets.observe_write(key, updated)
        return None

    def _should_run(
        self,
        ds: dict[str, Any],
        template_spec: dict[str, Any],
        tolerations: list[dict[str, Any]],
        node: dict[str, Any],
    ) -> bool:
        """:func:`should_run`, remembered until the DaemonSet or the node changes."""
        stamp = (ds["metadata"].get("resourceVersion"), node["metadata"].get("resourceVersion"))
        if stamp[0] is None or stamp[1] is None:
            return should_run(template_spec, node, tolerations)
        key = (ds["metadata"]["uid"], node["metadata"]["name"])
        known = self._eligible.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
        answer = should_run(template_spec, node, tolerations)
        self._eligible[key] = (stamp, answer)
        return answer

    def _create_pod(self, ds: dict[str, Any], template: dict[str, Any], node_name: str) -> None:
        meta = ds["metadata"]
        template_meta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta.get("namespace"),
                "labels": dict(template_meta.get("labels") or {}),
                "annotations": dict(template_meta.get("annotations") or {}),
                "ownerReferences": [owner_reference(ds)],
            },
            "spec": daemon_pod_spec(template.get("spec") or {}, node_name),
        }
        created = self.store.create(self.pods_rt, pod)
        self.pods.observe_write(object_key(created), created)

    async def run(self) -> None:
        try:
            await self.informers.start(self.daemonsets, self.nodes, self.pods)
            await run_worker("daemonsets", self.queue, self.reconcile)
        finally:
            await self.stop_own_informers()
