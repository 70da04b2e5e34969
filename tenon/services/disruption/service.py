"""The disruption service: its decider (:mod:`.decider`), its executor (below) and its settings.

The runtime follows the log and ticks; the decider chooses which claims to disrupt. The executor does the
rest:

* every claim with ``DisruptionRequested`` and no ``NodeClaimTerminated`` has a termination task
  (:mod:`.termination`: taint, drain through the Eviction API, ``NodeClaimDrained``, delete the Node); after a
  restart the rebuilt state shows which were under way, and they resume. An interrupted machine's drain
  respects PodDisruptionBudgets until the notice's deadline, no longer;
* a user's ``kubectl delete nodeclaim`` (a deletion timestamp held by tenon's finalizer) is watched here,
  since it
  is not in the log, and submitted as ``DisruptionRequested`` with method ``delete``;
* nodes left with the disrupted taint by a termination that will not finish are untainted at start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.runtime.decider import BaseExecutor, Decider, DeciderRuntime, Executor
from tenon.runtime.kube import NODECLAIMS, Kube, KubeApiError, Relisted, WatchChange, list_and_watch
from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.events import post_event
from tenon.runtime.service import (
    CommonSettings,
    ServiceContext,
    ServiceDefinition,
    decider_work,
    in_cluster_or,
)
from tenon.runtime.settings import setting
from tenon.runtime.tasks import cancel_and_wait
from tenon.services.disruption.decider import DisruptionDecider, request
from tenon.services.disruption.due import due_index
from tenon.services.disruption.projection_view import DisruptionState
from tenon.services.disruption.queue import QUEUED_METHOD
from tenon.services.disruption.termination import Terminator, remove_stale_taints

log = logging.getLogger("tenon.disruption")


@dataclass(frozen=True)
class DisruptionSettings(CommonSettings):
    kubeconfig: str | None = setting(
        "TENON_KUBECONFIG", None, "the workload cluster's kubeconfig (default: in-cluster)", kind="path"
    )
    tick: float = setting(
        "TENON_DISRUPTION_TICK",
        1.0,
        "how often the disruption methods look for candidates",
        kind="duration",
        minimum=0.05,
    )
    settle: float = setting(
        "TENON_DISRUPTION_SETTLE",
        15.0,
        "how long a proposed consolidation waits before it is judged again and acted on (Karpenter: 15s)",
        kind="duration",
        minimum=0,
    )


def make_decider(settings: DisruptionSettings) -> DisruptionDecider:
    return DisruptionDecider(settle=timedelta(seconds=settings.settle))


class DisruptionExecutor(BaseExecutor):
    def __init__(self, kube: Kube, *, poll_seconds: float = 0.2, max_backoff: float = 5.0) -> None:
        self.kube = kube
        self.runtime: DeciderRuntime[DisruptionState] | None = None
        self.terminator: Terminator | None = None
        self.poll_seconds = poll_seconds
        self.max_backoff = max_backoff
        self.terminations: dict[str, asyncio.Task[None]] = {}
        self._explaining: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self.drift_marked: dict[str, str] = {}

    @property
    def state(self) -> DisruptionState:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.state

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        self.runtime = runtime
        self.terminator = Terminator(
            self.kube,
            runtime.event_log,
            lambda: self.state.projection,
            poll_seconds=self.poll_seconds,
            max_backoff=self.max_backoff,
            deadline_of=lambda claim: self.state.interruptions.deadline_of(claim),
        )
        cleaned = await remove_stale_taints(self.kube, self.state.projection, self.state.busy())
        if cleaned:
            log.info("removed stale disrupted taints", extra={"nodes": cleaned})
        for name, claim in self.state.projection.claims.items():
            if claim.disruption is not None and claim.terminated is None:
                self._ensure_termination(name)
        self._watch = asyncio.create_task(self._watch_user_deletes(), name="disruption:user-deletes")

    async def stop(self) -> None:
        tasks = [t for t in (self._watch, *self.terminations.values(), *self._explaining) if t is not None]
        await cancel_and_wait(tasks)

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        if isinstance(decision, ev.DisruptionDecision):
            log.info(
                "disruption decision",
                extra={
                    "method": decision.method,
                    "candidates": [c.nodeclaim for c in decision.candidates],
                    "blocked": {b.nodeclaim: b.blocked_by for b in decision.blocked},
                    "budget": decision.budget,
                },
            )
        if isinstance(decision, ev.DisruptionDecision):
            await self._command_moved(decision)
        if isinstance(decision, ev.DisruptionRequested):
            self._ensure_termination(decision.nodeclaim)
            # the Event explains, it decides nothing: off the decision path
            self._background(self._explain_request(decision))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._explaining.add(task)
        task.add_done_callback(self._explaining.discard)

    async def _explain_request(self, decision: ev.DisruptionRequested) -> None:
        try:
            obj = await self.kube.get_or_none(NODECLAIMS, decision.nodeclaim)
            if obj is not None:
                suffix = f" (decision {decision.decision_id})" if decision.decision_id else ""
                message = f"{decision.method}: {decision.reason}{suffix}"
                await post_event(self.kube, obj, reason="DisruptionRequested", message=message)
        except KubeApiError as exc:
            log.warning(
                "could not post the DisruptionRequested Event",
                extra={"nodeclaim": decision.nodeclaim, "error": str(exc)},
            )

    async def _command_moved(self, decision: ev.DisruptionDecision) -> None:
        """Confirmed: the candidates are tainted before anything is launched or drained (Karpenter's queue),
        except an emptiness queue's, which wait their turn untainted (a pod may still use them meanwhile;
        each is tainted as its drain begins, and dropped from the queue if it is no longer empty by then);
        abandoned: the taint goes (unless the node is being disrupted anyway)."""
        assert self.terminator is not None
        try:
            if decision.stage == "confirmed" and not (
                decision.method == QUEUED_METHOD and not decision.replacements
            ):
                for candidate in decision.candidates:
                    if candidate.node:
                        await self.terminator.taint(candidate.node)
            elif decision.stage == "abandoned":
                await remove_stale_taints(self.kube, self.state.projection, self.state.busy())
        except KubeApiError as exc:  # level-triggered: the tick's stale-taint pass and the drain taint again
            log.warning(
                "could not update the disrupted taint", extra={"command": decision.command, "error": str(exc)}
            )

    async def ticked(self, now: datetime) -> None:
        """Keep the Drifted condition on drifted claims' NodeClaim objects (once per claim and reason). The
        drift of each claim is kept as events fold (:mod:`.due`), not judged again over the cluster every
        tick; it is read under the runtime's lock (a decision in a worker thread may be bringing it up to
        date)."""
        assert self.runtime is not None
        try:
            async with self.runtime.lock:
                drifted = due_index(self.state).drifted(self.state)
        except Exception as exc:  # the condition is a view for people; decisions do not depend on it
            log.warning("could not judge drift for the Drifted condition", extra={"error": str(exc)})
            return
        for name, (reason, detail) in drifted.items():
            if self.drift_marked.get(name) == reason:
                continue
            try:
                await mark_drifted(self.kube, name, reason, detail, now)
                self.drift_marked[name] = reason
            except KubeApiError as exc:
                log.warning("could not set Drifted", extra={"nodeclaim": name, "error": str(exc)})

    async def observed(self, event: ev.Event) -> None:
        if isinstance(event, ev.DisruptionRequested):
            self._ensure_termination(event.nodeclaim)

    def _ensure_termination(self, name: str) -> None:
        task = self.terminations.get(name)
        if task is not None and not task.done():
            return
        claim = self.state.projection.claims.get(name)
        if claim is None or claim.terminated is not None or claim.disruption is None:
            return
        self.terminations[name] = asyncio.create_task(self._terminate(name), name=f"terminate:{name}")

    async def _terminate(self, name: str) -> None:
        assert self.terminator is not None
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

    async def _watch_user_deletes(self) -> None:
        async for change in list_and_watch(self.kube, NODECLAIMS):
            if isinstance(change, WatchChange) and change.type == "DELETED":
                continue
            objects = change.items if isinstance(change, Relisted) else [change.object]
            for obj in objects:
                await self._nodeclaim_deleted(obj)

    async def _nodeclaim_deleted(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        claim = self.state.projection.claims.get(str(meta.get("name")))
        if not meta.get("deletionTimestamp") or claim is None or claim.disruption is not None or claim.ended:
            return
        assert self.runtime is not None
        decision = request(
            claim.name,
            method="delete",
            reason="NodeClaim deleted by a user",
            at=datetime.now(UTC),
            node=claim.node_name,
        )
        try:
            await self.runtime.submit([decision])
        except Exception as exc:  # the watch goes on; the next event on this NodeClaim tries again
            log.warning(
                "could not request the termination of a deleted NodeClaim",
                extra={"nodeclaim": claim.name, "error": str(exc)},
            )
            return
        log.info("NodeClaim deleted by a user: terminating it", extra={"nodeclaim": claim.name})


async def mark_drifted(kube: Kube, name: str, reason: str, detail: str, now: datetime) -> None:
    """``Drifted=True`` with the reason on the NodeClaim object, other conditions kept (read, then written on
    the version read)."""
    obj = await kube.get_or_none(NODECLAIMS, name)
    if obj is None:
        return
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != "Drifted"]
    conditions.append(
        {
            "type": "Drifted",
            "status": "True",
            "reason": reason,
            "message": detail,
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    patch = {
        "metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")},
        "status": {"conditions": conditions},
    }
    await kube.patch(NODECLAIMS, name, patch, subresource="status")


async def make_executor(
    ctx: ServiceContext, settings: DisruptionSettings, decider: Decider[Any]
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    kube = await load_kube(settings.kubeconfig, component=registry.DISRUPTION)
    return DisruptionExecutor(kube), kube.close


SERVICE = ServiceDefinition(
    name=registry.DISRUPTION,
    description=(
        "Remove, replace and consolidate nodes within budgets (emptiness, drift, expiration, consolidation);"
        " drain every node that goes, respecting PDBs."
    ),
    settings=DisruptionSettings,
    work=decider_work(make_decider, make_executor, lambda s: s.tick),
    decider=make_decider,
    preflight=lambda settings: in_cluster_or(settings.kubeconfig),
)
