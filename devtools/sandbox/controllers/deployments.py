"""Deployment -> ReplicaSet -> Pods, as kube-controller-manager does it (minus rolling-update pacing).

**Deployments.** Each Deployment owns one ReplicaSet per pod template, named ``<deployment>-<hash>`` where
the hash is taken over ``spec.template`` (the real ``pod-template-hash``, same alphabet). The ReplicaSet for
the current template gets ``spec.replicas``; ReplicaSets for older templates are scaled to 0 at once, i.e. a
template change behaves like the ``Recreate`` strategy (``maxSurge``/``maxUnavailable`` pacing is not
simulated). The Deployment's status sums its ReplicaSets' (replicas, updated, ready, available,
unavailable) and carries ``Available``/``Progressing`` conditions.

**ReplicaSets.** A ReplicaSet keeps ``spec.replicas`` active pods (not terminating, not terminal) owned by it
(``ownerReferences`` with ``controller: true``), created from its template as ``<replicaset>-<5 chars>``.
Surplus pods are deleted (gracefully; the kubelet finishes them) in the real controller's order: unbound
before bound, Pending before Running, not-ready before ready, newest first. Pods are never adopted or
orphaned by label: ownership is by uid only.

Both reconcilers are driven by watch events (a pod change re-queues its ReplicaSet after a short batching
delay, a ReplicaSet change its Deployment) and a periodic resync; writes go through the informers'
write-through (``observe_write``) so a second reconcile before the watch catches up never creates pods twice.
Each ReplicaSet's active and ready pods are tallied incrementally from pod events, so syncing a ReplicaSet of
10,000 pods does not rescan them; a scale-up creates at most 500 pods per reconcile before yielding.
"""

from __future__ import annotations

import json
from typing import Any

from devtools.sandbox.controllers.conditions import set_condition
from devtools.sandbox.controllers.informer import (
    Informer,
    InformerFactory,
    InformerUser,
    StoreLike,
    WorkQueue,
    object_key,
    run_worker,
)
from devtools.sandbox.controllers.ownership import OwnerIndex, controller_ref, owner_reference
from devtools.sandbox.controllers.predicates import is_terminal, is_terminating, pod_is_ready
from devtools.sandbox.errors import NotFound
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.profiles import TimingProfile

HASH_LABEL = "pod-template-hash"
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
POD_EVENT_BATCH = 0.05  # seconds a pod event may wait so that a burst causes one ReplicaSet sync
MAX_POD_WRITES_PER_RECONCILE = 500  # then yield and come back, so one huge scale-up cannot stall the loop


def template_hash(template: dict[str, Any]) -> str:
    """A short stable hash of a pod template (FNV-1a 32, encoded with Kubernetes' safe alphabet)."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    out = ""
    while value:
        value, digit = divmod(value, len(_SAFE_ALPHABET))
        out += _SAFE_ALPHABET[digit]
    return out or _SAFE_ALPHABET[0]


def desired_replicas(obj: dict[str, Any]) -> int:
    replicas = (obj.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)


def deletion_rank(pod: dict[str, Any]) -> tuple[int, int, int, str]:
    """Sort key: the pod to delete first sorts first (``controller.ActivePodsWithRanks``, simplified)."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(phase or "Pending", 0)
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    # newest first: invert the timestamp's characters so that a plain ascending sort puts it first
    newest_first = "".join(chr(0x10FFFF - ord(ch)) for ch in created)
    return (1 if spec.get("nodeName") else 0, phase_rank, 1 if pod_is_ready(pod) else 0, newest_first)


