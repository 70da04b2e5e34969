"""Emptiness as a queue kept at the budget: every empty node settled once, then removed as the budget lets
each one go, the next one as soon as another finishes; never more at once than the budget, and the whole
story replays to the same."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.domain.disruption.candidates import budget_mapping
from tenon.runtime.decider import BaseExecutor, DeciderRuntime
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.replay import replay
from tenon.services.disruption.decider import LINGER, DisruptionDecider
from tenon.services.disruption.load import PoolLoad, pool_load
from tenon.services.disruption.projection_view import Command as Underway
from tenon.services.disruption.projection_view import DisruptionState, build_view
from tests.disruption.test_budgets_and_emptiness import (
    T0,
    app_pod,
    cluster,
    cluster_events,
    envelope,
    nodepool,
)
from tests.support.events import append_to_claim, build_event
from tests.support.services import caught_up, running
from tests.support.waiting import until

SETTLE = timedelta(seconds=1)


def record(decider: DisruptionDecider, state: DisruptionState, decisions: list[ev.Event]) -> None:
    for decision in decisions:
        decider.evolve(state, decision)


def finished(
    name: str, request: ev.DisruptionRequested
) -> tuple[ev.NodeClaimDrained, ev.NodeClaimTerminated]:
    """What termination and then the launcher write when the claim's node and machine are gone."""
    drained = build_event(
        ev.NodeClaimDrained, f"drained-{name}", causation=request.id, nodeclaim=name, node=request.node
    )
    terminated = build_event(ev.NodeClaimTerminated, f"terminated-{name}", nodeclaim=name, reason="gone")
    return drained, terminated


def of_type(decisions: list[ev.Event], kind: type[ev.Event]) -> list[Any]:
    return [d for d in decisions if isinstance(d, kind)]


def test_every_empty_node_is_settled_once_and_requested_as_the_budget_lets_it_go() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    state = cluster(6, nodepool([{"nodes": "2"}], consolidateAfter="0s"))
    later = T0 + timedelta(minutes=1)

    [proposal] = decider.tick(state, later)
    assert isinstance(proposal, ev.DisruptionDecision) and proposal.stage == "proposed"
    assert len(proposal.candidates) == 6  # the whole empty pool, beyond the budget of 2
    record(decider, state, [proposal])
    assert decider.tick(state, later + SETTLE / 2) == []  # settling

    confirmed, *requests = decider.tick(state, later + SETTLE)
    assert isinstance(confirmed, ev.DisruptionDecision) and confirmed.stage == "confirmed"
    assert len(confirmed.candidates) == 6
    assert len(requests) == 2 and all(isinstance(r, ev.DisruptionRequested) for r in requests)
    record(decider, state, [confirmed, *requests])
    assert decider.tick(state, later + 2 * SETTLE) == []  # the budget is full

    # one finishes: the next goes in answer to that, not at a tick
    first = requests[0]
    drained, terminated = finished(first.nodeclaim, first)
    record(decider, state, [drained])
    assert decider.decide(state, drained) == []  # drained is not gone: its machine still counts
    record(decider, state, [terminated])
    [following] = decider.decide(state, terminated)
    assert isinstance(following, ev.DisruptionRequested) and following.causation_id == terminated.id
    assert following.decision_id == confirmed.command
    assert following.nodeclaim not in {r.nodeclaim for r in requests}


