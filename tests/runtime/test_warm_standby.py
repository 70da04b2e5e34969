"""A standby replica keeps its state warm while another leads, so that taking the lease is followed by a
decision, not a rebuild: it folds what the leader has handled, never an input twice, and steps aside once its
own term begins."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from proto import registry
from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor, DeciderRuntime, RuntimeSettings
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.service import CommonSettings, ServiceContext, decider_work
from tenon.services.scheduler.decider import SchedulerDecider
from tests.runtime.test_decider_runtime import facts, planned_claims, publish_batches, seeded
from tests.support.objects import demo_facts
from tests.support.services import caught_up, no_io, running
from tests.support.waiting import until


class WarmedDecider(SchedulerDecider):
    """Remembers the claims its state held each time it was warmed."""

    def __init__(self) -> None:
        super().__init__()
        self.warmed_with: list[list[str]] = []

    def warm(self, state: ClusterProjection) -> None:
        super().warm(state)
        self.warmed_with.append(planned_claims(state))


def standby_runtime(event_log: InMemoryEventLog, decider: SchedulerDecider) -> DeciderRuntime[Any]:
    return DeciderRuntime(decider, BaseExecutor(), event_log, RuntimeSettings(tick_seconds=0))


async def test_a_standby_caught_up_takes_over_and_plans_each_batch_exactly_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event_log = await seeded()
    decider = WarmedDecider()
    standby = standby_runtime(event_log, decider)
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as leader:
        await publish_batches(event_log, "a", "b")
        await until(lambda: caught_up(leader), what="the leader planned a and b")
        assert await standby.catch_up()
        await publish_batches(event_log, "c")
        await until(lambda: caught_up(leader), what="the leader planned c")
        assert await standby.catch_up()
        assert planned_claims(standby.state) == planned_claims(leader.state)
        assert decider.warmed_with[-1] == planned_claims(leader.state)
    # the leader is gone; a batch arrives before the standby's term begins
    await publish_batches(event_log, "d")
    stopping = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="tenon.runtime"):
        term = asyncio.create_task(standby.run(stopping))
        await until(lambda: caught_up(standby), what="the standby's term planned d")
        stopping.set()
        await asyncio.wait_for(term, 30)
    assert len(planned_claims(standby.state)) == 4  # a, b, c by the leader, d by the standby: once each
    assert any(getattr(r, "from", None) == "warm standby" for r in caplog.records if r.msg == "state rebuilt")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as cold:
        await until(lambda: caught_up(cold))
        assert facts(cold.state) == facts(standby.state)


async def test_a_standby_steps_aside_once_its_term_has_begun() -> None:
    event_log = await seeded()
    await publish_batches(event_log, "a")
    standby = standby_runtime(event_log, SchedulerDecider())
    assert await standby.catch_up()
    stopping = asyncio.Event()
    term = asyncio.create_task(standby.run(stopping))
    await until(lambda: caught_up(standby), what="the term planned a")
    # from now on the consumer folds; a catch-up would fold what it delivers a second time
    assert not await standby.catch_up()
    assert len(planned_claims(standby.state)) == 1
    stopping.set()
    await asyncio.wait_for(term, 30)


async def test_a_replica_is_warm_before_it_may_campaign_and_its_term_runs_on_that_state() -> None:
    event_log = await seeded()
    await publish_batches(event_log, "a")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as leader:
        await until(lambda: caught_up(leader))
    work = decider_work(lambda _: SchedulerDecider(), no_io)
    ctx = ServiceContext("scheduler", "replica-2", event_log)
    settings = CommonSettings(lease_ttl=1.5)
    warmed = asyncio.Event()
    standing = asyncio.create_task(work.standby(ctx, settings, warmed))
    await asyncio.wait_for(warmed.wait(), 30)
    warm = ctx.warm
    assert warm is not None and planned_claims(warm.state) == planned_claims(leader.state)

    await publish_batches(event_log, "b")
    term = asyncio.create_task(work(ctx, settings))
    await until(lambda: caught_up(warm), what="the term, on the warm runtime, planned b")
    assert ctx.warm is None and ctx.leading  # the standby steps aside for the term
    assert len(planned_claims(warm.state)) == 2
    ctx.stopping.set()
    await asyncio.wait_for(term, 30)
    await asyncio.wait_for(standing, 30)


class LogThatBreaksOnce(InMemoryEventLog):
    """Once ``armed``, its next read stops with an error after two records (the broker went away mid-read)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    async def read(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        count = 0
        async for record in super().read(*args, **kwargs):
            if self.armed and count == 2:
                self.armed = False
                raise ConnectionError("broker went away")
            count += 1
            yield record


async def test_a_catch_up_that_failed_part_way_is_not_continued_but_started_afresh() -> None:
    """Continuing would fold again what the failed pass had folded; the replica's next step starts anew."""
    event_log = LogThatBreaksOnce()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    await publish_batches(event_log, "a")
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as leader:
        await until(lambda: caught_up(leader))
        event_log.armed = True
        standby = standby_runtime(event_log, SchedulerDecider())
        with pytest.raises(ConnectionError):
            await standby.catch_up()
        with pytest.raises(RuntimeError, match="an earlier rebuild failed part-way"):
            await standby.catch_up()
        fresh = standby_runtime(event_log, SchedulerDecider())
        assert await fresh.catch_up()
        assert facts(fresh.state) == facts(leader.state)
