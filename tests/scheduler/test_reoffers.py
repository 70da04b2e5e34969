"""A pod offered again before the claim bought for it had its chance keeps its place: no second plan for
it and no node bought for it. Offered again well after its claim's Node registered, it is planned again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from proto import events as ev
from tenon.domain.projection import ClusterProjection
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import build_event
from tests.support.objects import demo_facts, pending_batch, pending_pod

NOW = datetime.now(UTC)


def with_first_wave() -> tuple[ClusterProjection, list[str], list[ev.Event]]:
    """Two pods that each need most of a c3-4, planned on two claims."""
    projection = ClusterProjection()
    for sequence, fact in enumerate(demo_facts(), start=1):
        projection.apply(fact, sequence)
    batch = pending_batch("first", pending_pod("big", "3"), pending_pod("small", "2"), at=NOW)
    projection.apply(batch, 100)
    decisions = list(SchedulerDecider().decide(projection, batch))
    for sequence, decision in enumerate(decisions, start=101):
        projection.apply(decision, sequence)
    claims = [d.nodeclaim for d in decisions if isinstance(d, ev.NodeClaimPlanned)]
    return projection, claims, decisions


def offer_again(
    projection: ClusterProjection, name: str, cpu: str, sequence: int, after: float = 5
) -> list[ev.Event]:
    again = pending_batch(f"again-{name}", pending_pod(name, cpu), at=NOW + timedelta(seconds=after))
    projection.apply(again, sequence)
    return list(SchedulerDecider().decide(projection, again))


def test_a_pod_offered_again_while_its_claim_is_coming_is_not_planned_again() -> None:
    projection, claims, _ = with_first_wave()
    assert len(claims) == 2
    decisions = offer_again(projection, "small", "2", 200)
    assert not [d for d in decisions if isinstance(d, ev.NodeClaimPlanned | ev.BatchPlanned)]


def registered(
    projection: ClusterProjection,
    decisions: list[ev.Event],
    pod: str,
    after: float,
    initialized_after: float | None = None,
) -> None:
    [claim] = [d.nodeclaim for d in decisions if isinstance(d, ev.NodeClaimPlanned) and pod in d.pods]
    at = NOW + timedelta(seconds=after)
    story = [
        build_event(
            ev.NodeClaimLaunched, "l", at=at, nodeclaim=claim, provider_id="p://s", instance_type="c3-4"
        ),
        build_event(ev.NodeClaimRegistered, "r", at=at, nodeclaim=claim, node="node-s", provider_id="p://s"),
    ]
    if initialized_after is not None:
        initialized_at = NOW + timedelta(seconds=initialized_after)
        story.append(
            build_event(ev.NodeClaimInitialized, "i", at=initialized_at, nodeclaim=claim, node="node-s")
        )
    for sequence, event in enumerate(story, start=150):
        projection.apply(event, sequence)


def test_a_pod_offered_again_as_its_claims_node_registers_is_not_planned_again() -> None:
    projection, _, decisions = with_first_wave()
    registered(projection, decisions, "default/small", after=4)
    assert not [
        d for d in offer_again(projection, "small", "2", 200, after=5) if isinstance(d, ev.BatchPlanned)
    ]


def test_a_pod_offered_again_well_after_its_claims_node_registered_is_planned_again() -> None:
    projection, _, decisions = with_first_wave()
    registered(projection, decisions, "default/small", after=4)
    answered = [
        d for d in offer_again(projection, "small", "2", 200, after=30) if isinstance(d, ev.BatchPlanned)
    ]
    assert len(answered) == 1


def test_a_pod_offered_again_a_while_after_its_claims_node_was_initialized_is_planned_again() -> None:
    """Registered 3 s before the offer (within the placement grace), but initialized 2 s before it: pods
    could land there, and the kube-scheduler did not place this one."""
    projection, _, decisions = with_first_wave()
    registered(projection, decisions, "default/small", after=4, initialized_after=5)
    answered = [
        d for d in offer_again(projection, "small", "2", 200, after=7) if isinstance(d, ev.BatchPlanned)
    ]
    assert len(answered) == 1


def test_a_pod_offered_again_right_after_its_claims_node_was_initialized_is_not_planned_again() -> None:
    projection, _, decisions = with_first_wave()
    registered(projection, decisions, "default/small", after=4, initialized_after=5)
    answered = [
        d for d in offer_again(projection, "small", "2", 200, after=6) if isinstance(d, ev.BatchPlanned)
    ]
    assert answered == []


def test_a_pod_is_offered_when_its_window_opened_not_at_its_close() -> None:
    """It joined the window 1 s after its Node was initialized (too soon to judge) and was still pending
    when the window closed 2 s after: deliberately, it keeps its place (judged at the close, the 10,000-pod
    scale wave planned the same pending pods again every few seconds)."""
    projection, _, decisions = with_first_wave()
    registered(projection, decisions, "default/small", after=4, initialized_after=5)
    again = build_event(
        ev.PendingBatch,
        "batch-late",
        at=NOW + timedelta(seconds=7),
        batch_id="late",
        pods=(pending_pod("small", "2"),),
        window_opened_at=NOW + timedelta(seconds=6),
        window_closed_by="idle",
    )
    projection.apply(again, 200)
    answered = [d for d in SchedulerDecider().decide(projection, again) if isinstance(d, ev.BatchPlanned)]
    assert answered == []
