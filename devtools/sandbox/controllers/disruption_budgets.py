"""The disruption controller: PodDisruptionBudget status, which the eviction subresource enforces.

The store's ``evict`` (B1) answers 429 when the budget's ``status.disruptionsAllowed`` is 0 or its
``observedGeneration`` lags; this controller keeps that status true to the pods, as
``pkg/controller/disruption`` does:

* **Pods**: those in the budget's namespace matched by ``spec.selector`` (policy/v1: an empty selector
  matches every pod in the namespace, a missing one none).
* **expectedPods / desiredHealthy**: with an integer ``minAvailable``, ``expectedPods`` is the number of
  matched pods and ``desiredHealthy = minAvailable``. With a percentage ``minAvailable`` or any
  ``maxUnavailable``, ``expectedPods`` is the sum of the pods' controllers' scale (a ReplicaSet's
  ``spec.replicas``; pods with another or no controller count as one each) and ``desiredHealthy`` is
  ``ceil(pct x expected)`` or ``expected - maxUnavailable`` (percentages rounded up), never below 0.
* **currentHealthy**: matched pods that are Running and Ready, not terminating, and not listed in
  ``status.disruptedPods`` (evictions the store granted that the pod has not yet reflected; entries are
  dropped once the pod is terminating or gone, or after 2 minutes, as upstream).
* **disruptionsAllowed** = ``max(0, currentHealthy - desiredHealthy)``; condition ``DisruptionAllowed``
  (``SufficientPods``/``InsufficientPods``); ``observedGeneration`` = the budget's generation.

:func:`budget_status` is the pure arithmetic; the controller recomputes a budget when one of its pods, a
ReplicaSet in its namespace, or the budget itself changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.controllers.clock import parse_rfc3339
from devtools.sandbox.controllers.conditions import set_condition
from devtools.sandbox.controllers.informer import (
    InformerFactory,
    InformerUser,
    StoreLike,
    WorkQueue,
    object_key,
    run_worker,
)
from devtools.sandbox.controllers.ownership import controller_ref
from devtools.sandbox.controllers.predicates import is_terminating, match_label_selector, pod_is_ready
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.profiles import TimingProfile

DISRUPTED_POD_TIMEOUT = 120.0  # seconds, upstream's DeletionTimeout
POD_EVENT_BATCH = 0.05  # seconds a pod event may wait, so that a burst of pod changes causes one sync


def _scaled(value: Any, expected: int, where: str) -> tuple[int, bool]:
    """An IntOrString budget value as a count: ``(count, was_percentage)``; percentages round up."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: invalid value {value!r}")
    if isinstance(value, int):
        return value, False
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            raise ValueError(f"{where}: invalid percentage {value!r}") from None
        return math.ceil(percent * expected / 100), True
    if isinstance(value, str) and value.isdigit():
        return int(value), False
    raise ValueError(f"{where}: expected an integer or a percentage such as '50%', got {value!r}")


def budget_status(
    pdb: dict[str, Any],
    pods: Iterable[dict[str, Any]],
    controller_scale: Callable[[dict[str, Any]], tuple[str, int] | None],
    now: datetime,
) -> tuple[dict[str, Any], float | None]:
    """The budget's new status and, if a disruptedPods entry will expire, seconds until it does."""
    spec = pdb.get("spec") or {}
    meta = pdb.get("metadata") or {}
    where = f"poddisruptionbudget {meta.get('namespace')}/{meta.get('name')}: spec"
    pods = list(pods)
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    uses_scale = max_unavailable is not None or (
        isinstance(min_available, str) and min_available.endswith("%")
    )
    if uses_scale:
        scales: dict[str, int] = {}
        loose = 0
        for pod in pods:
            found = controller_scale(pod)
            if found is None:
                loose += 1
            else:
                scales[found[0]] = found[1]
        expected = sum(scales.values()) + loose
    else:
        expected = len(pods)
    if max_unavailable is not None:
        count, _ = _scaled(max_unavailable, expected, f"{where}.maxUnavailable")
        desired = max(0, expected - count)
    elif min_available is not None:
        desired, _ = _scaled(min_available, expected, f"{where}.minAvailable")
    else:
        desired = 0
    previous = (pdb.get("status") or {}).get("disruptedPods") or {}
    disrupted: dict[str, str] = {}
    next_expiry: float | None = None
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    for name, stamp in previous.items():
        target = by_name.get(name)
        if target is None or is_terminating(target):
            continue
        when = parse_rfc3339(stamp)
        left = DISRUPTED_POD_TIMEOUT - (now - when).total_seconds() if when else 0.0
        if left > 0:
            disrupted[name] = stamp
            next_expiry = left if next_expiry is None else min(next_expiry, left)
    healthy = sum(
        1 for p in pods if pod_is_ready(p) and (p.get("metadata") or {}).get("name") not in disrupted
    )
    allowed = max(0, healthy - desired)
    status: dict[str, Any] = json_copy(pdb.get("status") or {})
    status.update(
        {
            "observedGeneration": meta.get("generation", 1),
            "expectedPods": expected,
            "desiredHealthy": desired,
            "currentHealthy": healthy,
            "disruptionsAllowed": allowed,
            "disruptedPods": disrupted,
        }
    )
    if not disrupted:
        status.pop("disruptedPods")
    holder = {"status": status}
    if allowed > 0:
        set_condition(
            holder,
            "DisruptionAllowed",
            "True",
            "SufficientPods",
            "",
            observedGeneration=meta.get("generation", 1),
        )
    else:
        set_condition(
            holder,
            "DisruptionAllowed",
            "False",
            "InsufficientPods",
            "",
            observedGeneration=meta.get("generation", 1),
        )
    return status, next_expiry


