"""The batching window's rules, driven by a fake clock (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from tenon.services.pod_watcher.batching import PendingBatcher


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pod(uid: str, version: int = 1) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "default", "resourceVersion": str(version)},
    }


def batcher(
    clock: FakeClock, idle: float = 1.0, max_duration: float = 10.0, rebatch: float = 30.0
) -> PendingBatcher:
    return PendingBatcher(idle=idle, max_duration=max_duration, rebatch=rebatch, clock=clock)


def test_window_closes_idle_seconds_after_the_last_new_pod() -> None:
    clock = FakeClock()
    b = batcher(clock)
    opened = clock.now
    b.pod_pending("a", pod("a"))
    clock.advance(0.6)
    b.pod_pending("b", pod("b"))
    assert b.next_deadline() == pytest.approx(clock.now + 1.0)
    clock.advance(0.9)
    assert b.poll() is None  # 0.9 s after the last new pod: still open
    clock.advance(0.1)
    batch = b.poll()
    assert batch is not None
    assert batch.uids == ("a", "b")
    assert batch.closed_by == "idle"
    assert batch.opened_at == opened
    assert b.poll() is None and b.next_deadline() is not None  # only the re-batch times remain


def test_updates_of_pods_already_in_the_window_do_not_extend_it_but_refresh_the_object() -> None:
    clock = FakeClock()
    b = batcher(clock)
    b.pod_pending("a", pod("a", 1))
    deadline = b.next_deadline()
    clock.advance(0.5)
    b.pod_pending("a", pod("a", 2))  # the scheduler marked it Unschedulable again
    assert b.next_deadline() == deadline
    clock.advance(0.5)
    batch = b.poll()
    assert batch is not None
    assert batch.pods[0]["metadata"]["resourceVersion"] == "2"


def test_a_steady_trickle_closes_the_window_at_max_duration() -> None:
    clock = FakeClock()
    b = batcher(clock, idle=1.0, max_duration=3.0)
    batches = []
    for i in range(12):  # a new pod every 0.5 s: never idle for 1 s
        b.pod_pending(f"p{i:02}", pod(f"p{i:02}"))
        clock.advance(0.5)
        batch = b.poll()
        if batch is not None:
            batches.append(batch)
    assert [x.closed_by for x in batches] == ["max-duration", "max-duration"]
    assert [len(x.pods) for x in batches] == [6, 6]
    assert all(x.closed_at - x.opened_at == pytest.approx(3.0) for x in batches)


def test_a_batch_holds_only_pods_still_pending_and_an_emptied_window_emits_nothing() -> None:
    clock = FakeClock()
    b = batcher(clock)
    b.pod_pending("a", pod("a"))
    b.pod_pending("b", pod("b"))
    b.pod_not_pending("a")  # bound or deleted before the window closed
    clock.advance(1.0)
    batch = b.poll()
    assert batch is not None and batch.uids == ("b",)

    b.pod_pending("c", pod("c"))
    b.pod_not_pending("c")
    clock.advance(1.0)
    assert b.poll() is None
    assert b.window_size == 0


def test_a_pod_added_after_the_window_closed_goes_into_the_next_batch() -> None:
    clock = FakeClock()
    b = batcher(clock)
    b.pod_pending("a", pod("a"))
    clock.advance(1.0)
    first = b.poll()
    b.pod_pending("a", pod("a", 2))  # still pending: not news
    b.pod_pending("b", pod("b"))
    clock.advance(1.0)
    second = b.poll()
    assert first is not None and first.uids == ("a",)
    assert second is not None and second.uids == ("b",)


def test_pods_still_pending_are_offered_again_after_the_rebatch_delay() -> None:
    clock = FakeClock()
    b = batcher(clock, rebatch=30.0)
    b.pod_pending("a", pod("a"))
    b.pod_pending("gone", pod("gone"))
    clock.advance(1.0)
    assert b.poll() is not None
    b.pod_not_pending("gone")
    batched_at = clock.now
    assert b.next_deadline() == pytest.approx(batched_at + 30.0)
    clock.advance(29.0)
    assert b.poll() is None
    clock.advance(1.0)
    assert b.poll() is None  # the pod joined a new window ...
    clock.advance(1.0)
    again = b.poll()  # ... which closes 1 s later
    assert again is not None and again.uids == ("a",)


def test_pods_remembered_from_the_log_wait_for_their_rebatch_time() -> None:
    clock = FakeClock()
    b = batcher(clock, rebatch=30.0)
    b.remember_batched(["a"], clock.now - 10.0)  # an earlier leader batched it 10 s ago
    b.replace_pending({"a": pod("a"), "b": pod("b")})
    clock.advance(1.0)
    batch = b.poll()
    assert batch is not None and batch.uids == ("b",)
    clock.advance(19.0)
    b.poll()
    clock.advance(1.0)
    again = b.poll()
    assert again is not None and again.uids == ("a",)


def test_flush_closes_the_open_window_as_shutdown() -> None:
    clock = FakeClock()
    b = batcher(clock)
    assert b.flush() is None
    b.pod_pending("a", pod("a"))
    batch = b.flush()
    assert batch is not None and batch.closed_by == "shutdown" and batch.uids == ("a",)


@pytest.mark.parametrize(
    ("idle", "max_duration", "rebatch", "message"),
    [
        (0.0, 10.0, 30.0, "idle must be a positive"),
        (1.0, float("nan"), 30.0, "max_duration must be a positive"),
        (5.0, 2.0, 30.0, "must not be shorter than idle"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(
    idle: float, max_duration: float, rebatch: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PendingBatcher(idle=idle, max_duration=max_duration, rebatch=rebatch, clock=FakeClock())
