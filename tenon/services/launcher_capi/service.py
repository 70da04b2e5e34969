"""The launcher's I/O: the event log, the management cluster's watches, and carrying out decisions.

:class:`CapiLauncher` holds four views of the world and keeps them current:

* **claims** (``launching.ClaimState`` by name): rebuilt at start by reading ``tenon.nodeclaim.*`` from the
  beginning, then kept current by the durable consumer ``launcher-capi`` on the same subjects (events already
  folded in are recognised by their sequence and ignored);
* **NodeClasses**: the latest ``NodeClassesSnapshot`` (read at start, then followed);
* **MachineDeployments** (karpenter members) and **Machines**: list-and-watch on the management cluster, kept
  as dicts. Writes the launcher makes are folded in from the API server's answer at once, so the next
  decision sees them without waiting for the watch (a watch event older than what is cached is ignored).

Two loops act on them:

* **catalog**: whenever MDs or NodeClasses change, each ClusterAPINodeClass's catalog is rebuilt
  (``catalog.build_catalog``; OpenStack flavors read in a thread and cached for ``flavor_refresh`` seconds)
  and a ``CatalogSnapshot`` is published on ``tenon.catalog.<nodeclass>`` when its content hash differs from
  the last one published; skipped MDs get a Warning Event in the management cluster.
* **reconcile**: ``launching.decide`` on the whole state, then its actions (mark, bind, scale, append), round
  after round until there is nothing left to do. It runs after every consumed claim event (so a Planned event is
  acknowledged only once its scale-up is recorded on the MD), on every watch change (a Machine getting its
  providerID becomes ``NodeClaimLaunched``), and every ``resync_interval`` seconds (the leak grace period).

A single lock serialises reconciles: the decider sees one consistent state, and decisions never interleave.
Conflicts (409 on an MD patch, ``ConcurrencyConflict`` on an append) refresh the object or the claim and decide
again; they never retry the old action blindly.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proto import subjects
from proto.events import (
    CatalogSnapshot,
    DisruptionRequested,
    NodeClaimEvent,
    NodeClaimInitialized,
    NodeClaimRegistered,
    NodeClassesSnapshot,
)
from tenon.core.wellknown import DELETE_MACHINE, KARPENTER_MEMBER, NODECLAIM, NODEPOOL
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, EventLog, LogRecord, TransientError
from tenon.runtime.kube import (
    EVENTS,
    MACHINEDEPLOYMENTS,
    MACHINES,
    Kube,
    KubeApiError,
    Relisted,
    list_and_watch,
)
from tenon.runtime.kube.resources import SECRETS, ResourceRef
from tenon.services.launcher_capi.catalog import (
    CatalogContent,
    MachineDeploymentKey,
    NodeClassInvalid,
    build_catalog,
    catalog_snapshot,
    served_node_classes,
    skipped_machine_deployment_event,
)
from tenon.services.launcher_capi.launching import (
    PRODUCER,
    AppendClaimEvent,
    BindMachine,
    ClaimState,
    Decision,
    LauncherState,
    MarkMachine,
    ScaleDeployment,
    apply_claim_event,
    decide,
    machine_deployment_view,
    machine_view,
)
from tenon.services.launcher_capi.openstack import (
    Flavor,
    NodeClassError,
    OpenStackError,
    SecretKeyRef,
    load_flavors,
    openstack_settings_from_nodeclass,
)

log = logging.getLogger("tenon.launcher_capi")

MAX_ROUNDS = 16
PASSIVE_EVENTS = (NodeClaimRegistered, NodeClaimInitialized, DisruptionRequested)
"""Claim events that move a claim's sequence but change nothing the launcher decides."""


