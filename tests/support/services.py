"""Running a decider service in the test's own event loop (the runtime a process would run, minus the
election)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tenon.runtime.decider import BaseExecutor, Decider, DeciderRuntime, Executor, RuntimeSettings
from tenon.runtime.eventlog import EventLog
from tenon.runtime.service import CommonSettings, ServiceContext


@asynccontextmanager
async def running(
    decider: Decider[Any],
    executor: Executor,
    event_log: EventLog,
    *,
    tick_seconds: float = 0.2,
    snapshot_every: int = 1000,
    snapshot_interval: float = 60.0,
    claim_gauges: bool = False,
) -> AsyncIterator[DeciderRuntime[Any]]:
    """A started runtime (rebuilt, following); stopped cleanly on exit, its errors raised."""
    stopping = asyncio.Event()
    runtime = DeciderRuntime(
        decider,
        executor,
        event_log,
        RuntimeSettings(
            tick_seconds=tick_seconds, snapshot_every=snapshot_every, snapshot_interval=snapshot_interval
        ),
        claim_gauges=claim_gauges,
    )
    task = asyncio.create_task(runtime.run(stopping))
    rebuilt = asyncio.create_task(runtime.rebuilt.wait())
    done, _ = await asyncio.wait({task, rebuilt}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        rebuilt.cancel()
        task.result()
        raise AssertionError(f"{decider.name} stopped before it was running")
    assert rebuilt in done, f"{decider.name} did not rebuild within 30 s"
    try:
        yield runtime
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)


async def caught_up(runtime: DeciderRuntime[Any]) -> bool:
    """Whether the runtime has handled every record now in the log (its own decisions included): from then on,
    anything it does is an answer to something newer."""
    newest = [await runtime.event_log.last_subject_sequence(f) for f in runtime.decider.inputs]
    return runtime.handled >= max(newest, default=0)


async def no_io(
    ctx: ServiceContext, settings: CommonSettings, decider: Any
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    """A ``make_executor`` for :func:`tenon.runtime.service.decider_work` whose executor does no I/O."""

    async def close() -> None:
        return None

    return BaseExecutor(), close
