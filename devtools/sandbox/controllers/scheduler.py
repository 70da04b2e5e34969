"""The simulated kube-scheduler: binds pending pods to nodes, or marks them Unschedulable.

Which pods: ``spec.nodeName`` empty, ``spec.schedulerName`` unset or ``default-scheduler``, no
``schedulingGates``, not terminating, not terminal. Everything else is left alone, so a second scheduler (or
a test) can own some pods.

How it runs (the real scheduler's queue, simplified):

* two informers (pods, nodes on the workload store) keep a :class:`ClusterState` current, and a cycle
  first takes what they have queued (:meth:`Informer.catch_up`), again at each turn it gets back: it decides
  on the store as it is, so a nomination is known when the Node change written after it is;
* a pending pod is *active* (try now) or *backing off* (try at ``next_try``). A new pod is active at once.
  Each failed attempt doubles its backoff from ``scheduler_backoff_initial`` up to
  ``scheduler_backoff_max``. A cluster change that can make a pod fit (a node added or changed, a bound pod
  deleted or finished) makes every backing-off pod due at the end of its *current* backoff rather than
  waiting for a later one: pods never spin, but they also never miss a change. As the real scheduler's
  queueing hint for taints, a change of a Node with taints wakes only the pending pods that tolerate them
  (1,000 pending pods were tried again for each of the 800 changes of 159 joining nodes, all tainted
  ``karpenter.sh/unregistered``, because their DaemonSet pods tolerate it: the sandbox's busiest work while
  those nodes joined);
* one task runs scheduling cycles: it takes the due pods in priority order (``spec.priority`` high first,
  then creation order), asks :func:`choose_node` for each, and either **binds** (the ``pods/binding``
  semantics: ``spec.nodeName`` set, ``PodScheduled=True``) and books the pod in the cache at once, or writes
  ``PodScheduled=False``, reason ``Unschedulable``, message ``"0/N nodes are available: ..."`` through the
  status subresource (only when the message changed) and a ``FailedScheduling`` Warning Event; a binding
  records a ``Scheduled`` Normal Event ("Successfully assigned ns/pod to node"), as ``kubectl describe``
  shows for real pods. Within a cycle,
  pods with the same scheduling requirements that already failed are not re-filtered
  (``equivalence_key``), which keeps a 10,000-pod backlog against 1,000 nodes workable. Pods with topology
  spread or pod affinity (which a booking can make easier) reuse the failure of a pod of the same shape
  (``pod_shape_key``: the pods of one ReplicaSet) until the next pod is booked: the state is unchanged, so is
  the answer. Without it a backlog of 3,000 such pods re-filtered each one against 2,000 nodes every
  half second (the fast profile's backoff), most of the sandbox's CPU in the 10,000-pod bench.

All decisions are made by the pure code in ``scheduling_filters.py``; this module only moves data between
the store and that code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from devtools.sandbox.controllers.cluster_state import ClusterState, PodEntry
from devtools.sandbox.controllers.conditions import set_condition
from devtools.sandbox.controllers.events import EventRecorder
from devtools.sandbox.controllers.informer import InformerFactory, InformerUser, StoreLike, TurnSlice
from devtools.sandbox.controllers.predicates import (
    SCHEDULING_EFFECTS,
    get_condition,
    is_terminal,
    is_terminating,
    pod_key,
    untolerated_taint,
)
from devtools.sandbox.controllers.scheduling_filters import (
    Decision,
    choose_node,
    equivalence_key,
    nominated_node_decision,
    pod_shape_key,
)
from devtools.sandbox.errors import ApiError, Conflict, NotFound
from devtools.sandbox.profiles import TimingProfile

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER = "default-scheduler"
FAILURES_KEPT_FOR = 100
"""Pods a cycle decides on its cached failures before a cluster change seen meanwhile voids them: voided at
every 5 ms turn during a churn (pods deleted all the time), each pod filtered every node again, and the
sandbox spent 2.4 times the CPU on the 2,500 pods of a churn wave at 2,300 nodes."""
COUNTS_ONLY_REWRITE = 2.0
"""Seconds at least between two rewrites of a pod's Unschedulable message that differ only in their counts
(see :meth:`Scheduler._mark_unschedulable`)."""
_COUNTS = re.compile(r"\d+")


def _counts_blanked(message: str) -> str:
    return _COUNTS.sub("#", message)


def wants_scheduling(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
        and not spec.get("schedulingGates")
        and not is_terminating(pod)
        and not is_terminal(pod)
    )


@dataclass
class _CycleFailures:
    """Failures one scheduling cycle reuses instead of filtering every node again."""

    by_class: dict[str, Decision] = field(default_factory=dict)
    """By ``equivalence_key``: valid for the whole cycle (bookings only make these pods harder to place)."""
    by_shape: dict[str, Decision] = field(default_factory=dict)
    """By ``pod_shape_key``, for the pods a booking can help: valid until the next pod is booked."""
    as_of: float = float("-inf")
    """Loop time they were started from; a cluster change seen after it (the cycle yields to the watches)
    voids them all."""


@dataclass
class _Pending:
    attempts: int = 0
    next_try: float = 0.0
    backoff_until: float = 0.0  # end of the current backoff (a cluster change moves next_try here)
    status_written: float = float("-inf")  # loop time of our last PodScheduled=False write
    last_attempt: float = float("-inf")
    tolerations: bytes = b"[]"  # its tolerations, encoded: a key of Scheduler._tolerations
    woken_at: float = float("-inf")  # loop time of the last change that can make this pod fit (not all)

    def due_at(self, changed_at: float) -> float:
        """When to try again: ``next_try``, or the end of the backoff if the cluster (``changed_at``) or
        something this pod may use changed since."""
        changed_at = max(changed_at, self.woken_at)
        if self.last_attempt < changed_at and self.backoff_until < self.next_try:
            return self.backoff_until
        return self.next_try


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def pod_node_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Did a node change in a way that can make a pending pod fit?"""
    if old is None:
        return True
    for path in (
        ("metadata", "labels"),
        ("spec", "taints"),
        ("spec", "unschedulable"),
        ("status", "allocatable"),
        ("status", "capacity"),
        ("status", "conditions"),
    ):
        a: Any = old
        b: Any = new
        for part in path:
            a = (a or {}).get(part)
            b = (b or {}).get(part)
        if a != b:
            return True
    return False


