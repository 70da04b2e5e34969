"""The decider runtime, as every service runs it: rebuild from a snapshot and the tail, refuse impossible
stories, tick with a basis a replay can follow, and never decide the same input twice."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from proto import events as ev
from proto import registry, subjects
from tenon.domain.nodeclaim import Phase
from tenon.domain.projection import ClusterProjection, encode_projection
from tenon.runtime.decider import LONG_DECISION_S, BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.replay import replay
from tenon.runtime.service import CommonSettings, ServiceContext, decider_work
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import build_event
from tests.support.objects import demo_facts, pending_batch, pending_pod
from tests.support.services import caught_up, no_io, running
from tests.support.waiting import until


async def seeded() -> InMemoryEventLog:
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    return event_log


async def publish_batches(event_log: InMemoryEventLog, *names: str) -> None:
    now = datetime.now(UTC)
    for name in names:
        batch = pending_batch(name, pending_pod(f"{name}-0", "3"), at=now)
        await event_log.publish(subjects.PENDING, batch)


def facts(state: ClusterProjection) -> bytes:
    """The state without its parse cache (which holds whatever was parsed when, a cache, not a fact)."""
    return encode_projection(dataclasses.replace(state, parsed={}))


def planned_claims(state: object) -> list[str]:
    return sorted(c.name for c in state.claims.values() if c.planned)  # type: ignore[attr-defined]


async def test_a_rebuild_from_snapshot_and_tail_equals_one_from_the_whole_log() -> None:
    event_log = await seeded()
    await publish_batches(event_log, "a", "b", "c")
    async with running(SchedulerDecider(), BaseExecutor(), event_log, snapshot_every=2) as first:
        await until(lambda: caught_up(first))
    snapshot = await event_log.snapshots().load("scheduler")
    assert snapshot is not None and snapshot.manifest.covers >= 4
    await publish_batches(event_log, "d", "e")  # the tail after the snapshot, while no scheduler runs

    async with running(SchedulerDecider(), BaseExecutor(), event_log) as from_snapshot:
        await until(lambda: caught_up(from_snapshot))
        state_with_snapshot = facts(from_snapshot.state)
        claims_with_snapshot = planned_claims(from_snapshot.state)
    await event_log.snapshots().delete("scheduler")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as from_log:
        await until(lambda: caught_up(from_log))
        assert planned_claims(from_log.state) == claims_with_snapshot
        assert facts(from_log.state) == state_with_snapshot
    assert len(claims_with_snapshot) == 5  # one c3-8 per batch, each planned exactly once


async def test_a_snapshot_of_another_format_is_ignored_with_a_word_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event_log = await seeded()
    await event_log.snapshots().save("scheduler", b"\x00not ours", format="scheduler/0", covers=99)
    await publish_batches(event_log, "a")
    with caplog.at_level(logging.WARNING, logger="tenon.runtime"):
        async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:
            await until(lambda: planned_claims(runtime.state))
    assert any("snapshot of another format ignored" in r.getMessage() for r in caplog.records)


async def test_forged_and_impossible_steps_are_dead_lettered_and_not_acted_on() -> None:
    event_log = await seeded()
    await publish_batches(event_log, "a")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:
        [name] = await until(lambda: planned_claims(runtime.state))
        # a launcher cannot write a drain; and even disruption cannot drain what it never asked to disrupt
        for producer in ("launcher-capi", "disruption"):
            forged = build_event(
                ev.NodeClaimDrained, f"forged-{producer}", nodeclaim=name, node=None, producer=producer
            )
            last = await event_log.last_subject_sequence(subjects.nodeclaim(name))
            await event_log.append(
                subjects.nodeclaim_step(name, "NodeClaimDrained"),
                forged,
                expected_last_sequence=last,
                aggregate=subjects.nodeclaim(name),
            )
        letters = await until(
            lambda: event_log.events(subjects.DEADLETTER_STREAM)[1:], what="two dead letters"
        )
        assert runtime.state.claims[name].phase == Phase.PLANNED
        assert runtime.refused == 2
    reasons = [letter.error for letter in event_log.events(subjects.DEADLETTER_STREAM)]
    assert any(
        "NodeClaimDrained written by 'launcher-capi': only disruption may write it" in r for r in reasons
    )
    assert any(
        f"NodeClaim {name}: NodeClaimDrained from disruption: no disruption was requested" in r
        for r in reasons
    )
    assert len(letters) == 1


async def test_tick_decisions_carry_their_basis_and_replay_to_the_same() -> None:
    event_log = await seeded()
    await publish_batches(event_log, "a")
    decider = SchedulerDecider(launch_timeout=timedelta(milliseconds=200))
    async with running(decider, BaseExecutor(), event_log, tick_seconds=0.1) as runtime:
        await until(lambda: any(c.abandoned for c in runtime.state.claims.values()), what="a claim abandoned")
        await until(lambda: caught_up(runtime))
    abandoned = [e for e in event_log.events() if isinstance(e, ev.NodeClaimAbandoned)]
    assert abandoned and all(a.basis is not None and a.causation_id is None for a in abandoned)
    report = replay(SchedulerDecider(launch_timeout=timedelta(milliseconds=200)), event_log.records())
    assert report.differing == [], [c.differences() for c in report.differing]
    assert any(c.input_type == "tick" for c in report.comparisons)


def take_long() -> None:
    """Spend the CPU of a long decision (twice :data:`LONG_DECISION_S`) in the calling thread."""
    started = time.thread_time()
    while time.thread_time() - started < 2 * LONG_DECISION_S:
        pass


class DecisionThatWaitsForTheLoop(SchedulerDecider):
    """Its first batch takes long (CPU); its second is planned only once something on the event loop has
    answered it: possible only if that decision does not hold the loop."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0
        self.deciding = threading.Event()
        self.answer = threading.Event()
        self.answered_in_time: list[bool] = []

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            self.batches += 1
            if self.batches == 1:
                take_long()
            else:
                self.deciding.set()
                self.answered_in_time.append(self.answer.wait(10))
        return super().decide(state, event)


