"""The scheduler service: the decider with I/O around it.

As leader of the ``scheduler`` group it:

1. **Rebuilds** the projection from the log up to what its consumer has handled, plus its own decisions
   (:mod:`tenon.runtime.rebuild`): what it had not finished is left for the consumer, so it is decided, not skipped.
2. **Follows** the log with the durable consumer ``scheduler`` (one message at a time: the projection is a fold
   in log order, and a decision must see everything before its input). For each input it asks the decider (:mod:`.decider`) what to do, carries it
   out, and only then folds the input, so a failure leaves nothing half-applied and the redelivery decides again:
   * ``NodeClaimPlanned``: appended as the first event of the claim's subject (expected sequence 0, so a
     redelivered batch cannot plan the same claim twice), then the ``karpenter.sh/v1`` NodeClaim is created;
   * ``BatchPlanned``: published;
   * ``NodeClaimRegistered``: the Node gets the NodePool's labels and taints and loses
     ``karpenter.sh/unregistered``, then the event is appended with the claim's last sequence;
   * ``NodeClaimInitialized`` / ``NodeClaimAbandoned``: appended likewise.
   After each claim event the NodeClaim object's status is brought up to date.
3. **Ticks** every few seconds: claims that timed out are abandoned, NodePool status (resources in use,
   ``ValidationSucceeded``) is written when it changed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto import subjects
from tenon.core.wellknown import INITIALIZED
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, LogRecord, TransientError
from tenon.runtime.kube import NODEPOOLS, NODES, Kube, KubeApiError
from tenon.runtime.kube.client import load_kube
from tenon.runtime.rebuild import rebuild_projection
from tenon.runtime.service import ServiceContext
from tenon.services.scheduler import lifecycle
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.nodepools import nodepool_status
from tenon.services.scheduler.objects import NodeClaimObjects

log = logging.getLogger("tenon.scheduler")


class SchedulerService:
    def __init__(
        self,
        ctx: ServiceContext,
        kube: Kube,
        *,
        launch_timeout: timedelta = lifecycle.LAUNCH_TIMEOUT,
        registration_timeout: timedelta = lifecycle.REGISTRATION_TIMEOUT,
        tick_seconds: float = 2.0,
    ) -> None:
        self.ctx = ctx
        self.log = ctx.event_log
        self.kube = kube
        self.decider = SchedulerDecider()
        self.projection = ClusterProjection()
        self.launch_timeout = launch_timeout
        self.registration_timeout = registration_timeout
        self.tick_seconds = tick_seconds
        self._nodepool_status: dict[str, Any] = {}
        self._prefolded: set[str] = set()
        self._handled_floor = 0
        self.objects = NodeClaimObjects(kube, self.projection)

    async def rebuild(self) -> None:
        self._prefolded = await rebuild_projection(
            self.log, self.projection, durable="scheduler", producer="scheduler"
        )
        self._handled_floor = self.projection.sequence

    async def run(self) -> None:
        await self.rebuild()
        runner = self.log.consumer(
            ConsumerSettings(
                "scheduler",
                (subjects.ALL_EVENTS,),
                max_concurrency=1,
                max_deliver=8,
                backoff=(0.2, 0.5, 1.0, 2.0, 5.0),
            ),
            self.handle,
        )
        await runner.start()
        ticker = asyncio.create_task(self._tick_forever())
        await self.objects.start()
        for name in self.projection.claims:
            self.objects.sync(name)  # whatever changed while no scheduler ran
        try:
            await self.ctx.stopping.wait()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            await runner.stop()
            await self.objects.stop()

    async def handle(self, record: LogRecord) -> None:
        event = record.decode()
        if record.sequence > self.projection.sequence:
            if event.id in self._prefolded:
                self._prefolded.discard(event.id)  # our own decision, folded at the rebuild
                self.projection.sequence = max(self.projection.sequence, record.sequence)
            else:
                self.projection.apply(event, record.sequence)
        elif event.id not in self._prefolded and record.sequence <= self._handled_floor:
            return  # handled before the rebuild
        # decide on the state with the event in it; a redelivery (after a failure) decides again, and since
        # decisions are level-triggered and idempotent, that is safe
        decisions = self.decider.decide(self.projection, event)
        started = time.perf_counter()
        # a plan's claims are independent aggregates: record them together, then the rest in order
        planned = [d for d in decisions if isinstance(d, ev.NodeClaimPlanned)]
        await asyncio.gather(*(self.execute(d, event) for d in planned))
        for decision in decisions:
            if not isinstance(decision, ev.NodeClaimPlanned):
                await self.execute(decision, event)
        if decisions:
            log.info(
                "decided",
                extra={
                    "input": type(event).__name__,
                    "input_sequence": record.sequence,
                    "decisions": [type(d).__name__ for d in decisions],
                    "ms": round((time.perf_counter() - started) * 1000),
                },
            )
        if isinstance(event, ev.NodeClaimEvent):
            self.objects.sync(event.nodeclaim)
        if isinstance(event, ev.NodePoolsSnapshot):
            await self.sync_nodepools()

    async def execute(self, decision: ev.Event, cause: ev.Event | None = None) -> None:
        if isinstance(decision, ev.NodeClaimPlanned):
            if await self._append(decision, expected=0):
                self.objects.sync(decision.nodeclaim, cause=cause)
                log.info(
                    "claim planned",
                    extra={
                        "nodeclaim": decision.nodeclaim,
                        "instance_type": decision.choice.instance_type,
                        "price_per_hour": decision.choice.price_per_hour,
                        "pods": len(decision.pods),
                        "why": decision.explanation.get("chosen", ""),
                    },
                )
        elif isinstance(decision, ev.BatchPlanned):
            await self.log.publish(subjects.BATCH_DECISIONS, decision)
            for pod in decision.unschedulable:
                log.warning("pod cannot run", extra={"pod": pod.pod, "reason": pod.reason})
        elif isinstance(decision, ev.NodeClaimRegistered):
            claim = self.projection.claims[decision.nodeclaim]
            node = self.projection.nodes.get(decision.node)
            if node is not None:
                patch = lifecycle.registration_patch(claim, node)
                if patch:
                    await self._patch_node(decision.node, patch)
            await self._append(decision, expected=claim.last_sequence)
        elif isinstance(decision, ev.NodeClaimInitialized):
            await self._patch_node(decision.node, {"metadata": {"labels": {INITIALIZED: "true"}}})
            await self._append(decision, expected=self.projection.claims[decision.nodeclaim].last_sequence)
        elif isinstance(decision, ev.NodeClaimEvent):
            await self._append(decision, expected=self.projection.claims[decision.nodeclaim].last_sequence)
        else:
            raise TypeError(f"the scheduler has no way to carry out a {type(decision).__name__}")

    async def _append(self, event: ev.NodeClaimEvent, *, expected: int) -> bool:
        """Record a decision on its claim and fold it; False when the claim's subject moved on first."""
        subject = subjects.nodeclaim(event.nodeclaim)
        try:
            result = await self.log.append(subject, event, expected_last_sequence=expected)
        except ConcurrencyConflict as conflict:
            # Someone wrote to the claim after what this scheduler has folded (the launcher, disruption), or
            # this decision was recorded by an earlier delivery. Either way: not now. Decisions are
            # level-triggered, so when that event is folded the claim is looked at again.
            log.info(
                "decision deferred: the claim moved on",
                extra={"nodeclaim": event.nodeclaim, "event": type(event).__name__, "why": str(conflict)},
            )
            return False
        if result.duplicate:
            log.info(
                "duplicate suppressed", extra={"nodeclaim": event.nodeclaim, "event": type(event).__name__}
            )
        # Fold our own decision now rather than when the log delivers it back: the next input must see it
        # (a Node event right behind the one that registered the claim must not register it again). Replay
        # does the same with the recorded answers, so live and replayed decisions see the same state.
        self.projection.apply(event)
        claim = self.projection.claim(event.nodeclaim)
        claim.last_sequence = max(claim.last_sequence, result.sequence)
        return True

    async def _patch_node(self, name: str, patch: dict[str, Any]) -> None:
        try:
            await self.kube.patch(NODES, name, patch)
        except KubeApiError as exc:
            if exc.status == 404:
                return
            raise TransientError(str(exc)) from None

    async def sync_nodepools(self) -> None:
        now = datetime.now(UTC)
        for name in list(self.projection.nodepools):
            status = nodepool_status(self.projection, name, now)
            comparable = {
                "resources": status["resources"],
                "conditions": [(c["type"], c["status"], c["message"]) for c in status["conditions"]],
            }
            if self._nodepool_status.get(name) == comparable:
                continue
            try:
                await self.kube.patch(NODEPOOLS, name, {"status": status}, subresource="status")
            except KubeApiError as exc:
                log.warning("could not update NodePool status", extra={"nodepool": name, "error": str(exc)})
                continue
            self._nodepool_status[name] = comparable
            problem = next(
                (
                    c["message"]
                    for c in status["conditions"]
                    if c["type"] == "ValidationSucceeded" and c["status"] == "False"
                ),
                None,
            )
            if problem:
                log.warning(
                    "NodePool invalid, left out of scheduling", extra={"nodepool": name, "reason": problem}
                )

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                await self.tick()
            except Exception as exc:  # a tick must never kill the service; the next one tries again
                log.warning("tick failed", extra={"error": str(exc)})

    async def tick(self) -> None:
        now = datetime.now(UTC)
        for abandoned in lifecycle.expired_claims(
            self.projection,
            now,
            launch_timeout=self.launch_timeout,
            registration_timeout=self.registration_timeout,
        ):
            log.warning(
                "claim abandoned", extra={"nodeclaim": abandoned.nodeclaim, "reason": abandoned.reason}
            )
            if await self._append(
                abandoned, expected=self.projection.claims[abandoned.nodeclaim].last_sequence
            ):
                self.objects.sync(abandoned.nodeclaim)
        await self.sync_nodepools()


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


async def work(ctx: ServiceContext, kubeconfig: str | None = None) -> None:
    kube = await load_kube(kubeconfig or os.environ.get("TENON_KUBECONFIG"))
    try:
        service = SchedulerService(
            ctx,
            kube,
            launch_timeout=timedelta(seconds=_seconds("TENON_LAUNCH_TIMEOUT_SECONDS", 300)),
            registration_timeout=timedelta(seconds=_seconds("TENON_REGISTRATION_TIMEOUT_SECONDS", 900)),
            tick_seconds=_seconds("TENON_TICK_SECONDS", 2.0),
        )
        await service.run()
    finally:
        await kube.close()
