"""``tenon replay pod-watcher``: the batching decided again from what each PendingBatch recorded.

The decider's answer to a window is the list of events the pod-watcher would publish for it; replaying a
recording compares that, field by field (``decidedAt`` included: it is the window's logical closing moment),
with the PendingBatch events the log holds. A tampered batch must show up as a difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import Event, PendingArrival, PendingBatch
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.services.pod_watcher.batching import PendingBatcher, micros
from tenon.services.pod_watcher.decider import BatchingDecider
from tenon.services.pod_watcher.pending_batches import window_events
from tenon.services.pod_watcher.service import SERVICE, PodWatcherSettings
from tests.pod_watcher.support import logged, running_watcher
from tests.sandbox.controller_support import deployment, pod
from tests.support.waiting import until

S = 1_000_000
T0 = 1_700_000_000 * S


def differences(recorded: Iterable[Event]) -> list[str]:
    """Replay ``recorded`` (in log order) through the pod-watcher's decider: what differs from the log."""
    decider = BatchingDecider()
    state = decider.initial_state()
    replayed: list[Event] = []
    batches = [e for e in recorded if isinstance(e, PendingBatch)]
    for event in batches:
        state = decider.evolve(state, event)
        replayed += decider.decide(state, event)
    want = [msgspec.to_builtins(e) for e in batches]
    got = [msgspec.to_builtins(e) for e in replayed]
    lines = [f"recorded {len(want)} batch(es), replay made {len(got)}"] if len(want) != len(got) else []
    for index, (old, new) in enumerate(zip(want, got, strict=False)):
        lines += [f"batch {index} {k}: {old.get(k)!r} != {new.get(k)!r}" for k in old if old[k] != new.get(k)]
    return lines


def simulated_windows() -> list[PendingBatch]:
    """Three windows through the live batcher: a burst with a leaver (idle), a trickle (max-duration) split
    into parts, and one cut short by a shutdown."""
    batcher = PendingBatcher(idle=micros(1.0), max_duration=micros(3.0), rebatch=micros(30.0))

    def p(name: str) -> dict[str, Any]:
        spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}
        meta = {"name": name, "namespace": "default", "uid": f"u-{name}", "labels": {"pad": "x" * 200}}
        return {"kind": "Pod", "metadata": meta, "spec": spec}

    closed = []
    for i, name in enumerate(("a", "b", "c")):
        batcher.pod_pending(f"u-{name}", p(name), T0 + i * 200_000)
    batcher.pod_not_pending("u-b", T0 + 500_000)
    for i in range(20):  # a pod every 0.4 s, from T0 + 5 s: never idle for 1 s
        batcher.pod_pending(f"u-t{i:02}", p(f"t{i:02}"), T0 + 5 * S + i * 400_000)
        closed += batcher.poll(T0 + 5 * S + i * 400_000)
    batcher.pod_pending("u-last", p("last"), T0 + 20 * S)
    closed += batcher.flush(T0 + 20 * S + 300_000)
    events = [e for b in closed for e in window_events(b, 6_000).events]
    assert [e.window_closed_by for e in events].count("max-duration") >= 2
    assert {e.window_closed_by for e in events} == {"idle", "max-duration", "shutdown"}
    assert any(e.window_parts > 1 for e in events)
    return events


def test_replaying_recorded_windows_finds_no_difference() -> None:
    assert differences(simulated_windows()) == []


def tampered(events: list[PendingBatch], index: int, **changes: Any) -> list[PendingBatch]:
    return [msgspec.structs.replace(e, **changes) if i == index else e for i, e in enumerate(events)]


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda e: {"pods": e.pods[1:]}, id="a pod removed"),
        pytest.param(lambda e: {"decided_at": e.decided_at - timedelta(milliseconds=100)}, id="closed early"),
        pytest.param(lambda e: {"window_closed_by": "max-duration"}, id="reason changed"),
        pytest.param(
            lambda e: {
                "arrivals": (*e.arrivals[:-1], PendingArrival(e.arrivals[-1].uid, e.arrivals[-1].joined_at))
            },
            id="a pod that left recorded as staying",
        ),
        pytest.param(lambda e: {"window_idle_seconds": 2.0}, id="settings changed"),
    ],
)
def test_a_tampered_batch_shows_as_a_difference(tamper: Any) -> None:
    events = simulated_windows()
    first = events[0]
    assert first.window_closed_by == "idle" and len(first.pods) == 2 and first.arrivals[-1].left_at
    assert differences(tampered(events, 0, **tamper(first))), "a tampered batch replayed without a difference"


def test_a_split_that_differs_from_the_recorded_limit_shows_as_a_difference() -> None:
    events = simulated_windows()
    index = next(i for i, e in enumerate(events) if e.window_parts > 1)
    assert differences(tampered(events, index, max_message_bytes=1_048_576))


def test_the_service_definition_offers_the_decider_for_replay() -> None:
    decider = SERVICE.decider(PodWatcherSettings())  # type: ignore[misc]
    assert isinstance(decider, BatchingDecider)
    assert decider.inputs == (subjects.PENDING,) and decider.name == SERVICE.name == "pod-watcher"
    state = decider.evolve(decider.initial_state(), simulated_windows()[0])
    assert decider.decode(decider.encode(state)) == state


@pytest.mark.integration
async def test_a_recorded_batching_of_the_live_service_replays_with_no_difference() -> None:
    """The pod-watcher against the sandbox's kube-scheduler: a burst split into parts with a pod that left
    its window, then a window cut short by the leader stopping."""
    event_log = InMemoryEventLog()
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        pods_rt = store.resource("v1", "Pod")
        async with running_watcher(
            sandbox, event_log, batch_idle=1.5, batch_max=20.0, rebatch=300.0, batch_max_bytes=12_288
        ) as watcher:
            store.create(pods_rt, pod("leaves", cpu="1"))
            await until(lambda: watcher.batcher.window_size == 1, what="the pod in the window")
            store.create(store.resource("apps/v1", "Deployment"), deployment("wide", 24, cpu="1"))
            await until(lambda: watcher.batcher.window_size > 1, what="the burst joining the window")
            store.delete(pods_rt, "leaves", "default")
            await until(
                lambda: sum(len(b.pods) for b in event_log.events() if isinstance(b, PendingBatch)) == 24,
                what="the burst batched",
            )
            store.create(pods_rt, pod("cut-short", cpu="1"))
            await until(lambda: watcher.batcher.window_size == 1, what="the last pod in a window")
    recorded = await logged(event_log, PendingBatch)
    assert [b.window_closed_by for b in recorded][-1] == "shutdown"
    assert recorded[0].window_parts > 1
    assert any(a.left_at is not None for b in recorded for a in b.arrivals)  # the pod that left
    assert differences(recorded) == []
    assert differences(tampered(recorded, 0, pods=recorded[0].pods[:-1]))
