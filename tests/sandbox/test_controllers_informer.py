"""The controllers' plumbing: list+watch caches that survive 410 Expired, and the delayed work queue."""

from __future__ import annotations

import asyncio
import contextlib

from devtools.sandbox.controllers.informer import Informer, WorkQueue
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
