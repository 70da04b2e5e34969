"""The event log on NATS JetStream.

* ``publish`` sets ``Nats-Msg-Id`` to the event id; JetStream answers a repeat inside the duplicate window
  with
  the original sequence (``duplicate=True``), which is what makes redelivered handlers harmless.
* ``append`` adds ``Nats-Expected-Last-Subject-Sequence``; the server's "wrong last sequence" (error 10071)
  becomes :class:`ConcurrencyConflict` with the actual sequence.
* ``read`` uses an *ordered consumer*: ephemeral, push, flow-controlled, in memory on the server and gone when
  the reader leaves. Auditing the log (``tenon tap``) or rebuilding a projection leaves no durable state.
* ``consumer`` provisions a durable pull consumer and runs :class:`PullConsumerRunner` over it; fetches are
  bounded by free handler slots, so the broker never holds more unacked work for a replica than it can do.

The client reconnects on its own (``max_reconnect_attempts=-1`` for services); the runner treats a failed
fetch as transient and tries again, so a broker restart costs a pause, not a crash.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import BadRequestError, NotFoundError

from proto import subjects
from proto.codec import encode
from proto.events import DeadLetter, Event
from tenon.runtime.eventlog import tracing
from tenon.runtime.eventlog.connection import ConnectionSettings, ReconnectBackoff
from tenon.runtime.eventlog.direct import get_message
from tenon.runtime.eventlog.interface import BatchHandler, ConsumerRunner, EventLog, Handler
from tenon.runtime.eventlog.keyvalue import JetStreamKeyValue, KeyValue
from tenon.runtime.eventlog.provisioning import (
    StreamSettings,
    default_streams,
    deliver_in_order_from_ack_floor,
    ensure_consumer,
    ensure_stream,
)
from tenon.runtime.eventlog.pull import PullFetcher
from tenon.runtime.eventlog.records import (
    ConcurrencyConflict,
    ConsumerSettings,
    EventLogError,
    LogBounds,
    LogRecord,
    PublishResult,
)
from tenon.runtime.eventlog.runner import Delivery, PullConsumerRunner
from tenon.runtime.eventlog.snapshots import JetStreamSnapshotStore, SnapshotStore

log = logging.getLogger("tenon.eventlog.jetstream")

PROVISION_PATIENCE = 60.0
"""Seconds a starting service keeps asking a broker that cannot provision streams yet (a 3-server cluster
electing its meta leader takes a few) before it gives up with one line."""
_PROVISION_BACKOFF = ReconnectBackoff(first=0.5, cap=5.0)

MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE = 10071
_WRONG_SEQ_TEXT = re.compile(r"wrong last sequence: (\d+)")


async def connect(settings: ConnectionSettings) -> Client:
    """Connect, turning the client's assorted failures into one :class:`EventLogError` that says where."""
    options = settings.connect_options()
    options["error_cb"] = _log_connection_error
    try:
        if settings.max_reconnect_attempts < 0:
            client: Client = await nats.connect(**options)
        else:
            budget = settings.connect_timeout * (options["max_reconnect_attempts"] + 1) + 1.0
            client = await asyncio.wait_for(nats.connect(**options), timeout=budget)
        return client
    except Exception as exc:
        detail = str(exc) or type(exc).__name__
        raise EventLogError(f"cannot reach NATS at {settings.describe()}: {detail}") from None


async def _log_connection_error(exc: Exception) -> None:
    # one line, not the client's default traceback: a reconnecting service would flood its log otherwise
    log.warning("nats connection error: %s", str(exc) or type(exc).__name__)


