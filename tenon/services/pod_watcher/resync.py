"""When to re-assert a published fact so that it never ages out of the log: pure, with the time given.

Why
---
The log keeps events for ``TENON_EVENTS_MAX_AGE`` (14 days by default). A Node that has not changed for two
weeks, a bound pod, the NodePools: their last event would age out, and a service rebuilding after that would
read "no such node" where there is one (absence of evidence read as evidence of absence). So every fact the
pod-watcher published is published again, unchanged, at least once per ``resync_interval`` (a quarter of
the max age: ``CommonSettings.resync_interval``), and the log always holds the last word on each object.

Spread over the interval
------------------------
Re-asserting everything at once would be a burst of one event per object (50,000 on a big cluster) every
interval, on every reader. Instead each fact has its own *phase* in the interval, a hash of its key, and its
*epochs* start at ``phase + k * interval``. A fact is due when an epoch starts in which it has not been
published yet: an object that changed (and was published) in the current epoch is not repeated, and the
re-assertions of a big cluster trickle at ``objects / interval`` per second (50,000 objects over 3.5 days:
one every 6 s). The last event on any fact is therefore at most two intervals old, half the max age.

Same epoch, same id
-------------------
A re-assertion's event id holds the fact's epoch (``resync`` in the id key, :mod:`.observations`). A restarted
or second leader re-asserting the same fact in the same epoch derives the same id, and the broker drops the
repeat. Each key costs one heap entry; finding what is due costs O(log n) per due fact.
"""

from __future__ import annotations

import hashlib
import heapq
import math


class ResyncSchedule:
    """The facts published (by key), the epoch of their last publication, and when each is due again."""

    def __init__(self, interval: float) -> None:
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(
                f"ResyncSchedule: interval must be a positive number of seconds, got {interval!r}"
            )
        self.interval = interval
        self._epochs: dict[str, int] = {}
        """key -> the epoch in which it was last published."""
        self._due: list[tuple[float, str]] = []  # heap; entries whose epoch no longer matches are stale

    def phase(self, key: str) -> float:
        """Where in the interval the key's epochs begin (a hash of the key: the same for every leader)."""
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 * self.interval

    def epoch(self, key: str, at: float) -> int:
        """The key's epoch at ``at`` (seconds since the epoch)."""
        return math.floor((at - self.phase(key)) / self.interval)

    def starts(self, key: str, epoch: int) -> float:
        """When the key's ``epoch`` begins."""
        return self.phase(key) + epoch * self.interval

    def published(self, key: str, at: float) -> None:
        """The fact ``key`` was published (a change, a re-assertion, or found in the log) at ``at``."""
        epoch = self.epoch(key, at)
        if epoch <= self._epochs.get(key, epoch - 1):
            return  # an older publication (the log's, read after a live one) changes nothing
        self._epochs[key] = epoch
        heapq.heappush(self._due, (self.starts(key, epoch + 1), key))

    def forget(self, key: str) -> None:
        """The fact is gone (a ``removed`` was published): nothing to re-assert."""
        self._epochs.pop(key, None)

    def next_due(self) -> float | None:
        """When the next fact is due, if any is known."""
        while self._due:
            when, key = self._due[0]
            if self._current(when, key):
                return when
            heapq.heappop(self._due)
        return None

    def due(self, now: float, limit: int | None = None) -> list[tuple[str, int]]:
        """The facts due at ``now`` with the epoch to re-assert them in, oldest first (at most ``limit``). The
        caller publishes each, which calls :meth:`published` (a snapshot kind not listed yet is published, and
        so re-armed, once it is)."""
        found: list[tuple[str, int]] = []
        while (limit is None or len(found) < limit) and (when := self.next_due()) is not None and when <= now:
            _, key = heapq.heappop(self._due)
            found.append((key, self.epoch(key, now)))
        return found

    def _current(self, when: float, key: str) -> bool:
        epoch = self._epochs.get(key)
        return epoch is not None and when >= self.starts(key, epoch + 1) - 1e-9