def test_the_consumer_gathers_records_into_batches_except_while_a_queue_waits_for_budget() -> None:
    """While a confirmed queue waits, each claim terminated frees budget that its next candidate takes in
    answer: its consumer must not wait to gather a larger batch then (with 10 ms, the 500-node scale to zero
    kept the budget 90-92 % full; without, 96 %). Otherwise it gathers records for :data:`LINGER`."""
    decider = DisruptionDecider(settle=SETTLE)
    state = cluster(3, nodepool([{"nodes": "1"}], consolidateAfter="0s"))
    later = T0 + timedelta(minutes=1)
    assert decider.batch_linger(state) == LINGER  # nothing under way

    [proposal] = decider.tick(state, later)
    record(decider, state, [proposal])
    assert decider.batch_linger(state) == LINGER  # settling: only a tick judges it

    confirmed, request = decider.tick(state, later + SETTLE)
    record(decider, state, [confirmed, request])
    requested = [request.nodeclaim]
    while state.commands:
        assert decider.batch_linger(state) == 0.0  # a candidate waits for this request's claim to end
        drained, terminated = finished(request.nodeclaim, request)
        record(decider, state, [drained, terminated])
        [request] = decider.decide(state, terminated)
        record(decider, state, [request])
        requested.append(request.nodeclaim)
    assert len(set(requested)) == 3  # every candidate requested: nothing waits for budget any more
    assert decider.batch_linger(state) == LINGER


def test_a_queued_node_that_is_no_longer_empty_ends_the_queue_and_keeps_its_node() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    state = cluster(3, nodepool([{"nodes": "1"}], consolidateAfter="0s"))
    later = T0 + timedelta(minutes=1)
    [proposal] = decider.tick(state, later)
    record(decider, state, [proposal])
    confirmed, first = decider.tick(state, later + SETTLE)
    record(decider, state, [confirmed, first])
    queued = [c.nodeclaim for c in confirmed.candidates if c.nodeclaim != first.nodeclaim]

    # a pod lands on the next node in the queue while the first drains
    node = state.projection.claims[queued[0]].node_name
    pod = {**app_pod("web-0"), "spec": {"nodeName": node}}
    landed = ev.BoundPodObserved(
        id="landed", decided_at=later, producer="pod-watcher", change="added", pod=pod
    )
    record(decider, state, [landed])
    drained, terminated = finished(first.nodeclaim, first)
    record(decider, state, [drained, terminated])
    [ended] = decider.decide(state, terminated)
    assert isinstance(ended, ev.DisruptionDecision) and ended.stage == "abandoned"
    assert f"{queued[0]} is no longer an empty candidate" in ended.reason
    assert ended.causation_id == terminated.id
    record(decider, state, [ended])
    assert state.commands == {}  # the pool is free for a new round, which leaves the busy node alone
    [again] = decider.tick(state, later + 3 * SETTLE)
    assert isinstance(again, ev.DisruptionDecision) and again.stage == "proposed"
    assert [c.nodeclaim for c in again.candidates] == queued[1:]


def test_a_node_that_empties_while_a_queue_fills_the_budget_settles_while_that_queue_drains() -> None:
    """A deliberate difference from Karpenter, which proposes empty nodes only when its budget has room now:
    here the next queue settles while the budget is full, so it is confirmed and waiting when room comes
    (proposed only then, its settle period was 1-2 s at an empty budget in every 500-node scale-down)."""
    decider = DisruptionDecider(settle=SETTLE)
    busy = {3: [app_pod("web-0")]}
    state = cluster(4, nodepool([{"nodes": "2"}], consolidateAfter="0s"), pods=busy)
    later = T0 + timedelta(minutes=1)
    [proposal] = decider.tick(state, later)
    record(decider, state, [proposal])
    confirmed, *requests = decider.tick(state, later + SETTLE)
    record(decider, state, [confirmed, *requests])
    assert len(confirmed.candidates) == 3 and len(requests) == 2  # the budget is full; one waits

    # the last node's pod goes while the budget is full
    node = state.projection.claims["default-3"].node_name
    pod = {**app_pod("web-0"), "spec": {"nodeName": node}}
    gone = ev.BoundPodObserved(id="gone", decided_at=later, producer="pod-watcher", change="removed", pod=pod)
    record(decider, state, [gone])
    [second] = decider.tick(state, later + 2 * SETTLE)
    assert isinstance(second, ev.DisruptionDecision) and second.stage == "proposed"
    assert [c.nodeclaim for c in second.candidates] == ["default-3"]
    assert "2 of 4 at once" in second.budget  # full: nothing may start now
    record(decider, state, [second])

    # settled while the first queue still fills the budget: confirmed, nothing requested yet
    [confirmed_second] = decider.tick(state, later + 3 * SETTLE)
    assert isinstance(confirmed_second, ev.DisruptionDecision) and confirmed_second.stage == "confirmed"
    record(decider, state, [confirmed_second])

    # room comes: both queues share it, never more than the budget at once
    drained, terminated = finished(requests[0].nodeclaim, requests[0])
    record(decider, state, [drained, terminated])
    [following] = decider.decide(state, terminated)
    assert isinstance(following, ev.DisruptionRequested)
    assert sum(1 for c in state.projection.claims.values() if c.disruption is not None and not c.ended) == 1


