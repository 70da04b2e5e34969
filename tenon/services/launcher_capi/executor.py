"""The Cluster API launcher's executor: its eyes on the management cluster, and its hands.

The runtime (:mod:`tenon.runtime.decider`) rebuilds the state, follows the log and records the decider's
decisions; the executor does the I/O around them:

* **observations** (:mod:`.watches`): MachineDeployments and Machines are watched and every change a decision
  reads is published (``MachineDeploymentObserved``, ``MachineObserved``); at the start of a term, whatever
  changed while no leader watched;
* **catalogs** (:mod:`.catalog_publisher`): built from the watched MachineDeployments and the NodeClasses in
  the state, published on change and at least every resync interval;
* **actions**, in ``prepare``, before a decision is recorded (a decision that cannot be carried out is
  dropped, not recorded, and decided again on the next input or tick):

  - ``MachineDeploymentScaled``: a patch of ``spec.replicas`` and the two record annotations, only when
    what the decider read (replicas, records, max size, paused) is what the object the executor holds says;
    its ``test`` operations hold the same object, its annotations and its spec on the server
    (:func:`deployment_patch`), so the Cluster API controller writing status refuses nothing (without
    annotations to hold on to: a merge patch preconditioned on the resourceVersion). A refusal takes the newer
    version as the watch brings it (read again if it does not come within half a second): while only fields
    no decision reads changed (the controller writing status) the same patch is retried on it, otherwise the
    decision is dropped and the new object observed. Every Machine the patch counts a replica fewer for must
    be marked ``delete-machine`` first (in the state), or nothing is patched;
  - ``MachineBound``: the claim annotation and the nodepool label, on a Machine still unbound and not marked;
  - ``MachineRemovalDecided``: the ``delete-machine`` mark, on a Machine still bound to that claim; for a
    leak, after looking once more that no NodeClaim object of that name appeared in the workload cluster;

  a Machine is patched with a JSON patch whose ``test`` operations hold the decision's premises: the same
  Machine (uid) with exactly the annotations it was decided on (which say whether it is bound, to whom, and
  marked). The Cluster API controller rewrites a booting Machine's status every step; a resourceVersion
  precondition was refused on each of those writes (two of three binds in the 1,000-pod run, each refusal a
  round trip to a busy API server), while the annotations are tenon's alone. A failed test (422) is a
  conflict when a newer version of the Machine exists, and is tried again on it like a 409;

  the answer of each patch is cached, not published: the decider folds the action itself and sets aside
  observations older than it; once the action is recorded, whatever else the executor knows of the object is
  published after it (an observation naming the action, ``after``);
* **evidence** (``ticked``): Machines bound past the leak grace to a claim the state does not know
  (:func:`.removal.leak_suspects`) are looked up: a NodeClaim object of that name in the workload cluster, and
  the log's bounds against the Machine's creation minus the launch timeout. The result is published as
  ``MachineLeakChecked``, from which the decider decides removal or ``MachineKept``;
* **explanations** (``recorded``): a log line for every action, and a Kubernetes Event on the Machine for
  every removal and every Machine kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.core.wellknown import DELETE_MACHINE, NODECLAIM, NODEPOOL, SCALED_DOWN_FOR, SCALED_UP_FOR
from tenon.runtime.decider import BaseExecutor, DeciderRuntime
from tenon.runtime.eventlog import EventLog, TransientError
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODECLAIMS, Kube, KubeApiError
from tenon.runtime.kube.events import post_event
from tenon.runtime.kube.resources import JSON_PATCH, ResourceRef
from tenon.runtime.tasks import cancel_and_wait
from tenon.services.launcher_capi.catalog import EVENT_COMPONENT
from tenon.services.launcher_capi.catalog_publisher import CatalogPublisher
from tenon.services.launcher_capi.observations import (
    PRODUCER,
    MachineDeploymentView,
    MachineView,
    machine_deployment_view,
    machine_view,
)
from tenon.services.launcher_capi.removal import leak_suspects
from tenon.services.launcher_capi.state import LauncherState
from tenon.services.launcher_capi.watches import ClusterWatch, ObjectCache

log = logging.getLogger("tenon.launcher_capi")

REMOVAL_EVENT_REASON = "TenonMachineRemoval"
KEPT_EVENT_REASON = "TenonMachineKept"

CONFLICT_ATTEMPTS = 4
"""Patches tried on a conflict when the object changed only in what no decision reads."""
CONFLICT_WATCH_WAIT = 0.5
"""Seconds a patch refused on a conflict waits for the watch to bring the newer version before reading it."""

Guard = Callable[[dict[str, Any]], str | None]
"""Why an object no longer matches what a decision was made from (None: it does)."""


def _pointer(key: str) -> str:
    """A map key as a JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def annotation_patch(
    current: dict[str, Any], annotations: dict[str, str], labels: dict[str, str]
) -> list[dict[str, Any]] | None:
    """A JSON patch adding ``annotations`` and ``labels`` to ``current`` only while it is the same object with
    the same annotations (``test`` operations); None when it has no uid, annotations or (with labels to add)
    labels to hold on to."""
    meta = current.get("metadata") or {}
    held, known_labels = meta.get("annotations"), meta.get("labels")
    if not meta.get("uid") or not isinstance(held, dict) or (labels and not isinstance(known_labels, dict)):
        return None
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": "/metadata/annotations", "value": held},
    ]
    ops += [
        {"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v}
        for k, v in annotations.items()
    ]
    ops += [{"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v} for k, v in labels.items()]
    return ops


def deployment_patch(
    current: dict[str, Any], replicas: int, annotations: dict[str, str | None]
) -> list[dict[str, Any]] | None:
    """A JSON patch setting ``spec.replicas`` and ``annotations`` (None: removed) on ``current`` only while it
    is the same MachineDeployment with the same annotations and spec (``test`` operations: what a scale is
    decided on, replicas, records, max size and pause, is in those); None when it has no uid, annotations or
    spec to hold on to. Cluster API rewrites a MachineDeployment's status at every Machine it creates, so a
    patch preconditioned on the resourceVersion was refused again and again while a wave of Machines came
    up (the scale run dropped a scale after four conflicts)."""
    meta = current.get("metadata") or {}
    held, spec = meta.get("annotations"), current.get("spec")
    if not meta.get("uid") or not isinstance(held, dict) or not isinstance(spec, dict):
        return None
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": "/metadata/annotations", "value": held},
        {"op": "test", "path": "/spec", "value": spec},
    ]
    for key, value in annotations.items():
        path = f"/metadata/annotations/{_pointer(key)}"
        if value is not None:
            ops.append({"op": "add", "path": path, "value": value})
        elif key in held:
            ops.append({"op": "remove", "path": path})
    ops.append({"op": "add", "path": "/spec/replicas", "value": replicas})
    return ops


def _kind(ref: ResourceRef) -> str:
    return "MachineDeployment" if ref is MACHINEDEPLOYMENTS else "Machine"


def _same_version(obj: dict[str, Any], version: str) -> bool:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "") == version


def parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class LauncherExecutor(BaseExecutor):
    def __init__(
        self,
        management: Kube,
        *,
        workload: Kube | None = None,
        secrets: Kube | None = None,
        namespace: str | None = None,
        leak_grace: float = 600.0,
        launch_timeout: float = 300.0,
        flavor_refresh: float = 600.0,
        resync: float = 86400.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.management = management
        self.workload = workload
        self.secrets = secrets
        self.namespace = namespace
        self.leak_grace = leak_grace
        self.launch_timeout = launch_timeout
        self.flavor_refresh = flavor_refresh
        self.resync = resync
        self.clock = clock
        self.runtime: DeciderRuntime[LauncherState] | None = None
        self.watch: ClusterWatch | None = None
        self.catalogs: CatalogPublisher | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()
        """Set once the term's first observations and catalogs are published (the runtime follows from
        then)."""

    @property
    def state(self) -> LauncherState:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.state

    @property
    def event_log(self) -> EventLog:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.event_log

    # --- the term
    # -----------------------------------------------------------------------------------------------

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        """Watch, publish what changed while no leader watched, publish the catalogs; the runtime follows."""
        self.runtime = runtime
        self.catalogs = CatalogPublisher(
            runtime.event_log,
            self.management,
            secrets=self.secrets,
            nodeclasses=lambda: self.state.nodeclasses,
            deployments=lambda: list(self._deployments.objects.values()),
            published=self.state.catalogs,
            flavor_refresh=self.flavor_refresh,
            resync=self.resync,
            clock=self.clock,
        )
        self.watch = ClusterWatch(
            self.management,
            runtime.event_log,
            namespace=self.namespace,
            deployments=self.state.deployments,
            machines=self.state.machines,
            on_deployments_changed=self.catalogs.wanted.set,
        )
        self._tasks.append(asyncio.create_task(self.watch.run(), name="launcher-capi:watch"))
        await self.watch.synced()
        await self.catalogs.refresh()
        self._tasks.append(asyncio.create_task(self.catalogs.run(), name="launcher-capi:catalogs"))
        self.started.set()
        log.info(
            "launcher running",
            extra={
                "claims": len(self.state.claims),
                "nodeclasses": len(self.state.nodeclasses),
                "machinedeployments": len(self._deployments.objects),
                "machines": len(self._machines.objects),
            },
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    @property
    def _deployments(self) -> ObjectCache:
        assert self.watch is not None
        return self.watch.deployments

    @property
    def _machines(self) -> ObjectCache:
        assert self.watch is not None
        return self.watch.machines

    # --- hooks
    # ----------------------------------------------------------------------------------------------------

    async def observed(self, event: ev.Event) -> None:
        if isinstance(event, ev.NodeClassesSnapshot) and self.catalogs is not None:
            self.catalogs.wanted.set()

    async def prepare(self, decision: ev.Event) -> bool:
        try:
            if isinstance(decision, ev.MachineDeploymentScaled):
                return await self._scale(decision)
            if isinstance(decision, ev.MachineBound):
                return await self._bind(decision)
            if isinstance(decision, ev.MachineRemovalDecided):
                return await self._mark(decision)
        except (KubeApiError, OSError, TimeoutError) as exc:
            raise TransientError(f"{type(decision).__name__}: {exc}") from None
        return True

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        assert self.watch is not None
        if isinstance(decision, ev.MachineDeploymentScaled):
            ref = f"{decision.namespace}/{decision.machine_deployment}"
            believed = self.state.deployments.get(ref)
            await self.watch.correct("MachineDeployment", ref, believed, decision.id)
        elif isinstance(decision, ev.MachineBound | ev.MachineRemovalDecided):
            ref = f"{decision.namespace}/{decision.machine}"
            await self.watch.correct("Machine", ref, self.state.machines.get(ref), decision.id)
        if isinstance(decision, ev.MachineKept):
            log.warning(
                "machine kept",
                extra={
                    "machine": f"{decision.namespace}/{decision.machine}",
                    "nodeclaim": decision.nodeclaim,
                    "code": decision.code,
                    "why": decision.reason,
                },
            )
            await self._machine_event(
                decision.namespace, decision.machine, KEPT_EVENT_REASON, decision.reason
            )
        elif isinstance(decision, ev.MachineRemovalDecided):
            await self._machine_event(
                decision.namespace,
                decision.machine,
                REMOVAL_EVENT_REASON,
                decision.reason,
                event_type="Normal",
            )
        elif isinstance(decision, ev.NodeClaimEvent):
            log.info(
                "claim event appended",
                extra={"nodeclaim": decision.nodeclaim, "type": type(decision).__name__},
            )

    async def ticked(self, now: datetime) -> None:
        for machine in list(leak_suspects(self.state, now, timedelta(seconds=self.leak_grace))):
            try:
                check = await self.check_leak(machine, now)
            except Exception as exc:  # the next tick looks again
                log.warning("leak check failed", extra={"machine": machine.ref, "error": str(exc)})
                continue
            if check is not None:
                await self.event_log.publish(registry.subject_of(check), check)

    # --- actions
    # --------------------------------------------------------------------------------------------------

    async def _patch_guarded(
        self,
        ref: ResourceRef,
        cache: ObjectCache,
        key: str,
        guard: Guard,
        body: dict[str, Any],
        *,
        believed: MachineDeploymentView | MachineView | None,
        dropped: str,
        tested: Callable[[dict[str, Any]], list[dict[str, Any]] | None] | None = None,
    ) -> dict[str, Any] | None:
        """Patch the object at ``key`` if ``guard`` finds the version the executor holds still as the decision
        saw it: with the JSON patch ``tested`` makes of it (its ``test`` operations hold the premises on the
        server), else with ``body`` preconditioned on that version. On a conflict, take the newer version and
        try again while only what no decision reads changed (the controller writing status). None: dropped
        (gone, changed, or conflicting every time)."""
        assert self.watch is not None
        namespace, _, name = key.partition("/")
        current = cache.objects.get(key)
        for _ in range(CONFLICT_ATTEMPTS):
            why = "it is gone" if current is None else guard(current)
            if current is None or why is not None:
                log.info("decision dropped: decided again", extra={"object": key, "why": why})
                await self.watch.correct(_kind(ref), key, believed, dropped)
                return None
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            ops = tested(current) if tested is not None else None
            try:
                updated: dict[str, Any] = await self._patch(ref, name, namespace, body, version, ops)
            except KubeApiError as exc:
                if exc.status == 404:
                    cache.objects.pop(key, None)
                    return None
                if exc.status not in (409, 422) or (exc.status == 422 and ops is None):
                    raise
                newer = await self._newer(ref, cache, key, version)
                if exc.status == 422 and newer is not None and _same_version(newer, version):
                    raise  # the patch itself is refused, not its premises
                current = newer
                continue
            updated.setdefault("kind", _kind(ref))
            await self.watch.written(updated)
            return updated
        log.info("decision dropped after repeated conflicts: decided again", extra={"object": key})
        # published even unchanged in what decisions read: the log then says the decision was dropped, and
        # `tenon replay --diff` does not count the one it makes again as a difference
        await self.watch.correct(_kind(ref), key, believed, dropped, always=True)
        return None

    async def _patch(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str,
        body: dict[str, Any],
        version: str,
        ops: list[dict[str, Any]] | None,
    ) -> dict[str, Any]:
        if ops is not None:
            return await self.management.patch(ref, name, ops, namespace=namespace, content_type=JSON_PATCH)
        meta = {**(body.get("metadata") or {}), "resourceVersion": version}
        return await self.management.patch(ref, name, {**body, "metadata": meta}, namespace=namespace)

    async def _newer(
        self, ref: ResourceRef, cache: ObjectCache, key: str, version: str
    ) -> dict[str, Any] | None:
        """The object after a conflict: the version the watch brings (it brings every change, and reading it
        again would cost the API server a request, and most conflicts are a controller's status write a
        moment earlier), else read again."""
        try:
            seen = int(version)
        except ValueError:
            seen = 0
        newer = await cache.newer_than(key, seen, timeout=CONFLICT_WATCH_WAIT) if seen else None
        if newer is not None:
            return newer
        namespace, _, name = key.partition("/")
        current = await self.management.get_or_none(ref, name, namespace)
        if current is not None:
            await self._observe(ref, current)
        return current

    async def _observe(self, ref: ResourceRef, obj: dict[str, Any]) -> None:
        assert self.watch is not None
        if ref is MACHINEDEPLOYMENTS:
            await self.watch.observe_deployment(obj)
        else:
            await self.watch.observe_machine(obj)

    async def _scale(self, decision: ev.MachineDeploymentScaled) -> bool:
        key = f"{decision.namespace}/{decision.machine_deployment}"
        decided_on = self.state.deployments.get(key)
        if decided_on is None:
            return False
        for name in set(decision.scaled_down_for) - set(decided_on.scaled_down_for):
            machine = self.state.machines.get(f"{decision.namespace}/{name}")
            if machine is None or not machine.marked:
                log.warning(
                    "scale-down dropped: its Machine is not marked delete-machine",
                    extra={"machinedeployment": key, "machine": name},
                )
                return False

        def guard(obj: dict[str, Any]) -> str | None:
            if machine_deployment_view(obj).content() != decided_on.content():
                return "replicas, records, max size or pause changed since the decision"
            return None

        annotations = {
            SCALED_UP_FOR: ",".join(decision.scaled_up_for) or None,
            SCALED_DOWN_FOR: ",".join(decision.scaled_down_for) or None,
        }
        body = {"metadata": {"annotations": annotations}, "spec": {"replicas": decision.replicas_to}}
        patched = await self._patch_guarded(
            MACHINEDEPLOYMENTS,
            self._deployments,
            key,
            guard,
            body,
            believed=decided_on,
            dropped=decision.id,
            tested=lambda current: deployment_patch(current, decision.replicas_to, annotations),
        )
        if patched is None:
            return False
        log.info(
            "machinedeployment scaled"
            if decision.replicas_to != decision.replicas_from
            else "machinedeployment records updated",
            extra={
                "machinedeployment": key,
                "from": decision.replicas_from,
                "to": decision.replicas_to,
                "scaled_up_for": list(decision.scaled_up_for),
                "scaled_down_for": list(decision.scaled_down_for),
                "why": decision.reason,
            },
        )
        return True

    async def _bind(self, decision: ev.MachineBound) -> bool:
        def guard(obj: dict[str, Any]) -> str | None:
            view = machine_view(obj)
            if view.deleting or view.marked:
                return "it is being removed"
            if view.claim not in (None, decision.nodeclaim):
                return f"it is bound to NodeClaim {view.claim}"
            return None

        labels = {NODEPOOL: decision.nodepool} if decision.nodepool else {}
        annotations = {NODECLAIM: decision.nodeclaim}
        body = {"metadata": {"annotations": annotations, "labels": labels}}
        key = f"{decision.namespace}/{decision.machine}"
        believed = self.state.machines.get(key)
        if (
            await self._patch_guarded(
                MACHINES,
                self._machines,
                key,
                guard,
                body,
                believed=believed,
                dropped=decision.id,
                tested=lambda current: annotation_patch(current, annotations, labels),
            )
            is None
        ):
            return False
        log.info("machine bound", extra={"machine": key, "nodeclaim": decision.nodeclaim})
        return True

    async def _mark(self, decision: ev.MachineRemovalDecided) -> bool:
        key = f"{decision.namespace}/{decision.machine}"
        if decision.nodeclaim not in self.state.claims and not await self._still_leaked(decision):
            return False

        def guard(obj: dict[str, Any]) -> str | None:
            view = machine_view(obj)
            if view.claim != decision.nodeclaim:
                return f"it is bound to {view.claim or 'no NodeClaim'} now"
            return None

        stamp = decision.decided_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        annotations = {DELETE_MACHINE: stamp}
        body = {"metadata": {"annotations": annotations}}
        believed = self.state.machines.get(key)
        if (
            await self._patch_guarded(
                MACHINES,
                self._machines,
                key,
                guard,
                body,
                believed=believed,
                dropped=decision.id,
                tested=lambda current: annotation_patch(current, annotations, {}),
            )
            is None
        ):
            return False
        log.info(
            "machine marked for deletion",
            extra={
                "machine": key,
                "nodeclaim": decision.nodeclaim,
                "why": decision.reason,
                "evidence": list(decision.evidence),
            },
        )
        return True

    # --- evidence
    # -------------------------------------------------------------------------------------------------

    async def _still_leaked(self, decision: ev.MachineRemovalDecided) -> bool:
        """Right before marking a leaked Machine: no NodeClaim object of that name appeared meanwhile."""
        found, detail = await self.nodeclaim_object(decision.nodeclaim)
        if found == "absent":
            return True
        machine = self.state.machines.get(f"{decision.namespace}/{decision.machine}")
        log.warning(
            "leaked machine not removed: the evidence changed",
            extra={"machine": decision.machine, "nodeclaim": decision.nodeclaim, "found": found},
        )
        if machine is not None and found is not None:
            check = await self.check_leak(machine, datetime.now(UTC), known=(found, detail))
            if check is not None:
                await self.event_log.publish(registry.subject_of(check), check)
        return False

    async def nodeclaim_object(self, name: str) -> tuple[str | None, str]:
        """``present``, ``absent`` or ``unknown`` (with why) for a NodeClaim object in the workload cluster;
        None when the cluster did not answer this time (look again later)."""
        if self.workload is None:
            return "unknown", "no workload cluster configured (TENON_KUBECONFIG)"
        try:
            found = await self.workload.get_or_none(NODECLAIMS, name)
        except KubeApiError as exc:
            if exc.status in (401, 403):
                return "unknown", f"reading NodeClaim {name} was refused: {exc}"
            log.warning("NodeClaim lookup failed", extra={"nodeclaim": name, "error": str(exc)})
            return None, str(exc)
        except (OSError, TimeoutError) as exc:
            log.warning("NodeClaim lookup failed", extra={"nodeclaim": name, "error": str(exc)})
            return None, str(exc)
        return ("present" if found is not None else "absent"), ""

    async def check_leak(
        self, machine: MachineView, now: datetime, *, known: tuple[str, str] | None = None
    ) -> ev.MachineLeakChecked | None:
        """The evidence about a Machine bound to a claim the state does not know (None: ask again later)."""
        assert machine.claim is not None and machine.bound_since is not None
        found, detail = known or await self.nodeclaim_object(machine.claim)
        if found is None:
            return None
        bounds = await self.event_log.bounds()
        created = parse_time(machine.created)
        needed = created - timedelta(seconds=self.launch_timeout) if created is not None else None
        reaches = needed is not None and bounds.reaches_back_to(needed)
        return make_event(
            ev.MachineLeakChecked,
            producer=PRODUCER,
            key=(machine.ref, machine.uid, machine.claim, machine.bound_since.isoformat(), found),
            correlation_id=machine.claim,
            decided_at=now,
            namespace=machine.namespace,
            machine=machine.name,
            machine_deployment=machine.deployment,
            nodeclaim=machine.claim,
            machine_created=created,
            bound_since=machine.bound_since,
            leak_grace=self.leak_grace,
            nodeclaim_object=found,
            log_first_sequence=bounds.first_sequence,
            log_starts_at=bounds.first_time,
            log_needed_since=needed,
            log_reaches_back=reaches,
            detail=detail if needed is not None else (detail or "the Machine has no creationTimestamp"),
        )

    async def _machine_event(
        self, namespace: str, name: str, reason: str, message: str, *, event_type: str = "Warning"
    ) -> None:
        machine = self._machines.objects.get(f"{namespace}/{name}") if self.watch is not None else None
        if machine is None:
            return
        await post_event(
            self.management,
            {"kind": "Machine", **machine},
            reason=reason,
            message=message,
            event_type=event_type,
            component=EVENT_COMPONENT,
        )
