"""The controllers' plumbing: list+watch caches that survive 410 Expired, the delayed work queue, and the
slices a controller runs for before the event loop turns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from devtools.sandbox.controllers.informer import Informer, TurnSlice, WorkQueue
from devtools.sandbox.store import Store
from tests.sandbox.controller_support import node, wait_for


async def test_informer_restart_relists_and_reports_deletions_it_missed() -> None:
    store = Store(history_size=4)
    nodes_rt = store.resource("v1", "Node")
    store.create(nodes_rt, node("keep"))
    store.create(nodes_rt, node("gone"))
    informer = Informer(store, nodes_rt, resync_period=60.0)
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    await informer.synced.wait()
    assert sorted(seen) == [("ADDED", "gone"), ("ADDED", "keep")]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # while nobody watches, more changes happen than the store's history keeps
    store.delete(nodes_rt, "gone")
    for i in range(10):
        store.create(nodes_rt, node(f"new-{i}"))
    seen.clear()
    task = asyncio.create_task(informer.run())  # a (re)start always lists, then diffs against its cache
    try:
        await wait_for(lambda: ("DELETED", "gone") in seen and len(informer.objects) == 11, what="re-list")
        assert sorted(informer.objects) == sorted(["keep", *[f"new-{i}" for i in range(10)]])
        store.create(nodes_rt, node("after"))
        await wait_for(lambda: ("ADDED", "after") in seen, what="watching again after the re-list")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_informer_write_through_is_not_reported_twice() -> None:
    store = Store()
    nodes_rt = store.resource("v1", "Node")
    informer = Informer(store, nodes_rt, resync_period=60.0)
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        created = store.create(nodes_rt, node("n"))
        informer.observe_write("n", created)
        # a later object seen through the watch: the write's own watch event came before it, and was ignored
        store.create(nodes_rt, node("later"))
        await wait_for(lambda: ("ADDED", "later") in seen, what="the later object through the watch")
        assert seen == [("ADDED", "n"), ("ADDED", "later")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_work_queue_keeps_the_earliest_due_time_once_per_key() -> None:
    queue = WorkQueue()
    queue.add("late", 0.2)
    queue.add("soon", 0.05)
    queue.add("late", 0.01)  # an earlier due time wins
    queue.add("soon", 5.0)  # a later one does not postpone
    assert len(queue) == 2
    first = await asyncio.wait_for(queue.get(), 1.0)
    second = await asyncio.wait_for(queue.get(), 1.0)
    assert (first, second) == ("late", "soon")
    assert len(queue) == 0


class _Clock:
    """A clock in milliseconds that moves only when told to, and by ``on_yield`` each time the loop turns
    (the others' turn: while :meth:`turning`, a task in the background adds it whenever it runs)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_yield = 0.0

    def __call__(self) -> float:
        return self.now

    async def _others(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.now += self.on_yield

    @contextlib.asynccontextmanager
    async def turning(self) -> AsyncIterator[None]:
        others = asyncio.create_task(self._others())
        await asyncio.sleep(0)
        try:
            yield
        finally:
            others.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await others


async def _steps(turn: TurnSlice, clock: _Clock, count: int) -> list[bool]:
    """``count`` steps of 1 ms each; whether the loop turned after each."""
    yielded = []
    for _ in range(count):
        clock.now += 1
        yielded.append(await turn.pause())
    return yielded


async def test_a_fair_slice_runs_as_long_as_its_wait_for_a_turn_up_to_its_cap() -> None:
    clock = _Clock()
    turn = TurnSlice(5, fair_up_to=50, clock=clock)
    async with clock.turning():
        clock.on_yield = 20  # a busy loop: others run 20 ms between two of our turns
        assert await _steps(turn, clock, 5) == [False] * 4 + [True]
        # it waited 20 ms for its turn, so it now runs 20 ms before it lets the loop turn again
        assert await _steps(turn, clock, 20) == [False] * 19 + [True]
        clock.on_yield = 200  # a very busy loop: the slice stops at the cap
        assert await _steps(turn, clock, 20) == [False] * 19 + [True]
        assert await _steps(turn, clock, 50) == [False] * 49 + [True]
        clock.on_yield = 0  # an idle loop: back to the base slice
        assert await _steps(turn, clock, 50) == [False] * 49 + [True]
        assert await _steps(turn, clock, 5) == [False] * 4 + [True]


async def test_a_plain_slice_turns_after_its_seconds_however_busy_the_loop() -> None:
    clock = _Clock()
    turn = TurnSlice(5, clock=clock)
    async with clock.turning():
        clock.on_yield = 200
        for _ in range(3):
            assert await _steps(turn, clock, 5) == [False] * 4 + [True]