class Terminating(BaseExecutor):
    """Stands for termination and the launcher: a requested claim is drained and terminated a moment later,
    and how many are in flight at once is watched."""

    def __init__(self, event_log: InMemoryEventLog) -> None:
        self.event_log = event_log
        self.in_flight: set[str] = set()
        self.peak = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        self.runtime = runtime

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        if isinstance(decision, ev.DisruptionRequested):
            self.in_flight.add(decision.nodeclaim)
            self.peak = max(self.peak, len(self.in_flight))
            task = asyncio.create_task(self._finish(decision))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _finish(self, request: ev.DisruptionRequested) -> None:
        await asyncio.sleep(0.05)
        drained, terminated = finished(request.nodeclaim, request)
        await append_to_claim(self.event_log, drained)
        await asyncio.sleep(0.05)
        self.in_flight.discard(request.nodeclaim)
        await append_to_claim(self.event_log, terminated)


async def test_the_live_queue_keeps_the_budget_full_and_replays_to_the_same() -> None:
    event_log = InMemoryEventLog()
    for event in cluster_events(8, nodepool([{"nodes": "2"}], consolidateAfter="0s")):
        await event_log.publish(registry.subject_of(event), event)
    executor = Terminating(event_log)
    settle = timedelta(seconds=0.2)
    # ticks far apart: whatever goes after the first two goes because another finished
    async with running(DisruptionDecider(settle=settle), executor, event_log, tick_seconds=0.5) as runtime:
        await until(
            lambda: all(c.terminated for c in runtime.state.projection.claims.values()),
            timeout=30,
            what="every node gone",
        )
        await until(lambda: caught_up(runtime))
    assert executor.peak == 2
    requests = [e for e in event_log.events() if isinstance(e, ev.DisruptionRequested)]
    assert len(requests) == 8
    answered = [r for r in requests if r.causation_id is not None]
    terminated_ids = {e.id for e in event_log.events() if isinstance(e, ev.NodeClaimTerminated)}
    assert len(answered) == 6 and all(r.causation_id in terminated_ids for r in answered)
    report = replay(DisruptionDecider(settle=settle), event_log.records())
    assert not report.differing, [c.differences() for c in report.differing]


def test_nodes_that_emptied_while_a_queue_settled_are_proposed_when_it_is_confirmed() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    busy = {i: [app_pod(f"web-{i}")] for i in (3, 4, 5)}
    state = cluster(6, nodepool([{"nodes": "4"}], consolidateAfter="0s"), pods=busy)
    later = T0 + timedelta(minutes=1)
    [first] = decider.tick(state, later)
    assert [c.nodeclaim for c in first.candidates] == ["default-0", "default-1", "default-2"]
    record(decider, state, [first])
    # the workload goes while the first queue settles: three more nodes empty
    gone = [
        build_event(
            ev.BoundPodObserved,
            f"gone-{i}",
            at=later,
            change="removed",
            pod={**app_pod(f"web-{i}"), "spec": {"nodeName": f"node-{i}"}},
        )
        for i in busy
    ]
    record(decider, state, gone)

    confirmed, *requests, second = decider.tick(state, later + SETTLE)
    assert confirmed.stage == "confirmed" and len(requests) == 3
    assert all(isinstance(r, ev.DisruptionRequested) for r in requests)
    # in the same tick, not the next one: the second queue begins settling while the first drains
    assert isinstance(second, ev.DisruptionDecision) and second.stage == "proposed"
    assert [c.nodeclaim for c in second.candidates] == ["default-3", "default-4", "default-5"]
    record(decider, state, [confirmed, *requests, second])

    # the second is confirmed a settle period later and takes only the room the first left: 4 - 3
    confirmed_too, *more = decider.tick(state, later + 2 * SETTLE)
    assert confirmed_too.stage == "confirmed" and len(more) == 1


