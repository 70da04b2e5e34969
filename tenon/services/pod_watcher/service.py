"""The pod-watcher's I/O: watches on the workload cluster in, events on the log out.

One :class:`PodWatcher` runs per leadership term (``tenon.runtime.service`` elects the leader; a standby replica holds
no watches). A term has three phases:

1. **Recover** what earlier terms published, from the log: the last published version of every Node and
   bound pod (``tenon.cluster.>``), the last snapshot of each kind with its sequence, and which pods were
   batched within the last ``rebatch`` seconds (``tenon.pending``). A new leader therefore continues the
   story instead of repeating it: unchanged objects produce no event, recently batched pods are not offered
   again before their time, and where it does derive the same event as its predecessor (a snapshot step, a
   change at the same resourceVersion) the deterministic id makes JetStream drop the copy.
2. **Watch** pods, nodes, DaemonSets, NodePools (``karpenter.sh/v1``), ClusterAPINodeClasses
   (``karpenter.cluster.x-k8s.io/v1alpha1``) and EC2NodeClasses (``karpenter.k8s.aws/v1``) with
   :func:`tenon.runtime.kube.list_and_watch`, one task each. Every (re-)list is diffed against the recovered view,
   so what disappeared during a gap (a 410, a disconnect, a leader change) is published as ``removed``.
   The decisions are the pure ones in :mod:`.observations` and :mod:`.batching`; this module only moves data.
   A custom kind whose CRD is not installed answers 404: its source counts as empty (so the NodeClasses
   snapshot still goes out with the kinds that exist) and is probed again every ``absent_kind_retry`` seconds.
3. **Stop** on ``stopping``: watches end, the open batching window is flushed as a ``shutdown`` batch, and
   the term returns, which releases the lease for the next leader.

A window whose pods would not fit in one broker message (NATS refuses messages over its ``max_payload``,
1 MiB by default: roughly 500 to 1,000 pods) goes out as several ``PendingBatch`` events with the same
``windowOpenedAt``, pods of one workload kept together; a single pod too large for any message is left out
with an error log naming it (it would otherwise fail every batch, forever).

Snapshots are debounced (``snapshot_debounce`` seconds, ~100 ms) so that applying ten NodePools at once logs
one snapshot, and go out only when their content changed. Publishing failures are not retried here: the
exception ends the term, the election starts a new one, and phase 1 rebuilds the state from the log
(crash-only, so there is exactly one recovery path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from proto import subjects
from proto.codec import UndecodableEvent, decode
from proto.events import (
    BoundPodObserved,
    DaemonSetsSnapshot,
    Event,
    NodeClassesSnapshot,
    NodeObserved,
    NodePoolsSnapshot,
    PendingBatch,
)
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.records import PublishResult
from tenon.runtime.kube import resources
from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.resources import Kube, KubeApiError, ResourceRef
from tenon.runtime.kube.watching import Relisted, WatchChange, list_and_watch
from tenon.runtime.service import ServiceContext, Work
from tenon.services.pod_watcher import observations as obs
from tenon.services.pod_watcher.batching import Batch, PendingBatcher

log = logging.getLogger("tenon.pod_watcher")

SERVICE_NAME = "pod-watcher"


@dataclass(frozen=True)
class PodWatcherSettings:
    """How the pod-watcher runs (flags and environment in ``__main__``)."""

    kubeconfig: str | None = None
    """The workload cluster's kubeconfig; ``None``: the in-cluster service account."""
    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    rebatch_seconds: float = 5.0
    """A pod still pending this long after its batch is offered again: the kube-scheduler may have packed the
    new nodes differently from the plan, and the pod must not wait long for the room it lacks."""
    snapshot_debounce_seconds: float = 0.1
    absent_kind_retry_seconds: float = 30.0
    watch_timeout_seconds: int = 300
    batch_max_bytes: int = 8 * 1_048_576
    """Largest PendingBatch message; a bigger window is split into several batches (see
    :func:`.observations.split_for_payload`). The broker's own limit, when lower, wins."""

    def __post_init__(self) -> None:
        for name in (
            "batch_idle_seconds",
            "batch_max_seconds",
            "rebatch_seconds",
            "absent_kind_retry_seconds",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"pod-watcher settings: {name} must be a positive number, got {value!r}")
        if self.snapshot_debounce_seconds < 0:
            raise ValueError(
                "pod-watcher settings: snapshot_debounce_seconds must not be negative, "
                f"got {self.snapshot_debounce_seconds!r}"
            )
        if self.batch_max_seconds < self.batch_idle_seconds:
            raise ValueError(
                f"pod-watcher settings: batch_max_seconds ({self.batch_max_seconds}) must not be "
                f"shorter than batch_idle_seconds ({self.batch_idle_seconds})"
            )


