"""The cluster as the event log tells it (pure): the view the scheduler and the disruption service decide on.

Every input of a scheduling decision is an event, so the projection is a fold over the log: apply events in
log order and you get exactly what the live scheduler saw when it decided. That is what makes ``tenon replay
scheduler`` honest.

It keeps: Nodes and bound pods (from pod-watcher's observations), NodePools, NodeClasses and DaemonSets
(latest snapshots), catalogs per NodeClass (from the launchers), pending pods seen in batches (until they are
bound or gone), and every NodeClaim's aggregate (:class:`tenon.domain.nodeclaim.NodeClaim`, folded from its
subjects), including the stream sequence of its last event, which is what an optimistic append on the claim
must expect.

``apply`` mutates in place and returns the projection (a replay holds one projection and folds the whole range
into it; copying thousands of objects per event would cost more than the decisions).

Besides the facts it keeps what the scheduling core read of them, parsed when first needed and dropped when
the fact changes (objects by kind and key, Nodes as a booting claim or a registration leaves them, running
pods by node), so a decision on a large, mostly unchanged cluster parses and gathers only what changed.
Those are derived: snapshots leave them out (:func:`encode_projection`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from proto import events as ev
from tenon.core import ClusterInput, InputError, Pod, parse_object, parse_pod
from tenon.domain.disruption.view import is_daemon
from tenon.domain.nodeclaim import ClaimBook, NodeClaim

KubeObject = dict[str, Any]

PENDING_TTL = timedelta(seconds=60)
ENDED_KEPT = timedelta(hours=1)
"""How long an ended claim stays in the projection (its NodeClaim object is deleted meanwhile); then it is
forgotten, so the state grows with the cluster, not with its history (the log and ``tenon explain`` keep
it)."""
PRUNE_EVERY = timedelta(minutes=10)
FINISHED = ("Succeeded", "Failed")
"""Phases of a pod that takes no room any more."""


def object_key(obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass
class ClusterProjection:
    nodes: dict[str, KubeObject] = field(default_factory=dict)
    bound_pods: dict[str, KubeObject] = field(default_factory=dict)
    nodepools: dict[str, KubeObject] = field(default_factory=dict)
    nodeclasses: dict[str, KubeObject] = field(default_factory=dict)
    daemonsets: dict[str, KubeObject] = field(default_factory=dict)
    pdbs: dict[str, KubeObject] = field(default_factory=dict)
    """PodDisruptionBudgets by namespace/name, as last snapshotted."""
    catalogs: dict[str, ev.CatalogSnapshot] = field(default_factory=dict)
    claims: ClaimBook = field(default_factory=ClaimBook)
    pods_by_node: dict[str, dict[str, KubeObject]] = field(default_factory=dict)
    last_pod_activity: dict[str, datetime] = field(default_factory=dict)
    """Node name -> when a pod last arrived on it or left it (for consolidateAfter)."""
    pending: dict[str, KubeObject] = field(default_factory=dict)
    """Pods seen in PendingBatches and not (yet) bound or gone: what an abandoned claim's pods go back to."""
    pending_seen: dict[str, datetime] = field(default_factory=dict)
    """When each pending pod was last offered in a batch: the pod-watcher offers a pod that is still pending
    again every few seconds, so one not offered for :data:`PENDING_TTL` is gone (deleted before it was
    bound)."""
    provider_ids: dict[str, str] = field(default_factory=dict)
    """providerID -> Node name, for the Nodes that have one."""
    parsed: dict[str, Parsed] = field(default_factory=dict)
    """Objects as the scheduling core reads them, by ``kind/key``: each is parsed once, when first needed
    after it changed (folding a change drops its entry), so a plan costs what is new. Derived, like the two
    caches below: left out of snapshots (:func:`encode_projection`)."""
    node_views: dict[str, tuple[str, Parsed]] = field(default_factory=dict)
    """Node name -> (variant, parse): the Node as a decision reads it while its claim boots or before its
    registration shows (:meth:`parse_node_view`), kept until the Node changes or the variant does."""
    running: RunningPods = field(default_factory=lambda: RunningPods())
    """The running pods parsed, by node (:meth:`running_pods`)."""

    pruned_at: datetime | None = None
    """Event time of the last pass that forgot long-ended claims (pruning follows event time, so a replay and
    a rebuild from a snapshot forget exactly what the live service forgot)."""

    def claim(self, name: str) -> NodeClaim:
        return self.claims.claim(name)

    def still_pending(self, key: str, now: datetime) -> bool:
        """Whether the pod ``key`` is pending as of ``now`` (offered recently and not bound since)."""
        seen = self.pending_seen.get(key)
        return seen is not None and now - seen <= PENDING_TTL

    def pods_on(self, node_name: str) -> list[KubeObject]:
        """Pods bound to the node and not finished."""
        return [
            pod
            for pod in self.pods_by_node.get(node_name, {}).values()
            if (pod.get("status") or {}).get("phase") not in FINISHED
        ]

    def node_by_provider_id(self, provider_id: str) -> KubeObject | None:
        name = self.provider_ids.get(provider_id)
        return self.nodes.get(name) if name is not None else None

    def parse(self, kind: str, key: str, obj: KubeObject) -> Parsed:
        """``obj`` as the scheduling core reads it (parsed once; the cache entry goes when the object
        changes)."""
        cache_key = f"{kind}/{key}"
        found = self.parsed.get(cache_key)
        if found is None:
            found = self.parsed[cache_key] = parse_for_core(kind, obj)
        return found

    def parse_node_view(self, name: str, variant: str, view: Callable[[], KubeObject]) -> Parsed:
        """The Node ``name`` as ``view()`` gives it (the Node as the registration or a boot leaves it),
        parsed once per ``variant`` (what, besides the Node, the view is made of) until the Node changes."""
        found = self.node_views.get(name)
        if found is None or found[0] != variant:
            found = self.node_views[name] = (variant, parse_for_core("Node", view()))
        return found[1]

    def running_pods(self) -> tuple[Pod, ...]:
        """Every running pod (bound, not Succeeded or Failed) as the scheduling core reads it, by node name
        then pod key; one that cannot be read is left out. Kept between decisions, by node: a pod that binds,
        changes or goes drops its nodes' entries, so a decision parses and gathers again only what changed."""
        running = self.running
        if running.every is None:
            gathered: list[Pod] = []
            for node in sorted(self.pods_by_node):
                gathered += self.running_on(node)
            running.every = tuple(gathered)
        return running.every

    def running_on(self, node: str) -> tuple[Pod, ...]:
        """The running pods bound to ``node`` as the scheduling core reads them (kept as :meth:`running_pods`
        keeps them)."""
        found = self.running.by_node.get(node)
        if found is None:
            found = self.running.by_node[node] = self._parse_running_on(node)
        return found

    def _parse_running_on(self, node: str) -> tuple[Pod, ...]:
        pods = self.pods_by_node.get(node) or {}
        parsed = self.running.pods
        out: list[Pod] = []
        for key in sorted(pods):
            obj = pods[key]
            if (obj.get("status") or {}).get("phase") in FINISHED:
                continue
            if key in parsed:
                pod = parsed[key]
            else:
                pod = parsed[key] = _pod_for_core(obj)
            if pod is not None:
                out.append(pod)
        return tuple(out)

    def _forget_parsed(self, prefix: str) -> None:
        for key in [k for k in self.parsed if k.startswith(prefix)]:
            del self.parsed[key]

    def apply(self, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        """Fold ``event`` (stored at ``sequence``; 0 for a decision folded before the log hands it back).
        A NodeClaim event that cannot belong to its claim's story raises
        :class:`tenon.domain.nodeclaim.ImpossibleStory` and changes nothing."""
        if isinstance(event, ev.NodeClaimEvent):
            self.claims.fold(event, sequence)
        else:
            fold = _FOLDS.get(type(event))
            if fold is not None:
                fold(self, event)
        self._prune(event.decided_at)
        return self

    def _prune(self, now: datetime) -> None:
        if self.pruned_at is not None and now - self.pruned_at < PRUNE_EVERY:
            return
        self.pruned_at = now
        horizon = now - ENDED_KEPT
        for name in [name for name, claim in self.claims.items() if _ended_before(claim, horizon)]:
            del self.claims[name]

    def _node_observed(self, event: ev.NodeObserved) -> None:
        name = object_key(event.node)
        self.parsed.pop(f"Node/{name}", None)
        self.node_views.pop(name, None)
        previous = self.nodes.pop(name, None)
        if previous is not None:
            self.provider_ids.pop(str((previous.get("spec") or {}).get("providerID")), None)
        if event.change != "removed":
            self.nodes[name] = event.node
            provider_id = (event.node.get("spec") or {}).get("providerID")
            if provider_id:
                self.provider_ids[str(provider_id)] = name

    def _bound_pod_observed(self, event: ev.BoundPodObserved) -> None:
        key = object_key(event.pod)
        self.parsed.pop(f"Pod/{key}", None)
        self.parsed.pop(f"Pending/{key}", None)
        node_name = (event.pod.get("spec") or {}).get("nodeName")
        previous = self.bound_pods.get(key)
        if node_name and _pod_came_or_went(previous, event):
            self.last_pod_activity[node_name] = event.decided_at
        self.bound_pods.pop(key, None)
        if previous is not None:
            previous_node = (previous.get("spec") or {}).get("nodeName") or ""
            self.pods_by_node.get(previous_node, {}).pop(key, None)
            self.running.forget(key, previous_node)
        if event.change != "removed":
            self.bound_pods[key] = event.pod
            self.pods_by_node.setdefault(node_name or "", {})[key] = event.pod
            self.running.forget(key, node_name or "")
        self.pending.pop(key, None)
        self.pending_seen.pop(key, None)

    def _nodepools(self, event: ev.NodePoolsSnapshot) -> None:
        self._forget_parsed("NodePool/")
        self.nodepools = {object_key(np): np for np in event.nodepools}

    def _nodeclasses(self, event: ev.NodeClassesSnapshot) -> None:
        self._forget_parsed("NodeClass/")
        self.nodeclasses = {object_key(nc): nc for nc in event.nodeclasses}

    def _daemonsets(self, event: ev.DaemonSetsSnapshot) -> None:
        self._forget_parsed("DaemonSet/")
        self.daemonsets = {object_key(ds): ds for ds in event.daemonsets}

    def _pdbs(self, event: ev.PodDisruptionBudgetsSnapshot) -> None:
        self.pdbs = {object_key(pdb): pdb for pdb in event.pdbs}

    def _catalog(self, event: ev.CatalogSnapshot) -> None:
        self.parsed.pop(f"Catalog/{event.node_class}", None)
        self.catalogs[event.node_class] = event

    def _pending_batch(self, event: ev.PendingBatch) -> None:
        for pod in event.pods:
            key = object_key(pod)
            self.parsed.pop(f"Pending/{key}", None)
            if key not in self.bound_pods:
                self.pending[key] = pod
                self.pending_seen[key] = event.decided_at


def _pod_came_or_went(previous: KubeObject | None, event: ev.BoundPodObserved) -> bool:
    """Whether the observation changes what runs on the node, as Karpenter's pod events controller reads it:
    the pod was bound, finished (Succeeded, Failed) or began terminating. A re-assertion of the same pod does
    not (it must not restart the node's consolidateAfter clock), nor does a pod starting to run. A
    DaemonSet's pod never does: it comes with the node and goes with it (a daemon pod bound seconds after its
    node emptied restarted the clock, and ended an emptiness queue half drained)."""
    if is_daemon(event.pod):
        return False
    if previous is None or event.change == "removed":
        return True
    before, after = previous, event.pod
    return (
        (before.get("spec") or {}).get("nodeName") != (after.get("spec") or {}).get("nodeName")
        or _finished(before) != _finished(after)
        or bool((before.get("metadata") or {}).get("deletionTimestamp"))
        != bool((after.get("metadata") or {}).get("deletionTimestamp"))
    )


def _finished(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


@dataclass
class RunningPods:
    """The running pods as the scheduling core reads them (:meth:`ClusterProjection.running_pods`): each pod
    (``None``: it cannot be read), per node, and all of them in one tuple. A change to a pod drops its entry,
    its node's and the whole."""

    pods: dict[str, Pod | None] = field(default_factory=dict)
    by_node: dict[str, tuple[Pod, ...]] = field(default_factory=dict)
    every: tuple[Pod, ...] | None = None

    def forget(self, key: str, node: str) -> None:
        self.pods.pop(key, None)
        self.by_node.pop(node, None)
        self.every = None


@dataclass(frozen=True)
class Parsed:
    """One object as the scheduling core read it: its part of a ClusterInput, or why it could not be read."""

    part: ClusterInput | None = None
    problem: str | None = None


def _pod_for_core(obj: KubeObject) -> Pod | None:
    """A bound pod as the scheduling core reads it, ``None`` when it cannot be read (it takes no room then,
    as a pod the planner parsed with :func:`parse_for_core` and could not read)."""
    try:
        return parse_pod("event", 0, obj)
    except InputError:
        return None


def parse_for_core(kind: str, obj: KubeObject) -> Parsed:
    try:
        return Parsed(part=parse_object(kind, 0, obj))
    except InputError as exc:
        return Parsed(problem=str(exc))


def _ended_before(claim: NodeClaim, moment: datetime) -> bool:
    ending = claim.terminated or claim.abandoned
    return ending is not None and ending.decided_at < moment


_FOLDS: dict[type[ev.Event], Any] = {
    ev.NodeObserved: ClusterProjection._node_observed,
    ev.BoundPodObserved: ClusterProjection._bound_pod_observed,
    ev.NodePoolsSnapshot: ClusterProjection._nodepools,
    ev.NodeClassesSnapshot: ClusterProjection._nodeclasses,
    ev.DaemonSetsSnapshot: ClusterProjection._daemonsets,
    ev.PodDisruptionBudgetsSnapshot: ClusterProjection._pdbs,
    ev.CatalogSnapshot: ClusterProjection._catalog,
    ev.PendingBatch: ClusterProjection._pending_batch,
}
"""Event type -> how it changes the projection (NodeClaim events go to the claim's aggregate)."""


def _decode_hook(kind: type, obj: Any) -> Any:
    if kind is ClaimBook:
        return ClaimBook.from_plain(obj)
    raise NotImplementedError(f"cannot decode {kind}")


def encode_projection(projection: ClusterProjection) -> bytes:
    """The projection as bytes (for snapshots); :func:`decode_projection` reads it back. Indexes that other
    fields determine (pods by node, providerIDs) and the parse caches are left out: rebuilding them costs less
    than storing and decoding them (measured: 50,000 pods)."""
    facts = dataclasses.replace(
        projection, pods_by_node={}, provider_ids={}, parsed={}, node_views={}, running=RunningPods()
    )
    return msgspec.msgpack.encode(facts)


def decode_projection(data: bytes) -> ClusterProjection:
    projection = msgspec.msgpack.decode(data, type=ClusterProjection, dec_hook=_decode_hook)
    for key, pod in projection.bound_pods.items():
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        projection.pods_by_node.setdefault(node_name, {})[key] = pod
    for name, node in projection.nodes.items():
        provider_id = (node.get("spec") or {}).get("providerID")
        if provider_id:
            projection.provider_ids[str(provider_id)] = name
    return projection
