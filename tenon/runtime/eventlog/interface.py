"""The interface every service codes against, whatever carries the events."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime

from proto import subjects
from proto.events import Event
from tenon.runtime.eventlog.keyvalue import KeyValue
from tenon.runtime.eventlog.records import ConsumerSettings, LogBounds, LogRecord, PublishResult
from tenon.runtime.eventlog.snapshots import SnapshotStore

Handler = Callable[[LogRecord], Awaitable[None]]
"""Handles one delivered message. Returning means its side effects are done and the message may be acked;
raising :class:`TransientError` (or anything unexpected) retries it with backoff, :class:`PermanentError`
dead-letters it at once. The record may not decode: call ``record.decode()`` inside the handler (the runner
dead-letters :class:`UndecodableEvent` with its reason)."""


BatchHandler = Callable[[list[LogRecord]], Awaitable[Mapping[int, str]]]
"""Handles records in log order, a batch at a time, and answers which of them to dead-letter (sequence ->
reason). Returning means every record of the batch is done (acked); raising redelivers the whole batch, so the
handler must skip what it already handled (the decider runtime does, by sequence)."""


class ConsumerRunner(abc.ABC):
    """A running durable consumer. ``stop()`` drains in-flight handlers before it returns."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @property
    @abc.abstractmethod
    def handled(self) -> int:
        """Messages acked after a successful handler (for progress reporting and tests)."""

    @property
    @abc.abstractmethod
    def dead_lettered(self) -> int: ...


class EventLog(abc.ABC):
    """Publish, append, read and consume events."""

    @abc.abstractmethod
    async def provision(self) -> None:
        """Create or update the streams this log needs; safe to call from every replica at every start."""

    @abc.abstractmethod
    async def publish(
        self, subject: str, event: Event, *, headers: Mapping[str, str] | None = None
    ) -> PublishResult:
        """Store ``event``; a second publish of the same event id is a no-op reported as ``duplicate``."""

    async def publish_in_order(self, items: Sequence[tuple[str, Event]]) -> list[PublishResult]:
        """Publish each ``(subject, event)``, stored in the order given; the results in that order. This one
        waits for each before the next; a log that keeps the order of what it is sent without waiting (a
        broker connection) publishes them all at once (about one round trip). Raises the first failure; what
        came before it is stored."""
        return [await self.publish(subject, event) for subject, event in items]

    @abc.abstractmethod
    async def append(
        self,
        subject: str,
        event: Event,
        *,
        expected_last_sequence: int,
        aggregate: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishResult:
        """Store ``event`` only if the last message on ``aggregate`` (a subject filter; default ``subject``
        itself) has stream sequence ``expected_last_sequence`` (0: none may exist); else raise
        :class:`ConcurrencyConflict`. A duplicate event id still returns the original sequence with
        ``duplicate=True``."""

    @abc.abstractmethod
    async def last_subject_sequence(self, subject: str) -> int:
        """Stream sequence of the last message on ``subject`` (a wildcard filter: on any subject it matches);
        0 when there is none."""

    @abc.abstractmethod
    def read(
        self,
        subject_filter: str = subjects.ALL_EVENTS,
        *,
        start_sequence: int | None = None,
        start_time: datetime | None = None,
        stop_sequence: int | None = None,
        follow: bool = False,
        stream: str = subjects.EVENTS_STREAM,
    ) -> AsyncIterator[LogRecord]:
        """Records in log order, leaving no state behind on the server. Without ``follow`` it ends when it
        has caught up with the log as it was when reading began (or at ``stop_sequence``)."""

    @abc.abstractmethod
    def last_per_subject(self, subject_filter: str) -> AsyncIterator[LogRecord]:
        """The newest record of every subject ``subject_filter`` matches, in log order: what a view of "the
        last word on each object" needs, at the cost of one record per object instead of the whole history."""

    @abc.abstractmethod
    async def bounds(self, stream: str = subjects.EVENTS_STREAM) -> LogBounds:
        """The first and last sequence the log still holds, and when the first was stored: how far back it
        reaches (retention removes the oldest records)."""

    @property
    def connected(self) -> bool:
        """Whether the log can be reached now (a readiness check)."""
        return True

    @property
    @abc.abstractmethod
    def max_message_size(self) -> int:
        """The largest message the broker accepts, in bytes."""

    @abc.abstractmethod
    async def key_value(self, bucket: str, *, ttl: float | None = None) -> KeyValue:
        """A key-value bucket (created if missing) whose keys expire ``ttl`` seconds after their last
        write."""

    @abc.abstractmethod
    def snapshots(self) -> SnapshotStore:
        """Where services keep snapshots of their state (never aged out while they are the latest)."""

    @abc.abstractmethod
    async def consumer_ack_floor(self, durable: str) -> int:
        """The stream sequence up to which the durable consumer has acked everything (0: none, or no such
        consumer). A service that rebuilds state at start folds the log up to here and lets the consumer
        deliver the rest, so nothing it had not finished handling is folded without being handled."""

    @abc.abstractmethod
    def ordered_consumer(self, settings: ConsumerSettings, handler: BatchHandler) -> ConsumerRunner:
        """A durable consumer that hands over its records strictly in log order, in batches of up to
        ``settings.fetch_batch``, one batch at a time: for deciders, whose every decision must see every
        record before its input. One fetch and one ack per batch, not per record: the consumer acks
        cumulatively (JetStream's ``AckPolicy.ALL``), so the ack of a batch's last record covers the batch."""

    @abc.abstractmethod
    def consumer(self, settings: ConsumerSettings, handler: Handler) -> ConsumerRunner:
        """A durable consumer (created if missing, updated if its settings changed), not yet started."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> EventLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
