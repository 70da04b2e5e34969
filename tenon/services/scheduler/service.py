"""The scheduler service: its decider (:mod:`.decider`), its executor (below) and its settings.

The runtime (:mod:`tenon.runtime.decider`) rebuilds the projection, follows the log and records decisions;
this module adds what the decisions need around them in the workload cluster:

* before ``NodeClaimRegistered`` is recorded, the Node gets the NodePool's labels and taints and loses
  ``karpenter.sh/unregistered`` (:func:`.lifecycle.registration_patch`); before ``NodeClaimInitialized``, the
  label ``karpenter.sh/initialized`` (in the registration's own patch when both are decided together: one
  round trip to the API server, not two);
* after every claim event, the ``karpenter.sh/v1`` NodeClaim object is brought up to date, off the decision
  path
  (:mod:`.objects`);
* NodePool status (resources in use, ``ValidationSucceeded``) is written when a NodePools snapshot arrives
  and on
  every tick, when it changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.core.wellknown import INITIALIZED
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor, Decider, DeciderRuntime, Executor
from tenon.runtime.eventlog import TransientError
from tenon.runtime.kube import NODEPOOLS, NODES, PODS, Kube, KubeApiError
from tenon.runtime.kube.client import load_kube
from tenon.runtime.service import (
    CommonSettings,
    ServiceContext,
    ServiceDefinition,
    decider_work,
    in_cluster_or,
)
from tenon.runtime.settings import setting
from tenon.services.scheduler import lifecycle, nominations, reoffers
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.nodepools import nodepool_status
from tenon.services.scheduler.objects import NodeClaimObjects

log = logging.getLogger("tenon.scheduler")

REGISTRATION_ATTEMPTS = 5
"""Registration patches tried on one Node that keeps changing between the read and the write (409)."""

CONNECTIONS_KEPT_FROM_NOMINATIONS = 20
"""Of the client's connections to the API server, how many nominations leave to the other requests.

