"""A closed window as PendingBatch events: ids, what each records for a replay, the split by message size."""

from __future__ import annotations

from typing import Any

from proto.codec import encode
from proto.events import PendingArrival, PendingBatch
from tenon.services.pod_watcher.batching import Arrival, Batch, moment_of
from tenon.services.pod_watcher.pending_batches import ENVELOPE_BYTES, window_events

S = 1_000_000
T0 = 1_700_000_000 * S


def pod(name: str, uid: str | None = None, padding: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid or f"u-{name}",
            "labels": {"app": name[:3], "pad": "x" * padding},
        },
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
    }


def batch(pods: list[dict[str, Any]], *, leavers: tuple[str, ...] = (), closed_by: Any = "idle") -> Batch:
    arrivals = [Arrival(p["metadata"]["uid"], T0 + i) for i, p in enumerate(pods)]
    arrivals += [Arrival(uid, T0 + 100 + i, T0 + 200 + i) for i, uid in enumerate(leavers)]
    return Batch(
        tuple(sorted(pods, key=lambda p: p["metadata"]["uid"])),
        T0,
        T0 + 2 * S,
        closed_by,
        tuple(arrivals),
        S,
        10 * S,
    )


def test_one_part_records_ids_settings_arrivals_and_the_closing_moment() -> None:
    made = window_events(batch([pod("b"), pod("a")], leavers=("u-gone",)), 1_048_576)
    [event] = made.events
    assert isinstance(event, PendingBatch) and made.too_large == ()
    assert event.batch_id == event.id == event.correlation_id
    assert [p["metadata"]["name"] for p in event.pods] == ["a", "b"]
    assert event.decided_at == moment_of(T0 + 2 * S) and event.window_opened_at == moment_of(T0)
    assert (event.window_idle_seconds, event.window_max_seconds) == (1.0, 10.0)
    assert (event.window_part, event.window_parts, event.max_message_bytes) == (1, 1, 1_048_576)
    assert event.arrivals == (
        PendingArrival("u-a", moment_of(T0 + 1)),
        PendingArrival("u-b", moment_of(T0)),
        PendingArrival("u-gone", moment_of(T0 + 100), moment_of(T0 + 200)),
    )
    same_pods = window_events(batch([pod("a"), pod("b")]), 2_000_000).events[0]
    assert same_pods.id == event.id  # the ids are the pods and the window's opening, as before


def test_a_window_too_big_for_one_message_is_split_in_order_with_every_pod_and_arrival() -> None:
    pods = [pod(f"web-{i:02}", padding=300) for i in range(40)]
    limit = 4 * 1024 + ENVELOPE_BYTES
    made = window_events(batch(pods, leavers=("u-left-1", "u-left-2")), limit)
    assert len(made.events) > 3
    names = [p["metadata"]["name"] for e in made.events for p in e.pods]
    assert names == sorted(p["metadata"]["name"] for p in pods)
    assert {e.window_opened_at for e in made.events} == {moment_of(T0)}
    assert [e.window_part for e in made.events] == list(range(1, len(made.events) + 1))
    assert {e.window_parts for e in made.events} == {len(made.events)}
    recorded = sorted(a.uid for e in made.events for a in e.arrivals)
    assert recorded == sorted([p["metadata"]["uid"] for p in pods] + ["u-left-1", "u-left-2"])
    for event in made.events:
        assert len(encode(event)) <= limit
        assert {a.uid for a in event.arrivals} >= {p["metadata"]["uid"] for p in event.pods}
    assert len({e.id for e in made.events}) == len(made.events)


def test_a_pod_too_large_for_any_message_is_left_out_named_and_its_arrival_kept() -> None:
    huge = pod("huge", padding=20_000)
    made = window_events(batch([pod("small"), huge]), 8_192 + ENVELOPE_BYTES)
    [event] = made.events
    assert [p["metadata"]["name"] for p in event.pods] == ["small"]
    assert event.too_large == ("u-huge",)
    assert "u-huge" in {a.uid for a in event.arrivals}
    [named] = made.too_large
    assert named.startswith("Pod default/huge (") and "bytes of JSON" in named