class JetStreamEventLog(EventLog):
    def __init__(self, client: Client, streams: tuple[StreamSettings, ...] | None = None) -> None:
        self.client = client
        self.js: JetStreamContext = client.jetstream(timeout=5.0)
        self.streams = streams or default_streams()
        self._snapshots: JetStreamSnapshotStore | None = None

    @classmethod
    async def connect(
        cls,
        settings: ConnectionSettings,
        streams: tuple[StreamSettings, ...] | None = None,
        *,
        provision: bool = True,
    ) -> JetStreamEventLog:
        event_log = cls(await connect(settings), streams)
        if provision:
            await event_log.provision()
        return event_log

    async def provision(self, patience: float = PROVISION_PATIENCE) -> None:
        """Create or update the streams; a broker that cannot answer yet (a cluster electing its meta leader,
        a server still starting) is asked again with backoff for up to ``patience`` seconds, then the failure
        is one :class:`EventLogError` saying why. A setting a running stream cannot change fails at once."""
        deadline = time.monotonic() + patience
        failures = 0
        for stream in self.streams:
            while True:
                try:
                    await ensure_stream(self.js, stream)
                    break
                except EventLogError:
                    raise
                except Exception as exc:
                    failures += 1
                    wait = _PROVISION_BACKOFF.delay(failures)
                    detail = str(exc) or type(exc).__name__
                    if time.monotonic() + wait > deadline:
                        raise EventLogError(f"cannot provision stream {stream.name}: {detail}") from None
                    log.warning(
                        "the broker cannot provision streams yet; retrying",
                        extra={"stream": stream.name, "error": detail, "retry_in_s": round(wait, 2)},
                    )
                    await asyncio.sleep(wait)

    @staticmethod
    def _stream_of(subject: str) -> str:
        if subjects.matches(subjects.DEADLETTERS, subject):
            return subjects.DEADLETTER_STREAM
        return subjects.EVENTS_STREAM

    @staticmethod
    def _headers(event: Event, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {MSG_ID: event.id, "Tenon-Event-Type": type(event).__name__, **(extra or {})}
        return tracing.inject(headers)

    async def publish(
        self, subject: str, event: Event, *, headers: Mapping[str, str] | None = None
    ) -> PublishResult:
        with tracing.publish_span(subject, type(event).__name__):
            return await self._publish(subject, encode(event), self._headers(event, headers))

    async def publish_in_order(self, items: Sequence[tuple[str, Event]]) -> list[PublishResult]:
        """Pipelined: every message is written to the connection, in order, before any acknowledgement is
        awaited, and the server stores them in the order it receives them; a burst costs about one round
        trip instead of one each. (The first is awaited alone: the client's reply subscription, made by its
        first request, is there for the others.)"""
        if not items:
            return []
        first = await self.publish(*items[0])
        rest = await asyncio.gather(*(self.publish(subject, event) for subject, event in items[1:]))
        return [first, *rest]

    async def publish_raw(
        self, subject: str, data: bytes, headers: Mapping[str, str] | None = None
    ) -> PublishResult:
        """Store bytes as they are (tests use it to feed undecodable payloads)."""
        return await self._publish(subject, data, dict(headers or {}))

    async def _publish(self, subject: str, data: bytes, headers: dict[str, str]) -> PublishResult:
        if "*" in subject or ">" in subject:
            raise EventLogError(f"cannot publish on {subject!r}: a subject filter is not a subject")
        try:
            ack = await self.js.publish(subject, data, headers=headers)
        except nats.errors.NoRespondersError:
            raise EventLogError(f"no stream captures {subject!r}: was the log provisioned?") from None
        return PublishResult(ack.stream, ack.seq, bool(ack.duplicate))

    async def append(
        self,
        subject: str,
        event: Event,
        *,
        expected_last_sequence: int,
        aggregate: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PublishResult:
        merged = {**(headers or {}), EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected_last_sequence)}
        if aggregate is not None and aggregate != subject:
            merged[EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT] = aggregate
        with tracing.publish_span(subject, type(event).__name__):
            try:
                return await self._publish(subject, encode(event), self._headers(event, merged))
            except BadRequestError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                match = _WRONG_SEQ_TEXT.search(exc.description or "")
                actual = int(match.group(1)) if match else None
                raise ConcurrencyConflict(aggregate or subject, expected_last_sequence, actual) from None

    async def last_subject_sequence(self, subject: str) -> int:
        try:
            message = await self.js.get_last_msg(self._stream_of(subject), subject)
        except NotFoundError:
            return 0
        return int(message.seq or 0)

    async def last_sequence(self, stream: str = subjects.EVENTS_STREAM) -> int:
        """The sequence of the newest message in ``stream``."""
        try:
            info = await self.js.stream_info(stream)
        except NotFoundError:
            raise EventLogError(
                f"stream {stream} does not exist on this broker: no tenon service has provisioned it yet"
            ) from None
        return int(info.state.last_seq)

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
        last = await self.last_sequence(stream)
        end = None if follow else min(last, stop_sequence) if stop_sequence else last
        if end is not None and (end == 0 or (start_sequence or 1) > end):
            return
        config = ConsumerConfig()
        if start_sequence:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start_sequence
        elif start_time:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            config.opt_start_time = start_time
        else:
            config.deliver_policy = DeliverPolicy.ALL
        subscription = await self.js.subscribe(
            subject_filter, stream=stream, ordered_consumer=True, config=config
        )
        try:
            while True:
                try:
                    # nothing matching within a second while catching up means nothing left to read
                    message = await subscription.next_msg(timeout=3600.0 if follow else 1.0)
                except nats.errors.TimeoutError:
                    if follow:
                        continue
                    return
                record = _record(message)
                if stop_sequence is not None and record.sequence > stop_sequence:
                    return
                yield record
                if end is not None and (record.sequence >= end or message.metadata.num_pending == 0):
                    return
        finally:
            # the server would drop the ephemeral consumer after its inactivity threshold anyway; deleting it
            # now keeps an audit session from showing up in consumer listings at all
            consumer_name = getattr(subscription, "_consumer", None)
            try:
                await subscription.unsubscribe()
                if consumer_name:
                    await self.js.delete_consumer(stream, consumer_name)
            except Exception:  # already gone, or the connection with it
                pass

    async def last_per_subject(self, subject_filter: str) -> AsyncIterator[LogRecord]:  # type: ignore[override]
        # a last-per-subject delivery: one message per object rather than the retained history (reading it all
        # ran at about 7,000 events/s, so a leader change on a big cluster would take minutes)
        try:
            info = await self.js.stream_info(subjects.EVENTS_STREAM, subjects_filter=subject_filter)
        except NotFoundError:
            return
        expected = len(info.state.subjects or {})
        if expected == 0:
            return
        config = ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
        subscription = await self.js.subscribe(
            subject_filter, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config
        )
        try:
            for _ in range(expected):
                try:
                    message = await subscription.next_msg(timeout=5.0)
                except nats.errors.TimeoutError:
                    return  # a subject vanished meanwhile (retention): nothing more is coming
                yield _record(message)
                if message.metadata.num_pending == 0:
                    return
        finally:
            try:
                await subscription.unsubscribe()
            except Exception:  # already gone, or the connection with it
                pass

    async def bounds(self, stream: str = subjects.EVENTS_STREAM) -> LogBounds:
        try:
            info = await self.js.stream_info(stream)
        except NotFoundError:
            return LogBounds(0, 0, None)
        state = info.state
        first_time = None
        if state.messages:
            try:
                first = await get_message(self.js, stream, int(state.first_seq))
                first_time = _stored_at(first)
            except NotFoundError:
                first_time = None
        return LogBounds(int(state.first_seq or 0), int(state.last_seq or 0), first_time)

    @property
    def connected(self) -> bool:
        return bool(self.client.is_connected)

    @property
    def max_message_size(self) -> int:
        return int(self.client.max_payload or 1_048_576)

    async def key_value(self, bucket: str, *, ttl: float | None = None) -> KeyValue:
        return await JetStreamKeyValue.open(self.js, bucket, ttl=ttl, replicas=self.streams[0].replicas)

    def snapshots(self) -> SnapshotStore:
        if self._snapshots is None:
            self._snapshots = JetStreamSnapshotStore(
                self.js, chunk_size=self.max_message_size - 4096, replicas=self.streams[0].replicas
            )
        return self._snapshots

    async def consumer_ack_floor(self, durable: str) -> int:
        try:
            info = await self.js.consumer_info(subjects.EVENTS_STREAM, durable)
        except NotFoundError:
            return 0
        return int(info.ack_floor.stream_seq) if info.ack_floor else 0

    def ordered_consumer(self, settings: ConsumerSettings, handler: BatchHandler) -> ConsumerRunner:
        return self._runner(settings, None, handler)

    def consumer(self, settings: ConsumerSettings, handler: Handler) -> ConsumerRunner:
        return self._runner(settings, handler, None)

    def _runner(
        self, settings: ConsumerSettings, handler: Handler | None, batch_handler: BatchHandler | None
    ) -> ConsumerRunner:
        stream = subjects.EVENTS_STREAM

        async def open_source() -> _JetStreamSource:
            await ensure_consumer(self.js, stream, settings, ordered=batch_handler is not None)
            if batch_handler is not None:  # ordered: what a dead leader left unacknowledged comes first
                await deliver_in_order_from_ack_floor(self.js, stream, settings)
            fetcher = PullFetcher(self.client, stream, settings.durable)
            await fetcher.open()
            return _JetStreamSource(fetcher)

        async def write_dead_letter(letter: DeadLetter) -> None:
            await self.publish(subjects.deadletter(letter.stream, letter.consumer), letter)

        return PullConsumerRunner(
            stream=stream,
            settings=settings,
            handler=handler,
            batch_handler=batch_handler,
            open_source=open_source,
            write_dead_letter=write_dead_letter,
        )

    async def close(self) -> None:
        if not self.client.is_closed:
            await self.client.drain()


_NO_HEADERS: dict[str, str] = {}


def _record(message: Msg) -> LogRecord:
    metadata = message.metadata
    return LogRecord(
        sequence=metadata.sequence.stream,
        subject=message.subject,
        data=message.data,
        headers=message.headers or _NO_HEADERS,  # the client's own dict, read-only from here on
        recorded_at=metadata.timestamp,  # nats-py gives it in UTC already
        delivery_count=metadata.num_delivered or 1,
        pending=metadata.num_pending,
    )


def _stored_at(message: Any) -> datetime | None:
    """When the broker stored a message fetched by a get (nats-py parses it into ``time``)."""
    stored = getattr(message, "time", None)
    return stored if isinstance(stored, datetime) else None


class _JetStreamDelivery:
    def __init__(self, message: Msg) -> None:
        self._message = message
        self.record = _record(message)

    async def ack(self) -> None:
        await self._message.ack_sync(timeout=2.0)

    async def nak(self, delay: float) -> None:
        await self._message.nak(delay=delay)


class _JetStreamSource:
    def __init__(self, fetcher: PullFetcher) -> None:
        self._fetcher = fetcher

    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        messages = await self._fetcher.fetch(max_messages, timeout)
        return [_JetStreamDelivery(m) for m in messages]

    async def close(self) -> None:
        try:
            await self._fetcher.close()
        except Exception:
            pass