def pods_gone(at: Any, nodes: dict[int, str]) -> list[ev.Event]:
    """The workload's pods (node index -> pod name) observed removed from their nodes ``at``."""
    return [
        build_event(
            ev.BoundPodObserved,
            f"gone-{i}",
            at=at,
            change="removed",
            pod={**app_pod(pod), "spec": {"nodeName": f"node-{i}"}},
        )
        for i, pod in nodes.items()
    ]


def test_a_proposal_takes_the_empty_nodes_whose_consolidate_after_ends_before_it_settles() -> None:
    # a Deployment deleted empties its nodes over a second or two: those that emptied just after the first
    # proposal settle with it, not a whole settle period later (deliberately unlike Karpenter, which
    # proposes only nodes consolidatable now; nothing goes before its consolidateAfter for it)
    decider = DisruptionDecider(settle=SETTLE)
    busy = {i: [app_pod(f"web-{i}")] for i in (3, 4, 5)}
    state = cluster(6, nodepool([{"nodes": "10"}], consolidateAfter="2s"), pods=busy)
    later = T0 + timedelta(minutes=1)
    record(decider, state, pods_gone(later - timedelta(seconds=1.5), {3: "web-3"}))  # consolidatable +0.5 s
    record(decider, state, pods_gone(later - timedelta(seconds=0.5), {4: "web-4"}))  # consolidatable +1.5 s

    [proposal] = decider.tick(state, later)
    assert [c.nodeclaim for c in proposal.candidates] == ["default-0", "default-1", "default-2", "default-3"]
    record(decider, state, [proposal])
    assert decider.tick(state, later + SETTLE / 2) == []  # settling

    # node-3 became consolidatable while the proposal settled and goes with the others; node-4 is not
    # consolidatable yet and begins settling in a queue of its own
    confirmed, *requests, second = decider.tick(state, later + SETTLE)
    assert confirmed.stage == "confirmed" and len(confirmed.candidates) == 4
    assert [r.nodeclaim for r in requests] == ["default-0", "default-1", "default-2", "default-3"]
    assert second.stage == "proposed" and [c.nodeclaim for c in second.candidates] == ["default-4"]


def test_a_node_that_empties_late_is_not_confirmed_if_a_pod_came_back_while_it_settled() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    busy = {3: [app_pod("web-3")]}
    state = cluster(4, nodepool([{"nodes": "10"}], consolidateAfter="1s"), pods=busy)
    later = T0 + timedelta(minutes=1)
    record(decider, state, pods_gone(later - timedelta(seconds=0.5), {3: "web-3"}))
    [proposal] = decider.tick(state, later)
    assert "default-3" in [c.nodeclaim for c in proposal.candidates]
    record(decider, state, [proposal])
    # a pod is bound to node-3 and goes again while the proposal settles: its consolidateAfter starts over
    back = build_event(
        ev.BoundPodObserved,
        "back-3",
        at=later + SETTLE / 4,
        change="added",
        pod={**app_pod("web-3b"), "spec": {"nodeName": "node-3"}},
    )
    record(decider, state, [back, *pods_gone(later + SETTLE / 2, {3: "web-3b"})])

    confirmed, *requests = decider.tick(state, later + SETTLE)
    assert confirmed.stage == "confirmed" and "no longer empty after settling" in confirmed.reason
    assert [r.nodeclaim for r in requests] == ["default-0", "default-1", "default-2"]


