"""The interruption-handler's executor: the SQS loop around the decider.

For each message received: if the decider already decided it (the same message received again, its deletion
lost), it is deleted at once; otherwise it is published as ``InterruptionMessageReceived`` (the publish
returns once JetStream has stored it) and the runtime's consumer folds and decides it, recording the notices
(or the dead letter); only then, in ``observed``, is the message deleted from the queue. A crash anywhere
before that leaves the message in the queue, and it comes back after the visibility timeout. A body too large
for one message of the log is dead-lettered by the executor itself (its reason says so) and deleted.

Counted (``karpenter_interruption_received_messages_total`` by ``message_type``: the notice's kind,
``unknown_instance``, ``malformed``, or the kind of event with nothing to do), deleted
(``karpenter_interruption_deleted_messages_total``) and timed on the queue
(``karpenter_interruption_message_queue_duration_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from proto import events as ev
from proto import registry, subjects
from tenon.runtime.decider import BaseExecutor, DeciderRuntime
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.observability import metrics
from tenon.runtime.tasks import cancel_and_wait
from tenon.services.interruption_handler.decider import DEADLETTER_STREAM, PRODUCER
from tenon.services.interruption_handler.sqs import InterruptionQueue, QueueError, Received, in_daemon_thread
from tenon.services.interruption_handler.state import HandlerState

log = logging.getLogger("tenon.interruption_handler")

HEADROOM = 16 * 1024
RETRY = 5.0


class InterruptionExecutor(BaseExecutor):
    def __init__(self, queue: InterruptionQueue) -> None:
        self.queue = queue
        self.runtime: DeciderRuntime[HandlerState] | None = None
        self.receipts: dict[str, Received] = {}
        self.deleted = 0
        self.received = 0
        self._task: asyncio.Task[None] | None = None
        self.polling = asyncio.Event()

    @property
    def state(self) -> HandlerState:
        assert self.runtime is not None
        return self.runtime.state

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        self.runtime = runtime
        self._task = asyncio.create_task(self._run(), name="interruption-handler:sqs")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        while self.queue.url is None:
            try:
                await in_daemon_thread(self.queue.resolve)
            except QueueError as exc:  # Karpenter crashes on a missing queue (kubernetes-sigs/karpenter#1799)
                log.error(
                    "interruption queue not found: retrying",
                    extra={"queue": self.queue.name, "error": str(exc)},
                )
                await asyncio.sleep(RETRY)
        log.info("polling the interruption queue", extra={"queue": self.queue.name, "url": self.queue.url})
        while True:
            self.polling.set()
            try:
                messages = await in_daemon_thread(self.queue.receive)
            except QueueError as exc:
                log.warning("receive failed", extra={"queue": self.queue.name, "error": str(exc)})
                await asyncio.sleep(RETRY)
                continue
            for message in messages:
                try:
                    await self._take(message)
                except Exception as exc:  # the message comes back after the visibility timeout
                    log.warning(
                        "message not taken", extra={"sqs_message": message.message_id, "error": str(exc)}
                    )

    async def _take(self, message: Received) -> None:
        assert self.runtime is not None
        self.received += 1
        self.receipts[message.message_id] = message
        if message.message_id in self.state.handled:
            log.info("message received again: decided already", extra={"sqs_message": message.message_id})
            await self._delete(message.message_id)
            return
        event_log = self.runtime.event_log
        if len(message.body.encode()) > event_log.max_message_size - HEADROOM:
            await self._too_large(message)
            return
        observation = make_event(
            ev.InterruptionMessageReceived,
            producer=PRODUCER,
            key=(self.queue.name, message.message_id, message.receive_count),
            decided_at=datetime.now(UTC),
            queue=self.queue.name,
            message_id=message.message_id,
            body=message.body,
            sent_at=message.sent_at,
            receive_count=message.receive_count,
        )
        await event_log.publish(registry.subject_of(observation), observation)

    async def _too_large(self, message: Received) -> None:
        assert self.runtime is not None
        letter = make_event(
            ev.DeadLetter,
            producer=PRODUCER,
            key=(DEADLETTER_STREAM, self.queue.name, message.message_id),
            stream=DEADLETTER_STREAM,
            consumer=PRODUCER,
            original_subject=subjects.interruption_message(self.queue.name),
            original_sequence=0,
            delivery_count=message.receive_count,
            error=f"message of {len(message.body.encode())} bytes is larger than the log takes",
            headers={"sqsQueue": self.queue.name, "sqsMessageId": message.message_id},
            data=message.body[:4096],
        )
        await self.runtime.event_log.publish(registry.subject_of(letter), letter)
        metrics.INTERRUPTION_RECEIVED.labels(message_type="malformed").inc()
        await self._delete(message.message_id)

    async def observed(self, event: ev.Event) -> None:
        """After the runtime decided a received message (its notices or dead letter are in the log)."""
        if not isinstance(event, ev.InterruptionMessageReceived):
            return
        outcome = self.state.handled.get(event.message_id)
        if outcome is not None and outcome.event_id == event.id:
            kind = {"dead-letter": "malformed", "unknown-instance": "unknown_instance"}.get(
                outcome.result, outcome.message_type
            )
            metrics.INTERRUPTION_RECEIVED.labels(message_type=kind.replace("-", "_")).inc()
            log.info(
                "interruption message handled",
                extra={
                    "sqs_message": event.message_id,
                    "outcome": outcome.result,
                    "kind": outcome.message_type,
                    "why": outcome.reason or None,
                    "instances": [i for i, _ in outcome.notices],
                },
            )
            if event.sent_at is not None:
                metrics.INTERRUPTION_QUEUE_DURATION.observe(
                    (datetime.now(UTC) - event.sent_at).total_seconds()
                )
        await self._delete(event.message_id)

    async def _delete(self, message_id: str) -> None:
        message = self.receipts.pop(message_id, None)
        if message is None:
            return  # received by an earlier term: it comes back and is deleted then
        try:
            await in_daemon_thread(lambda: self.queue.delete(message.receipt))
        except QueueError as exc:
            log.warning(
                "message not deleted: it comes back", extra={"sqs_message": message_id, "error": str(exc)}
            )
            return
        self.deleted += 1
        metrics.INTERRUPTION_DELETED.inc()
