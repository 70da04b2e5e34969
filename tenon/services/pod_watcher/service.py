"""The pod-watcher's I/O and settings: watches on the workload cluster in, events on the log out.

One :class:`PodWatcher` runs per leadership term (``tenon.runtime.service`` elects the leader; a standby
replica holds no watches). A term has three phases:

1. **Recover** what earlier terms published, from the log: the last event on every ``tenon.cluster.>`` subject
   (``EventLog.last_per_subject``: one record per Node, bound pod and snapshot kind, not the history), and
   which pods were batched within the last ``rebatch`` (``tenon.pending``). A new leader therefore continues
   the story instead of repeating it: unchanged objects produce no event, recently batched pods are not
   offered again before their time, facts are re-asserted when their epoch comes (not all at once), and
   where it derives the same event as its predecessor the deterministic id makes the broker drop the copy.
2. **Watch** pods, nodes, DaemonSets, NodePools (``karpenter.sh/v1``), ClusterAPINodeClasses
   (``karpenter.cluster.x-k8s.io/v1alpha1``) and EC2NodeClasses (``karpenter.k8s.aws/v1``) with
   :func:`tenon.runtime.kube.list_and_watch`, one task each. Every (re-)list is diffed against the recovered
   view, so what disappeared during a gap (a 410, a disconnect, a leader change) is published as ``removed``.
   The decisions are the pure ones in :mod:`.observations`, :mod:`.batching`, :mod:`.pending_batches` and
   :mod:`.resync`; this module only moves data. A custom kind whose CRD is not installed answers 404: its
   source counts as empty (so the NodeClasses snapshot still goes out with the kinds that exist) and is
   probed again every ``absent_kind_retry_seconds``. An object the API returns that cannot be read (no uid,
   no name) is skipped with a warning naming it.
3. **Stop** on ``stopping``: watches end, the open batching window is flushed as a ``shutdown`` batch, and
   the term returns, which releases the lease for the next leader.

**Publishing** Node and bound-pod observations goes through one outbox (:mod:`tenon.runtime.eventlog.outbox`):
a watch hands its events over and goes on, and whatever accumulated is published at once, in order (a burst
of 2,000 pod changes costs a few round trips, and the Node turning Ready a decision waits for does not queue
behind them one round trip each).

**Resync** (:mod:`.resync`): every Node, bound pod and snapshot is published again, unchanged, once per
``resync_interval`` (a quarter of ``TENON_EVENTS_MAX_AGE``), spread over the interval by a hash of each key,
so nothing a decision reads ages out of the log. Re-assertions and watch changes of nodes and pods go
through the same outbox, in the order they were decided, so the log's last word on an object is always its
latest published version; a catch-up (a leader back after more than an interval) goes out in chunks, each
stored before the next is decided, never holding the watches back.

Snapshots are debounced (``snapshot_debounce_seconds``, ~100 ms) so that applying ten NodePools at once logs
one snapshot, and go out only when their content changed (or their resync is due). Publishing failures are
not retried here: the exception ends the term, the runtime starts a new one, and phase 1 rebuilds the state
from the log (crash-only, so there is exactly one recovery path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from proto import registry, subjects
from proto.events import (
    BoundPodObserved,
    DaemonSetsSnapshot,
    Event,
    NodeClassesSnapshot,
    NodeObserved,
    NodePoolsSnapshot,
    PendingBatch,
    PodDisruptionBudgetsSnapshot,
)
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.outbox import Outbox
from tenon.runtime.eventlog.records import PublishResult
from tenon.runtime.kube import resources
from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.resources import Kube, KubeApiError, ResourceRef
from tenon.runtime.kube.watching import Relisted, WatchChange, list_and_watch
from tenon.runtime.observability import metrics
from tenon.runtime.service import CommonSettings, ServiceContext, ServiceDefinition
from tenon.runtime.settings import SettingsError, format_duration, setting
from tenon.services.pod_watcher import observations as obs
from tenon.services.pod_watcher.batching import Batch, PendingBatcher, micros, micros_of
from tenon.services.pod_watcher.decider import BatchingDecider
from tenon.services.pod_watcher.pending_batches import window_events
from tenon.services.pod_watcher.pod_states import PodStates
from tenon.services.pod_watcher.pool_metrics import PoolMetrics
from tenon.services.pod_watcher.resync import ResyncSchedule
from tenon.services.pod_watcher.views import node_view, pod_view

log = logging.getLogger("tenon.pod_watcher")
QUEUE_DEPTH = metrics.SCHEDULING_QUEUE_DEPTH.labels(controller="provisioner", scheduling_id="")
"""``karpenter_scheduler_queue_depth``: the pods waiting to be scheduled, as this watcher knows them
(Karpenter labels each of its scheduling simulations; here there is one queue)."""

RESYNC_CHUNK = 256
"""Re-assertions published together (concurrently) before the watches get the lock back."""


@dataclass(frozen=True)
class PodWatcherSettings(CommonSettings):
    """How the pod-watcher runs: the workload cluster and the batching window (flags and environment)."""

    kubeconfig: str | None = setting(
        "TENON_KUBECONFIG", None, "the workload cluster's kubeconfig (default: in-cluster)", kind="path"
    )
    batch_idle: float = setting(
        "TENON_BATCH_IDLE",
        1.0,
        "close a batching window this long after the last new pending pod",
        kind="duration",
        minimum=0.001,
    )
    batch_max: float = setting(
        "TENON_BATCH_MAX",
        10.0,
        "... or this long after its first pod, whichever comes first (not shorter than TENON_BATCH_IDLE)",
        kind="duration",
        minimum=0.001,
    )
    rebatch: float = setting(
        "TENON_REBATCH",
        5.0,
        "offer a pod still pending this long after its batch again, then twice as long each time (up to 64x)",
        kind="duration",
        minimum=0.001,
    )
    snapshot_debounce_seconds: float = 0.1
    absent_kind_retry_seconds: float = 30.0
    watch_timeout_seconds: int = 300
    batch_max_bytes: int = 8 * 1_048_576
    """Largest PendingBatch message; a bigger window is split into several batches
    (:mod:`.pending_batches`). The broker's own limit, when lower, wins."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for env, value in (
            ("TENON_BATCH_IDLE", self.batch_idle),
            ("TENON_BATCH_MAX", self.batch_max),
            ("TENON_REBATCH", self.rebatch),
        ):
            if not micros(value) > 0:
                raise SettingsError(f"{env}: {value!r} must be at least 1µs")
        if self.batch_max < self.batch_idle:
            raise SettingsError(
                f"TENON_BATCH_MAX ({format_duration(self.batch_max)}) must not be shorter than "
                f"TENON_BATCH_IDLE ({format_duration(self.batch_idle)})"
            )


