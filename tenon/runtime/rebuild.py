"""Rebuilding a service's projection at start, so that nothing is folded without being handled.

A service keeps its projection in memory and follows the log with a durable consumer. After a restart (or a
change of leader) it must get the projection back, but not past what it has *handled*: an input folded at
rebuild but never decided would be skipped by the consumer and never answered. So the rebuild folds

* every record up to the consumer's ack floor (handled, acked), and
* every later record the service produced itself (decisions already made: the live service folds its own
  decisions as soon as it makes them, before its next input, and so must the rebuilt one),

and leaves the rest for the consumer, which will deliver it and have it decided. The ids of the service's own
events folded early are returned, so the handler does not fold them a second time.
"""

from __future__ import annotations

import logging
import time

from proto import subjects
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog import EventLog

log = logging.getLogger("tenon.rebuild")


async def rebuild_projection(
    event_log: EventLog, projection: ClusterProjection, *, durable: str, producer: str
) -> set[str]:
    started = time.perf_counter()
    floor = await event_log.consumer_ack_floor(durable)
    own: set[str] = set()
    folded = 0
    async for record in event_log.read(subjects.ALL_EVENTS):
        event = record.event
        if record.sequence <= floor:
            if event is not None:
                projection.apply(event, record.sequence)
                folded += 1
            continue
        if event is not None and event.producer == producer:
            projection.apply(event)  # not the global sequence: the consumer still has records before it
            if hasattr(event, "nodeclaim"):
                claim = projection.claim(event.nodeclaim)
                claim.last_sequence = max(claim.last_sequence, record.sequence)
            own.add(event.id)
            folded += 1
    projection.sequence = max(projection.sequence, floor)
    log.info(
        "projection rebuilt",
        extra={
            "durable": durable,
            "ack_floor": floor,
            "events": folded,
            "own_beyond_floor": len(own),
            "ms": round((time.perf_counter() - started) * 1000),
        },
    )
    return own
