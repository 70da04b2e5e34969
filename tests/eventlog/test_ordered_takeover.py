"""An ordered consumer taken over by a new leader delivers what the old one left unacknowledged first.

A leader that dies holding delivered records never acknowledges them; the broker gives them out again only
after ``ack_wait``, and meanwhile it hands the next leader the records published since. A decider that skips
what it has passed would then never decide the older ones (a claim planned but never launched). The new
leader must get them first, in log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from nats.js.api import AckPolicy

from proto import events as ev
from proto.subjects import EVENTS_STREAM
from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import consumer_config
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


async def test_a_consumer_that_acked_each_record_is_made_again_after_its_ack_floor(
    nats_settings: ConnectionSettings,
) -> None:
    """A consumer made by a version that acked each record cannot take the cumulative ack policy in place: it
    is made again, starting after the last record it acked (none acked comes again, none is lost)."""
    log = await JetStreamEventLog.connect(nats_settings)
    settings = ConsumerSettings(durable="upgraded", subjects=("tenon.cluster.node.*",), ack_wait=30.0)
    try:
        for number in (1, 2, 3):
            await log.publish(f"tenon.cluster.node.n{number}", node_event(number))
        await log.js.add_consumer(EVENTS_STREAM, consumer_config(settings))  # an ack for each record
        old = await log.js.pull_subscribe_bind("upgraded", EVENTS_STREAM)
        delivered = await old.fetch(3, timeout=5)
        for message in delivered:
            await message.ack_sync()
        await old.unsubscribe()
        await log.publish("tenon.cluster.node.n4", node_event(4))

        seen: list[int] = []

        async def record(records: list[LogRecord]) -> Mapping[int, str]:
            seen.extend(r.sequence for r in records)
            return {}

        upgraded = log.ordered_consumer(settings, record)
        await upgraded.start()
        try:
            await until(lambda: seen, timeout=10, what="record 4 handled")
            assert seen == [4]
            info = await log.js.consumer_info(EVENTS_STREAM, "upgraded")
            assert info.config.ack_policy == AckPolicy.ALL
        finally:
            await upgraded.stop()
    finally:
        await log.close()
