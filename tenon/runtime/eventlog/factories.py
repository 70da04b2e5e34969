"""Building events with the envelope filled in the same way everywhere."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from proto.events import Event
from proto.ids import derive_id

E = TypeVar("E", bound=Event)


def make_event(
    event_type: type[E],
    *,
    producer: str,
    key: tuple[object, ...],
    causation: Event | None = None,
    correlation_id: str | None = None,
    decided_at: datetime | None = None,
    **fields: Any,
) -> E:
    """An event whose id derives from the producer, its type and ``key`` (see :mod:`proto.ids`).

    ``causation`` links it to the event it answers; its correlation id is inherited unless given.
    """
    causation_id = causation.id if causation is not None else None
    if correlation_id is None and causation is not None:
        correlation_id = causation.correlation_id
    return event_type(
        id=derive_id(producer, event_type.__name__, *key),
        decided_at=decided_at or datetime.now(UTC),
        producer=producer,
        causation_id=causation_id,
        correlation_id=correlation_id,
        **fields,
    )
