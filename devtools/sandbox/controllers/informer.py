"""List-then-watch caches and delayed work queues: the plumbing every sandbox controller runs on.

Controllers follow the client-go pattern, in-process against the sandbox ``Store``:

* an :class:`Informer` lists a resource, keeps a local copy of every object (``objects``, keyed by
  ``namespace/name``), then watches from the list's resourceVersion and calls its handlers with
  ``(event_type, new, old)`` for every change. If the watch ends it resumes from the last resourceVersion it
  saw; if the store answers 410 Expired (history compacted) it re-lists and emits the differences as
  synthetic ADDED/MODIFIED/DELETED events, so handlers never miss a deletion. Every ``resync_period`` it
  replays its cache to the handlers (``old`` is the object itself), which re-queues every key: the safety
  net that makes a controller recover from a dropped write or a bug; every ``RELIST_FACTOR`` resyncs it also
  re-lists from the store.
* an :class:`InformerFactory` shares one informer per resource and store between controllers (seven
  controllers watch pods; each event is decoded and cached once). Cached objects are read-only: controllers
  copy before they modify. ``observe_write`` puts the result of a controller's own write into the cache at
  once (write-through), so a second reconcile before the watch event arrives sees it; the watch event for
  that same version is then ignored.
* a :class:`WorkQueue` holds keys to reconcile, each at most once, with the earliest due time winning; a
  worker (:func:`run_worker`) pops due keys and calls the controller's synchronous ``reconcile(key)``, which
  returns ``None`` when done or a delay in seconds to be called again (the simulated component is waiting
  for a timer to expire). An ``ApiError`` such as a 409 Conflict from a stale write re-queues the key after a
  short backoff rather than killing the controller. Handlers that see bursts (pod events) enqueue with a
  small delay, so a burst of 500 pod changes causes one reconcile of their owner, not 500.

Handlers run inside the watch task and must be quick: they update indexes and enqueue keys; the writes
happen in ``reconcile``. The store is synchronous and in-process, so a reconcile is a short, non-blocking
sequence of calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devtools.sandbox.profiles import TimingProfile

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from devtools.sandbox.errors import ApiError, Expired

log = logging.getLogger(__name__)

TURN_SLICE_S = 0.005
"""Longest a controller runs before it lets the event loop turn. The API server shares the thread, and a
request needs several turns to be read, handled and answered: while nodes joined in the 1,000-pod burst the
scheduler's cycle held turns of 100-235 ms, and every request tenon made waited 0.3-0.8 s."""

CLOUD_SLICE_CAP_S = 0.05
"""Longest the simulated cloud's worker (the Cluster API controller's) runs in one turn, when it waited that
long for it.

A worker yielding after :data:`TURN_SLICE_S` gets one slice per turn of the loop, however long the turn: the
API server's requests, watch writes and informers each take turns of their own, so the more tenon asks, the
less the simulated cloud gets done, where in the field it runs elsewhere. Under the 1,000-pod e2e wave the
Cluster API worker ran a few reconciles per turn, and Machines got their providerID 2.1-3.8 s after they were
created (p90, five runs; the fast profile says 0.15 s), which then counted in tenon's ``Planned ->
Launched``. Running as long as it waited for its turn, it keeps about half the thread when the loop is
saturated: p90 0.41-0.46 s in four runs, never over 0.5 s (2026-12-03; measured with every worker on fair
slices, below). That is the profile kept, not a faster stack: the API server's answers then wait for the
Cluster API work done sooner, and all Running on the 1,000-pod run was no faster (:mod:`bench.e2e`).

Only that worker: its work is a few steps per Machine. Given to every worker (the kubelets' and the
DaemonSet controller's too), the scale run's 10,000-pod wave took 308 s instead of 164 s and left 36 pods
never Running, most likely because the sandbox's scheduler, on 5 ms slices, got what they left: pods waited
to be placed, were planned again and again (about 590 claims bought for the same 869 pods), and the sandbox
spent 279 CPU s in that wave (146 s before). Given to the scheduler too, ``Launched -> Registered`` on the
1,000-pod run (the Node patches and pod nominations tenon sends while Nodes join) had a p99 of 2.5 and 4.2 s
in two runs, against 1.9-2.1 s without."""


