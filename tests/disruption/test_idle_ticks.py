"""Ticks with nothing to do return at once, and what time alone makes due still happens on the very tick it
is due, after any number of idle ticks: an expiry, a node empty for ``consolidateAfter``, a budget window
closing, a ``do-not-disrupt`` duration ending, a node no longer held for pods that never came. The decider
answers every tick of a long story exactly as a decider doing the whole work every tick does."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from proto import events as ev
from tenon.core.wellknown import DO_NOT_DISRUPT
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.projection_view import DisruptionState
from tests.disruption.test_budgets_and_emptiness import (
    T0,
    app_pod,
    cluster,
    cluster_events,
    daemon_pod,
    nodepool,
)
from tests.disruption.test_emptiness_queue import of_type
from tests.support.events import build_event

SECOND = timedelta(seconds=1)


def first_decision(
    decider: DisruptionDecider, state: DisruptionState, moments: Iterable[datetime]
) -> tuple[datetime | None, list[ev.Event]]:
    """Tick at each moment in turn: the first that decides something, and what it decided."""
    for moment in moments:
        decided = list(decider.tick(state, moment))
        if decided:
            return moment, decided
    return None, []


def every(start: datetime, step: timedelta, until: datetime) -> Iterable[datetime]:
    moment = start
    while moment <= until:
        yield moment
        moment += step


def test_an_expiry_fires_on_the_tick_it_is_due_after_an_hour_of_idle_ticks() -> None:
    pool = nodepool(consolidateAfter="Never")
    pool["spec"]["template"]["spec"]["expireAfter"] = "1h"
    state = cluster(3, pool, pods={i: [app_pod(f"web-{i}")] for i in range(3)})
    decider = DisruptionDecider()
    when, decided = first_decision(decider, state, every(T0 + SECOND, SECOND, T0 + timedelta(hours=2)))
    assert when == T0 + timedelta(hours=1)  # planned at T0: not a second later
    assert [d.method for d in of_type(decided, ev.DisruptionDecision)] == ["expiration"]
    requested = sorted(r.nodeclaim for r in of_type(decided, ev.DisruptionRequested))
    assert requested == ["default-0", "default-1", "default-2"]


@pytest.mark.parametrize("wait", [0, 30])
def test_a_node_that_empties_is_proposed_on_the_first_tick_after_consolidate_after(wait: int) -> None:
    pool = nodepool([{"nodes": "100%"}], consolidateAfter=f"{wait}s")
    state = cluster(3, pool, pods={i: [app_pod(f"web-{i}")] for i in range(3)})
    decider = DisruptionDecider()
    quiet_until = T0 + timedelta(minutes=10)
    assert first_decision(decider, state, every(T0 + SECOND, SECOND, quiet_until)) == (None, [])
    left = quiet_until + SECOND / 2
    gone = {**app_pod("web-1"), "spec": {"nodeName": "node-1"}}
    leaving = build_event(ev.BoundPodObserved, "web-1-left", at=left, change="removed", pod=gone)
    state = decider.evolve(state, leaving)
    assert decider.decide(state, leaving) == []
    when, decided = first_decision(decider, state, every(left + SECOND, SECOND, left + timedelta(minutes=5)))
    assert when == left + max(SECOND, timedelta(seconds=wait))
    [proposal] = of_type(decided, ev.DisruptionDecision)
    assert proposal.stage == "proposed" and [c.nodeclaim for c in proposal.candidates] == ["default-1"]


def test_empty_nodes_go_on_the_tick_their_budget_window_closes() -> None:
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}], consolidateAfter="0s")
    state = cluster(2, pool)
    noon = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    when, decided = first_decision(
        DisruptionDecider(), state, every(noon, timedelta(seconds=20), noon + timedelta(hours=6))
    )
    assert when == datetime(2026, 11, 29, 17, 0, tzinfo=UTC)  # 09:00 + 8h
    [proposal] = of_type(decided, ev.DisruptionDecision)
    assert [c.nodeclaim for c in proposal.candidates] == ["default-0", "default-1"]


def test_a_node_goes_on_the_tick_a_do_not_disrupt_duration_on_its_pod_ends() -> None:
    guarded = daemon_pod("agent-0", {DO_NOT_DISRUPT: "30m"})
    guarded["status"]["startTime"] = T0.isoformat()
    state = cluster(1, nodepool([{"nodes": "100%"}], consolidateAfter="0s"), pods={0: [guarded]})
    moments = every(T0 + timedelta(minutes=1), timedelta(seconds=10), T0 + timedelta(hours=1))
    when, decided = first_decision(DisruptionDecider(), state, moments)
    assert when == T0 + timedelta(minutes=30)
    assert [c.nodeclaim for c in of_type(decided, ev.DisruptionDecision)[0].candidates] == ["default-0"]


def test_a_node_held_for_pods_that_never_came_goes_once_it_is_no_longer_held() -> None:
    events = cluster_events(1, nodepool([{"nodes": "100%"}], consolidateAfter="0s"))
    events = [
        msgspec.structs.replace(e, pods=("default/on-its-way",)) if isinstance(e, ev.NodeClaimPlanned) else e
        for e in events
    ]
    on_its_way = {"metadata": {"name": "on-its-way", "namespace": "default"}, "spec": {}, "status": {}}
    events.append(
        build_event(
            ev.PendingBatch,
            "batch",
            at=T0 + 5 * SECOND,
            batch_id="b",
            pods=(on_its_way,),
            window_opened_at=T0,
            window_closed_by="idle",
        )
    )
    decider = DisruptionDecider()
    state = decider.initial_state()
    for event in events:
        state = decider.evolve(state, event)
    when, decided = first_decision(decider, state, every(T0 + SECOND, SECOND, T0 + timedelta(minutes=5)))
    assert when == T0 + timedelta(seconds=60)  # Karpenter's nomination: 60 s after it was initialized
    assert [c.nodeclaim for c in of_type(decided, ev.DisruptionDecision)[0].candidates] == ["default-0"]
