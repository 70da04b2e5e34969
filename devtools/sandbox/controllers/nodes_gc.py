"""Pod garbage collection and taint eviction: what happens to pods when their node goes or turns hostile.

Two pieces of kube-controller-manager that autoscalers rely on when they remove nodes:

* **Orphaned pods** (``podgc``): a pod bound to a Node that no longer exists is force-deleted (grace 0)
  ``orphan_pod_gc`` seconds after the controller noticed the Node missing (upstream: a 40 s quarantine).
  Its owner (ReplicaSet, DaemonSet) then replaces it as usual.
* **NoExecute taints** (``tainteviction``): a bound, non-terminal pod on a node with a ``NoExecute`` taint it
  does not tolerate is deleted (gracefully, so the kubelet finishes it); a toleration with
  ``tolerationSeconds`` delays that by as many seconds, counted from when the controller first saw the
  taint. This is what empties a node once ``karpenter.sh/disrupted`` is escalated to ``NoExecute`` or a test
  taints it by hand.

Pods are indexed by node name so a node event only looks at its own pods.
"""

from __future__ import annotations

import asyncio
from typing import Any

from devtools.sandbox.controllers.informer import (
    InformerFactory,
    InformerUser,
    StoreLike,
    WorkQueue,
    run_worker,
    split_key,
)
from devtools.sandbox.controllers.predicates import is_terminal, is_terminating, pod_key, tolerates
from devtools.sandbox.errors import NotFound
from devtools.sandbox.profiles import TimingProfile


def eviction_delay(pod: dict[str, Any], taints: list[dict[str, Any]]) -> float | None:
    """Seconds until ``pod`` must leave a node with ``taints``: None = may stay, 0 = now."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    delay: float | None = None
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return 0.0
        bounded = [float(t["tolerationSeconds"]) for t in matching if t.get("tolerationSeconds") is not None]
        if len(bounded) == len(matching):  # every matching toleration is time-limited
            limit = max(0.0, min(bounded))
            delay = limit if delay is None else min(delay, limit)
    return delay


class PodGarbageCollector(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.profile = profile
        self.pods_rt = store.resource("v1", "Pod")
        self.nodes_rt = store.resource("v1", "Node")
        self.nodes = self.informers.informer(self.nodes_rt, "nodes")
        self.pods = self.informers.informer(self.pods_rt, "pods")
        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.pods_by_node: dict[str, set[str]] = {}
        self._node_of: dict[str, str] = {}
        self.missing_since: dict[str, float] = {}  # node name -> loop time it was first seen missing
        self.tainted_since: dict[tuple[str, str], float] = {}  # (pod key, node) -> first seen NoExecute
        self.queue = WorkQueue()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _on_node(self, event_type: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if event_type == "DELETED":
            self.missing_since.setdefault(name, self._now())
        else:
            self.missing_since.pop(name, None)
            before = ((old or {}).get("spec") or {}).get("taints")
            if old is not None and before == (node.get("spec") or {}).get("taints"):
                return
        for key in self.pods_by_node.get(name, ()):
            self.queue.add(key)

    def _on_pod(self, event_type: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(pod)
        previous = self._node_of.pop(key, None)
        if previous is not None:
            self.pods_by_node.get(previous, set()).discard(key)
        if event_type == "DELETED":
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and not is_terminal(pod):
            self._node_of[key] = node_name
            self.pods_by_node.setdefault(node_name, set()).add(key)
            if event_type == "ADDED" or (old is not None and not (old.get("spec") or {}).get("nodeName")):
                self.queue.add(key)

    def reconcile(self, key: str) -> float | None:
        pod = self.pods.objects.get(key)
        if pod is None or is_terminal(pod):
            return None
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return None
        namespace, name = split_key(key)
        now = self._now()
        node = self.nodes.objects.get(node_name)
        if node is None:
            since = self.missing_since.setdefault(node_name, now)
            remaining = since + self.profile.orphan_pod_gc - now
            if remaining > 0:
                return remaining
            self._delete(name, namespace, 0)
            return None
        if is_terminating(pod):
            return None
        taints = (node.get("spec") or {}).get("taints") or []
        delay = eviction_delay(pod, taints)
        if delay is None:
            self.tainted_since.pop((key, node_name), None)
            return None
        since = self.tainted_since.setdefault((key, node_name), now)
        remaining = since + delay - now
        if remaining > 0:
            return remaining
        self.tainted_since.pop((key, node_name), None)
        self._delete(name, namespace, None)
        return None

    def _delete(self, name: str, namespace: str | None, grace: int | None) -> None:
        try:
            self.store.delete(self.pods_rt, name, namespace, grace_period_seconds=grace)
        except NotFound:
            pass

    async def run(self) -> None:
        try:
            await self.informers.start(self.nodes, self.pods)
            for name in {n for n in self.pods_by_node if n not in self.nodes.objects}:
                for key in self.pods_by_node[name]:
                    self.queue.add(key)
            await run_worker("pod-gc", self.queue, self.reconcile)
        finally:
            await self.stop_own_informers()
