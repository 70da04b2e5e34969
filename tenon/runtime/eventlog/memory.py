"""An event log in memory, for fast unit tests of logic that publishes and consumes events.

It keeps the semantics services rely on: one sequence per stream, events routed to the events or dead-letter
stream by subject, duplicate event ids answered with the original sequence, optimistic appends on a subject,
durable consumers with their own cursor, redelivery on nak (after the delay) and after ``ack_wait``, and the
same consumer runner as the JetStream log. It does not persist, replicate or enforce retention.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from proto import subjects
from proto.codec import encode
from proto.events import DeadLetter, Event
from tenon.runtime.eventlog import tracing
from tenon.runtime.eventlog.interface import BatchHandler, ConsumerRunner, EventLog, Handler
from tenon.runtime.eventlog.keyvalue import InMemoryKeyValue, KeyValue
from tenon.runtime.eventlog.records import (
    ConcurrencyConflict,
    ConsumerSettings,
    EventLogError,
    LogBounds,
    LogRecord,
    PublishResult,
)
from tenon.runtime.eventlog.runner import Delivery, PullConsumerRunner
from tenon.runtime.eventlog.snapshots import InMemorySnapshotStore, SnapshotStore

MSG_ID = "Nats-Msg-Id"


@dataclass
class _Stream:
    name: str
    subject_filters: tuple[str, ...]
    records: list[LogRecord] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    last_by_subject: dict[str, int] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


class InMemoryEventLog(EventLog):
    def __init__(self, *, max_message_size: int = 8 * 1_048_576) -> None:
        self._max_message_size = max_message_size
        self._buckets: dict[str, InMemoryKeyValue] = {}
        self._snapshot_store = InMemorySnapshotStore()
        self._streams = {
            subjects.EVENTS_STREAM: _Stream(subjects.EVENTS_STREAM, subjects.EVENT_SUBJECTS),
            subjects.DEADLETTER_STREAM: _Stream(subjects.DEADLETTER_STREAM, (subjects.DEADLETTERS,)),
        }
        self._consumers: dict[str, _ConsumerState] = {}

    # --- inspection helpers for tests ---
    def records(self, stream: str = subjects.EVENTS_STREAM) -> list[LogRecord]:
        return list(self._streams[stream].records)

    def events(self, stream: str = subjects.EVENTS_STREAM) -> list[Event]:
        return [r.decode() for r in self._streams[stream].records]

    async def provision(self) -> None:
        return None

    def _stream_for(self, subject: str) -> _Stream:
        for stream in self._streams.values():
            if any(subjects.matches(f, subject) for f in stream.subject_filters):
                return stream
        raise EventLogError(f"no stream captures subject {subject!r}")

    async def publish_raw(
        self, subject: str, data: bytes, headers: Mapping[str, str] | None = None
    ) -> PublishResult:
        """Store bytes as they are (tests use it to feed undecodable payloads)."""
        return await self._store(subject, data, dict(headers or {}), expected_last=None)

    async def publish(
        self, subject: str, event: Event, *, headers: Mapping[str, str] | None = None
    ) -> PublishResult:
        return await self._store(subject, encode(event), self._headers(event, headers), expected_last=None)

    async def append(
        self,
        subject: str,
        event: Event,
        *,
        expected_last_sequence: int,
        aggregate: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishResult:
        return await self._store(
            subject,
            encode(event),
            self._headers(event, headers),
            expected_last=expected_last_sequence,
            aggregate=aggregate,
        )

    @staticmethod
    def _headers(event: Event, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {MSG_ID: event.id, "Tenon-Event-Type": type(event).__name__, **(extra or {})}
        return tracing.inject(headers)

    async def _store(
        self,
        subject: str,
        data: bytes,
        headers: dict[str, str],
        *,
        expected_last: int | None,
        aggregate: str | None = None,
    ) -> PublishResult:
        if "*" in subject or ">" in subject:
            raise EventLogError(f"cannot publish on {subject!r}: a subject filter is not a subject")
        stream = self._stream_for(subject)
        msg_id = headers.get(MSG_ID)
        if msg_id and msg_id in stream.ids:
            return PublishResult(stream.name, stream.ids[msg_id], duplicate=True)
        if len(data) > self.max_message_size:
            raise EventLogError(
                f"message on {subject} is {len(data)} bytes, over the {self.max_message_size} limit"
            )
        if expected_last is not None:
            actual = self._last_on(stream, aggregate or subject)
            if actual != expected_last:
                raise ConcurrencyConflict(aggregate or subject, expected_last, actual)
        sequence = len(stream.records) + 1
        stream.records.append(LogRecord(sequence, subject, data, headers, datetime.now(UTC)))
        stream.last_by_subject[subject] = sequence
        if msg_id:
            stream.ids[msg_id] = sequence
        async with stream.changed:
            stream.changed.notify_all()
        return PublishResult(stream.name, sequence)

    @staticmethod
    def _last_on(stream: _Stream, subject_filter: str) -> int:
        """The newest sequence on any subject the filter matches (as JetStream answers a wildcard)."""
        if "*" in subject_filter or ">" in subject_filter:
            return max(
                (
                    seq
                    for name, seq in stream.last_by_subject.items()
                    if subjects.matches(subject_filter, name)
                ),
                default=0,
            )
        return stream.last_by_subject.get(subject_filter, 0)

    async def last_subject_sequence(self, subject: str) -> int:
        return self._last_on(self._stream_for(subject), subject)

    async def last_per_subject(self, subject_filter: str) -> AsyncIterator[LogRecord]:  # type: ignore[override]
        stream = self._streams[subjects.EVENTS_STREAM]
        newest = sorted(
            seq for name, seq in stream.last_by_subject.items() if subjects.matches(subject_filter, name)
        )
        for sequence in newest:
            yield stream.records[sequence - 1]

    async def bounds(self, stream: str = subjects.EVENTS_STREAM) -> LogBounds:
        records = self._streams[stream].records
        if not records:
            return LogBounds(0, 0, None)
        return LogBounds(records[0].sequence, records[-1].sequence, records[0].recorded_at)

    @property
    def max_message_size(self) -> int:
        return self._max_message_size

    async def key_value(self, bucket: str, *, ttl: float | None = None) -> KeyValue:
        found = self._buckets.get(bucket)
        if found is None:
            found = self._buckets[bucket] = InMemoryKeyValue(ttl)
        return found

    def snapshots(self) -> SnapshotStore:
        return self._snapshot_store

    async def read(  # type: ignore[override]
        self,
        subject_filter: str = subjects.ALL_EVENTS,
        *,
        start_sequence: int | None = None,
        start_time: datetime | None = None,
        stop_sequence: int | None = None,
        follow: bool = False,
        stream: str = subjects.EVENTS_STREAM,
    ) -> AsyncIterator[LogRecord]:
        log = self._streams[stream]
        end = len(log.records) if not follow else None
        index = max((start_sequence or 1) - 1, 0)
        while True:
            while index < len(log.records):
                record = log.records[index]
                index += 1
                if stop_sequence is not None and record.sequence > stop_sequence:
                    return
                if end is not None and record.sequence > end:
                    return
                if start_time is not None and record.recorded_at < start_time:
                    continue
                if subjects.matches(subject_filter, record.subject):
                    yield record
            if not follow:
                return
            async with log.changed:
                await log.changed.wait_for(_grown_past(log, index))

    async def consumer_ack_floor(self, durable: str) -> int:
        state = self._consumers.get(durable)
        if state is None:
            return 0
        if state.deliveries:
            return min(state.deliveries) - 1
        return state.stream.records[state.cursor - 1].sequence if state.cursor else 0

    def ordered_consumer(self, settings: ConsumerSettings, handler: BatchHandler) -> ConsumerRunner:
        return self._runner(settings, None, handler)

    def consumer(self, settings: ConsumerSettings, handler: Handler) -> ConsumerRunner:
        return self._runner(settings, handler, None)

    def _runner(
        self, settings: ConsumerSettings, handler: Handler | None, batch_handler: BatchHandler | None
    ) -> ConsumerRunner:
        state = self._consumers.get(settings.durable)
        if state is None:
            stream = self._streams[subjects.EVENTS_STREAM]
            start = len(stream.records) if settings.deliver_new_only else 0
            state = _ConsumerState(stream=stream, settings=settings, cursor=start)
            self._consumers[settings.durable] = state
        else:
            state.settings = settings
        state.cumulative_acks = batch_handler is not None

        async def open_source() -> _MemorySource:
            return _MemorySource(state)

        async def write_dead_letter(letter: DeadLetter) -> None:
            await self.publish(subjects.deadletter(letter.stream, letter.consumer), letter)

        return PullConsumerRunner(
            stream=subjects.EVENTS_STREAM,
            settings=settings,
            handler=handler,
            batch_handler=batch_handler,
            open_source=open_source,
            write_dead_letter=write_dead_letter,
        )

    async def close(self) -> None:
        return None


def _grown_past(stream: _Stream, length: int) -> Callable[[], bool]:
    return lambda: len(stream.records) > length


@dataclass
class _ConsumerState:
    stream: _Stream
    settings: ConsumerSettings
    cursor: int
    deliveries: dict[int, int] = field(default_factory=dict)
    """sequence -> times delivered, for messages not yet acked"""
    redeliver_at: dict[int, float] = field(default_factory=dict)
    """sequence -> monotonic time it becomes deliverable again (nak delay or ack_wait expiry)"""
    cumulative_acks: bool = False
    """An ack covers every record delivered before it too (an ordered consumer: JetStream's AckPolicy.ALL)."""


class _MemoryDelivery:
    def __init__(self, state: _ConsumerState, record: LogRecord) -> None:
        self._state = state
        self.record = record

    async def ack(self) -> None:
        state, sequence = self._state, self.record.sequence
        acked = [s for s in state.deliveries if s <= sequence] if state.cumulative_acks else [sequence]
        for each in acked:
            state.deliveries.pop(each, None)
            state.redeliver_at.pop(each, None)

    async def nak(self, delay: float) -> None:
        self._state.redeliver_at[self.record.sequence] = time.monotonic() + delay


class _MemorySource:
    def __init__(self, state: _ConsumerState) -> None:
        self._state = state

    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while True:
            batch = self._take(max_messages)
            if batch or time.monotonic() >= deadline:
                return batch
            stream = self._state.stream
            try:
                async with stream.changed:
                    await asyncio.wait_for(stream.changed.wait(), timeout=min(0.05, timeout))
            except TimeoutError:
                pass

    def _take(self, max_messages: int) -> list[Delivery]:
        state = self._state
        now = time.monotonic()
        taken: list[Delivery] = []
        for sequence, when in sorted(state.redeliver_at.items()):
            if len(taken) >= max_messages:
                return taken
            if when <= now:
                taken.append(self._deliver(state.stream.records[sequence - 1]))
        while len(taken) < max_messages and state.cursor < len(state.stream.records):
            record = state.stream.records[state.cursor]
            state.cursor += 1
            if any(subjects.matches(f, record.subject) for f in state.settings.subjects):
                taken.append(self._deliver(record))
        return taken

    def _deliver(self, record: LogRecord) -> Delivery:
        state = self._state
        count = state.deliveries.get(record.sequence, 0) + 1
        state.deliveries[record.sequence] = count
        # if nobody acks or naks in time, it comes back, as JetStream's ack_wait does
        state.redeliver_at[record.sequence] = time.monotonic() + state.settings.ack_wait
        return _MemoryDelivery(state, replace(record, delivery_count=count))

    async def close(self) -> None:
        return None
