"""The outbox: a watch hands its events over and goes on; the log stores them in the order they were handed
over, a burst at once; a failure reaches the owner, or is retried until the broker is back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from proto import events as ev
from proto import subjects
from tenon.runtime.eventlog import EventLogError, PublishResult
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.eventlog.outbox import Outbox
from tests.support.events import build_event


def node_version(name: str, version: int) -> ev.NodeObserved:
    node = {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(version)}}
    return build_event(ev.NodeObserved, f"{name}-{version}", change="changed", node=node)


class HeldLog(InMemoryEventLog):
    """Stores nothing until ``release`` is set, then as a broker would; can refuse a number of attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.refusals = 0
        self.calls: list[int] = []

    async def publish_in_order(self, items: Sequence[tuple[str, ev.Event]]) -> list[PublishResult]:
        self.calls.append(len(items))
        await self.release.wait()
        if self.refusals:
            self.refusals -= 1
            raise EventLogError("the broker is away")
        return await super().publish_in_order(items)


def stored_versions(event_log: InMemoryEventLog) -> list[str]:
    return [
        e.node["metadata"]["resourceVersion"] for e in event_log.events() if isinstance(e, ev.NodeObserved)
    ]


async def test_a_put_returns_at_once_and_the_log_keeps_the_order_of_the_puts() -> None:
    event_log = HeldLog()
    seen: list[tuple[str, int]] = []
    outbox = Outbox(event_log, on_published=lambda e, r: seen.append((e.id, r.sequence)))
    for version in range(1, 6):
        await asyncio.wait_for(outbox.put(subjects.node("n1"), node_version("n1", version)), timeout=1)
    assert outbox.waiting == 5 and stored_versions(event_log) == []  # handed over, nothing stored yet
    event_log.release.set()
    await outbox.flushed()
    assert stored_versions(event_log) == ["1", "2", "3", "4", "5"]
    assert [event_id for event_id, _ in seen] == [f"n1-{v}" for v in range(1, 6)]
    # the puts made while a publish was under way went out together, not one round trip each
    assert sum(event_log.calls) == 5 and len(event_log.calls) < 5


async def test_a_failure_is_raised_to_the_owner_or_retried_until_the_broker_is_back() -> None:
    failing = HeldLog()
    failing.refusals = 1
    failing.release.set()
    outbox = Outbox(failing)
    await outbox.put(subjects.node("n1"), node_version("n1", 1))
    with pytest.raises(EventLogError, match="the broker is away"):
        await asyncio.wait_for(outbox.failure(), timeout=5)
    with pytest.raises(EventLogError):
        await outbox.put(subjects.node("n1"), node_version("n1", 2))

    patient = HeldLog()
    patient.refusals = 2
    patient.release.set()
    outbox = Outbox(patient, retry=0.01)
    for version in (1, 2, 3):
        await outbox.put(subjects.node("n1"), node_version("n1", version))
    await asyncio.wait_for(outbox.flushed(), timeout=5)
    assert stored_versions(patient) == ["1", "2", "3"]


async def test_a_full_outbox_makes_the_watch_wait() -> None:
    event_log = HeldLog()
    outbox = Outbox(event_log, limit=2)
    await outbox.put(subjects.node("n1"), node_version("n1", 1))
    await outbox.put(subjects.node("n1"), node_version("n1", 2))
    third = asyncio.create_task(outbox.put(subjects.node("n1"), node_version("n1", 3)))
    await asyncio.sleep(0.05)
    assert not third.done()  # two waiting: the third waits for room
    event_log.release.set()
    await asyncio.wait_for(third, timeout=5)
    await outbox.flushed()
    assert stored_versions(event_log) == ["1", "2", "3"]


async def test_a_pipelined_burst_on_jetstream_is_stored_in_the_order_sent(
    jetstream_log: JetStreamEventLog,
) -> None:
    items: list[tuple[str, Any]] = [
        (subjects.node(f"n{i % 3}"), node_version(f"n{i % 3}", i)) for i in range(1, 301)
    ]
    results = await jetstream_log.publish_in_order(items)
    assert [r.sequence for r in results] == sorted(r.sequence for r in results)
    stored = [r.event async for r in jetstream_log.read(subjects.CLUSTER)]
    assert [e.id for e in stored if e is not None] == [event.id for _, event in items]
    # and a repeat of the same burst stores nothing new
    again = await jetstream_log.publish_in_order(items)
    assert all(r.duplicate for r in again)
    assert [r.sequence for r in again] == [r.sequence for r in results]
