"""A standby replica keeps its state warm while another leads, so that taking the lease is followed by a
decision, not a rebuild: it folds what the leader has handled, never an input twice, and steps aside once its
own term begins."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor, DeciderRuntime, Executor, RuntimeSettings
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.service import CommonSettings, ServiceContext, decider_work
from tenon.services.scheduler.decider import SchedulerDecider
from tests.runtime.test_decider_runtime import facts, planned_claims, publish_batches, seeded
from tests.support.services import caught_up, running
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


async def no_io(
    ctx: ServiceContext, settings: CommonSettings, decider: Any
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    async def close() -> None:
        return None

    return BaseExecutor(), close


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
