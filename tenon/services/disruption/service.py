"""The disruption service: decides which nodes go (emptiness, for now) and terminates them.

As leader of the ``disruption`` group it rebuilds the cluster projection from the log, then follows the log with
the durable consumer ``disruption`` (sequential, like the scheduler: decisions see the log in order). Then:

* every ``tick_seconds`` it asks :mod:`.emptiness` what to do now; a ``DisruptionDecision`` is published (once
  per distinct content) and each chosen claim gets ``DisruptionRequested`` on its subject;
* every claim with ``DisruptionRequested`` and no ``NodeClaimTerminated`` has a termination task
  (:mod:`.termination`); after a restart the rebuilt projection shows which were under way, and they resume;
* a user's ``kubectl delete nodeclaim`` (a deletion timestamp held by tenon's finalizer) or ``kubectl delete
  node`` becomes ``DisruptionRequested`` with method ``delete``, so it takes the same graceful path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import UTC, datetime

from proto import events as ev
from proto import subjects
from proto.ids import derive_id
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, LogRecord
from tenon.runtime.kube import NODECLAIMS, Kube, Relisted, WatchChange, list_and_watch
from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.events import post_event
from tenon.runtime.rebuild import rebuild_projection
from tenon.runtime.service import ServiceContext
from tenon.services.disruption import emptiness
from tenon.services.disruption.termination import Terminator, remove_stale_taints

log = logging.getLogger("tenon.disruption")


class DisruptionService:
    def __init__(self, ctx: ServiceContext, kube: Kube, *, tick_seconds: float = 1.0) -> None:
        self.ctx = ctx
        self.log = ctx.event_log
        self.kube = kube
        self.tick_seconds = tick_seconds
        self.projection = ClusterProjection()
        self.terminator = Terminator(kube, ctx.event_log, self.projection)
        self.terminations: dict[str, asyncio.Task[None]] = {}
        self._published: set[str] = set()
        self._prefolded: set[str] = set()

    async def rebuild(self) -> None:
        self._prefolded = await rebuild_projection(
            self.log, self.projection, durable="disruption", producer="disruption"
        )

    async def run(self) -> None:
        await self.rebuild()
        cleaned = await remove_stale_taints(self.kube, self.projection)
        if cleaned:
            log.info("removed stale disrupted taints", extra={"nodes": cleaned})
        for name, claim in self.projection.claims.items():
            if claim.disruption is not None and claim.terminated is None:
                self._ensure_termination(name)
        runner = self.log.consumer(
            ConsumerSettings("disruption", (subjects.ALL_EVENTS,), max_concurrency=1, max_deliver=8),
            self.handle,
        )
        await runner.start()
        tasks = [asyncio.create_task(self._tick_forever()), asyncio.create_task(self._watch_user_deletes())]
        try:
            await self.ctx.stopping.wait()
        finally:
            for task in tasks + list(self.terminations.values()):
                task.cancel()
            await asyncio.gather(*tasks, *self.terminations.values(), return_exceptions=True)
            await runner.stop()

    async def handle(self, record: LogRecord) -> None:
        if record.sequence <= self.projection.sequence:
            return  # handled before the rebuild: folded then
        event = record.decode()
        if event.id in self._prefolded:
            self._prefolded.discard(event.id)  # our own, folded at the rebuild
        else:
            self.projection.apply(event, record.sequence)
        if isinstance(event, ev.DisruptionRequested):
            self._ensure_termination(event.nodeclaim)
        elif isinstance(event, ev.NodeObserved):
            await self._node_deleted_by_user(event)

    def _ensure_termination(self, name: str) -> None:
        task = self.terminations.get(name)
        if task is not None and not task.done():
            return
        claim = self.projection.claims.get(name)
        if claim is None or claim.terminated is not None:
            return
        self.terminations[name] = asyncio.create_task(self._terminate(name), name=f"terminate:{name}")

    async def _terminate(self, name: str) -> None:
        delay = 0.5
        while True:
            try:
                await self.terminator.terminate(name)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep going: a node must not stay half-terminated
                log.warning("termination step failed, retrying", extra={"nodeclaim": name, "error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _request(
        self, name: str, method: str, reason: str, decision_id: str | None = None, node: str | None = None
    ) -> bool:
        claim = self.projection.claims.get(name)
        if claim is None or claim.disruption is not None or claim.terminated is not None:
            return False
        event = ev.DisruptionRequested(
            id=derive_id("disruption", "DisruptionRequested", name),
            decided_at=datetime.now(UTC),
            producer="disruption",
            causation_id=decision_id,
            correlation_id=name,
            nodeclaim=name,
            method=method,
            reason=reason,
            node=node or (claim.registered.node if claim.registered else None),
            decision_id=decision_id,
        )
        try:
            await self.log.append(subjects.nodeclaim(name), event, expected_last_sequence=claim.last_sequence)
        except ConcurrencyConflict:
            return False  # the claim moved on; the next tick decides again with fresh state
        claim.disruption = event  # the consumer folds the same event again later (idempotent)
        self._ensure_termination(name)
        obj = await self.kube.get_or_none(NODECLAIMS, name)
        if obj is not None:
            await post_event(
                self.kube,
                obj,
                reason="DisruptionRequested",
                message=f"{method}: {reason}" + (f" (decision {decision_id})" if decision_id else ""),
            )
        return True

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                await self.tick()
            except Exception as exc:
                log.warning("disruption tick failed", extra={"error": str(exc)})

    async def tick(self, now: datetime | None = None) -> None:
        for event in emptiness.decide(self.projection, now or datetime.now(UTC)):
            if isinstance(event, ev.DisruptionDecision):
                if event.id in self._published:
                    continue
                await self.log.publish(subjects.DISRUPTION_DECISIONS, event)
                self._published.add(event.id)
                log.info(
                    "disruption decision",
                    extra={
                        "method": event.method,
                        "candidates": [c.nodeclaim for c in event.candidates],
                        "blocked": {b.nodeclaim: b.blocked_by for b in event.blocked},
                        "budget": event.budget,
                    },
                )
            elif isinstance(event, ev.DisruptionRequested):
                await self._request(
                    event.nodeclaim, event.method, event.reason, event.decision_id, event.node
                )

    async def _node_deleted_by_user(self, event: ev.NodeObserved) -> None:
        meta = event.node.get("metadata") or {}
        if event.change == "removed" or not meta.get("deletionTimestamp"):
            return
        for name, claim in self.projection.claims.items():
            if claim.registered and claim.registered.node == meta.get("name"):
                if await self._request(name, "delete", f"Node {meta.get('name')} deleted by a user"):
                    log.info("node deleted by a user: terminating its claim", extra={"nodeclaim": name})

    async def _watch_user_deletes(self) -> None:
        async for change in list_and_watch(self.kube, NODECLAIMS):
            objects = change.items if isinstance(change, Relisted) else [change.object]
            if isinstance(change, WatchChange) and change.type == "DELETED":
                continue
            for obj in objects:
                meta = obj.get("metadata") or {}
                if meta.get("deletionTimestamp") and meta.get("name") in self.projection.claims:
                    with contextlib.suppress(Exception):
                        if await self._request(meta["name"], "delete", "NodeClaim deleted by a user"):
                            log.info(
                                "NodeClaim deleted by a user: terminating it",
                                extra={"nodeclaim": meta["name"]},
                            )


async def work(ctx: ServiceContext, kubeconfig: str | None = None) -> None:
    kube = await load_kube(kubeconfig or os.environ.get("TENON_KUBECONFIG"))
    try:
        service = DisruptionService(
            ctx, kube, tick_seconds=float(os.environ.get("TENON_DISRUPTION_TICK_SECONDS", 1.0))
        )
        await service.run()
    finally:
        await kube.close()
