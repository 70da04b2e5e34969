"""A new term rebuilds its view from the log (the last event per subject): on JetStream and in memory the
result is the same."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from proto import subjects
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube.resources import Kube
from tenon.services.pod_watcher import observations as obs
from tenon.services.pod_watcher.batching import Arrival, Batch, micros
from tenon.services.pod_watcher.pending_batches import window_events
from tenon.services.pod_watcher.service import PodWatcher, PodWatcherSettings


def node(name: str, uid: str, rv: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid, "resourceVersion": str(rv), "labels": labels},
    }


def bound_pod(name: str, rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "resourceVersion": str(rv)},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


async def publish_history(event_log: EventLog) -> None:
    """n1 changes, n2 goes, n3 comes back under a new uid; a pod runs; a NodePool snapshot; a batch now."""
    nodes = obs.node_tracker()
    pods = obs.bound_pod_tracker()
    history = [
        nodes.observe(node("n1", "u1", 1)),
        nodes.observe(node("n2", "u2", 2)),
        nodes.observe(node("n3", "u3a", 3)),
        nodes.observe(node("n1", "u1", 4, team="blue")),
        nodes.forget(node("n2", "u2", 5)),
        nodes.forget(node("n3", "u3a", 6)),
        nodes.observe(node("n3", "u3b", 7)),
        pods.observe(bound_pod("web", 8)),
    ]
    for event in history:
        assert event is not None
        subject = (
            obs.node_subject(event)
            if type(event).__name__ == "NodeObserved"
            else obs.bound_pod_subject(event)
        )
        await event_log.publish(subject, event)
    snapshots = obs.SnapshotState(obs.NODEPOOLS)
    snapshot = snapshots.decide([{"kind": "NodePool", "metadata": {"name": "general", "uid": "u-np"}}])
    assert snapshot is not None
    await event_log.publish(subjects.NODEPOOLS, snapshot)
    now = micros(time.time())
    window = Batch(
        ({"kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u-p"}},),
        now - 2_000_000,
        now - 1_000_000,
        "idle",
        (Arrival("u-p", now - 2_000_000),),
        1_000_000,
        10_000_000,
    )
    [batch] = window_events(window, 1_048_576).events
    await event_log.publish(subjects.PENDING, batch)


async def recovered(event_log: EventLog) -> PodWatcher:
    watcher = PodWatcher(Kube(None), event_log, PodWatcherSettings(rebatch=30.0))  # type: ignore[arg-type]
    await watcher.recover()
    return watcher


@pytest.mark.integration
async def test_jetstream_and_in_memory_logs_recover_the_same_view(jetstream_log: JetStreamEventLog) -> None:
    memory_log = InMemoryEventLog()
    for event_log in (jetstream_log, memory_log):
        await publish_history(event_log)
    views = []
    for event_log in (jetstream_log, memory_log):
        watcher = await recovered(event_log)
        views.append(
            (
                {
                    uid: (n["metadata"]["name"], n["metadata"]["resourceVersion"])
                    for uid, n in watcher.nodes.known.items()
                },
                sorted(watcher.bound_pods.known),
                watcher.snapshots["nodepools"].state.fingerprint is not None,
                watcher.snapshots["daemonsets"].state.fingerprint,
            )
        )
        # the recently batched pod is not offered again before its re-batch time
        watcher.batcher.pod_pending("u-p", {"metadata": {"uid": "u-p"}}, micros(time.time()))
        assert watcher.batcher.window_size == 0
    assert views[0] == views[1]
    assert views[0][0] == {"u1": ("n1", "4"), "u3b": ("n3", "7")}
    assert views[0][1] == ["u-web"]
    assert views[0][2] is True and views[0][3] is None


async def test_an_unreadable_event_in_the_log_is_skipped_and_the_rest_recovered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event_log = InMemoryEventLog()
    await publish_history(event_log)
    broken = obs.node_event("added", node("n9", "u9", 9))
    del broken.node["metadata"]["uid"]  # well-formed JSON, but no uid: not an object the view can hold
    await event_log.publish(subjects.node("n9"), broken)
    with caplog.at_level(logging.WARNING, logger="tenon.pod_watcher"):
        watcher = await recovered(event_log)
    assert sorted(watcher.nodes.known) == ["u1", "u3b"]
    assert any("metadata.uid is missing" in getattr(r, "error", "") for r in caplog.records)