SNAPSHOT_SOURCES: dict[obs.SnapshotName, tuple[ResourceRef, ...]] = {
    "nodepools": (resources.NODEPOOLS,),
    "nodeclasses": (resources.CLUSTERAPINODECLASSES, resources.EC2NODECLASSES),
    "daemonsets": (resources.DAEMONSETS,),
    "pdbs": (resources.PODDISRUPTIONBUDGETS,),
}
OPTIONAL_KINDS = frozenset({resources.NODEPOOLS, resources.CLUSTERAPINODECLASSES, resources.EC2NODECLASSES})
"""Custom kinds: their CRD may not be installed (an EC2NodeClass on a Cluster API cluster)."""


@dataclass
class _SnapshotSource:
    state: obs.SnapshotState
    refs: tuple[ResourceRef, ...]
    objects: dict[ResourceRef, dict[str, dict[str, Any]]] = field(default_factory=dict)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    resync: int | None = None
    """The epoch of a re-assertion that is due (published with the next snapshot decision)."""

    @property
    def ready(self) -> bool:
        """Every kind has been listed (or found absent): a snapshot now would not omit objects by accident."""
        return all(ref in self.objects for ref in self.refs)

    def current(self) -> list[dict[str, Any]]:
        return [obj for ref in self.refs for obj in self.objects.get(ref, {}).values()]