def pod_from_template(replicaset: dict[str, Any]) -> dict[str, Any]:
    meta = replicaset["metadata"]
    template = json_copy((replicaset.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    pod_meta: dict[str, Any] = {
        "generateName": f"{meta['name']}-",
        "namespace": meta.get("namespace"),
        "labels": dict(template_meta.get("labels") or {}),
        "ownerReferences": [owner_reference(replicaset)],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}


class DeploymentController(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.deploy_rt = store.resource("apps/v1", "Deployment")
        self.rs_rt = store.resource("apps/v1", "ReplicaSet")
        self.pods_rt = store.resource("v1", "Pod")
        self.deployments = self.informers.informer(self.deploy_rt, "deployments")
        self.replicasets = self.informers.informer(self.rs_rt, "replicasets")
        self.pods = self.informers.informer(self.pods_rt, "pods")
        self.rs_by_owner = OwnerIndex("Deployment")
        self.pods_by_owner = OwnerIndex("ReplicaSet")
        self._rs_key_by_uid: dict[str, str] = {}
        # per ReplicaSet uid: its active pods and, among them, the ready ones (kept current by _on_pod,
        # so a ReplicaSet with 10,000 pods is synced without rescanning them)
        self.active_pods: dict[str, set[str]] = {}
        self.ready_pods: dict[str, set[str]] = {}
        self._tallied_owner: dict[str, str] = {}
        self.deployments.add_handler(self._on_deployment)
        self.replicasets.add_handler(self._on_replicaset)
        self.pods.add_handler(self._on_pod)
        self.queue = WorkQueue()

    # ------------------------------------------------------------------------------------------- handlers
    def _on_deployment(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event_type != "DELETED":
            self.queue.add(("deploy", object_key(obj)))

    def _on_replicaset(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        uid = obj["metadata"].get("uid")
        if event_type == "DELETED":
            self._rs_key_by_uid.pop(uid, None)
        else:
            self._rs_key_by_uid[uid] = key
            self.queue.add(("rs", key))
        self.rs_by_owner.handle(key, obj, event_type == "DELETED")
        ref = controller_ref(obj)
        if ref is not None and ref.get("kind") == "Deployment":
            self.queue.add(("deploy", f"{obj['metadata'].get('namespace')}/{ref.get('name')}"))

    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        owner = self.pods_by_owner.handle(key, obj, event_type == "DELETED")
        previous = self._tallied_owner.pop(key, None)
        if previous is not None:
            self.active_pods.get(previous, set()).discard(key)
            self.ready_pods.get(previous, set()).discard(key)
        if event_type != "DELETED" and owner is not None and not is_terminating(obj) and not is_terminal(obj):
            self._tallied_owner[key] = owner
            self.active_pods.setdefault(owner, set()).add(key)
            if pod_is_ready(obj):
                self.ready_pods.setdefault(owner, set()).add(key)
        if owner is not None and owner in self._rs_key_by_uid:
            # pod churn comes in bursts: sync the ReplicaSet at most once per batch window
            self.queue.add(("rs", self._rs_key_by_uid[owner]), POD_EVENT_BATCH)

    # ------------------------------------------------------------------------------------------ reconcile
    def reconcile(self, item: tuple[str, str]) -> float | None:
        kind, key = item
        return self._sync_deployment(key) if kind == "deploy" else self._sync_replicaset(key)

    def _sync_replicaset(self, key: str) -> float | None:
        rs = self.replicasets.objects.get(key)
        if rs is None or is_terminating(rs):
            return None
        uid = rs["metadata"]["uid"]
        active_count = len(self.active_pods.get(uid, ()))
        desired = desired_replicas(rs)
        again: float | None = None
        if active_count < desired:
            missing = desired - active_count
            if missing > MAX_POD_WRITES_PER_RECONCILE:
                missing, again = MAX_POD_WRITES_PER_RECONCILE, 0.0
            for _ in range(missing):
                created = self.store.create(self.pods_rt, pod_from_template(rs))
                self.pods.observe_write(object_key(created), created)  # updates the tally
        elif active_count > desired:
            active = [self.pods.objects[k] for k in self.active_pods.get(uid, ()) if k in self.pods.objects]
            for pod in sorted(active, key=deletion_rank)[: active_count - desired]:
                meta = pod["metadata"]
                try:
                    last = self.store.delete(self.pods_rt, meta["name"], meta.get("namespace"))
                except NotFound:
                    last = None
                self.pods.observe_write(object_key(pod), last)
        replicas = len(self.active_pods.get(uid, ()))
        ready = len(self.ready_pods.get(uid, ()))
        status = {
            "replicas": replicas,
            "fullyLabeledReplicas": replicas,  # pods are only ever created from the template
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        self._write_status(self.rs_rt, self.replicasets, rs, status)
        return again

    def _sync_deployment(self, key: str) -> float | None:
        deployment = self.deployments.objects.get(key)
        if deployment is None or is_terminating(deployment):
            return None
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        template = json_copy(spec.get("template") or {})
        pod_hash = template_hash(template)
        desired = desired_replicas(deployment)
        owned = [
            self.replicasets.objects[k]
            for k in self.rs_by_owner.dependents(meta["uid"])
            if k in self.replicasets.objects
        ]
        current = next(
            (rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash), None
        )
        if current is None:
            template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
            selector = json_copy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
            revision = 1 + max(
                (
                    int((rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", 0))
                    for rs in owned
                ),
                default=0,
            )
            replicaset = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{meta['name']}-{pod_hash}",
                    "namespace": meta.get("namespace"),
                    "labels": dict(template["metadata"]["labels"]),
                    "annotations": {"deployment.kubernetes.io/revision": str(revision)},
                    "ownerReferences": [owner_reference(deployment)],
                },
                "spec": {"replicas": desired, "selector": selector, "template": template},
            }
            current = self.store.create(self.rs_rt, replicaset)
            self.replicasets.observe_write(object_key(current), current)
        elif desired_replicas(current) != desired:
            self._scale(current, desired)
        for rs in owned:
            if rs is not current and desired_replicas(rs) != 0 and not is_terminating(rs):
                self._scale(rs, 0)
        owned = [
            self.replicasets.objects[k]
            for k in self.rs_by_owner.dependents(meta["uid"])
            if k in self.replicasets.objects
        ]
        totals = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0}
        for rs in owned:
            for name in totals:
                totals[name] += int((rs.get("status") or {}).get(name) or 0)
        updated = int(
            ((self.replicasets.objects.get(object_key(current)) or current).get("status") or {}).get(
                "replicas"
            )
            or 0
        )
        status: dict[str, Any] = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": totals["replicas"],
            "updatedReplicas": updated,
            "readyReplicas": totals["readyReplicas"],
            "availableReplicas": totals["availableReplicas"],
            "unavailableReplicas": max(0, desired - totals["availableReplicas"]),
            "conditions": json_copy((deployment.get("status") or {}).get("conditions") or []),
        }
        holder = {"status": status}
        if totals["availableReplicas"] >= desired:
            set_condition(
                holder,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        else:
            set_condition(
                holder,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        done = updated == desired and totals["replicas"] == desired
        set_condition(
            holder,
            "Progressing",
            "True",
            "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
            f'ReplicaSet "{current["metadata"]["name"]}" '
            + ("has successfully progressed." if done else "is progressing."),
        )
        self._write_status(self.deploy_rt, self.deployments, deployment, status)
        return None

    # --------------------------------------------------------------------------------------------- writes
    def _scale(self, rs: dict[str, Any], replicas: int) -> None:
        fresh = json_copy(rs)
        fresh.setdefault("spec", {})["replicas"] = replicas
        updated = self.store.update(self.rs_rt, fresh)
        self.replicasets.observe_write(object_key(updated), updated)

    def _write_status(self, rt: Any, informer: Informer, obj: dict[str, Any], status: dict[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        fresh = json_copy(obj)
        fresh["status"] = {**current, **status}
        updated = self.store.update(rt, fresh, subresource="status")
        informer.observe_write(object_key(updated), updated)

    async def run(self) -> None:
        try:
            await self.informers.start(self.deployments, self.replicasets, self.pods)
            await run_worker("deployments", self.queue, self.reconcile)
        finally:
            await self.stop_own_informers()
