"""One contract, two implementations: every test here runs against the in-memory log and a real JetStream.

What services rely on the log for, stated once: deduplication by event id, the optimistic append on an
aggregate (a claim's whole history, across its step subjects), the newest record per subject, how far back
the log reaches, the broker's message size, compare-and-swap keys that expire, and snapshots kept apart from
the log.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from proto import events as ev
from proto import registry, subjects
from tenon.runtime.claims import append_claim_event
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, EventLog, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.keyvalue import RevisionMismatch
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tests.support.events import build_event
from tests.support.waiting import until


@pytest.fixture(params=["memory", "jetstream"])
async def event_log(request: pytest.FixtureRequest) -> AsyncIterator[EventLog]:
    if request.param == "memory":
        yield InMemoryEventLog(max_message_size=1_048_576)
        return
    server = request.getfixturevalue("nats_server")
    log = await JetStreamEventLog.connect(ConnectionSettings(servers=(server.url,), name="contract"))
    try:
        yield log
    finally:
        await log.close()


def node_event(name: str, version: int = 1) -> ev.NodeObserved:
    return build_event(
        ev.NodeObserved,
        f"node-{name}-{version}",
        change="added" if version == 1 else "changed",
        node={"metadata": {"name": name, "resourceVersion": str(version)}},
    )


def planned(claim: str) -> ev.NodeClaimPlanned:
    return build_event(
        ev.NodeClaimPlanned,
        f"plan-{claim}",
        nodeclaim=claim,
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={},
    )


def launched(claim: str) -> ev.NodeClaimLaunched:
    return build_event(
        ev.NodeClaimLaunched,
        f"launch-{claim}",
        nodeclaim=claim,
        provider_id=f"p:///{claim}",
        instance_type="c3-8",
    )


async def test_a_repeated_event_id_is_stored_once(event_log: EventLog) -> None:
    first = await event_log.publish(subjects.node("a"), node_event("a"))
    again = await event_log.publish(subjects.node("a"), node_event("a"))
    assert again.duplicate and again.sequence == first.sequence
    assert [r.sequence async for r in event_log.read()] == [first.sequence]


async def test_an_append_checks_the_whole_history_of_a_claim(event_log: EventLog) -> None:
    first = await append_claim_event(event_log, planned("c1"), expected=0)
    await event_log.publish(subjects.node("other"), node_event("other"))  # other subjects do not matter
    await append_claim_event(event_log, planned("c2"), expected=0)  # nor other claims
    second = await append_claim_event(event_log, launched("c1"), expected=first.sequence)
    assert second.sequence > first.sequence
    registered = build_event(
        ev.NodeClaimRegistered, "reg-c1", nodeclaim="c1", node="n", provider_id="p:///c1"
    )
    with pytest.raises(ConcurrencyConflict) as conflict:
        await append_claim_event(
            event_log, registered, expected=first.sequence
        )  # a writer that missed Launched
    assert conflict.value.actual == second.sequence
    assert "tenon.nodeclaim.c1.*" in str(conflict.value)
    steps = [r.subject async for r in event_log.read(subjects.nodeclaim("c1"))]
    assert steps == ["tenon.nodeclaim.c1.planned", "tenon.nodeclaim.c1.launched"]


async def test_last_per_subject_gives_the_newest_word_on_each_object(event_log: EventLog) -> None:
    for version in (1, 2, 3):
        await event_log.publish(subjects.node("a"), node_event("a", version))
    await event_log.publish(subjects.node("b"), node_event("b"))
    await event_log.publish(registry.subject_of(planned("c1")), planned("c1"))
    newest = [r.decode() async for r in event_log.last_per_subject(subjects.NODES)]
    assert [(e.node["metadata"]["name"], e.node["metadata"]["resourceVersion"]) for e in newest] == [  # type: ignore[attr-defined]
        ("a", "3"),
        ("b", "1"),
    ]
    assert [r async for r in event_log.last_per_subject("tenon.cluster.nodepools")] == []


async def test_bounds_say_how_far_back_the_log_reaches(event_log: EventLog) -> None:
    empty = await event_log.bounds()
    assert (empty.first_sequence, empty.last_sequence) == (0, 0)
    before = datetime.now(UTC) - timedelta(seconds=1)
    for name in ("a", "b"):
        await event_log.publish(subjects.node(name), node_event(name))
    bounds = await event_log.bounds()
    assert (bounds.first_sequence, bounds.last_sequence) == (1, 2)
    assert bounds.first_time is not None and bounds.first_time >= before
    assert bounds.reaches_back_to(before)


async def test_an_ordered_consumer_acks_each_batch_whole(event_log: EventLog) -> None:
    """A decider's consumer acks a batch with one cumulative ack: everything handled, the refused record
    (dead-lettered) included, is acked, so a new leader starts after it; nothing handled comes again."""
    published = [(await event_log.publish(subjects.node(n), node_event(n))).sequence for n in "abcde"]
    seen: list[int] = []

    async def refuse_the_second(records: list[LogRecord]) -> Mapping[int, str]:
        seen.extend(r.sequence for r in records)
        return {published[1]: "impossible"} if published[1] in (r.sequence for r in records) else {}

    async def acked_through() -> int:
        return await event_log.consumer_ack_floor("ordered-acks")

    settings = ConsumerSettings("ordered-acks", (subjects.NODES,), ack_wait=30.0)
    first = event_log.ordered_consumer(settings, refuse_the_second)
    await first.start()
    try:
        await until(lambda: seen == published, timeout=10, what="records 1-5 handled")
        # well within ack_wait: only acks move the floor
        await until(lambda: _equals(acked_through(), published[-1]), timeout=10, what="the batch acked whole")
        assert first.dead_lettered == 1
    finally:
        await first.stop()
    newer = (await event_log.publish(subjects.node("f"), node_event("f"))).sequence
    second = event_log.ordered_consumer(settings, refuse_the_second)
    await second.start()
    try:
        await until(lambda: newer in seen, timeout=10, what="the new leader handling record 6")
        assert seen == [*published, newer]
    finally:
        await second.stop()


async def test_a_lingering_ordered_consumer_hands_over_at_once_then_gathers_what_arrives_meanwhile(
    event_log: EventLog,
) -> None:
    """With ``linger``, a record after a quiet spell is handed over at once, and the records that arrive
    one by one while its batch is handled and the linger runs come in the next batch together."""
    batches: list[list[str]] = []

    async def handle(records: list[LogRecord]) -> Mapping[int, str]:
        batches.append([r.subject for r in records])
        return {}

    settings = ConsumerSettings("lingering", (subjects.NODES,), ack_wait=30.0, linger=1.0)
    consumer = event_log.ordered_consumer(settings, handle)
    await consumer.start()
    try:
        await event_log.publish(subjects.node("a"), node_event("a"))
        await until(lambda: len(batches) == 1, timeout=10, what="the first record handed over")
        for name in "bcd":  # apart from each other: without the linger, each would be a batch of its own
            await asyncio.sleep(0.05)
            await event_log.publish(subjects.node(name), node_event(name))
        await until(lambda: len(batches) >= 2, timeout=10, what="the records that came meanwhile")
        assert batches == [[subjects.node("a")], [subjects.node(n) for n in "bcd"]]
    finally:
        await consumer.stop()


async def test_a_consumer_asks_a_callable_linger_after_each_batch_it_handled(event_log: EventLog) -> None:
    """A consumer whose handler can wait only at times says so with a callable: it is asked once each batch
    is handled (so it can answer from what that batch changed), before the next fetch."""
    handled: list[str] = []
    asked: list[int] = []

    async def handle(records: list[LogRecord]) -> Mapping[int, str]:
        handled.extend(r.subject for r in records)
        return {}

    def linger() -> float:
        asked.append(len(handled))
        return 0.0

    settings = ConsumerSettings("asking", (subjects.NODES,), ack_wait=30.0, linger=linger)
    consumer = event_log.ordered_consumer(settings, handle)
    await consumer.start()
    try:
        await event_log.publish(subjects.node("a"), node_event("a"))
        await until(lambda: asked == [1], timeout=10, what="the linger asked after the first batch")
        await event_log.publish(subjects.node("b"), node_event("b"))
        await until(lambda: asked == [1, 2], timeout=10, what="the linger asked after the second batch")
    finally:
        await consumer.stop()


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def test_the_broker_tells_its_largest_message(event_log: EventLog) -> None:
    assert event_log.max_message_size >= 1_048_576


async def test_keys_are_compare_and_swap(event_log: EventLog) -> None:
    kv = await event_log.key_value("contract_leases", ttl=30)
    revision = await kv.create("scheduler", b"a")
    with pytest.raises(RevisionMismatch):
        await kv.create("scheduler", b"b")
    newer = await kv.update("scheduler", b"a", revision=revision)
    with pytest.raises(RevisionMismatch):
        await kv.update("scheduler", b"b", revision=revision)  # someone who missed the last write
    entry = await kv.get("scheduler")
    assert entry is not None and (entry.value, entry.revision) == (b"a", newer)
    await kv.delete("scheduler", revision=newer)
    assert await kv.get("scheduler") is None
    assert await kv.create("scheduler", b"b") > 0


async def test_keys_expire_when_not_rewritten(event_log: EventLog) -> None:
    kv = await event_log.key_value("contract_short", ttl=1)
    await kv.create("lease", b"a")
    await asyncio.sleep(1.6)  # the TTL itself is what is under test: nothing to observe but the clock
    assert await kv.create("lease", b"b") > 0


async def test_snapshots_round_trip_and_keep_only_recent_generations(event_log: EventLog) -> None:
    store = event_log.snapshots()
    assert await store.load("scheduler") is None
    big = os.urandom(3 * 1_048_576 + 17)  # more than one broker message
    for covers in (10, 20, 30):
        manifest = await store.save("scheduler", big + bytes([covers]), format="scheduler/1", covers=covers)
    stored = await store.load("scheduler")
    assert stored is not None and stored.data == big + bytes([30])
    assert (stored.manifest.covers, stored.manifest.format, stored.manifest.generation) == (
        30,
        "scheduler/1",
        3,
    )
    assert manifest.generation == 3
    assert await store.load("disruption") is None
    await store.delete("scheduler")
    assert await store.load("scheduler") is None
    # snapshots are not events: nothing of them is in the event log
    assert [r async for r in event_log.read()] == []
