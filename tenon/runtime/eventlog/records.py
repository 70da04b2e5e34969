"""Values the event log hands out, the settings of a consumer, and the errors it raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from proto.codec import UndecodableEvent, decode
from proto.events import Event


class EventLogError(RuntimeError):
    """The log could not do what was asked (broker unreachable, stream missing, ...)."""


class ConcurrencyConflict(EventLogError):
    """An append found a different last sequence on its aggregate subject than the writer expected."""

    def __init__(self, subject: str, expected: int, actual: int | None) -> None:
        self.subject = subject
        self.expected = expected
        self.actual = actual
        actual_text = "unknown" if actual is None else str(actual)
        super().__init__(
            f"concurrent write on {subject}: expected last sequence {expected}, the log has {actual_text}; "
            "reload the aggregate and decide again"
        )


class TransientError(Exception):
    """A handler failure worth retrying later (a conflict, an API timeout): the message is nak'ed with
    backoff."""


class PermanentError(Exception):
    """A handler failure no retry will fix: the message is dead-lettered at once."""


@dataclass(frozen=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool = False
    """True when the log already held a message with this event id (a redelivered handler published again)."""


@dataclass(frozen=True)
class LogBounds:
    """What a stream still holds: ``first_sequence`` to ``last_sequence`` (0 and 0 when empty)."""

    first_sequence: int
    last_sequence: int
    first_time: datetime | None

    def reaches_back_to(self, moment: datetime) -> bool:
        """Whether everything stored since ``moment`` is still held (nothing after it was removed)."""
        return self.first_sequence <= 1 or (self.first_time is not None and self.first_time <= moment)


@dataclass(frozen=True)
class LogRecord:
    """One stored message: the raw bytes, where it sits, and the event if it decodes."""

    sequence: int
    subject: str
    data: bytes
    headers: Mapping[str, str]
    recorded_at: datetime
    delivery_count: int = 1
    pending: int | None = None
    """For a consumer's delivery: how many messages its consumer still had to deliver after this one, as the
    broker said (None where not known)."""

    def decode(self) -> Event:
        """The event; raises :class:`proto.codec.UndecodableEvent` with the reason."""
        return decode(self.data)

    @property
    def event(self) -> Event | None:
        try:
            return decode(self.data)
        except UndecodableEvent:
            return None


@dataclass(frozen=True)
class ConsumerSettings:
    """A durable consumer: its name, what it reads, and how hard it tries."""

    durable: str
    subjects: tuple[str, ...]
    max_concurrency: int = 16
    """Handlers running at once; messages on the same subject always run one at a time, in order."""
    max_deliver: int = 5
    """Attempts before a failing message is dead-lettered."""
    backoff: tuple[float, ...] = (0.2, 1.0, 5.0, 15.0)
    """Nak delay after the n-th failed attempt (the last value repeats)."""
    ack_wait: float = 30.0
    """Seconds the broker waits for an ack before redelivering (handlers longer than this should be split)."""
    deliver_new_only: bool = False
    """Start at messages published after the consumer is created, instead of the whole log."""
    drain_timeout: float = 20.0
    """On stop, how long in-flight handlers may take to finish before their messages are left to
    redelivery."""
    fetch_batch: int = 64
    linger: float | Callable[[], float] = 0.0
    """Ordered consumers: seconds to wait after a batch shorter than ``fetch_batch`` before fetching the next,
    so that under a stream of records each batch gathers what arrived meanwhile (a record after a quiet
    spell is still handed over at once: the wait comes after it). Each batch costs a fetch, an ack and a
    decision whatever its size; for a consumer that can wait a little, fewer, larger batches. A callable is
    asked after each batch: a consumer whose handler can wait only at times (:meth:`linger_now`)."""
    extra: Mapping[str, str] = field(default_factory=dict)

    def linger_now(self) -> float:
        """Seconds to wait after a short batch, as of now."""
        return self.linger() if callable(self.linger) else self.linger

    def backoff_for(self, attempt: int) -> float:
        if not self.backoff:
            return 0.0
        return self.backoff[min(max(attempt, 1), len(self.backoff)) - 1]