class DisruptionController(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.pdb_rt = store.resource("policy/v1", "PodDisruptionBudget")
        self.pods_rt = store.resource("v1", "Pod")
        self.rs_rt = store.resource("apps/v1", "ReplicaSet")
        self.budgets = self.informers.informer(self.pdb_rt, "pdbs")
        self.pods = self.informers.informer(self.pods_rt, "pods")
        self.replicasets = self.informers.informer(self.rs_rt, "replicasets")
        self.pods_by_namespace: dict[str, set[str]] = {}
        self.matched: dict[str, set[str]] = {}  # budget key -> keys of the pods its selector matches
        self.budgets.add_handler(self._on_budget)
        self.pods.add_handler(self._on_pod)
        self.replicasets.add_handler(self._on_replicaset)
        self.queue = WorkQueue()

    def _budgets_in(self, namespace: str) -> list[str]:
        return [k for k in self.budgets.objects if k.startswith(f"{namespace}/")]

    def _on_budget(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        if event_type == "DELETED":
            self.matched.pop(key, None)
            return
        selector = (obj.get("spec") or {}).get("selector")
        if key not in self.matched or old is None or selector != (old.get("spec") or {}).get("selector"):
            namespace = obj["metadata"].get("namespace") or "default"
            self.matched[key] = {
                pod_key
                for pod_key in self.pods_by_namespace.get(namespace, ())
                if (pod := self.pods.objects.get(pod_key)) is not None
                and match_label_selector(selector, pod["metadata"].get("labels"))
            }
        self.queue.add(key)

    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        namespace = obj["metadata"].get("namespace") or "default"
        key = object_key(obj)
        if event_type == "DELETED":
            self.pods_by_namespace.get(namespace, set()).discard(key)
        else:
            self.pods_by_namespace.setdefault(namespace, set()).add(key)
        for budget_key in self._budgets_in(namespace):
            selector = (self.budgets.objects[budget_key].get("spec") or {}).get("selector")
            members = self.matched.setdefault(budget_key, set())
            was_member = key in members
            if event_type != "DELETED" and match_label_selector(selector, obj["metadata"].get("labels")):
                members.add(key)
            else:
                members.discard(key)
            if was_member or key in members:
                self.queue.add(budget_key, POD_EVENT_BATCH)

    def _on_replicaset(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is not None and (old.get("spec") or {}).get("replicas") == (obj.get("spec") or {}).get(
            "replicas"
        ):
            return
        for budget_key in self._budgets_in(obj["metadata"].get("namespace") or "default"):
            self.queue.add(budget_key)

    def _controller_scale(self, pod: dict[str, Any]) -> tuple[str, int] | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return None
        rs = self.replicasets.objects.get(f"{pod['metadata'].get('namespace')}/{ref.get('name')}")
        if rs is None:
            return None
        replicas = (rs.get("spec") or {}).get("replicas")
        return f"ReplicaSet/{ref.get('uid')}", 1 if replicas is None else int(replicas)

    def reconcile(self, key: str) -> float | None:
        pdb = self.budgets.objects.get(key)
        if pdb is None or is_terminating(pdb):
            return None
        pods = [
            pod
            for pod_key in self.matched.get(key, ())
            if (pod := self.pods.objects.get(pod_key)) is not None
        ]
        try:
            status, expiry = budget_status(pdb, pods, self._controller_scale, datetime.now(UTC))
        except ValueError as err:  # a malformed budget blocks every eviction, as upstream's failSafe
            status, expiry = json_copy(pdb.get("status") or {}), None
            status.update(
                {"disruptionsAllowed": 0, "observedGeneration": pdb["metadata"].get("generation", 1)}
            )
            set_condition({"status": status}, "DisruptionAllowed", "False", "SyncFailed", str(err))
        if status != (pdb.get("status") or {}):
            fresh = json_copy(pdb)
            fresh["status"] = status
            updated = self.store.update(self.pdb_rt, fresh, subresource="status")
            self.budgets.observe_write(key, updated)
        return expiry

    async def run(self) -> None:
        try:
            await self.informers.start(self.budgets, self.pods, self.replicasets)
            await run_worker("disruption", self.queue, self.reconcile)
        finally:
            await self.stop_own_informers()