async def test_a_kind_of_decision_seen_to_take_long_leaves_the_event_loop_free() -> None:
    """The lease is renewed, the broker answered and the health heartbeat kept on the loop while such a
    decision runs."""
    event_log = await seeded()
    decider = DecisionThatWaitsForTheLoop()
    async with running(decider, BaseExecutor(), event_log) as runtime:
        await publish_batches(event_log, "a")
        await until(lambda: caught_up(runtime), what="the long batch planned")
        await publish_batches(event_log, "b")
        await until(decider.deciding.is_set, 15, interval=0.01, what="the next decision under way")
        decider.answer.set()  # the loop ran while the decision was waiting
        await until(lambda: caught_up(runtime), what="the second batch planned")
        assert len(planned_claims(runtime.state)) == 2
    assert decider.answered_in_time == [True]


class EveryBatchWaitsForTheLoop(SchedulerDecider):
    """Each batch is planned only once something on the event loop has answered it."""

    def __init__(self) -> None:
        super().__init__()
        self.deciding = threading.Event()
        self.answer = threading.Event()
        self.answered_in_time: list[bool] = []

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            self.deciding.set()
            self.answered_in_time.append(self.answer.wait(10))
        return super().decide(state, event)


class LongQuickThenWaitingTicks(SchedulerDecider):
    """Tick 1 takes long (CPU), tick 2 is quick, tick 3 decides only once something on the event loop has
    answered it: a tick's cost swings (disruption's idle tick, then its consolidation round)."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0
        self.deciding = threading.Event()
        self.answer = threading.Event()
        self.answered_in_time: list[bool] = []

    def tick(self, state: ClusterProjection, now: datetime) -> Sequence[ev.Event]:
        self.ticks += 1
        if self.ticks == 1:
            take_long()
        elif self.ticks == 3:
            self.deciding.set()
            self.answered_in_time.append(self.answer.wait(10))
        return super().tick(state, now)


async def test_a_tick_seen_to_take_long_stays_off_the_event_loop_after_quick_ones() -> None:
    event_log = await seeded()
    decider = LongQuickThenWaitingTicks()
    async with running(decider, BaseExecutor(), event_log, tick_seconds=0.05):
        await until(decider.deciding.is_set, 15, interval=0.01, what="the third tick under way")
        decider.answer.set()  # the loop ran while it was being decided
        await until(lambda: decider.answered_in_time, what="the third tick decided")
    assert decider.answered_in_time == [True]


async def test_a_replicas_next_term_decides_off_the_loop_what_an_earlier_term_saw_take_long() -> None:
    event_log = await seeded()
    decider = EveryBatchWaitsForTheLoop()
    work = decider_work(lambda _: decider, no_io)
    ctx = ServiceContext("scheduler", "replica-1", event_log)
    ctx.long_kinds.add(ev.PendingBatch)  # learnt by an earlier term of this replica
    term = asyncio.create_task(work(ctx, CommonSettings(lease_ttl=1.5)))
    await publish_batches(event_log, "a")
    await until(decider.deciding.is_set, 15, interval=0.01, what="the first decision of the term under way")
    decider.answer.set()
    await until(lambda: decider.answered_in_time, what="the first batch decided")
    ctx.stopping.set()
    await asyncio.wait_for(term, 30)
    assert decider.answered_in_time == [True]


ENCODE_S = 0.01


class SlowToEncode(SchedulerDecider):
    """A state that takes :data:`ENCODE_S` of CPU to encode (a large cluster's projection takes 0.1-0.2 s)."""

    def encode(self, state: ClusterProjection) -> bytes:
        started = time.thread_time()
        while time.thread_time() - started < ENCODE_S:
            pass
        return super().encode(state)


async def test_a_state_slow_to_encode_is_snapshotted_less_often_and_the_last_snapshot_covers_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Snapshots take a bounded share of the service's time: after one that took t to encode, the next waits
    at least 50 t, however many records came (here one per record was asked for); one still comes to cover
    them all."""
    event_log = await seeded()
    store = event_log.snapshots()
    saved: list[tuple[float, int]] = []
    save = store.save

    async def timed_save(name: str, data: bytes, **fields: object) -> object:
        saved.append((time.monotonic(), int(fields["covers"])))  # type: ignore[call-overload]
        return await save(name, data, **fields)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "save", timed_save)
    async with running(
        SlowToEncode(), BaseExecutor(), event_log, snapshot_every=1, snapshot_interval=4.0
    ) as rt:
        for name in "abcde":
            await publish_batches(event_log, name)
            await until(lambda: caught_up(rt), what=f"batch {name} planned")
        handled = rt.handled
        await until(lambda: bool(saved) and saved[-1][1] == handled, what="a snapshot covering every batch")
    assert len(planned_claims(rt.state)) == 5
    assert len(saved) < 5
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(saved)]
    assert all(gap >= 50 * ENCODE_S for gap in gaps), gaps


class PreparingExecutor(BaseExecutor):
    """Records which decisions it was asked to carry out."""

    def __init__(self) -> None:
        self.prepared: list[str] = []

    async def prepare(self, decision: ev.Event) -> bool:
        self.prepared.append(decision.id)
        return True


async def test_an_answer_an_earlier_term_recorded_is_not_carried_out_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A term that recorded its answer but did not ack the input leaves the input to the next term, which
    decides it again on a state holding that answer: nothing is carried out twice, nothing is logged as a
    refusal."""
    event_log = await seeded()
    await publish_batches(event_log, "a")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as first:
        [name] = await until(lambda: planned_claims(first.state))
        planned = first.state.claims[name].planned
    assert planned is not None
    last = await event_log.last_subject_sequence(subjects.nodeclaim(name))
    executor = PreparingExecutor()
    with caplog.at_level(logging.INFO, logger="tenon.runtime"):
        async with running(SchedulerDecider(), executor, event_log) as second:
            await until(lambda: caught_up(second))
            await second.submit([planned])
    assert planned.id not in executor.prepared
    assert await event_log.last_subject_sequence(subjects.nodeclaim(name)) == last
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
