"""What the pod-watcher sees, and which of it is worth an event: pure functions and plain-data trackers.

Everything here takes Kubernetes objects as dicts (plus what was published before) and returns the event to
publish, or ``None``. Nothing here reads a clock it was not given, talks to a cluster or touches the log, so
every rule is tested with literal objects (``tests/pod_watcher/test_observations.py``).

Which pods are pending
----------------------
A pod is *pending* for tenon when the kube-scheduler has tried and failed to place it: condition
``PodScheduled=False`` with reason ``Unschedulable``. Excluded, as in Karpenter's provisioner:

* pods owned by a DaemonSet (their controller places them per node; a new node would not help them),
* pods being deleted (``metadata.deletionTimestamp``),
* pods of another scheduler (``spec.schedulerName`` set and not ``default-scheduler``),
* pods already bound (``spec.nodeName``) or finished (phase ``Succeeded``/``Failed``).

Which changes matter
--------------------
Nodes and bound pods change constantly for reasons no scheduling decision depends on (kubelet heartbeats,
image lists, pod IPs). A change is published only when its *fingerprint* changes: for a Node its labels,
taints, capacity and allocatable, the Ready condition's status, ``spec.unschedulable``, ``spec.providerID``,
``deletionTimestamp`` and the annotations tenon reads; for a bound pod its node, phase, labels, owners,
resource requests (containers, init containers, overhead), ``deletionTimestamp`` and the annotations tenon
reads. The comparison is against the last object *published*, so small irrelevant changes never hide a
relevant one that follows.

:class:`ObservedObjects` keeps that "last published" version per kind, keyed by uid, and turns both watch
changes and re-lists into events: after a re-list (the only correct answer to a gap, e.g. 410 Gone) anything
it knew that is no longer listed becomes ``removed``. It can be rebuilt from the log
(:meth:`ObservedObjects.restore`), which is how a new leader continues where the old one stopped without
repeating it.

Snapshots
---------
NodePools, NodeClasses and DaemonSets are few and read together, so they travel as whole snapshots. A
snapshot is published when its *content* changes; content ignores ``resourceVersion`` and fields that are
outputs rather than inputs (a DaemonSet's ``status``, which changes whenever a node joins, and a NodePool's
``status.resources``, which the scheduler itself writes as it buys nodes; publishing on those would log a
snapshot per node for nothing).

Ids (``proto/README.md``, "Envelope and ids")
---------------------------------------------
* ``NodeObserved``/``BoundPodObserved``: object uid, resourceVersion, change; a re-assertion
  (:mod:`.resync`) adds ``resync`` and its epoch.
* snapshots: the content hash, preceded by the log sequence of the previous snapshot of that kind. The hash
  alone would make a content that comes back (A, B, A within the broker's two-minute duplicate window) a
  "duplicate" of the first A and silently drop it, leaving B as the log's last word; the previous sequence
  makes each step distinct while two replicas deciding the same step still derive the same id. A
  re-assertion adds ``resync`` and its epoch.
* ``PendingBatch`` (:mod:`.pending_batches`): the sorted pod uids and the window's opening time.

What is recorded of an object is its :mod:`.views` view: what scheduling reads, never env values, commands
or unknown annotations. NodePools and NodeClasses are tenon's own configuration and are recorded whole except
``metadata.managedFields`` (server-side-apply bookkeeping, often larger than the object itself).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from proto import subjects
from proto.events import (
    BoundPodObserved,
    DaemonSetsSnapshot,
    Event,
    KubeObject,
    NodeClassesSnapshot,
    NodeObserved,
    NodePoolsSnapshot,
    ObservedChange,
    PodDisruptionBudgetsSnapshot,
)
from tenon.domain.projection import FINISHED
from tenon.runtime.eventlog.factories import make_event
from tenon.services.pod_watcher.views import READ_ANNOTATIONS, daemonset_view, node_view, pdb_view, pod_view

PRODUCER = "pod-watcher"
DEFAULT_SCHEDULER = "default-scheduler"


class InvalidObject(ValueError):
    """A Kubernetes object lacks a field the pod-watcher needs; the message names the object and the field."""


# --- objects ------------------------------------------------------------------------------------------------


def describe(obj: Mapping[str, Any]) -> str:
    """``Pod default/web-1``, ``Node n1``: how errors and logs name an object (even a malformed one)."""
    if not isinstance(obj, Mapping):
        return f"a {type(obj).__name__}, not an object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kind = obj.get("kind") or "object"
    name = meta.get("name") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise InvalidObject(f"{describe(obj)}: metadata is missing or not an object")
    return meta


def uid_of(obj: Mapping[str, Any]) -> str:
    uid = _metadata(obj).get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidObject(f"{describe(obj)}: metadata.uid is missing")
    return uid


def name_of(obj: Mapping[str, Any]) -> str:
    name = _metadata(obj).get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject(f"{describe(obj)}: metadata.name is missing")
    return name


def namespace_of(obj: Mapping[str, Any]) -> str:
    namespace = _metadata(obj).get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidObject(f"{describe(obj)}: metadata.namespace is missing")
    return namespace


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str(_metadata(obj).get("resourceVersion") or "")


def trimmed(obj: Mapping[str, Any]) -> KubeObject:
    """A deep copy without ``metadata.managedFields``."""
    out: KubeObject = copy.deepcopy(dict(obj))
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return out


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def is_schedulable(node: Mapping[str, Any]) -> bool:
    """Whether pods may land on ``node`` now: Ready, not cordoned, no taint that keeps pods off it."""
    ready = _condition(node, "Ready")
    if ready is None or ready.get("status") != "True":
        return False
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    return not any(
        isinstance(taint, Mapping) and taint.get("effect") in ("NoSchedule", "NoExecute")
        for taint in spec.get("taints") or ()
    )


def _owned_by_daemonset(pod: Mapping[str, Any]) -> bool:
    return any(
        isinstance(ref, Mapping) and ref.get("kind") == "DaemonSet"
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
    )


def pending_exclusion(pod: Mapping[str, Any]) -> str | None:
    """Why this pod is not one tenon should find room for, or ``None`` when it is pending."""
    meta = _metadata(pod)
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return "bound to a node"
    if (pod.get("status") or {}).get("phase") in FINISHED:
        return "finished"
    if meta.get("deletionTimestamp"):
        return "being deleted"
    if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
        return f"scheduled by {spec.get('schedulerName')}"
    if _owned_by_daemonset(pod):
        return "owned by a DaemonSet"
    condition = _condition(pod, "PodScheduled")
    if condition is None or condition.get("status") != "False" or condition.get("reason") != "Unschedulable":
        return "not marked PodScheduled=False/Unschedulable"
    return None


def is_pending(pod: Mapping[str, Any]) -> bool:
    return pending_exclusion(pod) is None


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _read_annotations(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k in READ_ANNOTATIONS}


def node_fingerprint(node: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node a scheduling or disruption decision reads (not heartbeats, images, addresses)."""
    meta = _metadata(node)
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = _condition(node, "Ready")
    return {
        "labels": meta.get("labels") or {},
        "annotations": _read_annotations(meta),
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "taints": spec.get("taints") or [],
        "unschedulable": bool(spec.get("unschedulable")),
        "providerID": spec.get("providerID"),
        "capacity": status.get("capacity") or {},
        "allocatable": status.get("allocatable") or {},
        "ready": ready.get("status") if ready else None,
    }


