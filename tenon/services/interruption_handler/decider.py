"""The interruption-handler's decision function (pure), as the live service and ``tenon replay
interruption-handler`` run it.

* **inputs**: the SQS messages as received (``InterruptionMessageReceived``, written by its executor: the
  message is in the log before anything is decided from it) and the claims' ``NodeClaimLaunched`` /
  ``NodeClaimTerminated`` (which instances tenon runs).
* ``evolve`` folds them (:mod:`.state`); a message's outcome is fixed when it is folded, once per message id.
* ``decide`` answers a message with an ``InterruptionNotice`` per instance of tenon's it names (kind,
  providerID, deadline, what the message said), or a ``DeadLetter`` with the reason for a malformed or
  unknown message; a notice for an instance tenon does not run, and a known event with nothing to do, decide
  nothing (the executor counts them). The executor deletes the message from SQS once this is in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from proto import events as ev
from proto import registry, subjects
from tenon.domain.nodeclaim import ClaimBook
from tenon.runtime.eventlog.factories import make_event
from tenon.services.interruption_handler.messages import Interruption, read_message
from tenon.services.interruption_handler.state import HandlerState, Outcome, decode_state, encode_state

PRODUCER = registry.INTERRUPTION_HANDLER
DEADLETTER_STREAM = "SQS"


def notices(event: ev.InterruptionMessageReceived, outcome: Outcome) -> list[ev.Event]:
    reading = read_message(event.body)
    assert isinstance(reading, Interruption)
    return [
        make_event(
            ev.InterruptionNotice,
            producer=PRODUCER,
            key=(event.queue, event.message_id, instance),
            causation=event,
            correlation_id=provider_id,
            decided_at=event.decided_at,
            provider_id=provider_id,
            kind=reading.kind,
            deadline=reading.deadline,
            detail={
                **reading.detail,
                "instanceId": instance,
                "messageId": event.message_id,
                "queue": event.queue,
            },
        )
        for instance, provider_id in outcome.notices
    ]


def dead_letter(event: ev.InterruptionMessageReceived, outcome: Outcome, sequence: int) -> ev.DeadLetter:
    return make_event(
        ev.DeadLetter,
        producer=PRODUCER,
        key=(DEADLETTER_STREAM, event.queue, event.message_id),
        causation=event,
        decided_at=event.decided_at,
        stream=DEADLETTER_STREAM,
        consumer=PRODUCER,
        original_subject=subjects.interruption_message(event.queue),
        original_sequence=sequence,
        delivery_count=event.receive_count,
        error=outcome.reason,
        headers={"sqsQueue": event.queue, "sqsMessageId": event.message_id},
        data=event.body,
    )


class InterruptionDecider:
    name = PRODUCER
    inputs = registry.inputs_of(PRODUCER)
    state_format = "interruption-handler/1"
    observations: tuple[type[ev.Event], ...] = (ev.InterruptionMessageReceived,)

    def initial_state(self) -> HandlerState:
        return HandlerState()

    def evolve(self, state: HandlerState, event: ev.Event, sequence: int = 0) -> HandlerState:
        return state.apply(event, sequence)

    def decide(self, state: HandlerState, event: ev.Event) -> Sequence[ev.Event]:
        if not isinstance(event, ev.InterruptionMessageReceived):
            return ()
        outcome = state.handled.get(event.message_id)
        if outcome is None or outcome.event_id != event.id:
            return ()  # a repeat of a message already decided
        if outcome.result == "notice":
            return notices(event, outcome)
        if outcome.result == "dead-letter":
            return [dead_letter(event, outcome, state.sequences.get(event.message_id, 0))]
        return ()

    def tick(self, state: HandlerState, now: datetime) -> Sequence[ev.Event]:
        return ()

    def claims(self, state: HandlerState) -> ClaimBook:
        return state.claims

    def encode(self, state: HandlerState) -> bytes:
        return encode_state(state)

    def decode(self, data: bytes) -> HandlerState:
        return decode_state(data)