class Scheduler(InformerUser):
    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        super().__init__(store, profile, informers)
        self.profile = profile
        self.pods_rt = store.resource("v1", "Pod")
        self.nodes_rt = store.resource("v1", "Node")
        self.state = ClusterState()
        self.pending: dict[str, _Pending] = {}
        self.pod_informer = self.informers.informer(self.pods_rt, "pods")
        self.node_informer = self.informers.informer(self.nodes_rt, "nodes")
        self.pod_informer.add_handler(self._on_pod)
        self.node_informer.add_handler(self._on_node)
        self.events = EventRecorder(
            store, DEFAULT_SCHEDULER, min_interval=max(1.0, profile.scheduler_backoff_max)
        )
        self._wakeup = asyncio.Event()
        self._changed_at = float("-inf")  # loop time of the last change that can make pending pods fit
        self._tolerations: dict[bytes, tuple[list[Any], set[str]]] = {}
        """The pending pods' tolerations: each distinct list once, with the pods that have it."""
        self.binds = 0
        self.failures = 0

    # ------------------------------------------------------------------------------------- event handlers
    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _on_pod(self, event_type: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(pod)
        if event_type == "DELETED":
            entry = self.state.pods.get(key)
            was_bound = entry is not None and entry.node_name is not None
            self.state.remove_pod(key)
            self._unpend(key)
            self.events.forget(str((pod.get("metadata") or {}).get("uid")))
            if was_bound:
                self._cluster_changed()
            return
        before = self.state.pods.get(key)
        was_counted = before is not None and before.node_name is not None
        labels_before = _labels(before.pod) if before is not None else None  # upsert reuses the entry
        entry = self.state.upsert_pod(pod)
        if entry is None:
            self._unpend(key)
            return
        if wants_scheduling(pod):
            self._pend(key, pod)
        else:
            self._unpend(key)
            if was_counted and entry.node_name is None:
                self._cluster_changed()  # a bound pod finished: its node has room again
            elif was_counted and labels_before != _labels(pod):
                self._cluster_changed()  # relabelled: (anti-)affinity and spread counts may differ now

    def _on_node(self, event_type: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event_type == "DELETED":
            self.state.remove_node(node["metadata"]["name"])
            return
        self.state.upsert_node(node)
        if pod_node_changed(old, node):
            self._node_changed(node)

    def _node_changed(self, node: dict[str, Any]) -> None:
        """Wake the pending pods that may land on ``node``: all of them, or those tolerating its taints."""
        taints = (node.get("spec") or {}).get("taints") or []
        if not any(t.get("effect") in SCHEDULING_EFFECTS for t in taints):
            self._cluster_changed()
            return
        tolerating = [
            pods
            for tolerations, pods in self._tolerations.values()
            if untolerated_taint(tolerations, taints) is None
        ]
        if len(tolerating) == len(self._tolerations):
            self._cluster_changed()
            return
        now = self._now()
        for pods in tolerating:
            for key in pods:
                self.pending[key].woken_at = now
        if tolerating:
            self._wakeup.set()

    def _pend(self, key: str, pod: dict[str, Any]) -> None:
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        encoded = msgspec.json.encode(tolerations)
        item = self.pending.get(key)
        if item is None:
            self.pending[key] = _Pending(next_try=self._now(), tolerations=encoded)
            self._wakeup.set()
        elif item.tolerations != encoded:
            self._untrack_tolerations(key, item.tolerations)
            item.tolerations = encoded
        else:
            return
        self._tolerations.setdefault(encoded, (tolerations, set()))[1].add(key)

    def _unpend(self, key: str) -> None:
        item = self.pending.pop(key, None)
        if item is not None:
            self._untrack_tolerations(key, item.tolerations)

    def _untrack_tolerations(self, key: str, encoded: bytes) -> None:
        _, pods = self._tolerations.get(encoded, ([], set()))
        pods.discard(key)
        if not pods:
            self._tolerations.pop(encoded, None)

    def _cluster_changed(self) -> None:
        """Something that can make pods fit happened: every pod tried before now is due after its backoff."""
        self._changed_at = self._now()
        self._wakeup.set()

    # ---------------------------------------------------------------------------------------------- loop
    async def run(self) -> None:
        try:
            await self.informers.start(self.node_informer, self.pod_informer)
            while True:
                crashed = self.informers.failed()
                if crashed is not None:
                    raise crashed
                await self._cycle()
                await self._sleep_until_due()
        finally:
            await self.stop_own_informers()

    async def _sleep_until_due(self) -> None:
        now = self._now()
        changed_at = self._changed_at
        earliest = min((p.due_at(changed_at) for p in self.pending.values()), default=None)
        if earliest is not None and earliest <= now:
            await asyncio.sleep(0)
            return
        self._wakeup.clear()
        timeout = None if earliest is None else earliest - now
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel
                await self._wakeup.wait()

    def _due_pods(self) -> list[str]:
        now = self._now()
        changed_at = self._changed_at
        due = [key for key, item in self.pending.items() if item.due_at(changed_at) <= now]

        def order(key: str) -> tuple[int, str, str]:
            pod = self.state.pods[key].pod
            return (
                -int((pod.get("spec") or {}).get("priority") or 0),
                str((pod.get("metadata") or {}).get("creationTimestamp") or ""),
                key,
            )

        return sorted((k for k in due if k in self.state.pods), key=order)

    async def _cycle(self) -> None:
        self._catch_up()
        failures = _CycleFailures(as_of=self._now())
        turn = TurnSlice()
        for index, key in enumerate(self._due_pods()):
            if await turn.pause():
                self._catch_up()
            if index % FAILURES_KEPT_FOR == 0 and self._changed_at >= failures.as_of:
                failures = _CycleFailures(as_of=self._now())
            entry = self.state.pods.get(key)
            item = self.pending.get(key)
            if entry is None or item is None or not wants_scheduling(entry.pod):
                continue
            try:
                self._schedule_one(entry, item, failures)
            except Exception:  # an object we did not foresee must not stop scheduling the others
                log.exception("sandbox scheduler: skipping pod %s this cycle", key)
                item.next_try = self._now() + self.profile.scheduler_backoff_max

    def _catch_up(self) -> None:
        """Read the pods and Nodes as the store has them now (:meth:`Informer.catch_up`), before deciding: a
        nomination written before a Node's change is then known when that change is (tenon nominates a
        Node's pods, then removes its unregistered taint)."""
        self.pod_informer.catch_up()
        self.node_informer.catch_up()

    def _decide(self, entry: PodEntry, known: Decision | None) -> tuple[Decision, str]:
        """A node for the pod (or why none), and the PodScheduled reason a failure is reported with."""
        if known is not None:
            return nominated_node_decision(entry.pod, entry.requests, self.state) or known, "Unschedulable"
        try:
            return choose_node(entry.pod, entry.requests, self.state), "Unschedulable"
        except ValueError as err:  # malformed affinity/selector: not a capacity problem
            return Decision(None, f"pod {entry.key}: {err}"), "SchedulerError"
        except Exception as err:  # a pod shape we did not foresee must not stop scheduling
            log.exception("sandbox scheduler: cannot evaluate pod %s", entry.key)
            return Decision(None, f"pod {entry.key}: cannot be evaluated: {err!r}"), "SchedulerError"

    def _schedule_one(self, entry: PodEntry, item: _Pending, failures: _CycleFailures) -> None:
        key = entry.key
        klass = equivalence_key(entry.pod, entry.requests)
        shape = pod_shape_key(entry.pod, entry.requests) if klass is None else None
        known = failures.by_class.get(klass) if klass is not None else failures.by_shape.get(str(shape))
        decision, reason = self._decide(entry, known)
        if decision.node_name is not None:
            if self._bind(entry.pod, decision.node_name):
                self.events.record(
                    entry.pod, "Normal", "Scheduled", f"Successfully assigned {key} to {decision.node_name}"
                )
                self.state.assume(key, decision.node_name)
                self._unpend(key)
                self.binds += 1
                failures.by_shape.clear()  # the state changed: a failure by shape may not hold any more
            else:  # lost a race (pod bound or deleted meanwhile): not Unschedulable, just try again
                item.next_try = self._now() + self.profile.scheduler_backoff_initial
            return
        if reason == "Unschedulable":
            if klass is not None:
                failures.by_class[klass] = decision
            elif shape is not None:
                failures.by_shape[shape] = decision
        self._back_off(entry, item, decision, reason)

    def _back_off(self, entry: PodEntry, item: _Pending, decision: Decision, reason: str) -> None:
        """Report the failure and decide when the pod is tried again."""
        deferred = self._mark_unschedulable(entry.pod, decision.message, item, reason)
        self.failures += 1
        item.attempts += 1
        item.last_attempt = self._now()
        backoff = min(
            self.profile.scheduler_backoff_max,
            self.profile.scheduler_backoff_initial * 2 ** (item.attempts - 1),
        )
        item.backoff_until = self._now() + backoff
        # With nothing changing, the pod waits for the periodic flush (the real scheduler's
        # unschedulable queue); a cluster change brings it back at ``backoff_until``.
        item.next_try = self._now() + max(backoff, self.profile.resync_period)
        if deferred is not None:  # come back when the new message may be written
            item.next_try = min(item.next_try, deferred)

    # -------------------------------------------------------------------------------------------- writes
    def _bind(self, pod: dict[str, Any], node_name: str) -> bool:
        """``POST pods/{name}/binding``: the store sets ``spec.nodeName`` and ``PodScheduled=True``."""
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        try:
            self.store.bind(meta["name"], namespace, node_name)
        except (Conflict, NotFound) as err:
            log.debug(
                "sandbox scheduler: binding %s/%s -> %s failed: %s", namespace, meta["name"], node_name, err
            )
            return False
        except ApiError as err:
            log.warning(
                "sandbox scheduler: binding %s/%s -> %s failed: %s", namespace, meta["name"], node_name, err
            )
            return False
        return True

    def _mark_unschedulable(
        self, pod: dict[str, Any], message: str, item: _Pending, reason: str = "Unschedulable"
    ) -> float | None:
        """Write ``PodScheduled=False/Unschedulable`` and a FailedScheduling event.

        The first failure is written at once. Later ones only when the message changed, and, if the pod is
        already marked Unschedulable, at most once per ``scheduler_backoff_max``: while 1,000 nodes join,
        the "0/N nodes are available" counts change on every retry and rewriting 10,000 pods each time
        would only churn the watches. A message whose only change is its counts waits at least
        :data:`COUNTS_ONLY_REWRITE` seconds: the fast profile retries every half second, twenty times the
        real scheduler's pace, and the sandbox's one thread would spend the 1,000-pod run rewriting counts
        (half its work there) while nodes wait for it. Returns when a held-back message may be written (None:
        nothing held back).
        """
        current = get_condition(pod, "PodScheduled")
        marked = current is not None and current.get("status") == "False" and current.get("reason") == reason
        now = self._now()
        if marked and current.get("message") == message:  # type: ignore[union-attr]
            return None
        if marked:
            written = str((current or {}).get("message") or "")
            counts_only = _counts_blanked(written) == _counts_blanked(message)
            wait = self.profile.scheduler_backoff_max
            if counts_only:
                wait = max(wait, COUNTS_ONLY_REWRITE)
            if now - item.status_written < wait:
                return item.status_written + wait
        item.status_written = now
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        try:
            fresh = self.store.get(self.pods_rt, meta["name"], namespace)
            if wants_scheduling(fresh):
                set_condition(fresh, "PodScheduled", "False", reason, message)
                self.store.update(self.pods_rt, fresh, subresource="status")
        except ApiError as err:
            log.debug("sandbox scheduler: status of %s/%s not written: %s", namespace, meta["name"], err)
        self.events.record(pod, "Warning", "FailedScheduling", message)
        return None
