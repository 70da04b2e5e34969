"""A service's background tasks end when its term does, even one whose cancel was lost (Python 3.11's
``asyncio.wait_for``, under every nats-py request, can return a result that came with the cancel)."""

from __future__ import annotations

import asyncio

from tenon.runtime.tasks import cancel_and_wait
from tests.support.waiting import until


async def _loses_its_first_cancel(laps: list[int]) -> None:
    """A polling loop whose first cancel is swallowed, as a request answered in the same turn swallows it."""
    lost = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if lost:
                raise
            lost = True
        laps.append(1)


async def test_a_task_that_lost_its_cancel_is_cancelled_again_until_it_ends() -> None:
    laps: list[int] = []
    looping = asyncio.create_task(_loses_its_first_cancel(laps))
    failing = asyncio.create_task(asyncio.sleep(0))
    await until(lambda: laps, what="the loop running")
    await asyncio.wait_for(cancel_and_wait([looping, failing], again_after=0.05), timeout=5)
    assert looping.cancelled() and failing.done()


async def test_one_cancel_is_not_enough_for_such_a_task() -> None:
    """What the helper is for: cancelled once, the loop runs on."""
    laps: list[int] = []
    looping = asyncio.create_task(_loses_its_first_cancel(laps))
    await until(lambda: laps, what="the loop running")
    looping.cancel()
    cancelled_at = len(laps)
    await until(lambda: len(laps) > cancelled_at + 2, what="the loop going on after its cancel")
    assert not looping.done()
    await cancel_and_wait([looping])
    assert looping.cancelled()


async def test_what_a_stopped_task_raised_is_retrieved_not_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("broken")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait([task])
    assert isinstance(task.exception(), RuntimeError)
