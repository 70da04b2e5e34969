"""Nothing that decides ages out of the log: every published fact is re-asserted once per resync interval,
spread over the interval, with ids a restarted leader derives again in the same epoch."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import Event, NodeObserved
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.eventlog.provisioning import default_streams
from tenon.runtime.eventlog.records import PublishResult
from tenon.runtime.kube.resources import Kube
from tenon.services.pod_watcher import observations as obs
from tenon.services.pod_watcher.resync import ResyncSchedule
from tenon.services.pod_watcher.service import PodWatcher, PodWatcherSettings
from tests.pod_watcher.support import running_watcher
from tests.sandbox.controller_support import node, pod
from tests.support.waiting import until

T0 = 1_700_000_000.0


def test_a_fact_is_due_once_per_epoch_unless_it_was_published_in_that_epoch() -> None:
    schedule = ResyncSchedule(100.0)
    schedule.published("node/a", T0)
    epoch = schedule.epoch("node/a", T0)
    due_at = schedule.starts("node/a", epoch + 1)
    assert T0 < due_at <= T0 + 100.0
    assert schedule.due(due_at - 0.001) == []
    assert schedule.due(due_at) == [("node/a", epoch + 1)]
    assert schedule.due(due_at + 50) == []  # handed out once: the caller publishes it
    schedule.published("node/a", due_at + 1)
    changed_later = due_at + 150  # it changed (and was published) during its next epoch ...
    schedule.published("node/a", changed_later)
    assert schedule.next_due() == schedule.starts("node/a", schedule.epoch("node/a", changed_later) + 1)
    schedule.forget("node/a")  # ... then it was removed: nothing left to re-assert
    assert schedule.next_due() is None and schedule.due(T0 + 10_000) == []


def test_re_assertions_of_a_big_cluster_are_spread_over_the_interval() -> None:
    schedule = ResyncSchedule(3600.0)
    for i in range(10_000):
        schedule.published(f"pod/{i}", T0)  # all listed at the same moment (a leader's first list)
    per_minute = []
    now = T0
    while (upcoming := schedule.next_due()) is not None and upcoming < T0 + 3600:
        now += 60
        per_minute.append(len(schedule.due(now)))
    assert sum(per_minute) == 10_000
    assert max(per_minute) < 2 * 10_000 / 60  # even: ~167 a minute, never a burst of all of them


def node_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "3", "labels": {"zone": "a"}},
        "spec": {"providerID": f"test:///{name}"},
        "status": {"capacity": {"cpu": "4"}},
    }


async def publish_cluster(event_log: EventLog, at: float, nodes: int) -> None:
    moment = datetime.fromtimestamp(at, UTC)
    tracker = obs.node_tracker()
    for i in range(nodes):
        event = tracker.observe(node_object(f"n{i}"), decided_at=moment)
        assert event is not None
        await event_log.publish(obs.node_subject(event), event)


def by_name(events: list[NodeObserved]) -> list[dict[str, Any]]:
    return sorted((e.node for e in events), key=lambda n: str(n["metadata"]["name"]))


def watcher(event_log: EventLog, clock: list[float]) -> PodWatcher:
    settings = PodWatcherSettings(events_max_age=40.0)  # resync every 10 s
    return PodWatcher(Kube(None), event_log, settings, clock=lambda: clock[0])  # type: ignore[arg-type]


async def test_two_leaders_re_asserting_in_the_same_epoch_store_each_fact_once() -> None:
    event_log = InMemoryEventLog()
    await publish_cluster(event_log, T0, nodes=50)
    clock = [T0]
    one, two = watcher(event_log, clock), watcher(event_log, clock)
    await one.recover()
    await two.recover()
    assert one.resync.due(clock[0]) == []  # just published: in its epoch
    clock[0] = T0 + 10.0  # every node's next epoch has begun (each at its own phase)
    due_one, due_two = one.resync.due(clock[0]), two.resync.due(clock[0])
    assert sorted(due_one) == sorted(due_two) and len(due_one) == 50
    await one.reassert(due_one)
    await two.reassert(due_two)
    stored = [e for e in event_log.events() if isinstance(e, NodeObserved)]
    assert len(stored) == 100  # 50 added + 50 re-asserted: the second leader's copies were dropped
    again = stored[50:]
    assert {e.change for e in again} == {"changed"}
    assert by_name(again) == by_name(stored[:50])  # the very versions the log held

    restarted = watcher(event_log, clock)  # a third term in the same epoch: it finds them fresh
    await restarted.recover()
    assert restarted.resync.due(clock[0]) == []


class SlowFirstLog(InMemoryEventLog):
    """Publishing the node's old version takes a while (a slow broker round trip), anything else is quick."""

    async def publish(self, subject: str, event: Event, **kwargs: Any) -> PublishResult:
        if isinstance(event, NodeObserved) and event.node["metadata"]["resourceVersion"] == "3":
            await asyncio.sleep(0.05)
        return await super().publish(subject, event, **kwargs)