def _requests(containers: Any) -> list[Any]:
    return [
        (c.get("name"), (c.get("resources") or {}).get("requests"))
        for c in containers or ()
        if isinstance(c, Mapping)
    ]


def bound_pod_fingerprint(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a bound pod that change the room left on its node or how it may be disrupted. Of its
    phase, only whether it finished (Succeeded, Failed: its room is free again), as Karpenter's pod events
    read it: a pod that starts running takes no more room than when it was bound, and publishing that start
    was half the pod events of a 1,000-pod burst (so a bound pod's recorded phase is the one it had at its
    last recorded change)."""
    meta = _metadata(pod)
    spec = pod.get("spec") or {}
    return {
        "nodeName": spec.get("nodeName"),
        "finished": (pod.get("status") or {}).get("phase") in FINISHED,
        "labels": meta.get("labels") or {},
        "annotations": _read_annotations(meta),
        "ownerReferences": meta.get("ownerReferences") or [],
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "containers": _requests(spec.get("containers")),
        "initContainers": _requests(spec.get("initContainers")),
        "overhead": spec.get("overhead"),
    }


# --- observations of nodes and bound pods -------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _key(obj: Mapping[str, Any], change: ObservedChange, resync: int | None) -> tuple[object, ...]:
    key: tuple[object, ...] = (uid_of(obj), resource_version_of(obj), change)
    return key if resync is None else (*key, "resync", resync)


def node_event(
    change: ObservedChange,
    node: Mapping[str, Any],
    *,
    decided_at: datetime | None = None,
    resync: int | None = None,
    view: KubeObject | None = None,
) -> NodeObserved:
    """``resync``: the epoch of a re-assertion of an unchanged node (:mod:`.resync`), else None; ``view``: its
    :func:`.views.node_view`, when the caller has it already."""
    obj = view if view is not None else node_view(node)
    return make_event(
        NodeObserved,
        producer=PRODUCER,
        key=_key(obj, change, resync),
        decided_at=decided_at or _now(),
        change=change,
        node=obj,
    )


def bound_pod_event(
    change: ObservedChange,
    pod: Mapping[str, Any],
    *,
    decided_at: datetime | None = None,
    resync: int | None = None,
    view: KubeObject | None = None,
) -> BoundPodObserved:
    """``resync``: the epoch of a re-assertion of an unchanged pod (:mod:`.resync`), else None; ``view``: its
    :func:`.views.pod_view`, when the caller has it already."""
    obj = view if view is not None else pod_view(pod)
    return make_event(
        BoundPodObserved,
        producer=PRODUCER,
        key=_key(obj, change, resync),
        decided_at=decided_at or _now(),
        change=change,
        pod=obj,
    )


def node_subject(event: Event) -> str:
    assert isinstance(event, NodeObserved)
    return subjects.node(name_of(event.node))


def bound_pod_subject(event: Event) -> str:
    assert isinstance(event, BoundPodObserved)
    return subjects.bound_pod(namespace_of(event.pod), name_of(event.pod))


@dataclass
class ObservedObjects:
    """The last published version of each tracked object of one kind, and the events that keep it current.

    ``tracked`` says which objects belong here (every Node; only bound pods), ``fingerprint`` which changes
    matter, ``view`` what of an object is recorded (:mod:`.views`), ``make`` builds the event. Methods return
    the event to publish (or events, for a re-list) and update ``known`` as if it was published: the service
    publishes them in order, and if publishing fails its leadership term ends and the next one rebuilds
    ``known`` from the log.
    """

    kind: str
    tracked: Callable[[Mapping[str, Any]], bool]
    fingerprint: Callable[[Mapping[str, Any]], dict[str, Any]]
    view: Callable[[Mapping[str, Any]], KubeObject]
    make: Callable[..., Event]
    known: dict[str, KubeObject] = field(default_factory=dict)
    _fingerprints: dict[str, tuple[KubeObject, dict[str, Any]]] = field(default_factory=dict, repr=False)
    """The fingerprint of each known view, beside the view it is of (a ``known`` entry replaced by any other
    path is recognised and its fingerprint computed again): every change of every bound pod is compared."""

    def observe(
        self,
        obj: Mapping[str, Any],
        *,
        decided_at: datetime | None = None,
        view: KubeObject | None = None,
        fingerprint: dict[str, Any] | None = None,
    ) -> Event | None:
        """An object was added or modified: ``added``, ``changed`` (if its fingerprint moved) or nothing.
        ``view`` and ``fingerprint``: ``self.view(obj)`` and ``self.fingerprint(obj)`` when the caller has
        them already (the event and ``known`` then share the view)."""
        uid = uid_of(obj)
        previous = self.known.get(uid)
        if not self.tracked(obj):
            # e.g. a pod that was never bound; a tracked object cannot leave the set without being deleted
            return self.forget(obj, decided_at=decided_at) if previous is not None else None
        if fingerprint is None:
            fingerprint = self.fingerprint(obj)
        if previous is not None and self._fingerprint_of(uid, previous) == fingerprint:
            return None
        seen = view if view is not None else self.view(obj)
        self.known[uid] = seen
        self._fingerprints[uid] = (seen, fingerprint)
        change: ObservedChange = "changed" if previous is not None else "added"
        return self.make(change, obj, decided_at=decided_at, view=seen)

    def _fingerprint_of(self, uid: str, known: KubeObject) -> dict[str, Any]:
        remembered = self._fingerprints.get(uid)
        if remembered is not None and remembered[0] is known:
            return remembered[1]
        fingerprint = self.fingerprint(known)
        self._fingerprints[uid] = (known, fingerprint)
        return fingerprint

    def reassert(self, uid: str, epoch: int, *, decided_at: datetime | None = None) -> Event | None:
        """The last published version of ``uid`` again, as a ``changed`` of resync ``epoch`` (the same id for
        whoever re-asserts it in that epoch), or None if it is not known any more."""
        known = self.known.get(uid)
        if known is None:
            return None
        return self.make("changed", known, decided_at=decided_at, resync=epoch)

    def forget(self, obj: Mapping[str, Any], *, decided_at: datetime | None = None) -> Event | None:
        """An object was deleted: ``removed`` if it was known."""
        uid = uid_of(obj)
        self._fingerprints.pop(uid, None)
        if self.known.pop(uid, None) is None:
            return None
        return self.make("removed", obj, decided_at=decided_at)

    def relisted(
        self, items: Iterable[Mapping[str, Any]], *, decided_at: datetime | None = None
    ) -> list[Event]:
        """The complete current set: ``removed`` for what is gone, then events for what is new or changed.

        Removals come first because readers key objects by name: a StatefulSet pod or a Node recreated under
        the same name during the gap has a new uid, and its ``added`` must be the last word on that name."""
        items = list(items)
        seen = {uid_of(obj) for obj in items}
        events: list[Event] = []
        for uid in [uid for uid in self.known if uid not in seen]:
            gone = self.known.pop(uid)
            self._fingerprints.pop(uid, None)
            events.append(self.make("removed", gone, decided_at=decided_at))
        for obj in items:
            event = self.observe(obj, decided_at=decided_at)
            if event is not None:
                events.append(event)
        return events

    def restore(self, change: ObservedChange, obj: Mapping[str, Any]) -> None:
        """Replay one published event (from the log) into the view."""
        if change == "removed":
            self.known.pop(uid_of(obj), None)
            self._fingerprints.pop(uid_of(obj), None)
        else:
            self.known[uid_of(obj)] = self.view(obj)


def node_tracker() -> ObservedObjects:
    return ObservedObjects("Node", lambda _node: True, node_fingerprint, node_view, node_event)


def bound_pod_tracker() -> ObservedObjects:
    return ObservedObjects("Pod", is_bound, bound_pod_fingerprint, pod_view, bound_pod_event)


# --- snapshots ----------------------------------------------------------------------------------------------

SnapshotName = Literal["nodepools", "nodeclasses", "daemonsets", "pdbs"]


@dataclass(frozen=True)
class SnapshotKind:
    """One snapshot family: its event type and field, its subject, and what its content ignores."""

    name: SnapshotName
    event_type: type[Event]
    field_name: str
    subject: str
    ignored: tuple[tuple[str, ...], ...]
    """Paths left out of the content: outputs of controllers, not inputs of decisions."""
    view: Callable[[Mapping[str, Any]], KubeObject]
    """What of each object is recorded."""


_ALWAYS_IGNORED: tuple[tuple[str, ...], ...] = (
    ("metadata", "resourceVersion"),
    ("metadata", "managedFields"),
    ("metadata", "generation"),
)

NODEPOOLS = SnapshotKind(
    "nodepools",
    NodePoolsSnapshot,
    "nodepools",
    subjects.NODEPOOLS,
    (*_ALWAYS_IGNORED, ("status", "resources"), ("status", "nodes")),
    trimmed,
)
NODECLASSES = SnapshotKind(
    "nodeclasses", NodeClassesSnapshot, "nodeclasses", subjects.NODECLASSES, _ALWAYS_IGNORED, trimmed
)
DAEMONSETS = SnapshotKind(
    "daemonsets",
    DaemonSetsSnapshot,
    "daemonsets",
    subjects.DAEMONSETS,
    (*_ALWAYS_IGNORED, ("status",)),
    daemonset_view,
)
PDBS = SnapshotKind(
    "pdbs",
    PodDisruptionBudgetsSnapshot,
    "pdbs",
    subjects.PDBS,
    (
        *_ALWAYS_IGNORED,
        ("status", "observedGeneration"),
        ("status", "conditions"),
        ("status", "disruptedPods"),
    ),
    pdb_view,
)
SNAPSHOT_KINDS: tuple[SnapshotKind, ...] = (NODEPOOLS, NODECLASSES, DAEMONSETS, PDBS)


def _without(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    if not path or not isinstance(obj, Mapping) or path[0] not in obj:
        return obj
    out = dict(obj)
    if len(path) == 1:
        del out[path[0]]
    else:
        out[path[0]] = _without(obj[path[0]], path[1:])
    return out


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def snapshot_content(kind: SnapshotKind, objects: Iterable[Mapping[str, Any]]) -> tuple[KubeObject, ...]:
    """The objects of a snapshot as recorded (its kind's view), in a stable order (kind, namespace, name)."""
    return tuple(sorted((kind.view(obj) for obj in objects), key=_sort_key))


def snapshot_fingerprint(kind: SnapshotKind, objects: Sequence[Mapping[str, Any]]) -> str:
    """A hash of what a decision reads from these objects (see the module docstring for what is ignored)."""
    relevant = []
    for obj in sorted(objects, key=_sort_key):
        for path in kind.ignored:
            obj = _without(obj, path)
        relevant.append(obj)
    text = json.dumps(relevant, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SnapshotState:
    """What was last published for one snapshot kind (restored from the log by a new leader)."""

    kind: SnapshotKind
    fingerprint: str | None = None
    sequence: int = 0

    def decide(
        self,
        objects: Iterable[Mapping[str, Any]],
        *,
        decided_at: datetime | None = None,
        resync: int | None = None,
    ) -> Event | None:
        """The snapshot to publish for the current objects, or ``None`` when the content did not change. With
        ``resync`` (an epoch of :mod:`.resync`), an unchanged content is re-asserted rather than skipped, with
        an id of that epoch.

        Call :meth:`published` with the log sequence once it is stored."""
        content = snapshot_content(self.kind, objects)
        fingerprint = snapshot_fingerprint(self.kind, content)
        key: tuple[object, ...] = (self.sequence, fingerprint)
        if fingerprint == self.fingerprint:
            if resync is None:
                return None
            key = (*key, "resync", resync)
        fields: dict[str, Any] = {self.kind.field_name: content}
        return make_event(
            self.kind.event_type,
            producer=PRODUCER,
            key=key,
            decided_at=decided_at or _now(),
            **fields,
        )

    def published(self, event: Event, sequence: int) -> None:
        self.fingerprint = snapshot_fingerprint(self.kind, getattr(event, self.kind.field_name))
        self.sequence = sequence
