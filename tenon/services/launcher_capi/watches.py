"""The management cluster as the launcher's executor sees it: caches fed by watches, and observations for the
log.

Two list-and-watches (:func:`tenon.runtime.kube.list_and_watch`): MachineDeployments labelled
``node.cluster.x-k8s.io/karpenter-member``, and Machines. Each keeps the whole objects in an
:class:`ObjectCache` (the catalog is built from whole MachineDeployments, and a patch needs the current
resourceVersion), and every change that a decision reads (:mod:`.observations`) is published as
``MachineDeploymentObserved`` / ``MachineObserved``. Machines are observed when they belong to a member
MachineDeployment or carry tenon's ownership mark.

What was published last is compared by content (without the resourceVersion), starting from what the rebuilt
state holds, so a restart publishes exactly what changed while no leader watched (objects gone while it was
away become ``removed``), and a status update by the Cluster API controller publishes nothing. Observations
go out through an outbox (:mod:`tenon.runtime.eventlog.outbox`): in the order they were made, a burst at
once, and retried until the broker takes them (a lost observation would leave the decider behind); the
watches, and the executor's patches waiting for the same lock, do not wait a round trip per observation.
The answers to the launcher's own patches are fed in the same way (:meth:`ClusterWatch.note_deployment`), so
the decider sees its writes without waiting for the watch; a watch event older than what the cache holds is
ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proto import events as ev
from proto import registry
from proto.events import ObservedChange
from tenon.core.wellknown import DEPLOYMENT_NAME, KARPENTER_MEMBER, NODECLAIM
from tenon.runtime.eventlog import EventLog, PublishResult
from tenon.runtime.eventlog.outbox import Outbox
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, Kube, Relisted, list_and_watch
from tenon.runtime.kube.resources import ResourceRef
from tenon.services.launcher_capi.observations import (
    MachineDeploymentView,
    MachineView,
    machine_deployment_observed,
    machine_deployment_view,
    machine_observed,
    machine_view,
    ref_of,
    resource_version,
)

log = logging.getLogger("tenon.launcher_capi")


def _version_number(obj: Mapping[str, Any]) -> int:
    try:
        return int(resource_version(obj) or 0)
    except ValueError:
        return 0


class ObjectCache:
    """Objects of one kind by ``namespace/name``, fed by a watch and by the answers to the launcher's
    writes."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._bumped = asyncio.Event()
        """Set (and replaced) whenever the cache takes an object: what :meth:`newer_than` waits on."""

    def replace_all(self, items: list[dict[str, Any]]) -> None:
        self.objects = {ref_of(item): item for item in items}
        self.synced.set()
        self._bump()

    def put(self, obj: dict[str, Any]) -> bool:
        """Keep ``obj`` unless the cache holds a newer version of it; whether it was kept."""
        ref = ref_of(obj)
        current = self.objects.get(ref)
        if current is None or _version_number(obj) >= _version_number(current) or _version_number(obj) == 0:
            self.objects[ref] = obj
            self._bump()
            return True
        return False

    async def newer_than(self, ref: str, version: int, timeout: float) -> dict[str, Any] | None:
        """The object at ``ref`` once the cache holds a version after ``version`` (the watch brings every
        change), or None if none came within ``timeout`` seconds or the object is gone."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            obj = self.objects.get(ref)
            if obj is None or _version_number(obj) > version:
                return obj
            bumped, left = self._bumped, deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            try:
                async with asyncio.timeout(left):
                    await bumped.wait()
            except TimeoutError:
                return None

    def _bump(self) -> None:
        self._bumped.set()  # wakes whoever waits for a newer version
        self._bumped = asyncio.Event()

    def remove(self, obj: Mapping[str, Any]) -> None:
        self.objects.pop(ref_of(obj), None)


def _observed(
    kind: str, obj: dict[str, Any], change: ObservedChange, after: str
) -> ev.MachineDeploymentObserved | ev.MachineObserved:
    if kind == "MachineDeployment":
        return machine_deployment_observed(obj, change, after=after)
    return machine_observed(obj, change, after=after)


def _gone(ref: str, uid: str, kind: str) -> dict[str, Any]:
    """The last word on an object that vanished while no watch saw it go."""
    namespace, _, name = ref.partition("/")
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "uid": uid or None}}


class ClusterWatch:
    """Watches MachineDeployments and Machines; publishes what changed in what decisions read."""

    def __init__(
        self,
        management: Kube,
        event_log: EventLog,
        *,
        namespace: str | None,
        deployments: Mapping[str, MachineDeploymentView],
        machines: Mapping[str, MachineView],
        on_deployments_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.management = management
        self.event_log = event_log
        self.namespace = namespace
        self.deployments = ObjectCache()
        self.machines = ObjectCache()
        self.published_deployments = {ref: view.content() for ref, view in deployments.items()}
        self.published_machines = {ref: view.content() for ref, view in machines.items()}
        self.on_deployments_changed = on_deployments_changed
        self.ready = False
        self.observations = 0
        self._lock = asyncio.Lock()
        self.outbox = Outbox(event_log, on_published=self._published, retry=0.5)

    async def run(self) -> None:
        """Both watches, until cancelled."""
        try:
            await asyncio.gather(
                self._watch(MACHINEDEPLOYMENTS, self.deployments, KARPENTER_MEMBER, self._deployment_changed),
                self._watch(MACHINES, self.machines, None, self._machine_changed),
            )
        finally:
            await self.outbox.close()

    async def synced(self) -> None:
        """Wait for both first lists, then publish what differs from the state (the start of a term), and
        wait until it is stored."""
        await asyncio.gather(self.deployments.synced.wait(), self.machines.synced.wait())
        async with self._lock:
            await self._reconcile()
            self.ready = True
        await self.outbox.flushed()

    async def _watch(
        self,
        ref: ResourceRef,
        cache: ObjectCache,
        label_selector: str | None,
        changed: Callable[[dict[str, Any], ObservedChange], Awaitable[None]],
    ) -> None:
        async for change in list_and_watch(
            self.management, ref, self.namespace, label_selector=label_selector
        ):
            if isinstance(change, Relisted):
                cache.replace_all(change.items)
                async with self._lock:
                    if self.ready:
                        await self._reconcile()
                continue
            if change.type == "DELETED":
                cache.remove(change.object)
                kind: ObservedChange = "removed"
            elif cache.put(change.object):
                kind = "added" if change.type == "ADDED" else "changed"
            else:
                continue  # older than what the cache holds
            async with self._lock:  # before the first reconcile, the cache alone is updated: it publishes all
                if self.ready:
                    await changed(change.object, kind)

    async def _deployment_changed(self, md: dict[str, Any], change: ObservedChange) -> None:
        await self._note_deployment(md, change)
        self.on_deployments_changed()
        if change != "removed":
            await self._machines_of_new_members()

    async def _machine_changed(self, machine: dict[str, Any], change: ObservedChange) -> None:
        await self._note_machine(machine, change)

    # --- publishing
    # ---------------------------------------------------------------------------------------------

    async def observe_deployment(self, md: dict[str, Any]) -> None:
        """Feed in a MachineDeployment the launcher wrote or read itself (a patch's answer, a fresh read after
        a
        conflict): cached, and published if what decisions read of it changed."""
        async with self._lock:
            await self._note_deployment(md, "changed")

    async def observe_machine(self, machine: dict[str, Any]) -> None:
        """:meth:`observe_deployment` for a Machine."""
        async with self._lock:
            await self._note_machine(machine, "changed")

    async def written(self, obj: dict[str, Any]) -> None:
        """The answer to one of the launcher's own writes: cached, and not published (the action's record says
        what changed; :meth:`correct` publishes what else changed), nor when the watch shows it."""
        async with self._lock:
            if obj.get("kind") == "MachineDeployment":
                if self.deployments.put(obj):
                    self.published_deployments[ref_of(obj)] = machine_deployment_view(obj).content()
            elif self.machines.put(obj):
                self.published_machines[ref_of(obj)] = machine_view(obj).content()

    async def correct(
        self,
        kind: str,
        ref: str,
        believed: MachineDeploymentView | MachineView | None,
        after: str,
        *,
        always: bool = False,
    ) -> None:
        """Publish the object at ``ref`` as cached (``kind``: MachineDeployment or Machine), naming the
        launcher's action ``after``, when what the decider believes of it differs (or ``always``: the record
        that an action was dropped): after an action, observations stored before it are set aside, so what
        the executor learnt meanwhile must come after it."""
        async with self._lock:
            cache = self.deployments if kind == "MachineDeployment" else self.machines
            published: dict[str, Any] = (
                self.published_deployments if kind == "MachineDeployment" else self.published_machines
            )
            obj = cache.objects.get(ref)
            if obj is None:
                if believed is not None:
                    published.pop(ref, None)
                    await self._publish(_observed(kind, _gone(ref, believed.uid, kind), "removed", after))
                return
            content = (machine_deployment_view if kind == "MachineDeployment" else machine_view)(
                obj
            ).content()
            if not always and believed is not None and believed.content() == content:
                return
            published[ref] = content
            await self._publish(_observed(kind, obj, "changed", after))

    async def _note_deployment(self, md: dict[str, Any], change: ObservedChange) -> None:
        """Publish ``md`` if what decisions read of it changed (also for the answers to our own patches)."""
        ref = ref_of(md)
        if change == "removed":
            if self.published_deployments.pop(ref, None) is not None:
                await self._publish(machine_deployment_observed(md, "removed"))
            return
        if not self.deployments.put(md):
            return  # older than what the cache holds: its news were published already
        content = machine_deployment_view(md).content()
        if self.published_deployments.get(ref) == content:
            return
        first = ref not in self.published_deployments
        self.published_deployments[ref] = content
        await self._publish(machine_deployment_observed(md, "added" if first else "changed"))

    async def _note_machine(self, machine: dict[str, Any], change: ObservedChange) -> None:
        """Publish ``machine`` if it is one the launcher follows and what decisions read of it changed."""
        ref = ref_of(machine)
        if change == "removed":
            if self.published_machines.pop(ref, None) is not None:
                await self._publish(machine_observed(machine, "removed"))
            return
        if not self.machines.put(machine):
            return
        if ref not in self.published_machines and not self._followed(machine):
            return
        content = machine_view(machine).content()
        if self.published_machines.get(ref) == content:
            return
        first = ref not in self.published_machines
        self.published_machines[ref] = content
        await self._publish(machine_observed(machine, "added" if first else "changed"))

    def _followed(self, machine: Mapping[str, Any]) -> bool:
        meta = machine.get("metadata") or {}
        if (meta.get("annotations") or {}).get(NODECLAIM):
            return True
        deployment = (meta.get("labels") or {}).get(DEPLOYMENT_NAME)
        return (
            bool(deployment)
            and f"{meta.get('namespace') or 'default'}/{deployment}" in self.deployments.objects
        )

    async def _machines_of_new_members(self) -> None:
        for ref, machine in list(self.machines.objects.items()):
            if ref not in self.published_machines and self._followed(machine):
                await self._note_machine(machine, "added")

    async def _reconcile(self) -> None:
        """Publish every difference between the caches and what was published (after a list)."""
        for ref, content in list(self.published_deployments.items()):
            if ref not in self.deployments.objects:
                await self._note_deployment(_gone(ref, content.uid, "MachineDeployment"), "removed")
        for md in list(self.deployments.objects.values()):
            await self._note_deployment(md, "changed")
        self.on_deployments_changed()
        for ref, machine_content in list(self.published_machines.items()):
            if ref not in self.machines.objects:
                await self._note_machine(_gone(ref, machine_content.uid, "Machine"), "removed")
        for machine in list(self.machines.objects.values()):
            await self._note_machine(machine, "changed")

    async def _publish(self, event: ev.MachineDeploymentObserved | ev.MachineObserved) -> None:
        """Hand the observation to the outbox: stored after everything observed before it."""
        await self.outbox.put(registry.subject_of(event), event)

    def _published(self, event: ev.Event, result: PublishResult) -> None:
        self.observations += 1
