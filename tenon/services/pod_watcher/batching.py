"""Batching pending pods into windows: pure, on logical time in whole microseconds.

Why batch
---------
A Deployment scaled to 8 makes 8 pods Unschedulable within a few hundred milliseconds, not at once. Deciding
on the first pod alone would buy a small machine, then another for the next pod, and so on; deciding on all
eight buys the right machines. Like Karpenter's provisioner, the pod-watcher collects pods in a window that
closes ``idle`` after the last *new* pod joined (the burst is over) or ``max_duration`` after the first (a
steady trickle must not postpone a decision forever), whichever comes first. The scheduler then receives one
``PendingBatch`` per window.

Rules
-----
* A pod *joins* the window when it becomes pending and is neither in the window already nor waiting out its
  re-batch delay. Joining opens the window if none is open and pushes the idle deadline back; an update of a
  pod already in the window only refreshes its object (the scheduler marks pods Unschedulable again on every
  retry; that is not news).
* A pod that stops being pending (bound, deleted, no longer eligible) leaves the window at once: a batch holds
  only pods still pending when its window closes. A window left empty closes without a batch.
* Every pod of a closed batch remembers when it was batched. If it is still pending ``rebatch`` later it joins
  a window again, at that moment. The scheduler counts in-flight NodeClaims, so offering a pod again never
  buys twice; it is the safety net for claims that were abandoned or for a batch the scheduler never saw.
  Each further offer of a pod still pending waits twice as long as the one before, up to
  ``2**REBATCH_DOUBLINGS`` times ``rebatch`` (5 s -> 5 min 20 s): a pod nothing can run (too big for every
  pool, a limit reached) is offered every few minutes, not every 5 s, each time a copy of its spec in the
  log (pending batches were 227 of the 273 MiB the 10,000-pod scale run's log grew by). Capacity arriving
  still brings every such pod back at once (below). Its
  window waits ``idle`` like any other: on a busy machine the nodes of a wave may still be coming when the
  delay ends, and the kube-scheduler places many of those pods meanwhile (closing it at once offered 900 of
  1,000 pods again instead of 25, and planning them held back the registrations).
* **Capacity arrived** (:meth:`PendingBatcher.capacity_arrived`: a Node became schedulable). The
  kube-scheduler packs pods its own way, not as the plan assumed, so when the nodes bought for a batch are up
  some of its pods may be left with no room. Once for ``idle`` no capacity has arrived and the kube-scheduler
  placed none of those pods (the burst of nodes is over and the kube-scheduler, which tries again on every
  Node change, has done what it could: on a busy machine it may still be placing them a second after the
  last node), every pod batched before the last arrival and still pending joins a window at that moment,
  without waiting out its re-batch delay: the pods the new nodes did not take are offered again a second
  after the last node came (or the last of them was placed), not ``rebatch`` later. (One offered a moment
  before the kube-scheduler places it costs a plan, never a node: the scheduler sees the room it is about to
  take. Half a second proved too short on a busy machine: the registrations of one wave of nodes pause that
  long, and pods were offered before the kube-scheduler had placed them.)
* **Pods offered again after capacity wait for no burst.** The idle period lets a burst of *new* pods end;
  the pods offered again after capacity are all known at that moment, and the kube-scheduler had its quiet
  period. When no window is open, they join one opened where that quiet period began, which therefore
  closes at once instead of ``idle`` later. Never before the previous window closed (windows do not
  overlap); when a window is open, they join it as any pod does.
* :meth:`PendingBatcher.flush` closes an open window at shutdown, so a stopping leader hands over what it
  collected instead of dropping it.

Logical time
------------
Every call says what time it is (``now``, microseconds since the epoch), and before doing anything the batcher
first lets every deadline up to ``now`` happen *at its own moment*: a window closes exactly at its deadline,
a pod due for re-batching joins exactly at its due time, whatever the moment the service got round to asking.
A pod that becomes pending after a window's deadline therefore opens the next window even if the old one was
not collected yet. The outcome is a function of the observations and their times alone, not of how busy the
event loop was, which is what lets ``tenon replay pod-watcher`` decide a recorded window again and find the
same batch (:mod:`.decider`). Whole microseconds, because that is what a recorded timestamp holds: the replay
computes the same deadlines to the microsecond, with no float rounding between them.

Each window also records its *arrivals*: every time a pod joined it, and when it left if it left before the
close. They travel in the ``PendingBatch`` (uids and times only).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

ClosedBy = Literal["idle", "max-duration", "shutdown"]
Micros = int
"""A moment (microseconds since the Unix epoch) or a duration, in whole microseconds."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(seconds: float) -> Micros:
    """Seconds (a clock reading or a setting) in whole microseconds."""
    return round(seconds * 1_000_000)