@dataclass(frozen=True)
class LauncherSettings:
    namespace: str | None = None
    """Watch MachineDeployments and Machines in this namespace only (None: all)."""
    leak_grace: float = 600.0
    """Seconds a Machine bound to a claim the log does not have may live before it is removed."""
    resync_interval: float = 10.0
    flavor_refresh: float = 600.0
    durable: str = "launcher-capi"
    producer: str = PRODUCER


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class _Cache:
    """Objects of one kind by (namespace, name), fed by a watch and by our own writes' answers."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.synced = asyncio.Event()

    def replace_all(self, items: list[dict[str, Any]]) -> None:
        self.objects = {_key(item): item for item in items}
        self.synced.set()

    def put(self, obj: dict[str, Any]) -> None:
        key = _key(obj)
        current = self.objects.get(key)
        if current is None or _rv(obj) >= _rv(current) or _rv(obj) == 0:
            self.objects[key] = obj

    def remove(self, obj: dict[str, Any]) -> None:
        self.objects.pop(_key(obj), None)


class CapiLauncher:
    def __init__(
        self,
        event_log: EventLog,
        management: Kube,
        *,
        workload: Kube | None = None,
        settings: LauncherSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event_log = event_log
        self.management = management
        self.workload = workload
        self.settings = settings or LauncherSettings()
        self.clock = clock
        self.claims: dict[str, ClaimState] = {}
        self.nodeclasses: dict[str, dict[str, Any]] = {}
        self.deployments = _Cache()
        self.machines = _Cache()
        self.first_seen: dict[tuple[str, str], float] = {}
        self.catalogs: dict[str, CatalogContent] = {}
        self.published: dict[str, tuple[str, str]] = {}
        """NodeClass -> (content hash, event id) of the last CatalogSnapshot on its subject."""
        self._flavors: dict[str, tuple[float, str, dict[str, Flavor] | None, str | None]] = {}
        self._events_sent: set[str] = set()
        self._lock = asyncio.Lock()
        self._reconcile_wanted = asyncio.Event()
        self._catalog_wanted = asyncio.Event()
        self._nodeclass_sequence = 0
        self.catalogs_published = 0

    # -------------------------------------------------------------------------------------------- running
    async def run(self, stopping: asyncio.Event) -> None:
        """Rebuild, sync, publish catalogs, then consume and reconcile until ``stopping`` is set."""
        await self.rebuild()
        tasks = [
            asyncio.create_task(
                self._watch(MACHINEDEPLOYMENTS, self.deployments, KARPENTER_MEMBER), name="watch-mds"
            ),
            asyncio.create_task(self._watch(MACHINES, self.machines, None), name="watch-machines"),
        ]
        runner = None
        try:
            await asyncio.gather(self.deployments.synced.wait(), self.machines.synced.wait())
            await self.refresh_catalogs()
            tasks.append(asyncio.create_task(self._follow_nodeclasses(), name="follow-nodeclasses"))
            tasks.append(asyncio.create_task(self._catalog_loop(), name="catalogs"))
            tasks.append(asyncio.create_task(self._reconcile_loop(), name="reconcile"))
            runner = self.event_log.consumer(
                ConsumerSettings(durable=self.settings.durable, subjects=(subjects.NODECLAIMS,)), self.handle
            )
            await runner.start()
            log.info(
                "launcher running", extra={"claims": len(self.claims), "nodeclasses": len(self.nodeclasses)}
            )
            await stopping.wait()
        finally:
            if runner is not None:
                await runner.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def rebuild(self) -> None:
        """The claim projection, the NodeClasses and the last catalog ids, from the log.

        Each read stops at the last sequence its subjects hold (asked first), so reading a family with nothing
        in it costs one round trip instead of the reader's one-second "nothing more" wait.
        """
        last = await self.event_log.last_subject_sequence(subjects.NODECLAIMS)
        if last:
            async for record in self.event_log.read(subjects.NODECLAIMS, stop_sequence=last):
                event = record.event
                if event is not None:
                    apply_claim_event(self.claims, event, record.sequence)
        last = await self.event_log.last_subject_sequence(subjects.NODECLASSES)
        if last:
            async for record in self.event_log.read(
                subjects.NODECLASSES, start_sequence=last, stop_sequence=last
            ):
                self._apply_nodeclasses(record)
        last = await self.event_log.last_subject_sequence(subjects.CATALOGS)
        if last:
            async for record in self.event_log.read(subjects.CATALOGS, stop_sequence=last):
                event = record.event
                if isinstance(event, CatalogSnapshot) and event.producer == self.settings.producer:
                    self.published[event.node_class] = ("", event.id)

    def _apply_nodeclasses(self, record: LogRecord) -> bool:
        self._nodeclass_sequence = max(self._nodeclass_sequence, record.sequence)
        event = record.event
        if not isinstance(event, NodeClassesSnapshot):
            return False
        self.nodeclasses = served_node_classes(event.nodeclasses)
        return True

    async def _follow_nodeclasses(self) -> None:
        async for record in self.event_log.read(
            subjects.NODECLASSES, start_sequence=self._nodeclass_sequence + 1, follow=True
        ):
            if self._apply_nodeclasses(record):
                self._catalog_wanted.set()

    async def _watch(self, ref: ResourceRef, cache: _Cache, label_selector: str | None) -> None:
        async for change in list_and_watch(
            self.management, ref, self.settings.namespace, label_selector=label_selector
        ):
            if isinstance(change, Relisted):
                cache.replace_all(change.items)
            elif change.type == "DELETED":
                cache.remove(change.object)
            else:
                cache.put(change.object)
            if cache is self.deployments:
                self._catalog_wanted.set()
            self._reconcile_wanted.set()

    async def _catalog_loop(self) -> None:
        while True:
            # also every flavor_refresh seconds, so a flavor changed in Nova reaches the catalog without an MD change
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.flavor_refresh):
                    await self._catalog_wanted.wait()
            self._catalog_wanted.clear()
            try:
                await self.refresh_catalogs()
            except Exception as exc:  # the broker or the API server is away: try again on the next change
                log.warning("catalog refresh failed", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                self._catalog_wanted.set()

    async def _reconcile_loop(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that lands as the event fires,
            # and this loop would then outlive the launcher's stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.resync_interval):
                    await self._reconcile_wanted.wait()
            self._reconcile_wanted.clear()
            try:
                await self.reconcile()
            except Exception as exc:
                log.warning("reconcile failed, will retry", extra={"error": str(exc)})
                await asyncio.sleep(0.5)
                self._reconcile_wanted.set()

    async def handle(self, record: LogRecord) -> None:
        """One event from ``tenon.nodeclaim.*``: fold it in, then act on the whole state.

        Returning acks the message, so a Planned claim is acknowledged only after its scale-up is recorded on
        the MachineDeployment. Events that no decision reads (the node lifecycle's) are only folded in.
        """
        event = record.decode()  # an UndecodableEvent is dead-lettered by the runner
        new = apply_claim_event(self.claims, event, record.sequence)
        if isinstance(event, PASSIVE_EVENTS) or not isinstance(event, NodeClaimEvent):
            return
        if not new and not self._may_need_action(event.nodeclaim):
            return  # history replayed to a new consumer: settled claims need no decision each
        try:
            await self.reconcile()
        except (KubeApiError, OSError, TimeoutError) as exc:
            raise TransientError(str(exc)) from exc

    def _may_need_action(self, name: str) -> bool:
        claim = self.claims.get(name)
        if claim is None:
            return False
        if claim.live:
            return claim.launched is None
        if claim.drained is not None and claim.ended is None:
            return True
        return any(
            ((m.get("metadata") or {}).get("annotations") or {}).get(NODECLAIM) == name
            for m in self.machines.objects.values()
        )

    # ------------------------------------------------------------------------------------------- catalogs
    async def refresh_catalogs(self) -> None:
        mds = list(self.deployments.objects.values())
        for name, nodeclass in sorted(self.nodeclasses.items()):
            flavors, prices, notes = await self._openstack_inputs(nodeclass)
            try:
                content = build_catalog(nodeclass, mds, flavors=flavors, prices=prices, notes=notes)
            except NodeClassInvalid as err:
                log.warning("NodeClass unusable", extra={"nodeclass": name, "error": str(err)})
                continue
            self.catalogs[name] = content
            await self._publish_catalog(content)
            for md, reason in content.skipped_objects:
                await self._record_skipped(md, reason, name)
        for gone in set(self.catalogs) - set(self.nodeclasses):
            del self.catalogs[gone]
        self._reconcile_wanted.set()

    async def _publish_catalog(self, content: CatalogContent) -> None:
        digest = content.content_hash
        last_hash, last_id = self.published.get(content.node_class, ("", ""))
        if digest == last_hash:
            return
        event = catalog_snapshot(content, producer=self.settings.producer, previous_id=last_id or None)
        await self.event_log.publish(subjects.catalog(content.node_class), event)
        self.published[content.node_class] = (digest, event.id)
        self.catalogs_published += 1
        log.info(
            "catalog published",
            extra={
                "nodeclass": content.node_class,
                "types": len(content.instance_types),
                "skipped": len(content.skipped),
            },
        )

    async def _record_skipped(self, md: dict[str, Any], reason: str, nodeclass: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = skipped_machine_deployment_event(md, reason, nodeclass, now)
        name = f"{event['metadata']['namespace']}/{event['metadata']['name']}"
        if name in self._events_sent:
            return
        try:
            await self.management.create(EVENTS, event)
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning("event not recorded", extra={"machinedeployment": name, "error": str(exc)})
                return
        self._events_sent.add(name)

    async def _openstack_inputs(
        self, nodeclass: dict[str, Any]
    ) -> tuple[dict[str, Flavor] | None, dict[str, float] | None, list[str]]:
        name = str(nodeclass["metadata"]["name"])
        try:
            settings = openstack_settings_from_nodeclass(nodeclass)
        except NodeClassError as err:
            return None, None, [f"OpenStack settings ignored: {err}"]
        if settings is None:
            return None, None, []
        fingerprint = json.dumps((nodeclass.get("spec") or {}).get("openstack"), sort_keys=True, default=str)
        cached = self._flavors.get(name)
        now = self.clock()
        if cached is None or cached[1] != fingerprint or now - cached[0] >= self.settings.flavor_refresh:
            try:
                flavors: dict[str, Flavor] | None = await load_flavors(settings, self._read_secret)
                problem = None
            except (NodeClassError, OpenStackError) as err:
                flavors, problem = None, str(err)
            cached = (now, fingerprint, flavors, problem)
            self._flavors[name] = cached
        _, _, flavors, problem = cached
        notes = [f"OpenStack flavors not read, capacity only from annotations: {problem}"] if problem else []
        return (flavors if flavors is not None else {}), dict(settings.prices), notes

    async def _read_secret(self, ref: SecretKeyRef) -> str | None:
        kube = self.workload or self.management
        secret = await kube.get_or_none(SECRETS, ref.name, ref.namespace)
        if secret is None:
            return None
        if ref.key in (secret.get("stringData") or {}):
            return str(secret["stringData"][ref.key])
        raw = (secret.get("data") or {}).get(ref.key)
        return None if raw is None else base64.b64decode(raw).decode("utf-8")

    # ------------------------------------------------------------------------------------------ reconcile
    def state(self) -> LauncherState:
        now = self.clock()
        machines = []
        for key, machine in self.machines.objects.items():
            machines.append(machine_view(machine, self.first_seen.setdefault(key, now)))
        for key in set(self.first_seen) - set(self.machines.objects):
            del self.first_seen[key]
        deployments = {}
        for md in self.deployments.objects.values():
            view = machine_deployment_view(md)
            deployments[view.key] = view
        return LauncherState(
            claims=self.claims,
            targets={name: content.targets for name, content in self.catalogs.items()},
            deployments=deployments,
            machines=machines,
            now=now,
            leak_grace=self.settings.leak_grace,
        )

    async def reconcile(self) -> None:
        """Decide and act until the decision is empty (or a bounded number of rounds)."""
        async with self._lock:
            for _ in range(MAX_ROUNDS):
                decision = decide(self.state())
                if decision.empty:
                    return
                await self._execute(decision)
            log.warning("reconcile still busy after %d rounds; continuing later", MAX_ROUNDS)
            self._reconcile_wanted.set()

    async def _execute(self, decision: Decision) -> None:
        for mark in decision.marks:
            await self._mark(mark)
        for bind in decision.binds:
            await self._bind(bind)
        for scale in decision.scales:
            await self._scale(scale)
        for append in decision.appends:
            await self._append(append)

    async def _patch_machine(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        try:
            updated = await self.management.patch(MACHINES, name, body, namespace=namespace)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            self.machines.objects.pop((namespace, name), None)
            return
        self.machines.put(updated)

    async def _mark(self, mark: MarkMachine) -> None:
        stamp = datetime.now(UTC).isoformat()
        await self._patch_machine(
            mark.namespace, mark.name, {"metadata": {"annotations": {DELETE_MACHINE: stamp}}}
        )
        log.info(
            "machine marked for deletion",
            extra={"machine": f"{mark.namespace}/{mark.name}", "reason": mark.reason},
        )

    async def _bind(self, bind: BindMachine) -> None:
        # Leader election makes this launcher the only writer of the binding annotation, so no precondition:
        # the Cluster API controller rewrites the Machine often while it boots and would make one fail.
        labels = {NODEPOOL: bind.nodepool} if bind.nodepool else {}
        await self._patch_machine(
            bind.namespace,
            bind.name,
            {"metadata": {"annotations": {NODECLAIM: bind.claim}, "labels": labels}},
        )
        log.info("machine bound", extra={"machine": f"{bind.namespace}/{bind.name}", "nodeclaim": bind.claim})

    async def _scale(self, scale: ScaleDeployment) -> None:
        key: MachineDeploymentKey = scale.key
        try:
            updated = await self.management.patch(
                MACHINEDEPLOYMENTS, key.name, scale.patch(), namespace=key.namespace
            )
        except KubeApiError as exc:
            if exc.status == 404:
                self.deployments.objects.pop((key.namespace, key.name), None)
                return
            if exc.status != 409:
                raise
            fresh = await self.management.get_or_none(MACHINEDEPLOYMENTS, key.name, key.namespace)
            if fresh is None:
                self.deployments.objects.pop((key.namespace, key.name), None)
            else:
                self.deployments.put(fresh)
            log.info(
                "machinedeployment changed under us; deciding again", extra={"machinedeployment": str(key)}
            )
            return
        self.deployments.put(updated)
        log.info(
            "machinedeployment scaled"
            if scale.replicas_to != scale.replicas_from
            else "machinedeployment records updated",
            extra={
                "machinedeployment": str(key),
                "from": scale.replicas_from,
                "to": scale.replicas_to,
                "scaled_up_for": list(scale.scaled_up_for),
                "scaled_down_for": list(scale.scaled_down_for),
            },
        )

    async def _append(self, append: AppendClaimEvent) -> None:
        subject = subjects.nodeclaim(append.claim)
        try:
            result = await self.event_log.append(
                subject, append.event, expected_last_sequence=append.expected_last_sequence
            )
        except ConcurrencyConflict:
            async for record in self.event_log.read(subject):
                event = record.event
                if event is not None:
                    apply_claim_event(self.claims, event, record.sequence)
            return
        apply_claim_event(self.claims, append.event, result.sequence)
        log.info(
            "claim event appended",
            extra={
                "nodeclaim": append.claim,
                "type": type(append.event).__name__,
                "sequence": result.sequence,
            },
        )
