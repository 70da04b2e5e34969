"""Termination: the one path by which a node leaves, for every disruption method and for user deletes.

Steps, each idempotent so a restarted service resumes a half-done termination and finishes it once:

1. Taint the Node ``karpenter.sh/disrupted:NoSchedule`` so nothing new lands on it.
2. Drain through the Eviction API, in tiers (Karpenter's order): non-critical pods, then non-critical
DaemonSet
   pods, then critical pods (``system-cluster-critical`` / ``system-node-critical``), then critical DaemonSet
   pods; a tier starts only when the one before is gone. Pods that tolerate the disrupted taint are left (they
   would come straight back). A 429 means a PodDisruptionBudget says "not now": retry with backoff, never
   force. Only the NodeClaim's ``terminationGracePeriod`` (from the NodePool template) overrides budgets: past
   it, what remains is deleted; so does an interruption's deadline (the machine goes then, its pods with it).
3. Append ``NodeClaimDrained`` (the pods evicted, whether the grace period ran out), then delete the Node (and
   remove tenon's finalizer from it). The launcher removes exactly this claim's machine when it sees Drained,
   and appends ``NodeClaimTerminated``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto.ids import derive_id
from tenon.core.wellknown import DISRUPTED_TAINT, TERMINATION_FINALIZER
from tenon.domain.disruption.candidates import termination_grace_period
from tenon.domain.disruption.view import is_daemon, is_mirror, pod_do_not_disrupt
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject
from tenon.runtime import claims
from tenon.runtime.eventlog import EventLog
from tenon.runtime.kube import NODES, PODS, Kube, KubeApiError
from tenon.runtime.kube.resources import ResourceRef

log = logging.getLogger("tenon.disruption.termination")

PRODUCER = "disruption"
DISRUPTED_NO_SCHEDULE = {"key": DISRUPTED_TAINT, "effect": "NoSchedule"}
CRITICAL = ("system-cluster-critical", "system-node-critical")
VOLUME_ATTACHMENTS = ResourceRef("storage.k8s.io/v1", "volumeattachments", False)


def _tolerates_disrupted(pod: KubeObject) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("operator") == "Exists" and not toleration.get("key"):
            return True
        if toleration.get("key") == DISRUPTED_TAINT and toleration.get("effect") in (
            None,
            "",
            "NoSchedule",
        ):
            return True
    return False


def drain_tier(pod: KubeObject) -> int:
    critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL
    return (2 if critical else 0) + (1 if is_daemon(pod) else 0)


def pods_to_drain(pods: list[KubeObject]) -> list[KubeObject]:
    """The pods still to evict, first tier only."""
    remaining = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not _tolerates_disrupted(p)
        and not is_mirror(p)  # a static pod's mirror: the kubelet owns it, it goes with the node
    ]
    if not remaining:
        return []
    first = min(drain_tier(p) for p in remaining)
    return [p for p in remaining if drain_tier(p) == first]


def grace_period(projection: ClusterProjection, claim: NodeClaim) -> timedelta | None:
    if claim.planned is None:
        return None
    return termination_grace_period(projection.nodepools.get(claim.planned.nodepool) or {})


class Terminator:
    def __init__(
        self,
        kube: Kube,
        event_log: EventLog,
        state: Callable[[], ClusterProjection],
        *,
        poll_seconds: float = 0.2,
        max_backoff: float = 5.0,
        deadline_of: Callable[[NodeClaim], datetime | None] = lambda claim: None,
    ) -> None:
        self.kube = kube
        self.log = event_log
        self._state = state
        self.deadline_of = deadline_of
        """When a claim's machine goes away whatever tenon does (an interruption notice's deadline): past it
        PodDisruptionBudgets no longer hold the drain, as past the termination grace period."""
        self.poll_seconds = poll_seconds
        self.max_backoff = max_backoff
        self.evictions_refused = 0
        """Evictions a PodDisruptionBudget refused (429) so far: the drain is waiting on a budget."""

    @property
    def projection(self) -> ClusterProjection:
        return self._state()

    async def terminate(self, name: str) -> None:
        # a copy: what this appends (Drained) reaches the state when the consumer folds it from the log, at
        # its place there, as a replay folds it (folded into the state's claim at once, a tick decided
        # between the append and its delivery counted fewer claims in the budget than its replay did)
        claim = self.projection.claims[name].copy()
        assert claim.disruption is not None
        node_name = (claim.registered.node if claim.registered else None) or claim.disruption.node
        evicted: list[str] = []
        expired = False
        if claim.drained is None:
            if node_name:
                evicted, expired = await self._drain(claim, node_name)
            await self._append_drained(claim, node_name, evicted, expired)
        if node_name:
            await self._wait_for_volumes(claim, node_name)
            await self._delete_node(node_name)
        log.info("node terminated", extra={"nodeclaim": name, "node": node_name, "evicted": len(evicted)})

    async def _drain(self, claim: NodeClaim, node_name: str) -> tuple[list[str], bool]:
        assert claim.disruption is not None
        await self._taint(node_name)
        deadline = self._deadline(claim)
        evicted: list[str] = []
        backoff = self.poll_seconds
        while True:
            try:
                pods, _ = await self.kube.list(PODS, field_selector=f"spec.nodeName={node_name}")
            except KubeApiError as exc:
                log.warning("listing pods failed", extra={"node": node_name, "error": str(exc)})
                await asyncio.sleep(backoff)
                continue
            tier = pods_to_drain(pods)
            if not tier:
                return evicted, False
            if deadline is not None and datetime.now(UTC) >= deadline:
                for pod in [
                    p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                ]:
                    meta = pod["metadata"]
                    await self.kube.delete(PODS, meta["name"], meta.get("namespace"), grace_period_seconds=0)
                log.warning(
                    "deadline reached: remaining pods deleted",
                    extra={"nodeclaim": claim.name, "node": node_name, "why": self._why_deadline(claim)},
                )
                return evicted, True
            refused = await self._evict(tier, node_name, evicted)
            backoff = min(backoff * 2, self.max_backoff) if refused else self.poll_seconds
            await asyncio.sleep(backoff)

    def _deadline(self, claim: NodeClaim) -> datetime | None:
        """The earlier of the termination grace period's end and the machine's own end (an interruption)."""
        assert claim.disruption is not None
        grace = grace_period(self.projection, claim)
        ends = [claim.disruption.decided_at + grace if grace is not None else None, self.deadline_of(claim)]
        found = [moment for moment in ends if moment is not None]
        return min(found) if found else None

    def _why_deadline(self, claim: NodeClaim) -> str:
        noticed = self.deadline_of(claim)
        if noticed is not None and noticed == self._deadline(claim):
            return "the machine's interruption deadline (its pods go with it)"
        return "the terminationGracePeriod"

    async def _evict(self, tier: list[KubeObject], node_name: str, evicted: list[str]) -> int:
        """Evict the tier's pods (appending to ``evicted``); how many a PodDisruptionBudget refused."""
        refused = 0
        for pod in tier:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # already on its way out
            if pod_do_not_disrupt(pod, datetime.now(UTC)):
                continue  # not evicted: waited on until it finishes or the grace period ends
            key = f"{meta.get('namespace')}/{meta['name']}"
            try:
                await self.kube.evict(meta["name"], meta.get("namespace", "default"))
                evicted.append(key)
            except KubeApiError as exc:
                if exc.status == 429:
                    refused += 1
                    self.evictions_refused += 1
                    log.info(
                        "eviction refused by a PodDisruptionBudget, will retry",
                        extra={"pod": key, "node": node_name, "error": exc.message},
                    )
                elif exc.status != 404:
                    log.warning("eviction failed", extra={"pod": key, "error": str(exc)})
        return refused

    async def _wait_for_volumes(self, claim: NodeClaim, node_name: str) -> None:
        """Karpenter's ``VolumesDetached``: the Node is deleted once no VolumeAttachment names it (pods of
        StatefulSets find their volumes free elsewhere), or once the termination grace period is over."""
        deadline = self._deadline(claim) if claim.disruption else None
        while deadline is None or datetime.now(UTC) < deadline:
            try:
                attachments, _ = await self.kube.list(VOLUME_ATTACHMENTS)
            except KubeApiError as exc:
                if exc.status == 404:
                    return  # the API has no VolumeAttachments: nothing to wait for
                log.warning("listing VolumeAttachments failed", extra={"node": node_name, "error": str(exc)})
                await asyncio.sleep(self.poll_seconds)
                continue
            holding = [a for a in attachments if (a.get("spec") or {}).get("nodeName") == node_name]
            if not holding:
                return
            log.info("waiting for volumes to detach", extra={"node": node_name, "attachments": len(holding)})
            await asyncio.sleep(self.max_backoff)

    async def taint(self, node_name: str) -> None:
        """The disrupted taint, before anything leaves (a command's candidates get it once confirmed)."""
        await self._taint(node_name)

    async def _taint(self, node_name: str) -> None:
        for _ in range(20):  # conflicts: the kubelet and others write the Node too
            try:
                node = await self.kube.get(NODES, node_name)
                taints = list((node.get("spec") or {}).get("taints") or [])
                if any(t.get("key") == DISRUPTED_TAINT for t in taints):
                    return
                await self.kube.patch(
                    NODES,
                    node_name,
                    {
                        "spec": {"taints": [*taints, dict(DISRUPTED_NO_SCHEDULE)]},
                        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    },
                )
                return
            except KubeApiError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
        raise RuntimeError(f"could not taint node {node_name}: it keeps changing")

    async def _append_drained(
        self, claim: NodeClaim, node_name: str | None, evicted: list[str], expired: bool
    ) -> None:
        event = ev.NodeClaimDrained(
            id=derive_id(PRODUCER, "NodeClaimDrained", claim.name),
            decided_at=datetime.now(UTC),
            producer=PRODUCER,
            causation_id=claim.disruption.id if claim.disruption else None,
            correlation_id=claim.name,
            nodeclaim=claim.name,
            node=node_name,
            evicted=tuple(evicted),
            grace_period_expired=expired,
        )
        await claims.record(self.log, claim, lambda current: None if current.drained is not None else event)

    async def _delete_node(self, node_name: str) -> None:
        try:
            await self.kube.delete(NODES, node_name)
            node = await self.kube.get_or_none(NODES, node_name)
            if node is not None:
                finalizers = [
                    f for f in node["metadata"].get("finalizers") or [] if f != TERMINATION_FINALIZER
                ]
                await self.kube.patch(NODES, node_name, {"metadata": {"finalizers": finalizers}})
        except KubeApiError as exc:
            if exc.status != 404:
                raise


async def remove_stale_taints(
    kube: Kube, projection: ClusterProjection, busy: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """Nodes left with the disrupted taint by a termination that will not finish, or by a command that was
    abandoned (its claim is neither being disrupted nor a candidate of a command under way, ``busy``):
    untaint them so they are usable again."""
    disrupting = {
        c.registered.node
        for c in projection.claims.values()
        if c.registered and (c.disruption or c.name in busy) and not c.terminated
    }
    cleaned = []
    for name, node in projection.nodes.items():
        taints: list[dict[str, Any]] = (node.get("spec") or {}).get("taints") or []
        if name in disrupting or not any(t.get("key") == DISRUPTED_TAINT for t in taints):
            continue
        kept = [t for t in taints if t.get("key") != DISRUPTED_TAINT]
        try:
            await kube.patch(NODES, name, {"spec": {"taints": kept}})
            cleaned.append(name)
        except KubeApiError as exc:
            log.warning("could not remove a stale disrupted taint", extra={"node": name, "error": str(exc)})
    return cleaned
