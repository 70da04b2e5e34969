"""The durable consumer runner, shared by the JetStream and in-memory logs.

What it guarantees a handler:

* **At-least-once, effectively once.** A message is acked only after its handler returned, and the ack is a
  confirmed ("double") ack. If the confirmation is lost (the broker restarted at that moment) the runner
  remembers the sequence, and when the broker redelivers it, acks it again without running the handler twice.
  Across process restarts, handlers stay idempotent through deterministic event ids (:mod:`proto.ids`).
* **Bounded concurrency, per-subject order.** Up to ``max_concurrency`` handlers run at once, but messages on
  the same subject (one NodeClaim, one node) run one at a time in log order, like kopf's per-object queues.
* **Failures are retried, then kept.** :class:`TransientError` or any unexpected exception naks with backoff;
  after ``max_deliver`` attempts, or at once for :class:`PermanentError` and undecodable payloads, the message
  is copied to the dead-letter stream with the error text and delivery count, then acked so the consumer goes
  on. If the dead-letter write itself fails the message is nak'ed: nothing is dropped.
* **Graceful stop.** ``stop()`` stops fetching, lets in-flight handlers finish (up to ``drain_timeout``) and
  acks them; what did not finish is left for redelivery.

The transport is reached through two small protocols, :class:`Delivery` and :class:`DeliverySource`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

from proto.codec import UndecodableEvent
from proto.events import DeadLetter
from proto.ids import derive_id
from tenon.runtime.eventlog import tracing
from tenon.runtime.eventlog.connection import ReconnectBackoff
from tenon.runtime.eventlog.interface import BatchHandler, ConsumerRunner, Handler
from tenon.runtime.eventlog.records import ConsumerSettings, LogRecord, PermanentError
from tenon.runtime.observability import metrics

_FETCH_BACKOFF = ReconnectBackoff(first=0.25, cap=5.0)
"""Waits after failed fetches in a row: 0.125-0.25 s after the first, doubling to 2.5-5 s."""

log = logging.getLogger("tenon.eventlog.runner")

_REMEMBERED_UNCONFIRMED = 10_000


class Delivery(Protocol):
    record: LogRecord

    async def ack(self) -> None:
        """Confirmed ack; raises if the broker did not confirm."""

    async def nak(self, delay: float) -> None: ...


class DeliverySource(Protocol):
    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        """Up to ``max_messages`` deliveries; an empty list when none arrived within ``timeout``."""

    async def close(self) -> None: ...


DeadLetterWriter = Callable[[DeadLetter], Awaitable[None]]


class PullConsumerRunner(ConsumerRunner):
    def __init__(
        self,
        *,
        stream: str,
        settings: ConsumerSettings,
        handler: Handler | None,
        open_source: Callable[[], Awaitable[DeliverySource]],
        batch_handler: BatchHandler | None = None,
        write_dead_letter: DeadLetterWriter,
    ) -> None:
        self.stream = stream
        self.settings = settings
        if (handler is None) == (batch_handler is None):
            raise ValueError("a consumer runner takes a handler or a batch handler")
        self._handler = handler
        self._batch_handler = batch_handler
        self._open_source = open_source
        self._write_dead_letter = write_dead_letter
        self._source: DeliverySource | None = None
        self._fetch_task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._subject_locks: dict[str, asyncio.Lock] = {}
        self._subject_users: dict[str, int] = {}
        self._unconfirmed: OrderedDict[int, None] = OrderedDict()
        self._refill_at = max(1, min(settings.fetch_batch, settings.max_concurrency) * 3 // 4)
        self._slot_freed = asyncio.Event()
        self._stopping = False
        self._handled = 0
        self._dead_lettered = 0
        self._fetch_failures = 0

    @property
    def handled(self) -> int:
        return self._handled

    @property
    def dead_lettered(self) -> int:
        return self._dead_lettered

    async def start(self) -> None:
        if self._fetch_task is not None:
            return
        self._source = await self._open_source()
        self._fetch_task = asyncio.create_task(self._fetch_loop(), name=f"consumer:{self.settings.durable}")

    async def stop(self) -> None:
        self._stopping = True
        if self._fetch_task is not None:
            self._fetch_task.cancel()
            await asyncio.gather(self._fetch_task, return_exceptions=True)
            self._fetch_task = None
        if self._inflight:
            _done, pending = await asyncio.wait(set(self._inflight), timeout=self.settings.drain_timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._source is not None:
            await self._source.close()
            self._source = None

    async def _fetch_loop(self) -> None:
        if self._batch_handler is not None:
            await self._fetch_batches()
            return
        assert self._source is not None
        while not self._stopping:
            free = self.settings.max_concurrency - len(self._inflight)
            if free < self._refill_at:
                # wait for a worthwhile number of free slots: one fetch round trip per handful of messages
                # instead of one per message when handlers are quick (an Event, not asyncio.wait over the
                # in-flight set, which would cost O(in flight) per completed handler)
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            deliveries = await self._fetch(min(free, self.settings.fetch_batch))
            for delivery in deliveries:
                task = asyncio.create_task(self._process(delivery))
                self._inflight.add(task)
                task.add_done_callback(self._task_done)

    async def _fetch(self, count: int) -> list[Delivery]:
        """Up to ``count`` deliveries; none after a failed fetch, once a backoff with jitter has passed (the
        broker restarting or electing a leader: the client reconnects by itself, and the consumers of every
        service must not poll it in step four times a second meanwhile)."""
        assert self._source is not None
        try:
            deliveries = await self._source.fetch(count, timeout=1.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fetch_failures += 1
            wait = _FETCH_BACKOFF.delay(self._fetch_failures)
            log.warning(
                "fetch failed, retrying",
                extra={
                    "consumer": self.settings.durable,
                    "error": str(exc),
                    "failures": self._fetch_failures,
                    "retry_in_s": round(wait, 2),
                },
            )
            await asyncio.sleep(wait)
            return []
        self._fetch_failures = 0
        self._report_lag(deliveries)
        return deliveries

    def _report_lag(self, deliveries: list[Delivery]) -> None:
        """``tenon_eventlog_consumer_lag``: what the broker still holds for this consumer after the last
        delivery, plus the deliveries just taken (none came within the fetch's wait: nothing is behind)."""
        pending = deliveries[-1].record.pending if deliveries else 0
        if pending is not None:
            metrics.CONSUMER_LAG.labels(consumer=self.settings.durable).set(pending + len(deliveries))

    async def _fetch_batches(self) -> None:
        """One batch at a time, in log order: fetch, hand over, dead-letter what the handler refused, ack."""
        assert self._source is not None and self._batch_handler is not None
        while not self._stopping:
            deliveries = await self._fetch(self.settings.fetch_batch)
            if deliveries:
                task = asyncio.create_task(
                    self._process_batch(sorted(deliveries, key=lambda d: d.record.sequence))
                )
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
                await asyncio.shield(task)  # a stop waits for the batch (drain_timeout), it is not cut short
                if len(deliveries) < self.settings.fetch_batch and (linger := self.settings.linger_now()) > 0:
                    await asyncio.sleep(linger)

    async def _process_batch(self, deliveries: list[Delivery]) -> None:
        assert self._batch_handler is not None
        todo = [d for d in deliveries if d.record.sequence not in self._unconfirmed]
        try:
            refused = await self._batch_handler([d.record for d in todo]) if todo else {}
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            attempt = max(d.record.delivery_count for d in deliveries)
            log.warning(
                "batch handler failed, the batch will be redelivered",
                extra={
                    "consumer": self.settings.durable,
                    "attempt": attempt,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            await asyncio.gather(*(self._nak(d, self.settings.backoff_for(attempt)) for d in deliveries))
            return
        # the consumer acks cumulatively: one ack of the last record covers the batch, but never past a record
        # whose dead letter could not be written (nak'ed, it must come again, and the records after it too)
        covered: list[Delivery] = []
        for position, delivery in enumerate(deliveries):
            reason = refused.get(delivery.record.sequence)
            if reason is not None and not await self._dead_letter(delivery, reason, ack=False):
                delay = self.settings.backoff_for(delivery.record.delivery_count)
                for later in deliveries[position + 1 :]:  # one by one: they come again in log order
                    await self._nak(later, delay)
                break
            covered.append(delivery)
        self._handled += sum(1 for d in covered if d.record.sequence not in refused)
        if covered:
            await self._ack(covered[-1], covering=[d.record.sequence for d in covered])

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self.settings.max_concurrency - len(self._inflight) >= self._refill_at:
            self._slot_freed.set()

    async def _process(self, delivery: Delivery) -> None:
        record = delivery.record
        lock = self._subject_locks.setdefault(record.subject, asyncio.Lock())
        self._subject_users[record.subject] = self._subject_users.get(record.subject, 0) + 1
        try:
            async with lock:
                handled = await self._process_in_order(delivery)
            if handled:
                # acked outside the subject's lock: order matters for the handlers' side effects, not for the
                # acks, and the next message of the subject need not wait for this one's round trip
                await self._ack(delivery)
        finally:
            users = self._subject_users[record.subject] - 1
            if users:
                self._subject_users[record.subject] = users
            else:
                # nobody holds or waits for it: forget it so the map stays as small as the work in flight
                del self._subject_users[record.subject]
                del self._subject_locks[record.subject]

    async def _process_in_order(self, delivery: Delivery) -> bool:
        """Run the handler; True when it succeeded and the message is to be acked."""
        record = delivery.record
        if record.sequence in self._unconfirmed:
            # handled before, only the ack confirmation was lost: don't run the side effects again
            return True
        handler = self._handler
        assert handler is not None
        try:
            if "traceparent" in record.headers:
                with tracing.consume_span(
                    record.subject, record.headers, self.settings.durable, record.sequence
                ):
                    await handler(record)
            else:
                await handler(record)  # nothing to continue: skip the context manager on the hot path
        except asyncio.CancelledError:
            raise
        except UndecodableEvent as exc:
            await self._dead_letter(delivery, f"undecodable: {exc}")
        except PermanentError as exc:
            await self._dead_letter(delivery, f"permanent failure: {exc}")
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if record.delivery_count >= self.settings.max_deliver:
                await self._dead_letter(
                    delivery,
                    f"failed {record.delivery_count} of {self.settings.max_deliver} attempts: {reason}",
                )
            else:
                delay = self.settings.backoff_for(record.delivery_count)
                log.warning(
                    "handler failed, will retry",
                    extra={
                        "consumer": self.settings.durable,
                        "subject": record.subject,
                        "sequence": record.sequence,
                        "attempt": record.delivery_count,
                        "retry_in_s": delay,
                        "error": reason,
                    },
                )
                await self._nak(delivery, delay)
            return False
        else:
            self._handled += 1
            return True
        return False

    async def _ack(self, delivery: Delivery, covering: list[int] | None = None) -> None:
        """Ack ``delivery``; ``covering``: the sequences a cumulative ack of it stands for (an ordered
        consumer's batch), all remembered as handled when the broker does not confirm it."""
        sequences = covering or [delivery.record.sequence]
        try:
            await delivery.ack()
        except Exception as exc:
            for sequence in sequences:
                self._unconfirmed[sequence] = None
            while len(self._unconfirmed) > _REMEMBERED_UNCONFIRMED:
                self._unconfirmed.popitem(last=False)
            log.warning(
                "ack not confirmed; a redelivery will be acked without running the handler again",
                extra={"consumer": self.settings.durable, "sequence": sequences[-1], "error": str(exc)},
            )
        else:
            for sequence in sequences:
                self._unconfirmed.pop(sequence, None)

    async def _nak(self, delivery: Delivery, delay: float) -> None:
        try:
            await delivery.nak(delay)
        except Exception as exc:  # the broker redelivers after ack_wait anyway
            log.warning("nak failed", extra={"consumer": self.settings.durable, "error": str(exc)})

    async def _dead_letter(self, delivery: Delivery, error: str, *, ack: bool = True) -> bool:
        """Copy the record to the dead letters, then ack it (unless ``ack`` is False: a cumulative ack covers
        it). False when the copy could not be written: the record is nak'ed, to come again."""
        record = delivery.record
        try:
            text = record.data.decode("utf-8")
            data, encoding = text, "utf-8"
        except UnicodeDecodeError:
            data, encoding = base64.b64encode(record.data).decode("ascii"), "base64"
        letter = DeadLetter(
            id=derive_id("eventlog", "DeadLetter", self.stream, self.settings.durable, record.sequence),
            decided_at=datetime.now(UTC),
            producer=f"consumer/{self.settings.durable}",
            stream=self.stream,
            consumer=self.settings.durable,
            original_subject=record.subject,
            original_sequence=record.sequence,
            delivery_count=record.delivery_count,
            error=error,
            headers=dict(record.headers),
            data=data,
            data_encoding=encoding,  # type: ignore[arg-type]
        )
        try:
            await self._write_dead_letter(letter)
        except Exception as exc:
            log.error(
                "dead-letter write failed; message left for redelivery",
                extra={"consumer": self.settings.durable, "sequence": record.sequence, "error": str(exc)},
            )
            await self._nak(delivery, self.settings.backoff_for(record.delivery_count))
            return False
        self._dead_lettered += 1
        metrics.DEADLETTERS.labels(consumer=self.settings.durable).inc()
        log.error(
            "message dead-lettered",
            extra={
                "consumer": self.settings.durable,
                "subject": record.subject,
                "sequence": record.sequence,
                "error": error,
            },
        )
        if ack:
            await self._ack(delivery)
        return True