class TurnSlice:
    """Cooperative time slicing for a loop of synchronous steps: ``await slice.pause()`` after each step
    yields to the event loop once the slice has passed since the last yield (and returns whether it did).

    The slice is ``seconds``; with ``fair_up_to``, it is as long as the last wait for a turn (at least
    ``seconds``, at most ``fair_up_to``): the loop's share of the thread does not shrink with the number of
    others queued for it (:data:`CLOUD_SLICE_CAP_S`)."""

    def __init__(
        self,
        seconds: float = TURN_SLICE_S,
        *,
        fair_up_to: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.base = self.seconds = seconds
        self.fair_up_to = fair_up_to
        self._clock = clock
        self._since = clock()

    async def pause(self) -> bool:
        paused_at = self._clock()
        if paused_at - self._since < self.seconds:
            return False
        await asyncio.sleep(0)
        self._since = self._clock()
        if self.fair_up_to is not None:
            self.seconds = min(self.fair_up_to, max(self.base, self._since - paused_at))
        return True


RELIST_FACTOR = 10  # a full re-list every this many resync periods; resyncs in between replay the cache
Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]


class WatchLike(Protocol):
    def __aiter__(self) -> Any: ...
    def close(self) -> Any: ...


class StoreLike(Protocol):
    """The part of ``devtools.sandbox.store.Store`` the controllers use."""

    def resource(self, api_version: str, kind_or_plural: str) -> Any: ...
    def get(self, rt: Any, name: str, namespace: str | None = None) -> dict[str, Any]: ...
    def list(
        self, rt: Any, namespace: str | None = None, label_selector: Any = None, field_selector: Any = None
    ) -> tuple[list[dict[str, Any]], str]: ...
    def create(self, rt: Any, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...
    def update(self, rt: Any, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]: ...
    def delete(
        self,
        rt: Any,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str = "Background",
    ) -> Any: ...
    def bind(
        self, name: str, namespace: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> Any: ...
    def evict(self, name: str, namespace: str, delete_options: dict[str, Any] | None = None) -> Any: ...
    def watch(
        self,
        rt: Any,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: Any = None,
        field_selector: Any = None,
    ) -> Any: ...


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def split_key(key: str) -> tuple[str | None, str]:
    if "/" in key:
        namespace, name = key.split("/", 1)
        return namespace, name
    return None, key


class Informer:
    def __init__(self, store: StoreLike, rt: Any, resync_period: float, name: str = "") -> None:
        self.store = store
        self.rt = rt
        self.resync_period = resync_period
        self.name = name or getattr(rt, "plural", str(rt))
        self.objects: dict[str, dict[str, Any]] = {}
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self._resource_version: str | None = None
        self._watch: Any = None
        """The watch being consumed (what :meth:`catch_up` reads)."""

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def _emit(self, event_type: str, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        for handler in self.handlers:
            try:
                handler(event_type, new, old)
            except Exception:  # a handler bug must not stop the cache
                log.exception(
                    "sandbox informer %s: handler failed on %s %s", self.name, event_type, object_key(new)
                )

    def _relist(self) -> None:
        items, resource_version = self.store.list(self.rt)
        fresh = {object_key(obj): obj for obj in items}
        for key, gone in list(self.objects.items()):
            if key not in fresh:
                del self.objects[key]
                self._emit("DELETED", gone, gone)
        for key, obj in fresh.items():
            old = self.objects.get(key)
            self.objects[key] = obj
            if old is None:
                self._emit("ADDED", obj, None)
            elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                "resourceVersion"
            ):
                self._emit("MODIFIED", obj, old)
        self._resource_version = resource_version
        self.synced.set()

    def _apply(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self._resource_version = meta["resourceVersion"]
        if event_type == "BOOKMARK":
            return
        key = object_key(obj)
        old = self.objects.get(key)
        if event_type == "DELETED":
            if old is None or (old.get("metadata") or {}).get("uid") != meta.get("uid"):
                return  # already removed by write-through (or a newer object took the name)
            self.objects.pop(key, None)
            self._emit("DELETED", obj, old)
            return
        if (
            old is not None
            and _rv(old) >= _rv(obj)
            and (old.get("metadata") or {}).get("uid") == meta.get("uid")
        ):
            return  # this version (or a newer one) is already in the cache via write-through
        self.objects[key] = obj
        self._emit("ADDED" if old is None else "MODIFIED", obj, old)

    def catch_up(self) -> None:
        """Apply every event the watch has queued, now, without waiting.

        The informer reads its backlog in slices (:class:`TurnSlice`), and another informer's slice may come
        first. Under the 1,000-pod e2e wave the pod informer fell behind the Node informer: the simulated
        kube-scheduler saw a Node lose its unregistered taint before it saw the nominations written before
        that patch (traced: a pod bound to a Node the store had 6 pods nominated to, none of them known to
        the scheduler), and put other pods in the room they held. A real kube-scheduler's informers run
        beside its scheduling loop, milliseconds behind the API server; a controller that calls this before
        it decides reads the store as of now, as they would. Only the in-process store's watch queues events
        that can be taken this way; another leaves nothing to do."""
        take = getattr(self._watch, "take_queued", None)
        for event in take() if take is not None else ():
            self._apply(event.type, event.object)

    def observe_write(self, key: str, obj: dict[str, Any] | None) -> None:
        """Write-through: put the result of our own write in the cache now, ahead of its watch event.

        ``obj`` is what the store returned (None when the write removed the object). Without this a
        controller acting twice before its watch catches up would, e.g., create the same pods twice.
        """
        old = self.objects.get(key)
        if obj is None:
            if old is not None:
                del self.objects[key]
                self._emit("DELETED", old, old)
            return
        if old is not None and _rv(old) >= _rv(obj):
            return
        self.objects[key] = obj
        self._emit("ADDED" if old is None else "MODIFIED", obj, old)

    def _replay(self) -> None:
        """Periodic resync: hand every cached object to the handlers again (``old`` is the object itself)."""
        for obj in list(self.objects.values()):
            self._emit("MODIFIED", obj, obj)

    async def run(self) -> None:
        """List, then watch until cancelled.

        Every ``resync_period`` the cache is replayed to the handlers (client-go's resync: no API traffic);
        every ``RELIST_FACTOR`` resync periods, on 410 Expired, and whenever the watch cannot be re-opened,
        the resource is listed again and differences are emitted.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._relist()
            except ApiError as err:
                log.warning("sandbox informer %s: list failed: %s", self.name, err)
                await asyncio.sleep(min(1.0, self.resync_period))
                continue
            next_relist = loop.time() + self.resync_period * RELIST_FACTOR
            next_resync = loop.time() + self.resync_period
            while loop.time() < next_relist:
                try:
                    watch = self.store.watch(self.rt, resource_version=self._resource_version)
                except Expired:
                    break
                self._watch = watch
                try:
                    expired = await self._consume(watch, next_resync)
                finally:
                    self._watch = None
                    with contextlib.suppress(Exception):
                        result = watch.close()
                        if asyncio.iscoroutine(result):
                            await result
                if expired:
                    break
                if loop.time() >= next_resync:
                    self._replay()
                    next_resync = loop.time() + self.resync_period

    async def _consume(self, watch: Any, deadline: float) -> bool:
        """Feed events until the watch ends or the resync deadline; True if the history expired."""
        loop = asyncio.get_running_loop()
        iterator = watch.__aiter__()
        turn = TurnSlice()
        while True:
            await turn.pause()  # a queued backlog is read without suspending
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                if getattr(watch, "pending", 0) > 0:
                    # queued already: taken without suspending, so no deadline to arm (a timer armed and
                    # cancelled per event was a tenth of the informers' time in the 1,000-pod run)
                    event = await iterator.__anext__()
                else:
                    async with asyncio.timeout(remaining):  # not wait_for: on 3.11 it can swallow a cancel
                        event = await iterator.__anext__()
            except (StopAsyncIteration, TimeoutError):
                return False
            except Expired:
                return True
            event_type = getattr(event, "type", None) or event["type"]
            obj = getattr(event, "object", None) or event["object"]
            if event_type == "ERROR":
                return True
            self._apply(event_type, obj)


class InformerFactory:
    """Shared informers: one cache and one watch per resource type and store, whoever asks for it.

    Like client-go's SharedInformerFactory: with seven controllers watching pods, each watch event is
    decoded once instead of seven times. Controllers must treat cached objects as read-only (they copy
    before modifying). :meth:`start` launches the informers not yet running; :meth:`stop` ends them all.
    """

    def __init__(self, store: StoreLike, resync_period: float) -> None:
        self.store = store
        self.resync_period = resync_period
        self._informers: dict[Any, Informer] = {}
        self._tasks: dict[Any, asyncio.Task[None]] = {}

    def informer(self, rt: Any, name: str = "") -> Informer:
        key = getattr(rt, "storage_key", rt)
        found = self._informers.get(key)
        if found is None:
            found = self._informers[key] = Informer(self.store, rt, self.resync_period, name)
        return found

    async def start(self, *informers: Informer) -> None:
        """Run the given informers (if not already running) and wait until each has listed once."""
        for key, informer in self._informers.items():
            if informer in informers and key not in self._tasks:
                self._tasks[key] = asyncio.create_task(informer.run(), name=f"informer-{informer.name}")
        for informer in informers:
            await informer.synced.wait()

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def failed(self) -> BaseException | None:
        """The error of an informer task that crashed, if any."""
        for task in self._tasks.values():
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None


class WorkQueue:
    """Keys to reconcile, each queued once at its earliest due time (loop clock)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}
        self._seq = 0
        self._wakeup = asyncio.Event()

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        due = asyncio.get_running_loop().time() + max(0.0, delay)
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._wakeup.set()

    def __len__(self) -> int:
        return len(self._due)

    async def get(self) -> Hashable:
        loop = asyncio.get_running_loop()
        while True:
            while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # superseded by an earlier due time
            if self._heap:
                due, _, key = self._heap[0]
                wait = due - loop.time()
                if wait <= 0:
                    heapq.heappop(self._heap)
                    del self._due[key]
                    return key
            else:
                wait = None
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()


Reconcile = Callable[[Any], float | None]


async def run_worker(
    name: str, queue: WorkQueue, reconcile: Reconcile, *, fair_up_to: float | None = None
) -> None:
    """Pop due keys and reconcile them until cancelled; errors re-queue the key with backoff. ``fair_up_to``:
    the worker's slices are fair ones (:class:`TurnSlice`), up to that long."""
    failures: dict[Hashable, int] = {}
    turn = TurnSlice(fair_up_to=fair_up_to)  # let watches and the API server run between bursts
    while True:
        key = await queue.get()
        try:
            again = reconcile(key)
        except ApiError as err:
            count = failures.get(key, 0) + 1
            failures[key] = count
            log.debug("sandbox %s: %s on %s, retry %d", name, err.reason, key, count)
            queue.add(key, min(2.0, 0.01 * 2**count))
        except Exception:
            count = failures.get(key, 0) + 1
            failures[key] = count
            log.exception("sandbox %s: reconcile of %s failed", name, key)
            queue.add(key, min(10.0, 0.1 * 2**count))
        else:
            failures.pop(key, None)
            if again is not None:
                queue.add(key, again)
        await turn.pause()


class InformerUser:
    """A controller reading through shared informers: the factory it was given, or one of its own that it
    starts and stops itself."""

    def __init__(
        self, store: StoreLike, profile: TimingProfile, informers: InformerFactory | None = None
    ) -> None:
        self.store = store
        self._own_informers = informers is None
        self.informers = informers or InformerFactory(store, profile.resync_period)

    async def stop_own_informers(self) -> None:
        if self._own_informers:
            await self.informers.stop()
