"""The batching window's rules on logical time (microseconds given with each call; no I/O, no clock)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tenon.services.pod_watcher.batching import Arrival, PendingBatcher, micros, micros_of, moment_of

S = 1_000_000
"""One second in microseconds."""
T0 = 1_700_000_000 * S


def pod(uid: str, version: int = 1) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "default", "resourceVersion": str(version)},
    }


def batcher(idle: float = 1.0, max_duration: float = 10.0, rebatch: float = 30.0) -> PendingBatcher:
    return PendingBatcher(idle=micros(idle), max_duration=micros(max_duration), rebatch=micros(rebatch))


def test_window_closes_idle_after_the_last_new_pod_at_that_very_microsecond() -> None:
    b = batcher()
    b.pod_pending("a", pod("a"), T0)
    b.pod_pending("b", pod("b"), T0 + 600_000)
    assert b.next_deadline() == T0 + 1_600_000
    assert b.poll(T0 + 1_599_999) == []  # a microsecond before: still open
    [batch] = b.poll(T0 + 5 * S)  # collected late: it closed at its deadline all the same
    assert batch.uids == ("a", "b")
    assert (batch.closed_by, batch.opened_at, batch.closed_at) == ("idle", T0, T0 + 1_600_000)
    assert batch.arrivals == (Arrival("a", T0), Arrival("b", T0 + 600_000))
    assert b.poll(T0 + 6 * S) == [] and b.next_deadline() is not None  # only the re-batch times remain


def test_a_batch_holds_the_view_of_each_pod_as_last_seen_made_only_when_its_window_closes() -> None:
    viewed: list[str] = []

    def view(obj: dict[str, Any]) -> dict[str, Any]:
        viewed.append(obj["metadata"]["resourceVersion"])
        return {
            "metadata": {"uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"]}
        }

    b = PendingBatcher(idle=micros(1.0), max_duration=micros(10.0), rebatch=micros(30.0), view=view)
    b.pod_pending("a", {**pod("a", 1), "secret": "x"}, T0)
    b.pod_pending("a", {**pod("a", 2), "secret": "x"}, T0 + S // 2)
    b.pod_pending("b", pod("b", 1), T0 + S // 2)
    b.pod_not_pending("b", T0 + S // 2 + 1)  # bound before the close: never viewed
    assert viewed == []
    [batch] = b.poll(T0 + 2 * S)
    assert batch.pods == ({"metadata": {"uid": "a", "resourceVersion": "2"}},)
    assert viewed == ["2"]


def test_a_pod_pending_after_the_deadline_opens_the_next_window_even_if_the_first_was_not_collected() -> None:
    b = batcher()
    b.pod_pending("a", pod("a"), T0)
    b.pod_pending("b", pod("b"), T0 + S)  # exactly at the deadline: the window is over
    first, second = b.poll(T0 + 3 * S)
    assert (first.uids, first.closed_at) == (("a",), T0 + S)
    assert (second.uids, second.opened_at, second.closed_at) == (("b",), T0 + S, T0 + 2 * S)


def test_updates_of_pods_already_in_the_window_do_not_extend_it_but_refresh_the_object() -> None:
    b = batcher()
    b.pod_pending("a", pod("a", 1), T0)
    deadline = b.next_deadline()
    b.pod_pending("a", pod("a", 2), T0 + S // 2)  # the scheduler marked it Unschedulable again
    assert b.next_deadline() == deadline
    [batch] = b.poll(T0 + S)
    assert batch.pods[0]["metadata"]["resourceVersion"] == "2"
    assert batch.arrivals == (Arrival("a", T0),)


def test_a_steady_trickle_closes_the_window_at_max_duration() -> None:
    b = batcher(idle=1.0, max_duration=3.0)
    batches = []
    for i in range(12):  # a new pod every 0.5 s: never idle for 1 s
        b.pod_pending(f"p{i:02}", pod(f"p{i:02}"), T0 + i * S // 2)
        batches += b.poll(T0 + i * S // 2)
    batches += b.poll(T0 + 6 * S)
    assert [x.closed_by for x in batches] == ["max-duration", "max-duration"]
    assert [len(x.pods) for x in batches] == [6, 6]
    assert all(x.closed_at - x.opened_at == 3 * S for x in batches)


def test_a_batch_holds_only_pods_still_pending_records_who_left_and_an_emptied_window_emits_nothing() -> None:
    b = batcher()
    b.pod_pending("a", pod("a"), T0)
    b.pod_pending("b", pod("b"), T0 + 100)
    b.pod_not_pending("a", T0 + 200)  # bound or deleted before the window closed
    [batch] = b.poll(T0 + 2 * S)
    assert batch.uids == ("b",)
    assert batch.arrivals == (Arrival("a", T0, T0 + 200), Arrival("b", T0 + 100))

    b.pod_pending("c", pod("c"), T0 + 3 * S)
    b.pod_not_pending("c", T0 + 3 * S + 1)
    assert b.poll(T0 + 5 * S) == []
    assert b.window_size == 0


def test_pods_still_pending_join_again_exactly_at_their_rebatch_time() -> None:
    b = batcher(rebatch=30.0)
    b.pod_pending("a", pod("a"), T0)
    b.pod_pending("gone", pod("gone"), T0)
    assert len(b.poll(T0 + S)) == 1
    b.pod_not_pending("gone", T0 + 2 * S)
    assert b.next_deadline() == T0 + 31 * S
    b.pod_pending("a", pod("a", 2), T0 + 20 * S)  # still pending: not news before its time
    assert b.window_size == 0
    [again] = b.poll(T0 + 40 * S)  # it joined at T0+31 s, and that window closed 1 s later
    assert (again.uids, again.opened_at, again.closed_at) == (("a",), T0 + 31 * S, T0 + 32 * S)


def test_a_pod_still_pending_is_offered_again_ever_more_rarely_until_it_stops_pending() -> None:
    b = batcher(rebatch=5.0)
    b.pod_pending("a", pod("a"), T0)
    offers: list[int] = []
    while len(offers) < 9:  # every deadline in turn: a window opens, closes 1 s later, the pod waits
        deadline = b.next_deadline()
        assert deadline is not None
        offers += [(batch.opened_at - T0) // S for batch in b.poll(deadline)]
    # first batch at T0 (closed 1 s idle later), then 5, 10, 20, ... s after each, capped at 5 s x 64
    gaps = [later - earlier for earlier, later in itertools.pairwise(offers)]
    assert gaps == [6, 11, 21, 41, 81, 161, 321, 321]
    b.poll(T0 + 2000 * S)  # the offers until then
    b.pod_not_pending("a", T0 + 2000 * S)
    b.pod_pending("a", pod("a", 2), T0 + 2001 * S)  # pending again later: a fresh start
    [fresh] = b.poll(T0 + 2002 * S)
    [again] = b.poll(T0 + 2010 * S)
    assert again.opened_at - fresh.closed_at == 5 * S


def test_pods_remembered_from_the_log_wait_for_their_rebatch_time() -> None:
    b = batcher(rebatch=30.0)
    b.remember_batched(["a"], T0 - 10 * S)  # an earlier leader batched it 10 s ago
    b.replace_pending({"a": pod("a"), "b": pod("b")}, T0)
    [batch] = b.poll(T0 + S)
    assert batch.uids == ("b",)
    [again] = b.poll(T0 + 25 * S)
    assert (again.uids, again.opened_at) == (("a",), T0 + 20 * S)


def test_flush_closes_the_open_window_as_shutdown_unless_its_deadline_came_first() -> None:
    b = batcher()
    assert b.flush(T0) == []
    b.pod_pending("a", pod("a"), T0)
    [batch] = b.flush(T0 + S // 2)
    assert (batch.closed_by, batch.uids, batch.closed_at) == ("shutdown", ("a",), T0 + S // 2)
    b.pod_pending("b", pod("b"), T0 + 2 * S)
    [late] = b.flush(T0 + 9 * S)
    assert (late.closed_by, late.closed_at) == ("idle", T0 + 3 * S)


def test_a_clock_that_steps_back_does_not_run_time_backwards() -> None:
    b = batcher()
    b.pod_pending("a", pod("a"), T0 + 5 * S)
    b.pod_pending("b", pod("b"), T0)  # the wall clock stepped back: read as T0 + 5 s
    [batch] = b.poll(T0 + 6 * S)
    assert batch.arrivals == (Arrival("a", T0 + 5 * S), Arrival("b", T0 + 5 * S))


def test_recorded_timestamps_round_trip_to_the_microsecond() -> None:
    for at in (T0, T0 + 1, T0 + 999_999, 0, 2**53):
        assert micros_of(moment_of(at)) == at


@pytest.mark.parametrize(
    ("idle", "max_duration", "rebatch", "message"),
    [
        (0, 10 * S, 30 * S, "idle must be a positive"),
        (S, 0.5, 30 * S, "max_duration must be a positive"),
        (5 * S, 2 * S, 30 * S, "must not be shorter than idle"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(
    idle: int, max_duration: Any, rebatch: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PendingBatcher(idle=idle, max_duration=max_duration, rebatch=rebatch)
