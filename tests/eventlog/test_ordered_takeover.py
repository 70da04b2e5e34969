"""An ordered consumer taken over by a new leader delivers what the old one left unacknowledged first.

A leader that dies holding delivered records never acknowledges them; the broker gives them out again only
after ``ack_wait``, and meanwhile it hands the next leader the records published since. A decider that skips
what it has passed would then never decide the older ones (a claim planned but never launched). The new
leader must get them first, in log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from proto import events as ev
from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.support.events import build_event
from tests.support.waiting import until

SETTINGS = ConsumerSettings(durable="takeover", subjects=("tenon.cluster.node.*",), ack_wait=30.0)


def node_event(number: int) -> ev.NodeObserved:
    return build_event(
        ev.NodeObserved, f"node-{number}", change="added", node={"metadata": {"name": f"n{number}"}}
    )


async def test_a_new_holder_gets_the_old_holder_s_unacknowledged_records_first_in_order(
    nats_settings: ConnectionSettings,
) -> None:
    old = await JetStreamEventLog.connect(nats_settings)
    new = await JetStreamEventLog.connect(nats_settings)
    for number in (1, 2, 3):
        await old.publish(f"tenon.cluster.node.n{number}", node_event(number))

    held: list[int] = []
    never = asyncio.Event()

    async def hold_forever(records: list[LogRecord]) -> Mapping[int, str]:
        held.extend(r.sequence for r in records)
        await never.wait()  # the leader dies here: nothing is acknowledged
        return {}

    dying = old.ordered_consumer(SETTINGS, hold_forever)
    await dying.start()
    await until(lambda: len(held) == 3, timeout=10, what="the old leader holding 1-3")
    await old.client.close()  # dead: no ack, no drain
    for number in (4, 5):
        await new.publish(f"tenon.cluster.node.n{number}", node_event(number))

    seen: list[int] = []

    async def record(records: list[LogRecord]) -> Mapping[int, str]:
        seen.extend(r.sequence for r in records)
        return {}

    taking_over = new.ordered_consumer(SETTINGS, record)
    await taking_over.start()
    try:
        # well within ack_wait (30 s): without a rewind, 4 and 5 come first and 1-3 only after it
        await until(lambda: len(seen) >= 5, timeout=10, what="the new leader handling 1-5")
        assert seen[:5] == [1, 2, 3, 4, 5]
    finally:
        await taking_over.stop()
        await new.close()