async def test_a_re_assertion_never_lands_after_a_newer_change_of_the_same_node() -> None:
    event_log = SlowFirstLog()
    await publish_cluster(event_log, T0, nodes=1)
    clock = [T0 + 11.0]
    term = watcher(event_log, clock)
    await term.recover()
    due = term.resync.due(clock[0])
    relabelled = node_object("n0")
    relabelled["metadata"].update(resourceVersion="9", labels={"zone": "b"})

    async def the_watch_sees_a_change() -> None:
        change = term.nodes.observe(relabelled)
        assert change is not None
        await term._publish_observations([change])

    await asyncio.gather(term.reassert(due), the_watch_sees_a_change())
    await term.outbox.flushed()
    last = [r async for r in event_log.last_per_subject(subjects.node("n0"))]
    assert [r.event.node["metadata"]["labels"] for r in last] == [{"zone": "b"}]  # type: ignore[union-attr]
    assert len(event_log.events()) == 3  # added, re-asserted, changed


@pytest.mark.integration
async def test_with_a_short_max_age_the_log_still_holds_every_fact_after_the_first_events_expired(
    nats_settings: ConnectionSettings,
) -> None:
    """TENON_EVENTS_MAX_AGE=4s: the resync runs every second; once everything first published has expired, a
    service rebuilding from the log alone still finds the Node, the bound pod, the NodePools, the NodeClasses
    the DaemonSets and the PodDisruptionBudgets."""
    event_log = await JetStreamEventLog.connect(nats_settings, default_streams(max_age=4, duplicate_window=1))
    try:
        async with running_sandbox(controllers=False) as sandbox:
            store = sandbox.workload_store
            store.create(store.resource("v1", "Node"), node("n1", ready=True))
            store.create(store.resource("v1", "Pod"), pod("web", nodeName="n1"))
            store.create(
                store.resource("karpenter.sh/v1", "NodePool"),
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "metadata": {"name": "general"},
                    "spec": {"template": {"spec": {"requirements": []}}},
                },
            )
            store.create(
                store.resource("karpenter.cluster.x-k8s.io/v1alpha1", "ClusterAPINodeClass"),
                {
                    "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
                    "kind": "ClusterAPINodeClass",
                    "metadata": {"name": "default"},
                    "spec": {},
                },
            )
            async with running_watcher(sandbox, event_log, events_max_age=4.0) as term:
                assert term.settings.resync_interval == 1.0

                async def first_published() -> int:
                    facts = {r.subject: r.sequence async for r in event_log.read(subjects.CLUSTER)}
                    return max(facts.values()) if len(facts) == 6 else 0

                first: int = await until(lambda: first_published(), what="the six facts published")

                async def expired() -> bool:
                    return (await event_log.bounds()).first_sequence > first

                gone: bool = await until(
                    lambda: expired(), timeout=30, what="everything first published expired"
                )
                assert gone
                held = [r async for r in event_log.read(subjects.CLUSTER)]
                assert {r.subject for r in held} == {
                    subjects.node("n1"),
                    subjects.bound_pod("default", "web"),
                    subjects.NODEPOOLS,
                    subjects.NODECLASSES,
                    subjects.DAEMONSETS,
                    subjects.PDBS,
                }
                projection = ClusterProjection()
                for record in held:
                    assert record.event is not None and record.event.producer == "pod-watcher"
                    projection.apply(record.event, record.sequence)
                assert sorted(projection.nodes) == ["n1"]
                assert sorted(projection.bound_pods) == ["default/web"]
                assert sorted(projection.nodepools) == ["general"]
                assert sorted(projection.nodeclasses) == ["default"]
                assert term.reasserted > 0
    finally:
        await event_log.close()