A wave of joining Nodes nominates a thousand pods at once, and every registration's Node patch comes after
its own claim's nominations: on a pool they fill, it waited for a connection behind every nomination sent
meanwhile (p90 0.62 s, up to 0.9 s, on the 1,000-pod e2e run), so the Nodes registered together at the end
of the wave. With these kept free, a Node patch goes out at once (p90 0.19 s with a pool of its own): each
Node registers when its own pods are nominated. ``Launched -> Registered`` p99 in six runs, each beside one
without: 0.96-1.57 s against 1.17-1.72 s, lower in every pair."""


@dataclass(frozen=True)
class SchedulerSettings(CommonSettings):
    kubeconfig: str | None = setting(
        "TENON_KUBECONFIG", None, "the workload cluster's kubeconfig (default: in-cluster)", kind="path"
    )
    launch_timeout: float = setting(
        "TENON_LAUNCH_TIMEOUT",
        300.0,
        "a claim not launched this long after it was planned is abandoned",
        kind="duration",
        minimum=1,
    )
    registration_timeout: float = setting(
        "TENON_REGISTRATION_TIMEOUT",
        900.0,
        "a launched claim whose node has not joined this long after it was planned is abandoned",
        kind="duration",
        minimum=1,
    )
    tick: float = setting(
        "TENON_SCHEDULER_TICK",
        2.0,
        "how often timeouts and NodePool status are checked",
        kind="duration",
        minimum=0.05,
    )


def make_decider(settings: SchedulerSettings) -> SchedulerDecider:
    return SchedulerDecider(
        launch_timeout=timedelta(seconds=settings.launch_timeout),
        registration_timeout=timedelta(seconds=settings.registration_timeout),
    )


class SchedulerExecutor(BaseExecutor):
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        pool = kube.api.configuration.connection_pool_maxsize
        self._nominating = asyncio.Semaphore(max(1, pool - CONNECTIONS_KEPT_FROM_NOMINATIONS))
        """Nominations in flight (:data:`CONNECTIONS_KEPT_FROM_NOMINATIONS`)."""
        self.runtime: DeciderRuntime[ClusterProjection] | None = None
        self.objects = NodeClaimObjects(kube, lambda: self.state)
        self._nodepool_status: dict[str, Any] = {}
        self._labelled_initialized: set[str] = set()
        """Nodes whose registration patch carried the initialized label (their Initialized needs no patch)."""
        self._nominated: dict[str, str] = {}
        """Pod key -> the Node this term nominated it to, while it waits (:mod:`.nominations`)."""

    @property
    def state(self) -> ClusterProjection:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.state

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        self.runtime = runtime
        await self.objects.start()
        for name in self.state.claims:
            self.objects.sync(name)  # whatever changed while no scheduler ran
        await self.sync_nodepools()

    async def stop(self) -> None:
        await self.objects.stop()

    async def prepare(self, decision: ev.Event) -> bool:
        with self.objects.giving_way():
            return await self._prepare(decision)

    async def _prepare(self, decision: ev.Event) -> bool:
        if isinstance(decision, ev.NodeClaimRegistered):
            claim = self.state.claims.get(decision.nodeclaim)
            node = self.state.nodes.get(decision.node)
            initialized = bool(
                claim and node and lifecycle.is_initialized(claim, lifecycle.as_registered(claim, node))
            )
            if claim is not None:
                await self._nominate(claim, decision.node)
            # the Node as last observed: a joining Node changes while its pods are nominated (it turns Ready,
            # loses its not-ready taint), and a patch on the version the decision saw was refused, then read
            # and sent again, for most of the 1,000-pod run's registrations
            node = self._as_observed_now(decision, node)
            if claim is None or node is None:
                return True
            initialized = initialized or lifecycle.is_initialized(claim, lifecycle.as_registered(claim, node))
            return await self._register_node(claim, decision, node, initialized)
        elif isinstance(decision, ev.NodeClaimInitialized):
            claim = self.state.claims.get(decision.nodeclaim)
            if claim is None or claim.registered is None or claim.registered.node != decision.node:
                return False  # its registration was dropped: both are decided again
            if decision.node not in self._labelled_initialized:
                await self._patch_node(decision.node, {"metadata": {"labels": {INITIALIZED: "true"}}})
            self._labelled_initialized.discard(decision.node)
        return True

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        if isinstance(decision, ev.NodeClaimPlanned):
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
        if isinstance(decision, ev.NodeClaimAbandoned):
            log.warning("claim abandoned", extra={"nodeclaim": decision.nodeclaim, "reason": decision.reason})
        if isinstance(decision, ev.NodeClaimEvent):
            self.objects.sync(decision.nodeclaim, cause=cause)
        if isinstance(decision, ev.BatchPlanned):
            for pod in decision.unschedulable:
                log.warning("pod cannot run", extra={"pod": pod.pod, "reason": pod.reason})

    async def observed(self, event: ev.Event) -> None:
        if isinstance(event, ev.NodeClaimEvent):
            self.objects.sync(event.nodeclaim)
        if isinstance(event, ev.NodePoolsSnapshot):
            await self.sync_nodepools()

    async def ticked(self, now: datetime) -> None:
        await self.sync_nodepools()
        await self._clear_overcommitted(now)

    async def _nominate(self, claim: NodeClaim, node: str) -> None:
        """Nominate the claim's waiting pods to its Node before the Node loses its unregistered taint (so
        before any pod can land there): :mod:`.nominations`. Advice only: a pod gone or a refusal is logged
        and registration goes on."""
        keys = nominations.pods_to_nominate(self.state, claim, node, datetime.now(UTC))
        results = await asyncio.gather(
            *(self._nominate_pod(key, node) for key in keys), return_exceptions=True
        )
        failed: dict[str, str] = {}
        for key, result in zip(keys, results, strict=True):
            if not isinstance(result, BaseException):
                self._nominated[key] = node
            elif not (isinstance(result, KubeApiError) and result.status == 404):
                failed[key] = str(result)
        if failed:
            log.warning(
                "could not nominate pods to their node",
                extra={"nodeclaim": claim.name, "node": node, "errors": failed},
            )

    async def _nominate_pod(self, key: str, node: str) -> None:
        namespace, name = key.split("/", 1)
        async with self._nominating:
            await self.kube.patch(
                PODS, name, nominations.nomination_patch(node), namespace=namespace, subresource="status"
            )

    async def _clear_overcommitted(self, now: datetime) -> None:
        """Clear the nominations this term wrote that their Node cannot honour together
        (:func:`.nominations.overcommitted`), once its claim has been initialized for
        :data:`.reoffers.SETTLE_GRACE`; forget the pods that no longer wait. Which ones is read under the
        runtime's lock: weighing them parses pods and Nodes into the state's caches, which a plan deciding in
        a worker thread meanwhile reads (a marked pod once lost its mark so, f62874d)."""
        assert self.runtime is not None
        async with self.runtime.lock:
            overcommitted = self._overcommitted(now)
        for claim, node, nominated, cleared in overcommitted:
            log.warning(
                "nominations cleared: the node cannot take every pod nominated to it",
                extra={"nodeclaim": claim, "node": node, "nominated": nominated, "cleared": cleared},
            )
            for key in cleared:
                namespace, name = key.split("/", 1)
                try:
                    await self.kube.patch(
                        PODS, name, nominations.clearing_patch(), namespace=namespace, subresource="status"
                    )
                except KubeApiError as exc:
                    if exc.status != 404:
                        log.warning("could not clear a nomination", extra={"pod": key, "error": str(exc)})
                        continue
                self._nominated.pop(key, None)

    def _overcommitted(self, now: datetime) -> list[tuple[str, str, int, list[str]]]:
        """(claim, Node, how many pods are nominated there, the ones to clear) for each Node whose
        nominations to clear; forgets the pods that no longer wait."""
        state = self.state
        by_node: dict[str, list[str]] = {}
        for key, node in list(self._nominated.items()):
            if key in state.bound_pods or not state.still_pending(key, now):
                del self._nominated[key]
            else:
                by_node.setdefault(node, []).append(key)
        found = []
        for node, keys in by_node.items():
            claim = state.claims.registered_to(node)
            if claim is None or claim.initialized is None:
                continue
            if claim.initialized.decided_at + reoffers.SETTLE_GRACE > now:
                continue
            cleared = nominations.overcommitted(state, node, keys)
            if cleared:
                found.append((claim.name, node, len(keys), cleared))
        return found

    def _as_observed_now(self, decision: ev.NodeClaimRegistered, node: dict[str, Any] | None) -> Any:
        """The decision's Node as the state holds it now, if it is still the claim's (same providerID);
        else ``node``, as the decision saw it."""
        latest = self.state.nodes.get(decision.node)
        if latest is None or (latest.get("spec") or {}).get("providerID") != decision.provider_id:
            return node
        return latest

    async def _register_node(
        self, claim: NodeClaim, decision: ev.NodeClaimRegistered, node: dict[str, Any], initialized: bool
    ) -> bool:
        """The registration patch (:func:`.lifecycle.registration_patch`), plus the initialized label when
        the Node is initialized as the patch leaves it. A patch refused because the Node changed since
        ``node`` was observed is computed again from the Node as it is now; False (the decision dropped, to
        be decided again from the log) if that Node is no longer the claim's.

        ``initialized`` says the decision was made with Initialized (:func:`.lifecycle.due`): one patch
        carries both labels. A Node found initialized only when the patch is computed again (it turned Ready
        after the observation the registration was decided on: most of the refusals) gets the label too, so
        its Initialized, decided once that observation is folded, needs no patch of its own: under a wave of
        joining Nodes that patch waited behind every other registration's requests, and those few claims
        were ``Registered -> Initialized``'s p99 (about 2 s on a loaded run, against milliseconds for the
        others)."""
        name = decision.node
        for _ in range(REGISTRATION_ATTEMPTS):
            patch = lifecycle.registration_patch(claim, node) or {}
            if initialized:
                patch.setdefault("metadata", {}).setdefault("labels", {})[INITIALIZED] = "true"
            if not patch:
                return True
            try:
                await self.kube.patch(NODES, name, patch)
                if initialized:
                    self._labelled_initialized.add(name)
                return True
            except KubeApiError as exc:
                if exc.status == 404:
                    return True
                if exc.status != 409:
                    raise TransientError(str(exc)) from None
            try:
                current = await self.kube.get_or_none(NODES, name)
            except KubeApiError as exc:
                raise TransientError(str(exc)) from None
            if current is None:
                return True
            if (current.get("spec") or {}).get("providerID") != decision.provider_id:
                log.warning(
                    "node no longer has the claim's providerID: registration dropped",
                    extra={"nodeclaim": claim.name, "node": name, "provider_id": decision.provider_id},
                )
                return False
            node = current
            initialized = initialized or lifecycle.is_initialized(claim, lifecycle.as_registered(claim, node))
        raise TransientError(
            f"node {name} changed under each of {REGISTRATION_ATTEMPTS} registration patches"
        )

    async def _patch_node(self, name: str, patch: dict[str, Any]) -> None:
        try:
            await self.kube.patch(NODES, name, patch)
        except KubeApiError as exc:
            if exc.status == 404:
                return
            raise TransientError(str(exc)) from None

    async def sync_nodepools(self) -> None:
        now = datetime.now(UTC)
        for name in list(self.state.nodepools):
            status = nodepool_status(self.state, name, now)
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


async def make_executor(
    ctx: ServiceContext, settings: SchedulerSettings, decider: Decider[Any]
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    kube = await load_kube(settings.kubeconfig, component=registry.SCHEDULER)
    return SchedulerExecutor(kube), kube.close


SERVICE = ServiceDefinition(
    name=registry.SCHEDULER,
    description="Plan NodeClaims for pending pods; follow each claim's life until its node is initialized.",
    settings=SchedulerSettings,
    work=decider_work(make_decider, make_executor, lambda s: s.tick, claim_gauges=True),
    decider=make_decider,
    preflight=lambda settings: in_cluster_or(settings.kubeconfig),
)
