"""Batching pending pods into windows: pure, with an injected clock.

Why batch
---------
A Deployment scaled to 8 makes 8 pods Unschedulable within a few hundred milliseconds, not at once. Deciding
on the first pod alone would buy a small machine, then another for the next pod, and so on; deciding on all
eight buys the right machines. Like Karpenter's provisioner, the pod-watcher collects pods in a window that
closes ``idle`` seconds after the last *new* pod joined (the burst is over) or ``max_duration`` seconds after
the first (a steady trickle must not postpone a decision forever), whichever comes first. The scheduler then
receives one ``PendingBatch`` per window.

Rules
-----
* A pod *joins* the window when it becomes pending and is neither in the window already nor waiting out its
  re-batch delay. Joining opens the window if none is open and pushes the idle deadline back; an update of a
  pod already in the window only refreshes its object (the scheduler marks pods Unschedulable again on every
  retry; that is not news).
* A pod that stops being pending (bound, deleted, no longer eligible) leaves the window at once: a batch holds
  only pods still pending when its window closes. A window left empty closes without a batch.
* Every pod of a closed batch remembers when it was batched. If it is still pending ``rebatch`` seconds later
  it joins a window again. The scheduler counts in-flight NodeClaims, so offering a pod again never buys
  twice; it is the safety net for claims that were abandoned or for a batch the scheduler never saw.
* :meth:`PendingBatcher.flush` closes an open window at shutdown, so a stopping leader hands over what it
  collected instead of dropping it.

The clock returns seconds since the epoch (wall time, because a batch's opening time is part of its event id
and of the log a person reads). The service calls :meth:`~PendingBatcher.poll` when
:meth:`~PendingBatcher.next_deadline` is reached or when pods changed; tests drive a fake clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ClosedBy = Literal["idle", "max-duration", "shutdown"]


@dataclass(frozen=True)
class Batch:
    """One closed window: the pods still pending when it closed (ordered by uid), and its times."""

    pods: tuple[dict[str, Any], ...]
    opened_at: float
    closed_at: float
    closed_by: ClosedBy

    @property
    def uids(self) -> tuple[str, ...]:
        return tuple(str(pod["metadata"]["uid"]) for pod in self.pods)


@dataclass
class _Window:
    opened_at: float
    last_joined_at: float
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)


class PendingBatcher:
    """The pending pods the service knows, the open window, and when each batched pod may be offered again."""

    def __init__(
        self, *, idle: float, max_duration: float, rebatch: float, clock: Callable[[], float]
    ) -> None:
        for label, value in (("idle", idle), ("max_duration", max_duration), ("rebatch", rebatch)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"PendingBatcher: {label} must be a positive number of seconds, got {value!r}"
                )
        if max_duration < idle:
            raise ValueError(
                f"PendingBatcher: max_duration ({max_duration}) must not be shorter than idle ({idle})"
            )
        self.idle = idle
        self.max_duration = max_duration
        self.rebatch = rebatch
        self.clock = clock
        self._pending: dict[str, dict[str, Any]] = {}
        self._window: _Window | None = None
        self._batched_at: dict[str, float] = {}
        self._rebatch_due: list[
            tuple[float, str]
        ] = []  # heap; entries whose time no longer matches are stale

    # --- what the watch reports -------------------------------------------------------------------------------

    @property
    def pending(self) -> Mapping[str, dict[str, Any]]:
        return self._pending

    @property
    def window_size(self) -> int:
        return len(self._window.pods) if self._window else 0

    def pod_pending(self, uid: str, pod: dict[str, Any]) -> None:
        """``pod`` is pending now (first sight or an update)."""
        self._pending[uid] = pod
        if self._window is not None and uid in self._window.pods:
            self._window.pods[uid] = pod
            return
        batched_at = self._batched_at.get(uid)
        if batched_at is not None and self.clock() < batched_at + self.rebatch:
            return  # batched recently: it waits for its re-batch time (see poll)
        self._join(uid, pod, self.clock())

    def pod_not_pending(self, uid: str) -> None:
        """The pod was bound, deleted or stopped being eligible."""
        self._pending.pop(uid, None)
        self._batched_at.pop(uid, None)
        if self._window is not None:
            self._window.pods.pop(uid, None)

    def replace_pending(self, pods: Mapping[str, dict[str, Any]]) -> None:
        """A re-list: ``pods`` is the complete set of pending pods now."""
        for uid in [uid for uid in self._pending if uid not in pods]:
            self.pod_not_pending(uid)
        for uid in [uid for uid in self._batched_at if uid not in pods]:
            del self._batched_at[uid]  # remembered from the log, but not pending any more
        for uid, pod in pods.items():
            self.pod_pending(uid, pod)

    def remember_batched(self, uids: Iterable[str], at: float) -> None:
        """These pods were batched at ``at`` (by this or an earlier leader): don't offer them before re-batch time."""
        for uid in uids:
            if at > self._batched_at.get(uid, -math.inf):
                self._batched_at[uid] = at
                heapq.heappush(self._rebatch_due, (at + self.rebatch, uid))

    # --- time -------------------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`poll` next has something to do (a window closes or a pod is due again), if ever."""
        candidates = []
        if self._window is not None:
            candidates.append(self._close_time(self._window)[0])
        due = self._next_rebatch()
        if due is not None:
            candidates.append(due)
        return min(candidates) if candidates else None

    def poll(self) -> Batch | None:
        """Offer pods whose re-batch time came, then close the window if its time came; the batch, if any."""
        now = self.clock()
        while (due := self._next_rebatch()) is not None and due <= now:
            _, uid = heapq.heappop(self._rebatch_due)
            pod = self._pending.get(uid)
            if pod is not None and not (self._window is not None and uid in self._window.pods):
                self._join(uid, pod, now)
        window = self._window
        if window is None:
            return None
        close_at, closed_by = self._close_time(window)
        if not window.pods:
            self._window = None
            return None
        if now < close_at:
            return None
        return self._close(now, closed_by)

    def flush(self) -> Batch | None:
        """Close the open window now (shutdown)."""
        if self._window is None or not self._window.pods:
            self._window = None
            return None
        return self._close(self.clock(), "shutdown")

    # --- internals --------------------------------------------------------------------------------------------

    def _join(self, uid: str, pod: dict[str, Any], now: float) -> None:
        if self._window is None:
            self._window = _Window(opened_at=now, last_joined_at=now)
        self._window.pods[uid] = pod
        self._window.last_joined_at = now

    def _close_time(self, window: _Window) -> tuple[float, ClosedBy]:
        idle_close = window.last_joined_at + self.idle
        max_close = window.opened_at + self.max_duration
        return (idle_close, "idle") if idle_close < max_close else (max_close, "max-duration")

    def _close(self, now: float, closed_by: ClosedBy) -> Batch:
        assert self._window is not None
        window, self._window = self._window, None
        uids = sorted(window.pods)
        self.remember_batched(uids, now)
        return Batch(tuple(window.pods[uid] for uid in uids), window.opened_at, now, closed_by)

    def _next_rebatch(self) -> float | None:
        # drop stale heap entries: pods forgotten, or batched again since the entry was pushed. A pod remembered
        # from the log but not seen yet keeps its entry: it may still show up pending before its time
        while self._rebatch_due:
            due, uid = self._rebatch_due[0]
            batched_at = self._batched_at.get(uid)
            if batched_at is not None and due == batched_at + self.rebatch:
                return due
            heapq.heappop(self._rebatch_due)
        return None
