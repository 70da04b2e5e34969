"""Publishing what a watch sees, in order, without waiting for each acknowledgement: an outbox.

A watch that awaits every publish waits a broker round trip per change: 2,000 pod changes take seconds, and
the Node change a decision waits for queues behind them while the watch stream itself backs up. An
:class:`Outbox` takes events as they come (:meth:`Outbox.put` returns at once) and publishes whatever has
accumulated in one go with :meth:`EventLog.publish_in_order`, so a burst costs about one round trip and the
log still stores the events in the order they were put: the last word on an object is its latest version.

* ``put`` waits only while ``limit`` events are waiting (a broker away slows the watch down instead of filling
  memory);
* ``on_published(event, result)`` is called for each stored event, in order;
* ``flushed()`` waits until everything put so far is stored;
* a failure is the owner's to handle: without ``retry`` it is raised by the next ``put`` or ``flushed`` (the
  pod-watcher ends its term on it), with ``retry`` the events still waiting are published again, in order,
  after ``retry`` seconds (an event the broker had stored meanwhile is recognised by its id and not stored
  twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from proto.events import Event
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.records import PublishResult

log = logging.getLogger("tenon.eventlog.outbox")

Published = Callable[[Event, PublishResult], None]


class Outbox:
    def __init__(
        self,
        event_log: EventLog,
        *,
        on_published: Published | None = None,
        chunk: int = 256,
        limit: int = 10_000,
        retry: float | None = None,
    ) -> None:
        self.event_log = event_log
        self.on_published = on_published
        self.chunk = chunk
        self.limit = limit
        self.retry = retry
        self._waiting: deque[tuple[str, Event]] = deque()
        self._put = 0
        self._stored = 0
        self._progress = asyncio.Condition()
        self._drain: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def put(self, subject: str, event: Event) -> None:
        """Queue ``event`` for ``subject`` behind everything put before it."""
        self._raise_failure()
        if len(self._waiting) >= self.limit:
            async with self._progress:
                await self._progress.wait_for(lambda: len(self._waiting) < self.limit or self._failure)
            self._raise_failure()
        self._waiting.append((subject, event))
        self._put += 1
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._drain_all(), name="outbox")

    async def flushed(self) -> None:
        """Wait until every event put so far is stored (raises a failure that stopped it)."""
        target = self._put
        async with self._progress:
            await self._progress.wait_for(lambda: self._stored >= target or self._failure is not None)
        self._raise_failure()

    async def failure(self) -> None:
        """Wait until publishing fails for good (never, with ``retry``), and raise why."""
        async with self._progress:
            await self._progress.wait_for(lambda: self._failure is not None)
        self._raise_failure()

    async def close(self) -> None:
        """Stop publishing (what is still waiting stays unpublished)."""
        if self._drain is not None:
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _drain_all(self) -> None:
        while self._waiting:
            items = [self._waiting[i] for i in range(min(self.chunk, len(self._waiting)))]
            try:
                results = await self.event_log.publish_in_order(items)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.retry is None:
                    await self._failed(exc)
                    return
                log.warning(
                    "events not published, retrying",
                    extra={"waiting": len(self._waiting), "retry_in_s": self.retry, "error": str(exc)},
                )
                await asyncio.sleep(self.retry)
                continue
            for (_, event), result in zip(items, results, strict=True):
                self._waiting.popleft()
                if self.on_published is not None:
                    self.on_published(event, result)
            async with self._progress:
                self._stored += len(items)
                self._progress.notify_all()

    async def _failed(self, exc: BaseException) -> None:
        async with self._progress:
            self._failure = exc
            self._progress.notify_all()