def micros_of(moment: datetime) -> Micros:
    """A recorded timestamp in microseconds, exactly."""
    return (moment - EPOCH) // _MICROSECOND


def moment_of(at: Micros) -> datetime:
    """The timestamp an event records for ``at``, exactly."""
    return EPOCH + at * _MICROSECOND


@dataclass(frozen=True)
class Arrival:
    """A pod joined the window at ``joined`` (and left it at ``left``, if it did before the close)."""

    uid: str
    joined: Micros
    left: Micros | None = None


@dataclass(frozen=True)
class Batch:
    """One closed window: the pods still pending when it closed (ordered by uid), its times, its arrivals and
    the settings it closed by."""

    pods: tuple[dict[str, Any], ...]
    opened_at: Micros
    closed_at: Micros
    closed_by: ClosedBy
    arrivals: tuple[Arrival, ...] = ()
    idle: Micros = 0
    max_duration: Micros = 0

    @property
    def uids(self) -> tuple[str, ...]:
        return tuple(str(pod["metadata"]["uid"]) for pod in self.pods)


@dataclass
class _Window:
    opened_at: Micros
    last_joined_at: Micros
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrivals: list[Arrival] = field(default_factory=list)
    present: dict[str, int] = field(default_factory=dict)
    """uid -> index in ``arrivals`` of its join while it is in the window."""


REBATCH_DOUBLINGS = 6
"""How many times a pod's re-batch delay doubles at most (see the module docstring)."""