NODE_READS: tuple[Callable[[Mapping[str, Any]], object], ...] = (obs.node_fingerprint, node_view)


def readable(obj: Mapping[str, Any], reads: tuple[Callable[[Mapping[str, Any]], object], ...]) -> bool:
    """Whether the pod-watcher can read ``obj``: it has a uid and a name, and ``reads`` (what will be computed
    from it) work on it. An object that cannot be read is skipped with a warning naming it, and the rest of
    its list or batch goes on: one bad object must never end the term."""
    try:
        obs.uid_of(obj)
        obs.name_of(obj)
        for read in reads:
            read(obj)
    except (obs.InvalidObject, AttributeError, TypeError, ValueError) as exc:
        log.warning(
            "ignoring an object the API returned",
            extra={"object": obs.describe(obj), "error": f"{type(exc).__name__}: {exc}"},
        )
        return False
    return True


@dataclass(frozen=True, slots=True)
class PodReading:
    """What the pod-watcher computes from a pod, once per change (a 1,000-pod burst is ~7,000 changes). Not
    its view (:func:`.views.pod_view`, twice the cost of the rest): that is made only for a pod that is
    batched or whose fingerprint moved, a few changes in seven."""

    pending: bool
    fingerprint: dict[str, Any]


def read_pod(pod: Mapping[str, Any]) -> PodReading | None:
    """The pod read as :func:`readable` reads an object, or None (warned) when it cannot be read."""
    try:
        obs.uid_of(pod)
        obs.name_of(pod)
        return PodReading(obs.pending_exclusion(pod) is None, obs.bound_pod_fingerprint(pod))
    except (obs.InvalidObject, AttributeError, TypeError, ValueError) as exc:
        log.warning(
            "ignoring an object the API returned",
            extra={"object": obs.describe(pod), "error": f"{type(exc).__name__}: {exc}"},
        )
        return None


