"""The in-memory log keeps the semantics services rely on, so pure-logic tests can use it."""

from __future__ import annotations

import asyncio

import pytest

from proto import subjects
from proto.events import DeadLetter, NodeClaimLaunched
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, LogRecord
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tests.support.waiting import until


def launched(claim: str, n: int = 0) -> NodeClaimLaunched:
    return make_event(
        NodeClaimLaunched,
        producer="launcher",
        key=(claim, n),
        nodeclaim=claim,
        provider_id=f"p://{claim}/{n}",
        instance_type="c3-8",
    )


async def test_dedupe_and_append_conflicts() -> None:
    log = InMemoryEventLog()
    subject = subjects.nodeclaim_step("c1", "NodeClaimLaunched")
    first = await log.append(subject, launched("c1"), expected_last_sequence=0)
    again = await log.append(subject, launched("c1"), expected_last_sequence=0)
    assert again.duplicate and again.sequence == first.sequence
    with pytest.raises(ConcurrencyConflict):
        await log.append(subject, launched("c1", 1), expected_last_sequence=0)
    assert await log.last_subject_sequence(subject) == 1


async def test_consumer_retries_then_dead_letters_and_goes_on() -> None:
    log = InMemoryEventLog()
    await log.publish(subjects.nodeclaim_step("bad", "NodeClaimLaunched"), launched("bad"))
    await log.publish(subjects.nodeclaim_step("good", "NodeClaimLaunched"), launched("good"))
    await log.publish_raw(subjects.nodeclaim_step("junk", "NodeClaimLaunched"), b"junk")
    seen: list[str] = []

    async def handler(record: LogRecord) -> None:
        event = record.decode()
        assert isinstance(event, NodeClaimLaunched)
        if event.nodeclaim == "bad":
            raise RuntimeError("boom")
        seen.append(event.nodeclaim)

    runner = log.consumer(
        ConsumerSettings("t", (subjects.NODECLAIMS,), max_deliver=2, backoff=(0.01,)), handler
    )
    await runner.start()
    await until(lambda: runner.dead_lettered == 2, 5, interval=0.01, what="both bad records dead-lettered")
    await runner.stop()
    assert seen == ["good"]
    letters = log.events(subjects.DEADLETTER_STREAM)
    assert {letter.original_subject for letter in letters if isinstance(letter, DeadLetter)} == {
        subjects.nodeclaim_step("bad", "NodeClaimLaunched"),
        subjects.nodeclaim_step("junk", "NodeClaimLaunched"),
    }


async def test_read_follow_sees_new_events() -> None:
    log = InMemoryEventLog()
    got: list[int] = []

    async def follow() -> None:
        async for record in log.read(follow=True):
            got.append(record.sequence)
            if len(got) == 2:
                return

    task = asyncio.create_task(follow())
    await log.publish(subjects.nodeclaim_step("a", "NodeClaimLaunched"), launched("a"))
    await until(lambda: got == [1], 2, interval=0.01, what="the follower at the end of the log")
    await log.publish(subjects.nodeclaim_step("b", "NodeClaimLaunched"), launched("b"))  # after it got there
    await asyncio.wait_for(task, 2)
    assert got == [1, 2]