class PendingBatcher:
    """The pending pods the service knows, the open window, and when each batched pod may be offered again."""

    def __init__(
        self,
        *,
        idle: Micros,
        max_duration: Micros,
        rebatch: Micros,
        view: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``view``: what of a pod a batch holds, applied when its window closes (the service keeps the
        pods as the API server sent them and reduces only the ones batched: a pending pod changes three
        times or more before it is bound, and most changes are never batched). None: as given."""
        for label, value in (("idle", idle), ("max_duration", max_duration), ("rebatch", rebatch)):
            if not (isinstance(value, int) and value > 0):
                raise ValueError(
                    f"PendingBatcher: {label} must be a positive number of microseconds, got {value!r}"
                )
        if max_duration < idle:
            raise ValueError(
                f"PendingBatcher: max_duration ({max_duration}) must not be shorter than idle ({idle})"
            )
        self.idle = idle
        self.max_duration = max_duration
        self.rebatch = rebatch
        self._view = view
        self._now: Micros = 0
        self._pending: dict[str, dict[str, Any]] = {}
        self._window: _Window | None = None
        self._closed: list[Batch] = []
        self._batched_at: dict[str, Micros] = {}
        self._offers: dict[str, int] = {}
        """Times each pod was batched while pending without a break (its re-batch delay doubles with each)."""
        self._rebatch_due: list[
            tuple[Micros, str]
        ] = []  # heap; entries whose time no longer matches are stale
        self._capacity_at: Micros | None = None
        """The last moment capacity arrived while pods batched before it may still be waiting for it."""
        self._placed_at: Micros | None = None
        """The last moment one of those pods stopped being pending since then (the kube-scheduler placing
        them on the new capacity)."""
        self._last_closed: Micros | None = None
        """When the last window closed (a re-offer's window never opens before it)."""

    # --- what the watch reports -----------------------------------------------------------------------------

    @property
    def pending(self) -> Mapping[str, dict[str, Any]]:
        return self._pending

    @property
    def window_size(self) -> int:
        return len(self._window.pods) if self._window else 0

    def pod_pending(self, uid: str, pod: dict[str, Any], now: Micros) -> None:
        """``pod`` is pending at ``now`` (first sight or an update)."""
        now = self.advance(now)
        self._pending[uid] = pod
        if self._window is not None and uid in self._window.pods:
            self._window.pods[uid] = pod
            return
        batched_at = self._batched_at.get(uid)
        if batched_at is not None and now < batched_at + self._rebatch_delay(uid):
            return  # batched recently: it joins at its re-batch time (see advance)
        self._join(uid, pod, now)

    def pod_not_pending(self, uid: str, now: Micros) -> None:
        """The pod was bound, deleted or stopped being eligible at ``now``."""
        now = self.advance(now)
        self._pending.pop(uid, None)
        self._offers.pop(uid, None)
        batched = self._batched_at.pop(uid, None)
        if self._capacity_at is not None and batched is not None and batched < self._capacity_at:
            self._placed_at = now  # the kube-scheduler is still placing them: the re-offer waits
        window = self._window
        if window is None or uid not in window.pods:
            return
        del window.pods[uid]
        index = window.present.pop(uid)
        window.arrivals[index] = replace(window.arrivals[index], left=now)
        if not window.pods:
            self._window = None  # left empty: closes without a batch

    def replace_pending(self, pods: Mapping[str, dict[str, Any]], now: Micros) -> None:
        """A re-list at ``now``: ``pods`` is the complete set of pending pods."""
        for uid in [uid for uid in self._pending if uid not in pods]:
            self.pod_not_pending(uid, now)
        for uid in [uid for uid in self._batched_at if uid not in pods]:
            del self._batched_at[uid]  # remembered from the log, but not pending any more
            self._offers.pop(uid, None)
        for uid, pod in pods.items():
            self.pod_pending(uid, pod, now)

    def capacity_arrived(self, now: Micros) -> None:
        """A Node became schedulable at ``now``: the pods batched before it that are still pending join a
        window ``idle`` after the last such moment (see the module docstring)."""
        self._capacity_at = self.advance(now)

    def remember_batched(self, uids: Iterable[str], at: Micros) -> None:
        """These pods were batched at ``at`` (by this or an earlier leader): none is offered again before its
        re-batch time."""
        for uid in uids:
            if at > self._batched_at.get(uid, -1):
                self._batched_at[uid] = at
                self._offers[uid] = self._offers.get(uid, 0) + 1
                heapq.heappush(self._rebatch_due, (at + self._rebatch_delay(uid), uid))

    # --- time -----------------------------------------------------------------------------------------------

    def next_deadline(self) -> Micros | None:
        """When something next happens by time alone (a window closes or a pod is due again), if ever."""
        candidates = []
        if self._window is not None:
            candidates.append(self._close_time(self._window)[0])
        for due in (self._next_rebatch(), self._reoffer_time()):
            if due is not None:
                candidates.append(due)
        return min(candidates) if candidates else None

    def advance(self, now: Micros) -> Micros:
        """Let every deadline up to ``now`` happen at its own moment, in order (a window closing before a pod
        due at the same moment joins); the closed batches wait for :meth:`poll`. Time never runs backwards: a
        clock that stepped back reads as the latest moment seen. Returns that moment."""
        now = self._now = max(now, self._now)
        while True:
            close = self._close_time(self._window) if self._window is not None else None
            due = min(
                (t for t in (self._next_rebatch(), self._reoffer_time()) if t is not None), default=None
            )
            if close is not None and close[0] <= now and (due is None or close[0] <= due):
                self._close(*close)
            elif due is not None and due <= now:
                if due == self._reoffer_time():
                    self._reoffer(due)
                    continue
                self._rebatch(due)
            else:
                return now

    def poll(self, now: Micros) -> list[Batch]:
        """The batches whose windows closed up to ``now``, oldest first (each returned once)."""
        self.advance(now)
        closed, self._closed = self._closed, []
        return closed

    def flush(self, now: Micros) -> list[Batch]:
        """:meth:`poll`, then close the open window at ``now`` (shutdown)."""
        now = self.advance(now)
        if self._window is not None:
            self._close(now, "shutdown")
        return self.poll(now)

    # --- internals ------------------------------------------------------------------------------------------

    def _reoffer_time(self) -> Micros | None:
        if self._capacity_at is None:
            return None
        return max(self._capacity_at, self._placed_at or self._capacity_at) + self.idle

    def _reoffer(self, at: Micros) -> None:
        """The capacity that arrived by ``at - idle`` had its turn: the pods batched before it join now."""
        assert self._capacity_at is not None
        arrived, self._capacity_at, self._placed_at = self._capacity_at, None, None
        joins = self._known_join(at)  # the quiet wait before it was their window
        for uid in sorted(u for u, batched in self._batched_at.items() if batched < arrived):
            self._join_again(uid, joins)

    def _rebatch(self, due: Micros) -> None:
        """The pods due for re-batching at ``due`` join a window then, as new pods do (see the module
        docstring: the kube-scheduler may still place some of them while it is open)."""
        while self._next_rebatch() == due:
            self._join_again(heapq.heappop(self._rebatch_due)[1], due)

    def _known_join(self, at: Micros) -> Micros:
        """When pods offered again at ``at`` join: all known already, they wait for no burst to end, so with
        no window open they join one opened ``idle`` before ``at``, which closes at ``at`` (never before the
        last window closed: windows do not overlap); with a window open, at ``at``, as any pod."""
        if self._window is not None:
            return at
        opens = at - self.idle
        if self._last_closed is not None:
            opens = max(opens, self._last_closed + 1)
        return min(opens, at)

    def _join_again(self, uid: str, at: Micros) -> None:
        pod = self._pending.get(uid)
        if pod is not None and not (self._window is not None and uid in self._window.pods):
            self._join(uid, pod, at)

    def _join(self, uid: str, pod: dict[str, Any], at: Micros) -> None:
        if self._window is None:
            self._window = _Window(opened_at=at, last_joined_at=at)
        window = self._window
        window.pods[uid] = pod
        window.last_joined_at = at
        window.present[uid] = len(window.arrivals)
        window.arrivals.append(Arrival(uid, at))

    def _close_time(self, window: _Window) -> tuple[Micros, ClosedBy]:
        idle_close = window.last_joined_at + self.idle
        max_close = window.opened_at + self.max_duration
        return (idle_close, "idle") if idle_close < max_close else (max_close, "max-duration")

    def _close(self, at: Micros, closed_by: ClosedBy) -> None:
        assert self._window is not None
        window, self._window = self._window, None
        self._last_closed = at
        uids = sorted(window.pods)
        self.remember_batched(uids, at)
        view = self._view
        pods = tuple(window.pods[uid] for uid in uids)
        self._closed.append(
            Batch(
                pods if view is None else tuple(view(pod) for pod in pods),
                window.opened_at,
                at,
                closed_by,
                tuple(window.arrivals),
                self.idle,
                self.max_duration,
            )
        )

    def _rebatch_delay(self, uid: str) -> Micros:
        """``rebatch`` after a pod's first batch, doubling with each further one, up to
        ``2**REBATCH_DOUBLINGS`` times it."""
        return self.rebatch << min(max(self._offers.get(uid, 1) - 1, 0), REBATCH_DOUBLINGS)

    def _next_rebatch(self) -> Micros | None:
        # drop stale heap entries: pods forgotten, or batched again since the entry was pushed. A pod
        # remembered from the log but not seen yet keeps its entry: it may still turn up pending before then
        while self._rebatch_due:
            due, uid = self._rebatch_due[0]
            batched_at = self._batched_at.get(uid)
            if batched_at is not None and due == batched_at + self._rebatch_delay(uid):
                return due
            heapq.heappop(self._rebatch_due)
        return None