def fact_key(event: Event) -> str | None:
    """The resync key of the fact ``event`` publishes (``node/<uid>``, ``pod/<uid>``, ``snapshot/<kind>``)."""
    if isinstance(event, NodeObserved):
        return f"node/{obs.uid_of(event.node)}"
    if isinstance(event, BoundPodObserved):
        return f"pod/{obs.uid_of(event.pod)}"
    for kind in obs.SNAPSHOT_KINDS:
        if isinstance(event, kind.event_type):
            return f"snapshot/{kind.name}"
    return None


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
            idle=micros(settings.batch_idle),
            max_duration=micros(settings.batch_max),
            rebatch=micros(settings.rebatch),
            view=pod_view,
        )
        self.nodes = obs.node_tracker()
        self.bound_pods = obs.bound_pod_tracker()
        self.pod_states = PodStates()
        """``karpenter_pods_state``, kept from the same watches."""
        self.pool_metrics = PoolMetrics()
        """The NodePools' usage and limits, likewise."""
        self.snapshots = {
            kind.name: _SnapshotSource(obs.SnapshotState(kind), SNAPSHOT_SOURCES[kind.name])
            for kind in obs.SNAPSHOT_KINDS
        }
        self.resync = ResyncSchedule(settings.resync_interval)
        self._pending_changed = asyncio.Event()
        self._resync_changed = asyncio.Event()
        self.outbox = Outbox(event_log, on_published=self._stored)
        """Node and bound-pod events, re-assertions included, stored in the order they are decided."""
        self.published: dict[str, int] = {}
        """Events stored per type during this term (duplicates the broker dropped are not counted)."""
        self.schedulable: set[str] | None = None
        """The Nodes pods may land on, as last seen (None until the first list)."""
        self.reasserted = 0
        """Re-assertions published during this term (duplicates included)."""

    def _moment(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _now(self) -> int:
        return micros(self.clock())

    # --- the term -------------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        await self.recover()
        tasks = [
            self._task(self.outbox.failure(), "outbox"),
            self._task(self._watch_pods(), "pods"),
            self._task(self._watch_nodes(), "nodes"),
            self._task(self._batch_loop(), "batches"),
            self._task(self._resync_loop(), "resync"),
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
        await self.outbox.flushed()
        for batch in self.batcher.flush(self._now()):
            await self._publish_batch(batch)
        log.info(
            "pod-watcher term ended", extra={"published": dict(self.published), "reasserted": self.reasserted}
        )

    @staticmethod
    def _task(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coroutine, name=f"pod-watcher:{name}")

    # --- phase 1: recover from the log ----------------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild what earlier terms published (see the module docstring)."""
        restored = 0
        async for record in self.event_log.last_per_subject(subjects.CLUSTER):
            event = record.event
            try:
                known = self._restore(event, record.sequence)
            except obs.InvalidObject as exc:  # the term goes on without it: the next list publishes it anew
                log.warning(
                    "ignoring an unreadable event", extra={"sequence": record.sequence, "error": str(exc)}
                )
                continue
            if known and event is not None:
                self._track(event)
                restored += 1
        batches = await self._recover_batched()
        log.info(
            "recovered from the log",
            extra={
                "cluster_events": restored,
                "nodes": len(self.nodes.known),
                "bound_pods": len(self.bound_pods.known),
                "recent_batches": batches,
                "resync_interval_seconds": self.settings.resync_interval,
            },
        )

    def _restore(self, event: Event | None, sequence: int) -> bool:
        """Fold the last event of one ``tenon.cluster.>`` subject into the view; whether it was ours."""
        if isinstance(event, NodeObserved):
            self.nodes.restore(event.change, event.node)
        elif isinstance(event, BoundPodObserved):
            self.bound_pods.restore(event.change, event.pod)
        elif isinstance(
            event, NodePoolsSnapshot | NodeClassesSnapshot | DaemonSetsSnapshot | PodDisruptionBudgetsSnapshot
        ):
            kind = next(k for k in obs.SNAPSHOT_KINDS if isinstance(event, k.event_type))
            self.snapshots[kind.name].state.published(event, sequence)
        else:
            return False
        return True

    async def _recover_batched(self) -> int:
        """Remember the pods batched within the last ``rebatch``; the number of batches read."""
        since = datetime.fromtimestamp(self.clock() - self.settings.rebatch, UTC)
        if not await self._batched_since(since):
            return 0
        batches = 0
        async for record in self.event_log.read(subjects.PENDING, start_time=since):
            event = record.event
            if isinstance(event, PendingBatch):
                uids = [str((pod.get("metadata") or {}).get("uid")) for pod in event.pods]
                self.batcher.remember_batched(uids, micros_of(event.decided_at))
                batches += 1
        return batches

    async def _batched_since(self, since: datetime) -> bool:
        """Whether the last PendingBatch is recent (a read by start time finding nothing costs a timeout)."""
        last = await self.event_log.last_subject_sequence(subjects.PENDING)
        if last == 0:
            return False
        recent = False
        async for record in self.event_log.read(subjects.PENDING, start_sequence=last, stop_sequence=last):
            recent = record.recorded_at >= since  # one record: the read ends by itself, nothing left open
        return recent

    # --- phase 2: watch and publish -------------------------------------------------------------------------

    def _track(self, event: Event) -> None:
        """Tell the resync schedule that ``event``'s fact was published (or removed)."""
        key = fact_key(event)
        if key is None:
            return
        if getattr(event, "change", None) == "removed":
            self.resync.forget(key)
        else:
            self.resync.published(key, event.decided_at.timestamp())
            self._resync_changed.set()

    async def _publish(self, subject: str, event: Event) -> PublishResult:
        result = await self.event_log.publish(subject, event)
        self._stored(event, result)
        return result

    def _stored(self, event: Event, result: PublishResult) -> None:
        self._track(event)
        if not result.duplicate:
            name = type(event).__name__
            self.published[name] = self.published.get(name, 0) + 1
        log.debug(
            "published",
            extra={
                "type": type(event).__name__,
                "id": event.id,
                "sequence": result.sequence,
                "duplicate": result.duplicate,
            },
        )

    @staticmethod
    def _subject(event: Event) -> str:
        return obs.node_subject(event) if isinstance(event, NodeObserved) else obs.bound_pod_subject(event)

    async def _publish_observations(self, events: list[Event]) -> None:
        """Hand the events to the outbox (they are stored in this order, after what was handed before)."""
        for event in events:
            await self.outbox.put(self._subject(event), event)

    def _watch(self, ref: ResourceRef) -> Any:
        return list_and_watch(self.kube, ref, watch_timeout=self.settings.watch_timeout_seconds)

    async def _watch_pods(self) -> None:
        async for item in self._watch(resources.PODS):
            if isinstance(item, Relisted):
                pods = [pod for pod in item.items if read_pod(pod) is not None]
                self.pod_states.relisted(pods)
                self.batcher.replace_pending(
                    {obs.uid_of(pod): pod for pod in pods if obs.is_pending(pod)}, self._now()
                )
                await self._publish_observations(self.bound_pods.relisted(pods, decided_at=self._moment()))
            else:
                reading = read_pod(item.object)
                if reading is not None:
                    await self._pod_changed(item, reading)
            self._pending_changed.set()
            QUEUE_DEPTH.set(len(self.batcher.pending))

    async def _pod_changed(self, change: WatchChange, reading: PodReading) -> None:
        pod = change.object
        uid = obs.uid_of(pod)
        self.pod_states.pod(pod, deleted=change.type == "DELETED")
        if change.type == "DELETED":
            self.batcher.pod_not_pending(uid, self._now())
            event = self.bound_pods.forget(pod, decided_at=self._moment())
        else:
            if reading.pending:
                self.batcher.pod_pending(uid, pod, self._now())
            else:
                self.batcher.pod_not_pending(uid, self._now())
            event = self.bound_pods.observe(pod, decided_at=self._moment(), fingerprint=reading.fingerprint)
        if event is not None:
            await self._publish_observations([event])

    async def _watch_nodes(self) -> None:
        async for item in self._watch(resources.NODES):
            at = self._moment()
            if isinstance(item, Relisted):
                nodes = [n for n in item.items if readable(n, NODE_READS)]
                for node in nodes:
                    self._node_metrics(node)
                events = self.nodes.relisted(nodes, decided_at=at)
                self._capacity({obs.name_of(n) for n in nodes if obs.is_schedulable(n)})
            elif not readable(item.object, NODE_READS):
                continue
            elif item.type == "DELETED":
                self._node_metrics(item.object, deleted=True)
                events = [e for e in [self.nodes.forget(item.object, decided_at=at)] if e is not None]
                self._capacity((self.schedulable or set()) - {obs.name_of(item.object)})
            else:
                self._node_metrics(item.object)
                events = [e for e in [self.nodes.observe(item.object, decided_at=at)] if e is not None]
                name = obs.name_of(item.object)
                now = (self.schedulable or set()) - {name}
                self._capacity(now | {name} if obs.is_schedulable(item.object) else now)
            await self._publish_observations(events)

    def _node_metrics(self, node: dict[str, Any], deleted: bool = False) -> None:
        self.pod_states.node(node, deleted=deleted)
        self.pool_metrics.node(node, deleted=deleted)

    def _capacity(self, schedulable: set[str]) -> None:
        """Tell the batcher when a Node became schedulable (not at the term's first list: nothing arrived)."""
        before, self.schedulable = self.schedulable, schedulable
        if before is not None and schedulable - before:
            self.batcher.capacity_arrived(self._now())
            self._pending_changed.set()

    # --- batches --------------------------------------------------------------------------------------------

    async def _batch_loop(self) -> None:
        while True:
            for batch in self.batcher.poll(self._now()):
                await self._publish_batch(batch)
            deadline = self.batcher.next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self._now()) / 1_000_000)
            with contextlib.suppress(TimeoutError):
                # not wait_for: on 3.11 it can swallow the cancel that ends the term, and this loop would
                # then wait forever (seen: a stop that never finished)
                async with asyncio.timeout(timeout):
                    await self._pending_changed.wait()
            self._pending_changed.clear()

    async def _publish_batch(self, batch: Batch) -> None:
        made = window_events(batch, self.max_message_bytes())
        for pod in made.too_large:
            log.error("pod left out of its batch: too large for any message", extra={"pod": pod})
        for event in made.events:
            result = await self._publish(subjects.PENDING, event)
            log.info(
                "pending batch",
                extra={
                    "batch_id": event.batch_id,
                    "pods": len(event.pods),
                    "closed_by": batch.closed_by,
                    "part": f"{event.window_part}/{event.window_parts}",
                    "window_seconds": round((batch.closed_at - batch.opened_at) / 1_000_000, 3),
                    "sequence": result.sequence,
                },
            )

    def max_message_bytes(self) -> int:
        """The largest batch message: the broker's limit, capped by the setting."""
        return min(self.settings.batch_max_bytes, self.event_log.max_message_size)

    # --- resync ---------------------------------------------------------------------------------------------

    async def _resync_loop(self) -> None:
        while True:
            due = self.resync.due(self.clock(), limit=RESYNC_CHUNK)
            if due:
                await self.reassert(due)
                continue  # more may be due: the watches had the lock in between
            upcoming = self.resync.next_due()
            timeout = None if upcoming is None else max(0.0, upcoming - self.clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not wait_for: see _batch_loop
                    await self._resync_changed.wait()
            self._resync_changed.clear()

    async def reassert(self, due: list[tuple[str, int]]) -> None:
        """Publish these facts again, unchanged, each with the id of its resync epoch."""
        at = self._moment()
        events: list[Event] = []
        for key, epoch in due:
            kind, _, ident = key.partition("/")
            if kind == "snapshot":
                source = self.snapshots[ident]  # type: ignore[index]
                source.resync = epoch
                source.dirty.set()  # re-asserted by its own loop, in order with its changes
                continue
            tracker = self.nodes if kind == "node" else self.bound_pods
            event = tracker.reassert(ident, epoch, decided_at=at)
            if event is not None:
                events.append(event)
        await self._publish_observations(events)
        await self.outbox.flushed()  # this chunk stored before the next is decided
        self.reasserted += len(events)
        if events:
            log.info(
                "re-asserted", extra={"facts": len(events), "why": "resync: keep them inside the retention"}
            )

    # --- snapshots ------------------------------------------------------------------------------------------

    async def _watch_snapshot_kind(self, source: _SnapshotSource, ref: ResourceRef) -> None:
        while ref in OPTIONAL_KINDS and not await self._kind_served(ref):
            source.objects[ref] = {}  # absent: the snapshot goes out with the kinds that exist
            source.dirty.set()
            await asyncio.sleep(self.settings.absent_kind_retry_seconds)
        async for item in self._watch(ref):
            if isinstance(item, Relisted):
                reads = (source.state.kind.view,)
                source.objects[ref] = {obs.uid_of(o): o for o in item.items if readable(o, reads)}
            elif readable(item.object, (source.state.kind.view,)):
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
                continue  # a due re-assertion waits for the listing too
            resync, source.resync = source.resync, None
            if source.state.kind.name == "nodepools":
                self.pool_metrics.nodepools(source.current())
            event = source.state.decide(source.current(), decided_at=self._moment(), resync=resync)
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
                    "resync": resync is not None,
                },
            )


async def work(ctx: ServiceContext, settings: PodWatcherSettings) -> None:
    """The leader's work: one :class:`PodWatcher` term (the pod-watcher follows the cluster, not the log)."""
    kube = await load_kube(settings.kubeconfig, component=registry.POD_WATCHER)
    try:
        await PodWatcher(kube, ctx.event_log, settings).run(ctx.stopping)
    finally:
        await kube.close()


def make_decider(settings: PodWatcherSettings) -> BatchingDecider:
    """The batching decision, for ``tenon replay pod-watcher`` (it reads its settings from the batches)."""
    return BatchingDecider()


SERVICE = ServiceDefinition(
    name=registry.POD_WATCHER,
    description=(
        "Watch the workload cluster; publish pending-pod batches and the cluster facts decisions read, "
        "re-asserted so that none ages out of the log."
    ),
    settings=PodWatcherSettings,
    work=work,
    decider=make_decider,
)
