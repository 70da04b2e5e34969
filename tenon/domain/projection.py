"""The cluster as the event log tells it (pure): the view the scheduler and the disruption service decide on.

Every input of a scheduling decision is an event, so the projection is a fold over the log: apply events in
log order and you get exactly what the live scheduler saw when it decided. That is what makes ``tenon replay
scheduler`` honest.

It keeps: Nodes and bound pods (from pod-watcher's observations), NodePools, NodeClasses and DaemonSets (latest
snapshots), catalogs per NodeClass (from the launchers), pending pods seen in batches (until they are bound or
gone), and one :class:`ClaimState` per NodeClaim (from its aggregate subject), including the stream sequence of
its last event, which is what an optimistic append on the claim must expect.

``apply`` mutates in place and returns the projection (a replay holds one projection and folds the whole range
into it; copying thousands of objects per event would cost more than the decisions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from proto import events as ev

KubeObject = dict[str, Any]

LIVE_PHASES = ("Planned", "Launched", "Registered", "Initialized")
PENDING_TTL = timedelta(seconds=60)


def object_key(obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass
class ClaimState:
    name: str
    planned: ev.NodeClaimPlanned | None = None
    launched: ev.NodeClaimLaunched | None = None
    launch_failures: list[ev.NodeClaimLaunchFailed] = field(default_factory=list)
    registered: ev.NodeClaimRegistered | None = None
    initialized: ev.NodeClaimInitialized | None = None
    abandoned: ev.NodeClaimAbandoned | None = None
    disruption: ev.DisruptionRequested | None = None
    drained: ev.NodeClaimDrained | None = None
    terminated: ev.NodeClaimTerminated | None = None
    last_sequence: int = 0

    @property
    def phase(self) -> str:
        if self.terminated:
            return "Terminated"
        if self.abandoned:
            return "Abandoned"
        if self.launch_failures and not self.launch_failures[-1].retryable and not self.launched:
            return "Failed"
        if self.disruption:
            return "Disrupting"
        if self.initialized:
            return "Initialized"
        if self.registered:
            return "Registered"
        if self.launched:
            return "Launched"
        return "Planned"

    @property
    def live(self) -> bool:
        """Capacity the scheduler may count on (or is still waiting for)."""
        return self.planned is not None and self.phase in LIVE_PHASES

    @property
    def instance_type(self) -> str | None:
        if self.launched:
            return self.launched.instance_type
        return self.planned.choice.instance_type if self.planned else None


@dataclass
class ClusterProjection:
    sequence: int = 0
    nodes: dict[str, KubeObject] = field(default_factory=dict)
    bound_pods: dict[str, KubeObject] = field(default_factory=dict)
    nodepools: dict[str, KubeObject] = field(default_factory=dict)
    nodeclasses: dict[str, KubeObject] = field(default_factory=dict)
    daemonsets: dict[str, KubeObject] = field(default_factory=dict)
    catalogs: dict[str, ev.CatalogSnapshot] = field(default_factory=dict)
    claims: dict[str, ClaimState] = field(default_factory=dict)
    pods_by_node: dict[str, dict[str, KubeObject]] = field(default_factory=dict)
    last_pod_activity: dict[str, datetime] = field(default_factory=dict)
    """Node name -> when a pod last arrived on it or left it (for consolidateAfter)."""
    pending: dict[str, KubeObject] = field(default_factory=dict)
    pending_seen: dict[str, datetime] = field(default_factory=dict)
    """When each pending pod was last offered in a batch: the pod-watcher offers a pod that is still pending again
    every few seconds, so one not offered for :data:`PENDING_TTL` is gone (deleted before it was ever bound)."""
    """Pods seen in PendingBatches and not (yet) bound or gone: what an abandoned claim's pods go back to."""

    def claim(self, name: str) -> ClaimState:
        state = self.claims.get(name)
        if state is None:
            state = self.claims[name] = ClaimState(name)
        return state

    def still_pending(self, key: str, now: datetime) -> bool:
        """Whether the pod ``key`` is pending as of ``now`` (offered recently and not bound since)."""
        seen = self.pending_seen.get(key)
        return seen is not None and now - seen <= PENDING_TTL

    def pods_on(self, node_name: str) -> list[KubeObject]:
        """Pods bound to the node and not finished."""
        return [
            pod
            for pod in self.pods_by_node.get(node_name, {}).values()
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def node_by_provider_id(self, provider_id: str) -> KubeObject | None:
        for node in self.nodes.values():
            if (node.get("spec") or {}).get("providerID") == provider_id:
                return node
        return None

    def apply(self, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        if sequence:
            self.sequence = max(self.sequence, sequence)
        match event:
            case ev.NodeObserved():
                name = object_key(event.node)
                if event.change == "removed":
                    self.nodes.pop(name, None)
                else:
                    self.nodes[name] = event.node
            case ev.BoundPodObserved():
                key = object_key(event.pod)
                node_name = (event.pod.get("spec") or {}).get("nodeName")
                if node_name:
                    self.last_pod_activity[node_name] = event.decided_at
                previous = self.bound_pods.pop(key, None)
                if previous is not None:
                    self.pods_by_node.get((previous.get("spec") or {}).get("nodeName") or "", {}).pop(
                        key, None
                    )
                if event.change != "removed":
                    self.bound_pods[key] = event.pod
                    self.pods_by_node.setdefault(node_name or "", {})[key] = event.pod
                self.pending.pop(key, None)
                self.pending_seen.pop(key, None)
            case ev.NodePoolsSnapshot():
                self.nodepools = {object_key(np): np for np in event.nodepools}
            case ev.NodeClassesSnapshot():
                self.nodeclasses = {object_key(nc): nc for nc in event.nodeclasses}
            case ev.DaemonSetsSnapshot():
                self.daemonsets = {object_key(ds): ds for ds in event.daemonsets}
            case ev.CatalogSnapshot():
                self.catalogs[event.node_class] = event
            case ev.PendingBatch():
                for pod in event.pods:
                    key = object_key(pod)
                    if key not in self.bound_pods:
                        self.pending[key] = pod
                        self.pending_seen[key] = event.decided_at
            case ev.NodeClaimEvent():
                self._apply_claim(event, sequence)
        return self

    def _apply_claim(self, event: ev.NodeClaimEvent, sequence: int) -> None:
        state = self.claim(event.nodeclaim)
        if sequence:
            state.last_sequence = max(state.last_sequence, sequence)
        match event:
            case ev.NodeClaimPlanned():
                state.planned = event
            case ev.NodeClaimLaunched():
                state.launched = event
            case ev.NodeClaimLaunchFailed():
                state.launch_failures.append(event)
            case ev.NodeClaimRegistered():
                state.registered = event
            case ev.NodeClaimInitialized():
                state.initialized = event
            case ev.NodeClaimAbandoned():
                state.abandoned = event
            case ev.DisruptionRequested():
                state.disruption = event
            case ev.NodeClaimDrained():
                state.drained = event
            case ev.NodeClaimTerminated():
                state.terminated = event
