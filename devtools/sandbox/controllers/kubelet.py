"""The simulated kubelet and node lifecycle: nodes boot NotReady, then Ready; bound pods start, deleted go.

One controller plays every node's kubelet (KWOK-style) plus the bits of the node lifecycle controller the
autoscalers notice. It never invents resources: a node's capacity and allocatable are whatever its creator
wrote (the Cluster API controller copies them from the MachineDeployment's capacity annotations; tests write
them directly), with allocatable defaulting to capacity and, for a node with neither, KWOK's defaults
(cpu 1k, memory 1Ti, pods 1M) so that a bare ``kind: Node`` is usable.

**Nodes.**

* *Registration*: a node with no ``Ready`` condition is registered as a kubelet would: labels
  ``kubernetes.io/hostname``/``os``/``arch`` if missing, taint ``node.kubernetes.io/not-ready:NoSchedule``,
  conditions ``Ready=False`` (``KubeletNotReady``) and the pressure conditions False, addresses, nodeInfo.
  :func:`registered_node` is the pure version, also used by the Cluster API controller so that its nodes are
  born already registered (no window in which they look schedulable).
* *Ready*: ``node_ready`` seconds after the controller first saw the node NotReady, ``Ready=True``
  (``KubeletReady``) is written and the not-ready taint removed. Other taints (``karpenter.sh/unregistered``
  from a bootstrap template, startup taints) are left for their owners, as in a real cluster.
* A node created already Ready is left as it is; a node annotated ``sandbox.tenon.sh/kubelet: disabled`` is
  never touched, so tests can hold a node NotReady or flip conditions themselves.

**Pods.**

* A pod bound to a Ready node turns ``Running`` ``pod_start`` seconds after the kubelet could start it (bound
  and node Ready), with the conditions a real kubelet reports (``PodReadyToStartContainers``,
  ``Initialized``, ``ContainersReady``, ``Ready``, ``PodScheduled``), container statuses, ``hostIP`` and a pod
  IP from the node's /24. Pods bound to a NotReady node wait for it.
* A pod with ``deletionTimestamp`` is deleted (grace 0) ``min(deletionGracePeriodSeconds,
  pod_termination_cap)`` seconds after the kubelet first saw it terminating.

Timers use the event loop's clock, each pending action is a key in a :class:`WorkQueue`, and pods are indexed
by node, so a node turning Ready touches only its own pods.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.controllers.clock import now_rfc3339
from devtools.sandbox.controllers.conditions import set_condition
from devtools.sandbox.controllers.informer import (
    InformerFactory,
    InformerUser,
    StoreLike,
    WorkQueue,
    run_worker,
    split_key,
)
from devtools.sandbox.controllers.predicates import (
    NOT_READY_NO_SCHEDULE,
    get_condition,
    is_terminal,
    is_terminating,
    node_is_ready,
    pod_key,
)
from devtools.sandbox.errors import AlreadyExists, NotFound
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.profiles import TimingProfile
from tenon.core.wellknown import HOSTNAME, NOT_READY_TAINT

log = logging.getLogger(__name__)

KUBELET_ANNOTATION = "sandbox.tenon.sh/kubelet"
KUBELET_VERSION = "v1.32.4"
DEFAULT_CAPACITY = {"cpu": "1k", "memory": "1Ti", "pods": "1M"}  # KWOK's, for nodes created with none
DEFAULT_GRACE_SECONDS = 30
NODE_LEASE_NAMESPACE = "kube-node-lease"
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def kubelet_disabled(node: dict[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return annotations.get(KUBELET_ANNOTATION) == "disabled"


def node_address(index: int) -> str:
    return f"10.0.{(index // 250) % 250}.{index % 250 + 2}"


# ------------------------------------------------------------------------------------------- pure builders
def registered_node(node: dict[str, Any], index: int) -> dict[str, Any]:
    """``node`` as a kubelet registers it: default labels, not-ready taint, NotReady status (a new dict)."""
    node = json_copy(node)
    meta = node.setdefault("metadata", {})
    name = meta.get("name", "")
    labels = meta.setdefault("labels", {})
    labels.setdefault(HOSTNAME, name)
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    labels.setdefault("beta.kubernetes.io/os", labels["kubernetes.io/os"])
    labels.setdefault("beta.kubernetes.io/arch", labels["kubernetes.io/arch"])
    spec = node.setdefault("spec", {})
    taints = spec.setdefault("taints", [])
    if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
        taints.append({**NOT_READY_NO_SCHEDULE, "timeAdded": now_rfc3339()})
    status = node.setdefault("status", {})
    if not status.get("capacity"):
        status["capacity"] = dict(status.get("allocatable") or DEFAULT_CAPACITY)
    if not status.get("allocatable"):
        status["allocatable"] = dict(status["capacity"])
    address = node_address(index)
    status.setdefault(
        "addresses", [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]
    )
    status.setdefault(
        "nodeInfo",
        {
            "architecture": labels["kubernetes.io/arch"],
            "operatingSystem": labels["kubernetes.io/os"],
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "containerRuntimeVersion": "containerd://2.0.0",
            "osImage": "tenon sandbox",
            "kernelVersion": "6.1.0",
            "machineID": meta.get("uid") or name,
            "systemUUID": meta.get("uid") or name,
            "bootID": meta.get("uid") or name,
        },
    )
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})
    status.setdefault("phase", "Running")
    for pressure, reason, message in PRESSURE_CONDITIONS:
        set_condition(node, pressure, "False", reason, message, lastHeartbeatTime=now_rfc3339())
    set_condition(
        node,
        "Ready",
        "False",
        "KubeletNotReady",
        "container runtime network not ready",
        lastHeartbeatTime=now_rfc3339(),
    )
    return node


def running_pod_status(pod: dict[str, Any], host_ip: str, pod_ip: str) -> dict[str, Any]:
    """The status a kubelet reports once all of ``pod``'s containers started."""
    now = now_rfc3339()
    spec = pod.get("spec") or {}
    status = json_copy(pod.get("status") or {})
    status.update(
        {
            "phase": "Running",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": status.get("startTime") or now,
        }
    )
    holder = {"status": status}
    for cond_type in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
        set_condition(holder, cond_type, "True", lastProbeTime=None)
    status["containerStatuses"] = [
        {
            "name": c.get("name"),
            "image": c.get("image") or "",
            "imageID": c.get("image") or "",
            "containerID": f"containerd://{pod_ip.replace('.', '')}{i}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for i, c in enumerate(spec.get("containers") or [])
    ]
    init = spec.get("initContainers") or []
    if init:
        status["initContainerStatuses"] = [
            {
                "name": c.get("name"),
                "image": c.get("image") or "",
                "imageID": c.get("image") or "",
                "ready": c.get("restartPolicy") == "Always",
                "started": c.get("restartPolicy") == "Always",
                "restartCount": 0,
                "state": (
                    {"running": {"startedAt": now}}
                    if c.get("restartPolicy") == "Always"
                    else {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    }
                ),
            }
            for c in init
        ]
    return status


# -------------------------------------------------------------------------------------------- controller
class Kubelet(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.profile = profile
        self.pods_rt = store.resource("v1", "Pod")
        self.nodes_rt = store.resource("v1", "Node")
        self.leases_rt = store.resource("coordination.k8s.io/v1", "Lease")
        self._leased: set[str] = set()
        self.nodes = self.informers.informer(self.nodes_rt, "nodes")
        self.pods = self.informers.informer(self.pods_rt, "pods")
        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.queue = WorkQueue()
        self.pods_by_node: dict[str, set[str]] = {}
        self._pod_node: dict[str, str] = {}
        self.not_ready_since: dict[str, float] = {}
        self.start_at: dict[str, float] = {}
        self.terminating_since: dict[str, float] = {}
        self.node_index: dict[str, int] = {}
        self._ip_counter: dict[str, int] = {}

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _index_of(self, node_name: str) -> int:
        if node_name not in self.node_index:
            self.node_index[node_name] = len(self.node_index)
        return self.node_index[node_name]

    # ------------------------------------------------------------------------------------------- handlers
    def _on_node(self, event_type: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if event_type == "DELETED":
            self.not_ready_since.pop(name, None)
            self._leased.discard(name)
            return
        self.queue.add(("node", name))
        if node_is_ready(node) and (old is None or not node_is_ready(old)):
            for key in self.pods_by_node.get(name, ()):
                self.queue.add(("pod", key))

    def _on_pod(self, event_type: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(pod)
        previous = self._pod_node.pop(key, None)
        if previous is not None:
            self.pods_by_node.get(previous, set()).discard(key)
        if event_type == "DELETED":
            self.start_at.pop(key, None)
            self.terminating_since.pop(key, None)
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            self._pod_node[key] = node_name
            self.pods_by_node.setdefault(node_name, set()).add(key)
        if is_terminating(pod) or (
            node_name and not is_terminal(pod) and (pod.get("status") or {}).get("phase") != "Running"
        ):
            self.queue.add(("pod", key))

    # ------------------------------------------------------------------------------------------ reconcile
    def reconcile(self, item: tuple[str, str]) -> float | None:
        kind, key = item
        return self._reconcile_node(key) if kind == "node" else self._reconcile_pod(key)

    def _reconcile_node(self, name: str) -> float | None:
        node = self.nodes.objects.get(name)
        if node is None or kubelet_disabled(node) or is_terminating(node):
            return None
        ready = get_condition(node, "Ready")
        now = self._now()
        if ready is None:
            fresh = self.store.get(self.nodes_rt, name)
            registered = registered_node(fresh, self._index_of(name))
            fresh["metadata"] = registered["metadata"]
            fresh["spec"] = registered["spec"]
            updated = self.store.update(self.nodes_rt, fresh)
            updated["status"] = registered["status"]
            self.store.update(self.nodes_rt, updated, subresource="status")
            self.not_ready_since[name] = now
            return self.profile.node_ready
        if ready.get("status") != "True":
            since = self.not_ready_since.setdefault(name, now)
            remaining = since + self.profile.node_ready - now
            if remaining > 0:
                return remaining
            fresh = self.store.get(self.nodes_rt, name)
            if not node_is_ready(fresh):
                set_condition(
                    fresh,
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status",
                    lastHeartbeatTime=now_rfc3339(),
                )
                fresh = self.store.update(self.nodes_rt, fresh, subresource="status")
            self.not_ready_since.pop(name, None)
            node = fresh
        self._remove_not_ready_taint(node)
        self._ensure_lease(node)
        return None

    def _ensure_lease(self, node: dict[str, Any]) -> None:
        """The node's heartbeat Lease in ``kube-node-lease`` (``kubectl describe node`` shows it).

        Created once, owned by the Node (so the store's garbage collector removes it with the node) and not
        renewed: nothing in the sandbox judges node health by lease age.
        """
        name = node["metadata"]["name"]
        if name in self._leased:
            return
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"].get("uid")}
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": 40,
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            self.store.create(self.leases_rt, lease)
        except AlreadyExists:
            pass
        self._leased.add(name)

    def _remove_not_ready_taint(self, node: dict[str, Any]) -> None:
        """The node lifecycle controller's part: a Ready node loses the not-ready taint."""
        taints = (node.get("spec") or {}).get("taints") or []
        if not any(t.get("key") == NOT_READY_TAINT for t in taints):
            return
        fresh = self.store.get(self.nodes_rt, node["metadata"]["name"])
        fresh["spec"]["taints"] = [
            t for t in fresh["spec"].get("taints") or [] if t.get("key") != NOT_READY_TAINT
        ]
        self.store.update(self.nodes_rt, fresh)

    def _reconcile_pod(self, key: str) -> float | None:
        pod = self.pods.objects.get(key)
        if pod is None:
            return None
        now = self._now()
        namespace, name = split_key(key)
        if is_terminating(pod):
            since = self.terminating_since.setdefault(key, now)
            grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
            grace = DEFAULT_GRACE_SECONDS if grace is None else grace
            remaining = since + min(float(grace), self.profile.pod_termination_cap) - now
            if remaining > 0:
                return remaining
            try:
                self.store.delete(self.pods_rt, name, namespace, grace_period_seconds=0)
            except NotFound:
                pass
            return None
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or is_terminal(pod) or (pod.get("status") or {}).get("phase") == "Running":
            return None
        node = self.nodes.objects.get(node_name)
        if node is None or not node_is_ready(node) or kubelet_disabled(node):
            self.start_at.pop(key, None)
            return None  # re-queued when the node turns Ready
        start = self.start_at.setdefault(key, now + self.profile.pod_start)
        if start > now:
            return start - now
        fresh = self.store.get(self.pods_rt, name, namespace)
        if is_terminating(fresh) or (fresh.get("spec") or {}).get("nodeName") != node_name:
            return None
        index = self._index_of(node_name)
        counter = self._ip_counter.get(node_name, 0) % 253 + 1
        self._ip_counter[node_name] = counter
        host_ip = node_address(index)
        pod_ip = f"10.{244 + index // 256 % 8}.{index % 256}.{counter + 1}"
        fresh["status"] = running_pod_status(fresh, host_ip, pod_ip)
        self.store.update(self.pods_rt, fresh, subresource="status")
        self.start_at.pop(key, None)
        return None

    async def run(self) -> None:
        try:
            await self.informers.start(self.nodes, self.pods)
            await run_worker("kubelet", self.queue, self.reconcile)
        finally:
            await self.stop_own_informers()
