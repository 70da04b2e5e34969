"""The scheduler service: the decider with I/O around it.

As leader of the ``scheduler`` group it:

1. **Rebuilds** the projection from the log up to what its consumer has handled, plus its own decisions
   (:mod:`shared.rebuild`): what it had not finished is left for the consumer, so it is decided, not skipped.
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
from services.scheduler import lifecycle
from services.scheduler.decider import SchedulerDecider
from services.scheduler.nodeclaims import nodeclaim_spec, nodeclaim_status
from services.scheduler.nodepools import nodepool_status
from shared.eventlog import ConcurrencyConflict, ConsumerSettings, LogRecord, TransientError
from shared.explain import LoggedEvent, explain_nodeclaim, nodeclaim_event_message
from shared.kube import NODECLAIMS, NODEPOOLS, NODES, Kube, KubeApiError
from shared.kube.client import load_kube
from shared.kube.events import post_event
from shared.projection import ClusterProjection
from shared.rebuild import rebuild_projection
from shared.service import ServiceContext

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

    async def rebuild(self) -> None:
        self._prefolded = await rebuild_projection(self.log, self.projection, durable="scheduler", producer="scheduler")

    async def run(self) -> None:
        await self.rebuild()
        runner = self.log.consumer(
            ConsumerSettings("scheduler", (subjects.ALL_EVENTS,), max_concurrency=1, max_deliver=8,
                             backoff=(0.2, 0.5, 1.0, 2.0, 5.0)),
            self.handle,
        )
        await runner.start()
        ticker = asyncio.create_task(self._tick_forever())
        try:
            await self.ctx.stopping.wait()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            await runner.stop()

    async def handle(self, record: LogRecord) -> None:
        if record.sequence <= self.projection.sequence:
            return  # handled before the rebuild: folded then
        event = record.decode()
        decisions = self.decider.decide(self.projection, event)
        started = time.perf_counter()
        for decision in decisions:
            await self.execute(decision, event)
        if decisions:
            log.info(
                "decided",
                extra={"input": type(event).__name__, "input_sequence": record.sequence,
                       "decisions": [type(d).__name__ for d in decisions],
                       "ms": round((time.perf_counter() - started) * 1000)},
            )
        if event.id in self._prefolded:
            self._prefolded.discard(event.id)  # our own decision, folded at the rebuild
        else:
            self.projection.apply(event, record.sequence)
        if isinstance(event, ev.NodeClaimEvent) and not isinstance(event, ev.NodeClaimPlanned):
            await self.sync_nodeclaim(event.nodeclaim)
        if isinstance(event, ev.NodePoolsSnapshot):
            await self.sync_nodepools()

    async def execute(self, decision: ev.Event, cause: ev.Event | None = None) -> None:
        if isinstance(decision, ev.NodeClaimPlanned):
            await self._append(decision, expected=0, first=True)
            claim = self.projection.claim(decision.nodeclaim)
            if claim.planned is None:
                claim.planned = decision  # planned before, by an earlier delivery: the object may still be due
            await self._create_nodeclaim(decision.nodeclaim, cause)
            log.info(
                "claim planned",
                extra={"nodeclaim": decision.nodeclaim, "instance_type": decision.choice.instance_type,
                       "price_per_hour": decision.choice.price_per_hour, "pods": len(decision.pods),
                       "why": decision.explanation.get("chosen", "")},
            )
        elif isinstance(decision, ev.BatchPlanned):
            await self.log.publish(subjects.BATCH_DECISIONS, decision)
            for pod in decision.unschedulable:
                log.warning("pod cannot run", extra={"pod": pod.pod, "reason": pod.reason})
        elif isinstance(decision, ev.NodeClaimRegistered):
            claim = self.projection.claims[decision.nodeclaim]
            node = self.projection.nodes.get(decision.node)
            if isinstance(cause, ev.NodeObserved):
                node = cause.node  # newer than the projection, which folds the cause after deciding
            if node is not None:
                patch = lifecycle.registration_patch(claim, node)
                if patch:
                    await self._patch_node(decision.node, patch)
            await self._append(decision, expected=claim.last_sequence)
        elif isinstance(decision, ev.NodeClaimInitialized):
            await self._patch_node(decision.node, {"metadata": {"labels": {"karpenter.sh/initialized": "true"}}})
            await self._append(decision, expected=self.projection.claims[decision.nodeclaim].last_sequence)
        elif isinstance(decision, ev.NodeClaimEvent):
            await self._append(decision, expected=self.projection.claims[decision.nodeclaim].last_sequence)
        else:
            raise TypeError(f"the scheduler has no way to carry out a {type(decision).__name__}")

    async def _append(self, event: ev.NodeClaimEvent, *, expected: int, first: bool = False) -> None:
        subject = subjects.nodeclaim(event.nodeclaim)
        try:
            result = await self.log.append(subject, event, expected_last_sequence=expected)
        except ConcurrencyConflict as conflict:
            if first:
                # the claim's subject already has its first event: this batch was answered before (a
                # redelivery past the duplicate window); never plan a claim twice
                log.info("claim already planned", extra={"nodeclaim": event.nodeclaim})
                return
            raise TransientError(str(conflict)) from None
        if result.duplicate:
            log.info("duplicate suppressed", extra={"nodeclaim": event.nodeclaim, "event": type(event).__name__})
        # Fold our own decision now rather than when the log delivers it back: the next input must see it
        # (a Node event right behind the one that registered the claim must not register it again). Replay
        # does the same with the recorded answers, so live and replayed decisions see the same state.
        self.projection.apply(event)
        claim = self.projection.claim(event.nodeclaim)
        claim.last_sequence = max(claim.last_sequence, result.sequence)

    async def _patch_node(self, name: str, patch: dict[str, Any]) -> None:
        try:
            await self.kube.patch(NODES, name, patch)
        except KubeApiError as exc:
            if exc.status == 404:
                return
            raise TransientError(str(exc)) from None

    async def _create_nodeclaim(self, name: str, cause: ev.Event | None = None) -> None:
        claim = self.projection.claims[name]
        body = nodeclaim_spec(self.projection, claim)
        try:
            created = await self.kube.create(NODECLAIMS, body)
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning("could not create NodeClaim object", extra={"nodeclaim": name, "error": str(exc)})
            return  # 409: created before this redelivery, its Event with it
        await self._write_status(name)
        if claim.planned is not None:
            now = datetime.now(UTC)
            story = [LoggedEvent(0, now, e) for e in (cause, claim.planned) if e is not None]
            message = nodeclaim_event_message(explain_nodeclaim(name, story))
            await post_event(self.kube, created, reason="Planned", message=message)

    async def sync_nodeclaim(self, name: str) -> None:
        claim = self.projection.claims.get(name)
        if claim is None or claim.planned is None:
            return
        if claim.phase in ("Abandoned", "Terminated", "Failed"):
            try:
                if await self.kube.get_or_none(NODECLAIMS, name) is not None:
                    await self.kube.patch(NODECLAIMS, name, {"metadata": {"finalizers": []}})
                    await self.kube.delete(NODECLAIMS, name)
            except KubeApiError as exc:
                log.warning("could not delete NodeClaim object", extra={"nodeclaim": name, "error": str(exc)})
            return
        await self._write_status(name)

    async def _write_status(self, name: str) -> None:
        claim = self.projection.claims[name]
        try:
            await self.kube.patch(
                NODECLAIMS, name, {"status": nodeclaim_status(self.projection, claim)}, subresource="status"
            )
        except KubeApiError as exc:
            if exc.status == 404:
                await self._recreate(name)
                return
            log.warning("could not update NodeClaim status", extra={"nodeclaim": name, "error": str(exc)})

    async def _recreate(self, name: str) -> None:
        claim = self.projection.claims[name]
        try:
            await self.kube.create(NODECLAIMS, nodeclaim_spec(self.projection, claim))
            await self.kube.patch(
                NODECLAIMS, name, {"status": nodeclaim_status(self.projection, claim)}, subresource="status"
            )
        except KubeApiError as exc:
            log.warning("could not recreate NodeClaim object", extra={"nodeclaim": name, "error": str(exc)})

    async def sync_nodepools(self) -> None:
        now = datetime.now(UTC)
        for name in list(self.projection.nodepools):
            status = nodepool_status(self.projection, name, now)
            comparable = {"resources": status["resources"],
                          "conditions": [(c["type"], c["status"], c["message"]) for c in status["conditions"]]}
            if self._nodepool_status.get(name) == comparable:
                continue
            try:
                await self.kube.patch(NODEPOOLS, name, {"status": status}, subresource="status")
            except KubeApiError as exc:
                log.warning("could not update NodePool status", extra={"nodepool": name, "error": str(exc)})
                continue
            self._nodepool_status[name] = comparable
            problem = next((c["message"] for c in status["conditions"] if c["type"] == "ValidationSucceeded"
                            and c["status"] == "False"), None)
            if problem:
                log.warning("NodePool invalid, left out of scheduling", extra={"nodepool": name, "reason": problem})

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
            self.projection, now, launch_timeout=self.launch_timeout,
            registration_timeout=self.registration_timeout,
        ):
            log.warning("claim abandoned", extra={"nodeclaim": abandoned.nodeclaim, "reason": abandoned.reason})
            try:
                await self._append(abandoned, expected=self.projection.claims[abandoned.nodeclaim].last_sequence)
            except TransientError:
                continue  # the claim moved on meanwhile; look again next tick
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
