"""Pods the new nodes did not take are offered again a second after the nodes stopped arriving, not after
the re-batch delay, in a window that closes then (the wait was their window); and ``tenon replay pod-watcher``
still decides those windows the same."""

from __future__ import annotations

from typing import Any

from tenon.services.pod_watcher.batching import PendingBatcher, micros
from tenon.services.pod_watcher.pending_batches import window_events
from tests.pod_watcher.test_replay import differences

S = 1_000_000
T0 = 1_700_000_000 * S


def pod(uid: str) -> dict[str, Any]:
    spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}
    return {"kind": "Pod", "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "default"}, "spec": spec}


def batcher() -> PendingBatcher:
    return PendingBatcher(idle=micros(1.0), max_duration=micros(10.0), rebatch=micros(30.0))


def test_pods_left_pending_join_again_idle_after_the_last_node_arrived() -> None:
    b = batcher()
    for uid in ("a", "b", "c"):
        b.pod_pending(uid, pod(uid), T0)
    [first] = b.poll(T0 + S)  # batched at T0+1 s
    assert first.uids == ("a", "b", "c")
    # nodes become schedulable at 3 s and 3.5 s
    b.capacity_arrived(T0 + 3 * S)
    b.capacity_arrived(T0 + 3 * S + S // 2)
    assert b.next_deadline() == T0 + 4 * S + S // 2  # a second after the last node, not at T0+31 s
    assert b.poll(T0 + 4 * S + S // 4) == []
    # offered right then: their window opened at the last node's arrival and closes a second later
    [again] = b.poll(T0 + 4 * S + S // 2)
    assert again.uids == ("a", "b", "c")
    assert (again.opened_at, again.closed_at) == (T0 + 3 * S + S // 2, T0 + 4 * S + S // 2)
    assert [a.joined for a in again.arrivals] == [T0 + 3 * S + S // 2] * 3


def test_the_re_offer_waits_while_the_kube_scheduler_still_places_those_pods() -> None:
    b = batcher()
    for uid in ("a", "b", "c"):
        b.pod_pending(uid, pod(uid), T0)
    b.poll(T0 + S)
    b.capacity_arrived(T0 + 3 * S)
    b.pod_not_pending("b", T0 + 3 * S + 8 * S // 10)  # placed on the new node a moment later
    assert b.next_deadline() == T0 + 4 * S + 8 * S // 10  # a second after that, not after the node
    assert b.poll(T0 + 4 * S + S // 2) == []
    [again] = b.poll(T0 + 4 * S + 8 * S // 10)
    assert again.uids == ("a", "c")
    assert (again.opened_at, again.closed_at) == (T0 + 3 * S + 8 * S // 10, T0 + 4 * S + 8 * S // 10)


def test_only_pods_batched_before_the_node_arrived_are_offered_again() -> None:
    b = batcher()
    b.pod_pending("old", pod("old"), T0)
    assert [batch.uids for batch in b.poll(T0 + S)] == [("old",)]
    b.pod_pending("new", pod("new"), T0 + 2 * S + S // 2)  # its window opens...
    b.capacity_arrived(T0 + 2 * S + 6 * S // 10)  # ...a node comes...
    # ...and it is batched after the node came: planned with it in view, it waits for its own re-batch time
    assert [batch.uids for batch in b.poll(T0 + 3 * S + S // 2)] == [("new",)]
    # the re-offer comes at 3.6 s; its window never opens before new's closed (3.5 s): windows do not overlap
    [again] = b.poll(T0 + 6 * S)
    assert (again.uids, again.opened_at, again.closed_at) == (
        ("old",),
        T0 + 3 * S + S // 2 + 1,
        T0 + 4 * S + S // 2 + 1,
    )
    assert b.next_deadline() == T0 + 3 * S + S // 2 + 30 * S  # no capacity since: new's usual re-batch


def test_a_window_of_pods_offered_again_replays_to_the_same() -> None:
    b = batcher()
    for uid in ("a", "b"):
        b.pod_pending(uid, pod(uid), T0)
    closed = b.poll(T0 + S)
    b.capacity_arrived(T0 + 2 * S)
    b.pod_pending("late", pod("late"), T0 + 3 * S + S // 4)  # after the re-offer: a window of its own
    closed += b.poll(T0 + 5 * S)
    assert [batch.uids for batch in closed] == [("a", "b"), ("a", "b"), ("late",)]
    assert (closed[1].opened_at, closed[1].closed_at) == (T0 + 2 * S, T0 + 3 * S)
    recorded = [e for batch in closed for e in window_events(batch, 1_000_000).events]
    assert differences(recorded) == []


def test_pods_offered_again_join_a_window_already_open_and_replay_to_the_same() -> None:
    b = batcher()
    for uid in ("a", "b"):
        b.pod_pending(uid, pod(uid), T0)
    closed = b.poll(T0 + S)
    b.capacity_arrived(T0 + 2 * S)
    b.pod_pending("late", pod("late"), T0 + 2 * S + S // 2)  # opens a window before the re-offer comes
    closed += b.poll(T0 + 5 * S)
    assert [batch.uids for batch in closed] == [("a", "b"), ("a", "b", "late")]
    # a and b joined at the re-offer (3 s), and the window closed a second after that, as for any pod
    assert (closed[1].opened_at, closed[1].closed_at) == (T0 + 2 * S + S // 2, T0 + 4 * S)
    recorded = [e for batch in closed for e in window_events(batch, 1_000_000).events]
    assert differences(recorded) == []


def test_pods_due_for_re_batching_still_wait_a_window_for_the_kube_scheduler() -> None:
    b = PendingBatcher(idle=micros(1.0), max_duration=micros(10.0), rebatch=micros(5.0))
    for uid in ("a", "b"):
        b.pod_pending(uid, pod(uid), T0)
    assert len(b.poll(T0 + S)) == 1
    assert b.poll(T0 + 6 * S) == []  # due at 6 s: their window is open, as for new pods
    b.pod_not_pending("a", T0 + 6 * S + S // 2)  # the kube-scheduler placed one meanwhile
    [again] = b.poll(T0 + 7 * S)
    assert (again.uids, again.opened_at, again.closed_at) == (("b",), T0 + 6 * S, T0 + 7 * S)