SNAPSHOT_SOURCES: dict[obs.SnapshotName, tuple[ResourceRef, ...]] = {
    "nodepools": (resources.NODEPOOLS,),
    "nodeclasses": (resources.CLUSTERAPINODECLASSES, resources.EC2NODECLASSES),
    "daemonsets": (resources.DAEMONSETS,),
}
OPTIONAL_KINDS = frozenset({resources.NODEPOOLS, resources.CLUSTERAPINODECLASSES, resources.EC2NODECLASSES})
"""Custom kinds: their CRD may not be installed (an EC2NodeClass on a Cluster API cluster)."""


@dataclass
class _SnapshotSource:
    state: obs.SnapshotState
    refs: tuple[ResourceRef, ...]
    objects: dict[ResourceRef, dict[str, dict[str, Any]]] = field(default_factory=dict)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ready(self) -> bool:
        """Every kind has been listed (or found absent): a snapshot now would not omit objects by accident."""
        return all(ref in self.objects for ref in self.refs)

    def current(self) -> list[dict[str, Any]]:
        return [obj for ref in self.refs for obj in self.objects.get(ref, {}).values()]


class PodWatcher:
    """One leadership term of the pod-watcher (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        event_log: EventLog,
        settings: PodWatcherSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.event_log = event_log
        self.settings = settings
        self.clock = clock
        self.batcher = PendingBatcher(
            idle=settings.batch_idle_seconds,
            max_duration=settings.batch_max_seconds,
            rebatch=settings.rebatch_seconds,
            clock=clock,
        )
        self.nodes = obs.node_tracker()
        self.bound_pods = obs.bound_pod_tracker()
        self.snapshots = {
            kind.name: _SnapshotSource(obs.SnapshotState(kind), SNAPSHOT_SOURCES[kind.name])
            for kind in obs.SNAPSHOT_KINDS
        }
        self._pending_changed = asyncio.Event()
        self.published: dict[str, int] = {}
        """Events stored per type during this term (duplicates the broker dropped are not counted)."""

    # --- the term ---------------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        await self.recover()
        tasks = [
            self._task(self._watch_pods(), "pods"),
            self._task(self._watch_nodes(), "nodes"),
            self._task(self._batch_loop(), "batches"),
        ]
        for source in self.snapshots.values():
            tasks.append(self._task(self._snapshot_loop(source), f"snapshot:{source.state.kind.name}"))
            for ref in source.refs:
                tasks.append(self._task(self._watch_snapshot_kind(source, ref), f"watch:{ref.plural}"))
        stop = asyncio.create_task(stopping.wait())
        try:
            done, _ = await asyncio.wait({stop, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stop:
                    task.result()  # a watch or loop ended: raise its error (ends the term)
                    raise RuntimeError(f"pod-watcher task {task.get_name()} ended unexpectedly")
        finally:
            stop.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(stop, *tasks, return_exceptions=True)
        batch = self.batcher.flush()
        if batch is not None:
            await self._publish_batch(batch)
        log.info("pod-watcher term ended", extra={"published": dict(self.published)})

    @staticmethod
    def _task(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coroutine, name=f"pod-watcher:{name}")

    # --- phase 1: recover from the log ------------------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild what earlier terms published (see the module docstring)."""
        restored = 0
        async for sequence, event in self._last_cluster_events():
            if isinstance(event, NodeObserved):
                self.nodes.restore(event.change, event.node)
            elif isinstance(event, BoundPodObserved):
                self.bound_pods.restore(event.change, event.pod)
            elif isinstance(event, NodePoolsSnapshot | NodeClassesSnapshot | DaemonSetsSnapshot):
                kind = next(k for k in obs.SNAPSHOT_KINDS if isinstance(event, k.event_type))
                self.snapshots[kind.name].state.published(event, sequence)
            else:
                continue
            restored += 1
        since = datetime.fromtimestamp(self.clock() - self.settings.rebatch_seconds, UTC)
        batches = 0
        if await self._batched_since(since):
            async for record in self.event_log.read(subjects.PENDING, start_time=since):
                event = record.event
                if isinstance(event, PendingBatch):
                    uids = [str((pod.get("metadata") or {}).get("uid")) for pod in event.pods]
                    self.batcher.remember_batched(uids, event.decided_at.timestamp())
                    batches += 1
        log.info(
            "recovered from the log",
            extra={
                "cluster_events": restored,
                "nodes": len(self.nodes.known),
                "bound_pods": len(self.bound_pods.known),
                "recent_batches": batches,
            },
        )

    async def _batched_since(self, since: datetime) -> bool:
        """Whether the last PendingBatch is recent (a read by start time that finds nothing costs a timeout)."""
        last = await self.event_log.last_subject_sequence(subjects.PENDING)
        if last == 0:
            return False
        recent = False
        async for record in self.event_log.read(subjects.PENDING, start_sequence=last, stop_sequence=last):
            recent = record.recorded_at >= since  # one record: the read ends by itself, nothing left open
        return recent

    async def _last_cluster_events(self) -> AsyncIterator[tuple[int, Event | None]]:
        """The last event on each ``tenon.cluster.>`` subject, which is all the view needs: every subject is
        one object (or one snapshot kind), and its last event says whether it exists and what it was.

        On JetStream this is a last-per-subject delivery, so a leader change costs one message per object
        rather than the whole retained history (measured: about 7,000 events/s when reading it all). Any
        other log is read whole; folding in order gives the same view."""
        js = getattr(self.event_log, "js", None)
        if not isinstance(js, JetStreamContext):
            async for record in self.event_log.read(subjects.CLUSTER):
                yield record.sequence, record.event
            return
        try:
            info = await js.stream_info(subjects.EVENTS_STREAM, subjects_filter=subjects.CLUSTER)
        except NotFoundError:
            return
        expected = len(info.state.subjects or {})
        if expected == 0:
            return
        config = ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
        subscription = await js.subscribe(
            subjects.CLUSTER, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config
        )
        try:
            for _ in range(expected):
                try:
                    message = await subscription.next_msg(timeout=5.0)
                except NatsTimeoutError:
                    return  # a subject vanished meanwhile (retention): nothing more is coming
                try:
                    event: Event | None = decode(message.data)
                except UndecodableEvent:
                    event = None
                yield int(message.metadata.sequence.stream), event
                if message.metadata.num_pending == 0:
                    return
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    # --- phase 2: watch and publish ---------------------------------------------------------------------------

    async def _publish(self, subject: str, event: Event) -> PublishResult:
        result = await self.event_log.publish(subject, event)
        if not result.duplicate:
            name = type(event).__name__
            self.published[name] = self.published.get(name, 0) + 1
        log.debug(
            "published",
            extra={
                "subject": subject,
                "type": type(event).__name__,
                "id": event.id,
                "sequence": result.sequence,
                "duplicate": result.duplicate,
            },
        )
        return result

    async def _publish_observations(self, events: list[Event]) -> None:
        for event in events:
            subject = (
                obs.node_subject(event) if isinstance(event, NodeObserved) else obs.bound_pod_subject(event)
            )
            await self._publish(subject, event)

    @staticmethod
    def _valid(obj: Mapping[str, Any]) -> bool:
        try:
            obs.uid_of(obj)
            obs.name_of(obj)
        except obs.InvalidObject as exc:
            log.warning("ignoring an object the API returned", extra={"error": str(exc)})
            return False
        return True

    def _watch(self, ref: ResourceRef) -> Any:
        return list_and_watch(self.kube, ref, watch_timeout=self.settings.watch_timeout_seconds)

    async def _watch_pods(self) -> None:
        async for item in self._watch(resources.PODS):
            if isinstance(item, Relisted):
                pods = [pod for pod in item.items if self._valid(pod)]
                self.batcher.replace_pending(
                    {obs.uid_of(pod): obs.trimmed(pod) for pod in pods if obs.is_pending(pod)}
                )
                await self._publish_observations(self.bound_pods.relisted(pods))
            elif self._valid(item.object):
                await self._pod_changed(item)
            self._pending_changed.set()

    async def _pod_changed(self, change: WatchChange) -> None:
        pod = change.object
        uid = obs.uid_of(pod)
        if change.type == "DELETED":
            self.batcher.pod_not_pending(uid)
            event = self.bound_pods.forget(pod)
        else:
            if obs.is_pending(pod):
                self.batcher.pod_pending(uid, obs.trimmed(pod))
            else:
                self.batcher.pod_not_pending(uid)
            event = self.bound_pods.observe(pod)
        if event is not None:
            await self._publish_observations([event])

    async def _watch_nodes(self) -> None:
        async for item in self._watch(resources.NODES):
            if isinstance(item, Relisted):
                events = self.nodes.relisted([node for node in item.items if self._valid(node)])
            elif not self._valid(item.object):
                continue
            elif item.type == "DELETED":
                events = [e for e in [self.nodes.forget(item.object)] if e is not None]
            else:
                events = [e for e in [self.nodes.observe(item.object)] if e is not None]
            await self._publish_observations(events)

    async def _batch_loop(self) -> None:
        while True:
            batch = self.batcher.poll()
            if batch is not None:
                await self._publish_batch(batch)
            deadline = self.batcher.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pending_changed.wait(), timeout)
            self._pending_changed.clear()

    async def _publish_batch(self, batch: Batch) -> None:
        # by namespace and name, so that when a window must be split, pods of one workload stay together
        pods = sorted(batch.pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]))
        sendable = []
        for pod in pods:
            try:
                obs.split_for_payload([pod], self._max_payload())
            except obs.PodTooLarge as exc:
                log.error("pod left out of its batch", extra={"error": str(exc)})
                continue
            sendable.append(pod)
        parts = obs.split_for_payload(sendable, self._max_payload())
        for index, part in enumerate(parts):
            event = obs.pending_batch_event(
                part, opened_at=batch.opened_at, closed_at=batch.closed_at, closed_by=batch.closed_by
            )
            result = await self._publish(subjects.PENDING, event)
            log.info(
                "pending batch",
                extra={
                    "batch_id": event.batch_id,
                    "pods": len(event.pods),
                    "closed_by": batch.closed_by,
                    "part": f"{index + 1}/{len(parts)}",
                    "window_seconds": round(batch.closed_at - batch.opened_at, 3),
                    "sequence": result.sequence,
                },
            )

    def _max_payload(self) -> int:
        """The broker's message size limit (what the server announced), capped by the setting."""
        announced = getattr(getattr(self.event_log, "client", None), "max_payload", None)
        limit = self.settings.batch_max_bytes
        return min(limit, announced) if isinstance(announced, int) and announced > 0 else limit

    async def _watch_snapshot_kind(self, source: _SnapshotSource, ref: ResourceRef) -> None:
        while ref in OPTIONAL_KINDS and not await self._kind_served(ref):
            source.objects[ref] = {}  # absent: the snapshot goes out with the kinds that exist
            source.dirty.set()
            await asyncio.sleep(self.settings.absent_kind_retry_seconds)
        async for item in self._watch(ref):
            if isinstance(item, Relisted):
                source.objects[ref] = {obs.uid_of(o): o for o in item.items if self._valid(o)}
            elif self._valid(item.object):
                objects = source.objects.setdefault(ref, {})
                if item.type == "DELETED":
                    objects.pop(obs.uid_of(item.object), None)
                else:
                    objects[obs.uid_of(item.object)] = item.object
            source.dirty.set()

    async def _kind_served(self, ref: ResourceRef) -> bool:
        """False when the API server does not serve this kind (404: its CRD is not installed)."""
        try:
            await self.kube.request("GET", ref.path(), query={"limit": 1})
        except KubeApiError as exc:
            if exc.status == 404:
                log.info(
                    "kind not served; treating it as empty",
                    extra={
                        "resource": f"{ref.plural}.{ref.api_version}",
                        "retry_seconds": self.settings.absent_kind_retry_seconds,
                    },
                )
                return False
        return True  # other errors: list_and_watch retries them with backoff

    async def _snapshot_loop(self, source: _SnapshotSource) -> None:
        while True:
            await source.dirty.wait()
            await asyncio.sleep(self.settings.snapshot_debounce_seconds)
            source.dirty.clear()
            if not source.ready:
                continue
            event = source.state.decide(source.current())
            if event is None:
                continue
            result = await self._publish(source.state.kind.subject, event)
            source.state.published(event, result.sequence)
            log.info(
                "snapshot",
                extra={
                    "kind": source.state.kind.name,
                    "objects": len(source.current()),
                    "sequence": result.sequence,
                },
            )


def make_work(settings: PodWatcherSettings) -> Work:
    """The leader's work for :func:`tenon.runtime.service.serve`: one :class:`PodWatcher` term per leadership."""

    async def work(ctx: ServiceContext) -> None:
        try:
            kube = await load_kube(settings.kubeconfig)
            try:
                await PodWatcher(kube, ctx.event_log, settings).run(ctx.stopping)
            finally:
                await kube.close()
        except Exception:
            # the election only sees that the term ended; say why here, then let it campaign again
            log.exception(
                "pod-watcher term failed; the next term starts over from the log",
                extra={"identity": ctx.identity},
            )
            raise

    return work
