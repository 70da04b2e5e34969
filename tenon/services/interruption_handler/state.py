"""What the interruption-handler knows (pure): which instances tenon runs, and which messages it handled.

* ``instances``: instance id -> the NodeClaim launched as it (from ``NodeClaimLaunched``; an ``aws:///``
  providerID names the instance), until ``NodeClaimTerminated``. A notice for any other instance is counted
  and dropped: it is not tenon's (a queue shared with another cluster, an instance tenon already let go).
* ``handled``: SQS message id -> the outcome and when it was received, for :data:`HANDLED_KEPT`: SQS delivers
  a message at least once, so the same message received again (its deletion lost) decides nothing new.
* ``sequences``: the log sequence of each received message (a dead letter names it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from proto import events as ev
from tenon.domain.nodeclaim import ClaimBook
from tenon.services.interruption_handler.messages import Malformed, NotHandled, read_message

HANDLED_KEPT = timedelta(hours=1)
"""How long a handled message id is remembered (SQS keeps an EventBridge message at most a few minutes)."""


class Outcome(msgspec.Struct, frozen=True):
    result: str
    """``notice``, ``dead-letter``, ``unknown-instance`` or ``not-handled``."""
    at: datetime
    event_id: str
    """The ``InterruptionMessageReceived`` that decided it (a repeat of the message decides nothing)."""
    message_type: str = ""
    reason: str = ""
    notices: tuple[tuple[str, str], ...] = ()
    """(instance id, providerID) of each instance tenon runs that the message names."""


def instance_of(provider_id: str) -> str | None:
    if not provider_id.startswith("aws:///"):
        return None
    instance = provider_id.rsplit("/", 1)[-1]
    return instance if instance.startswith("i-") else None


@dataclass
class HandlerState:
    instances: dict[str, str] = field(default_factory=dict)
    """Instance id -> the providerID of the claim launched as it."""
    claim_of: dict[str, str] = field(default_factory=dict)
    """Instance id -> that claim."""
    handled: dict[str, Outcome] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    claims: ClaimBook = field(default_factory=ClaimBook)
    """Unused (the handler appends to no claim); the runtime asks for it."""

    def apply(self, event: ev.Event, sequence: int = 0) -> HandlerState:
        if isinstance(event, ev.NodeClaimLaunched):
            instance = instance_of(event.provider_id)
            if instance is not None:
                self.instances[instance] = event.provider_id
                self.claim_of[instance] = event.nodeclaim
        elif isinstance(event, ev.NodeClaimTerminated):
            for instance in [i for i, claim in self.claim_of.items() if claim == event.nodeclaim]:
                self.instances.pop(instance, None)
                self.claim_of.pop(instance, None)
        elif isinstance(event, ev.InterruptionMessageReceived):
            self._received(event, sequence)
        return self

    def _received(self, event: ev.InterruptionMessageReceived, sequence: int) -> None:
        self._forget(event.decided_at)
        if event.message_id in self.handled:
            return  # received again: decided the first time
        if sequence:
            self.sequences[event.message_id] = sequence
        self.handled[event.message_id] = outcome_of(self, event)

    def _forget(self, now: datetime) -> None:
        for message_id in [m for m, o in self.handled.items() if now - o.at > HANDLED_KEPT]:
            del self.handled[message_id]
            self.sequences.pop(message_id, None)


def outcome_of(state: HandlerState, event: ev.InterruptionMessageReceived) -> Outcome:
    """What a message comes to, given the instances tenon runs now."""
    reading = read_message(event.body)
    at = event.decided_at
    if isinstance(reading, Malformed):
        return Outcome("dead-letter", at, event.id, "malformed", reading.reason)
    if isinstance(reading, NotHandled):
        return Outcome("not-handled", at, event.id, reading.message_type, reading.reason)
    known = tuple((i, state.instances[i]) for i in reading.instance_ids if i in state.instances)
    if not known:
        ids = ", ".join(reading.instance_ids)
        return Outcome("unknown-instance", at, event.id, reading.kind, f"no instance of tenon's: {ids}")
    return Outcome("notice", at, event.id, reading.kind, "", known)


def encode_state(state: HandlerState) -> bytes:
    return msgspec.msgpack.encode(state)


def decode_state(data: bytes) -> HandlerState:
    return msgspec.msgpack.decode(
        data, type=HandlerState, dec_hook=lambda kind, obj: ClaimBook.from_plain(obj)
    )