def test_queues_on_one_pool_share_its_room_within_a_decision() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    state = cluster(6, nodepool([{"nodes": "2"}], consolidateAfter="0s"))
    later = T0 + timedelta(minutes=1)
    for command, members in (("q1", (0, 1, 2)), ("q2", (3, 4, 5))):
        state.commands[command] = Underway(
            id=command,
            method="emptiness",
            stage="confirmed",
            candidates=tuple(f"default-{i}" for i in members),
            decided_at=later,
        )
    notice = build_event(ev.BoundPodObserved, "news", at=later, change="added", pod=app_pod("elsewhere"))
    requests = of_type(list(decider.decide(state, notice)), ev.DisruptionRequested)
    assert [r.nodeclaim for r in requests] == ["default-0", "default-1"]  # the budget of 2, once


def test_a_claims_plan_time_hashes_go_when_the_projection_forgets_the_claim() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    state = cluster(1, nodepool([{"nodes": "1"}], consolidateAfter="0s"))
    assert "default-0" in state.hashes
    requested = build_event(
        ev.DisruptionRequested, "req", nodeclaim="default-0", method="emptiness", reason="empty"
    )
    drained, terminated = finished("default-0", requested)
    record(decider, state, [requested, drained, terminated])
    assert "default-0" in state.hashes  # ended, still in the projection's memory
    later = build_event(
        ev.BoundPodObserved, "later", at=T0 + timedelta(hours=2), change="added", pod=app_pod("other")
    )
    record(decider, state, [later])
    assert "default-0" not in state.projection.claims and "default-0" not in state.hashes


def test_a_tick_starts_nothing_while_every_budget_is_spent_and_proposes_once_one_opens() -> None:
    decider = DisruptionDecider(settle=SETTLE)
    pool = nodepool([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}], consolidateAfter="0s")
    state = cluster(2, pool)
    assert decider.tick(state, T0 + timedelta(hours=2)) == []  # 12:00, inside the zero window
    [proposal] = decider.tick(state, T0 + timedelta(hours=8))  # 18:00: the window closed
    assert isinstance(proposal, ev.DisruptionDecision) and proposal.stage == "proposed"
    assert [c.nodeclaim for c in proposal.candidates] == ["default-0", "default-1"]


def test_every_method_counts_the_claims_the_queue_counts_a_drained_one_and_one_whose_node_is_gone() -> None:
    """Karpenter counts a node in its pool's budget until its NodeClaim is gone, as disrupting once its
    termination began or its Node is gone: consolidation, drift and emptiness's proposals (a view's budgets)
    count what the emptiness queue's room counts. Left out of the view before (only live claims with a
    Node), a drained claim freed its place while its machine was still being removed."""
    decider = DisruptionDecider()
    state = cluster(4, nodepool([{"nodes": "50%"}]))
    request = build_event(
        ev.DisruptionRequested, "dr", nodeclaim="default-1", method="emptiness", reason="empty", node="node-1"
    )
    drained, _ = finished("default-1", request)
    gone = ev.NodeObserved(**envelope("gone"), change="removed", node={"metadata": {"name": "node-2"}})
    for event in (request, drained, gone):
        state = decider.evolve(state, event)

    assert pool_load(state) == {"default": PoolLoad(total=4, disrupting=2)}
    view = build_view(state, T0 + timedelta(minutes=5), with_core=False)
    allowance = budget_mapping(view, "Empty")["default"]
    assert allowance.budget == "NodePool default budget[0] nodes=50%: 2 of 4 at once, 2 in progress"
    assert allowance.allowed == 0


def with_node(pod: dict[str, Any], node: str) -> dict[str, Any]:
    return {**pod, "spec": {**pod.get("spec", {}), "nodeName": node}}
