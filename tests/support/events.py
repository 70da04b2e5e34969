"""Building events in tests with the envelope filled as the owning service would fill it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from proto import events as ev
from proto import registry

E = TypeVar("E", bound=ev.Event)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def build_event(
    event_type: type[E],
    event_id: str,
    *,
    at: datetime | None = None,
    producer: str | None = None,
    causation: str | None = None,
    correlation: str | None = None,
    **fields: Any,
) -> E:
    """``event_type`` with id ``event_id``, decided ``at`` (default :data:`T0`), written by its owner
    (:mod:`proto.registry`) unless ``producer`` says otherwise."""
    return event_type(
        id=event_id,
        decided_at=at or T0,
        producer=producer or registry.first_writer(event_type),
        causation_id=causation,
        correlation_id=correlation,
        **fields,
    )


async def append_to_claim(event_log: Any, event: ev.NodeClaimEvent) -> int:
    """Append ``event`` to its claim's history after whatever is there (what its owner would do); its
    sequence."""
    from proto import subjects
    from tenon.runtime.claims import append_claim_event

    expected = await event_log.last_subject_sequence(subjects.nodeclaim(event.nodeclaim))
    result = await append_claim_event(event_log, event, expected=expected)
    return int(result.sequence)


def planned_claim(
    nodeclaim: str,
    event_id: str = "planned",
    *,
    nodepool: str = "default",
    choice: ev.InstanceChoice | None = None,
    labels: dict[str, str] | None = None,
    **fields: Any,
) -> ev.NodeClaimPlanned:
    """A ``NodeClaimPlanned`` with nothing but what a test names: a c3-8 on-demand at 0.1 $/h in any zone
    by default, no pods, no requirements."""
    values: dict[str, Any] = {"fallbacks": (), "pods": (), "requirements": (), **fields}
    return build_event(
        ev.NodeClaimPlanned,
        event_id,
        nodeclaim=nodeclaim,
        nodepool=nodepool,
        node_class="default",
        choice=choice or ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        labels=labels if labels is not None else {},
        **values,
    )
