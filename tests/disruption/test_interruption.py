"""Disruption's answer to an interruption notice (pure): the replacement first, then the drain within the
window; a rebalance recommendation only recorded unless the NodePool opts in."""

from __future__ import annotations

from datetime import timedelta

from proto import events as ev
from tenon.domain.projection import ClusterProjection
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.interruption import (
    DRAIN_MARGIN,
    REBALANCE_OPT_IN,
    Interruptions,
    on_notice,
    replacement_name,
    tick,
)
from tenon.services.disruption.projection_view import DisruptionState
from tests.support.events import T0, build_event

PROVIDER_ID = "aws:///us-east-1b/i-0abc"


def _cluster(opt_in: bool = False) -> ClusterProjection:
    projection = ClusterProjection()
    pool = {"metadata": {"name": "default", "annotations": {REBALANCE_OPT_IN: "true"} if opt_in else {}}}
    projection.apply(build_event(ev.NodePoolsSnapshot, "np", nodepools=(pool,)))
    spot = ev.InstanceChoice("m5.large", "us-east-1b", "spot", 0.03)
    for event in (
        build_event(
            ev.NodeClaimPlanned,
            "p",
            nodeclaim="default-aaaaa",
            nodepool="default",
            node_class="default",
            choice=spot,
            fallbacks=(
                ev.InstanceChoice("m5.large", "us-east-1c", "spot", 0.031),
                ev.InstanceChoice("m5.large", None, "on-demand", 0.096),
            ),
            pods=("default/web-0",),
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched,
            "l",
            producer="launcher-ec2",
            nodeclaim="default-aaaaa",
            provider_id=PROVIDER_ID,
            instance_type="m5.large",
            zone="us-east-1b",
            capacity_type="spot",
        ),
        build_event(
            ev.NodeClaimRegistered,
            "r",
            nodeclaim="default-aaaaa",
            node="ip-10-0-0-1",
            provider_id=PROVIDER_ID,
        ),
        build_event(ev.NodeClaimInitialized, "i", nodeclaim="default-aaaaa", node="ip-10-0-0-1"),
    ):
        projection.apply(event)
    node = {"metadata": {"name": "ip-10-0-0-1"}, "spec": {"providerID": PROVIDER_ID}}
    projection.apply(build_event(ev.NodeObserved, "n", change="added", node=node))
    pod = {
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {"nodeName": "ip-10-0-0-1"},
        "status": {"phase": "Running"},
    }
    projection.apply(build_event(ev.BoundPodObserved, "b", change="added", pod=pod))
    return projection


def _notice(kind: str = "spot-interruption") -> ev.InterruptionNotice:
    deadline = T0 + timedelta(minutes=2) if kind != "state-change" else T0
    return build_event(
        ev.InterruptionNotice, f"notice-{kind}", provider_id=PROVIDER_ID, kind=kind, deadline=deadline
    )


def test_a_spot_warning_requests_the_replacement_first_without_the_reclaimed_offering() -> None:
    projection, notice, book = _cluster(), _notice(), Interruptions()
    book.fold(notice)
    decision, request = on_notice(book, projection, notice)
    assert isinstance(decision, ev.DisruptionDecision) and isinstance(request, ev.ReplacementsRequested)
    assert decision.method == "interruption" and decision.stage == "confirmed"
    assert [c.nodeclaim for c in decision.candidates] == ["default-aaaaa"]
    [replacement] = request.replacements
    assert replacement.pods == ("default/web-0",)
    assert (replacement.choice.zone, replacement.choice.capacity_type) == ("us-east-1c", "spot")
    assert [f.capacity_type for f in replacement.fallbacks] == ["on-demand"]
    assert on_notice(book, projection, notice) == [decision, request]  # same ids: recording twice is a no-op


def test_the_drain_waits_for_the_replacement_or_the_window_whichever_is_first() -> None:
    projection, notice, book = _cluster(), _notice(), Interruptions()
    book.fold(notice)
    assert tick(book, projection, T0 + timedelta(seconds=10)) == []
    [drain] = tick(book, projection, notice.deadline - DRAIN_MARGIN)
    assert isinstance(drain, ev.DisruptionRequested) and drain.method == "interruption"
    assert "before the deadline" in drain.reason

    name = replacement_name(projection.claims["default-aaaaa"], notice)
    for event in (
        build_event(
            ev.NodeClaimPlanned,
            "rp",
            nodeclaim=name,
            nodepool="default",
            node_class="default",
            choice=ev.InstanceChoice("m5.large", "us-east-1c", "spot", 0.031),
            fallbacks=(),
            pods=(),
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched,
            "rl",
            producer="launcher-ec2",
            nodeclaim=name,
            provider_id="aws:///us-east-1c/i-0def",
            instance_type="m5.large",
        ),
        build_event(
            ev.NodeClaimRegistered, "rr", nodeclaim=name, node="ip-2", provider_id="aws:///us-east-1c/i-0def"
        ),
        build_event(ev.NodeClaimInitialized, "ri", nodeclaim=name, node="ip-2"),
    ):
        projection.apply(event)
    [early] = tick(book, projection, T0 + timedelta(seconds=10))
    assert f"replacement {name} is Initialized" in early.reason


def test_a_rebalance_recommendation_is_recorded_unless_the_nodepool_opts_in() -> None:
    notice = _notice("rebalance-recommendation")
    book = Interruptions()
    book.fold(notice)
    [recorded] = on_notice(book, _cluster(), notice)
    assert isinstance(recorded, ev.DisruptionDecision) and recorded.candidates == ()
    assert "does not opt in" in recorded.blocked[0].blocked_by
    assert tick(book, _cluster(), notice.deadline or T0 + timedelta(hours=1)) == []
    decisions = on_notice(book, _cluster(opt_in=True), notice)
    assert [type(d).__name__ for d in decisions] == ["DisruptionDecision", "ReplacementsRequested"]


def test_a_stopping_instance_is_drained_at_once() -> None:
    projection, notice, book = _cluster(), _notice("state-change"), Interruptions()
    book.fold(notice)
    on_notice(book, projection, notice)
    [drain] = tick(book, projection, T0)
    assert "already going" in drain.reason


# --- the decider: the notice is an input, the drain a tick --------------------------------------------------


def _decider_state(opt_in: bool = False) -> tuple[DisruptionDecider, DisruptionState]:
    decider = DisruptionDecider()
    state = decider.initial_state()
    state.projection = _cluster(opt_in)
    return decider, state


def _fold(decider: DisruptionDecider, state: DisruptionState, events: list[ev.Event]) -> None:
    for event in events:
        decider.evolve(state, event)


def test_the_decider_answers_a_notice_and_drains_once_the_replacement_is_initialized() -> None:
    decider, state = _decider_state()
    notice = _notice()
    decider.evolve(state, notice)
    decided = list(decider.decide(state, notice))
    assert [type(d).__name__ for d in decided] == ["DisruptionDecision", "ReplacementsRequested"]
    _fold(decider, state, decided)
    assert state.busy() == {"default-aaaaa"}  # no other method picks the interrupted claim
    assert not [e for e in decider.tick(state, T0 + timedelta(seconds=5)) if e.nodeclaim == "default-aaaaa"]

    name = replacement_name(state.projection.claims["default-aaaaa"], notice)
    _fold(decider, state, _replacement_story(name))
    [drain] = [
        e for e in decider.tick(state, T0 + timedelta(seconds=6)) if isinstance(e, ev.DisruptionRequested)
    ]
    assert drain.nodeclaim == "default-aaaaa" and drain.method == "interruption"
    assert f"replacement {name} is Initialized" in drain.reason
    decider.evolve(state, drain)
    assert state.commands == {}  # the command is done once its candidate is being disrupted
    assert not [
        e for e in decider.tick(state, T0 + timedelta(seconds=7)) if isinstance(e, ev.DisruptionRequested)
    ]


def test_the_decider_records_a_rebalance_recommendation_and_starts_nothing() -> None:
    decider, state = _decider_state()
    notice = _notice("rebalance-recommendation")
    decider.evolve(state, notice)
    [recorded] = decider.decide(state, notice)
    assert isinstance(recorded, ev.DisruptionDecision) and recorded.stage == "abandoned"
    decider.evolve(state, recorded)
    assert state.commands == {} and state.busy() == set()
    assert not [
        e for e in decider.tick(state, T0 + timedelta(hours=1)) if isinstance(e, ev.DisruptionRequested)
    ]


def test_the_notices_survive_a_snapshot_and_go_with_their_claim() -> None:
    decider, state = _decider_state()
    notice = _notice()
    decider.evolve(state, notice)
    restored = decider.decode(decider.encode(state))
    assert restored.interruptions.notices == {PROVIDER_ID: notice}
    claim = restored.projection.claims["default-aaaaa"]
    assert restored.interruptions.deadline_of(claim) == notice.deadline
    for event in (
        build_event(
            ev.DisruptionRequested, "d", nodeclaim="default-aaaaa", method="interruption", reason="x"
        ),
        build_event(ev.NodeClaimDrained, "dr", nodeclaim="default-aaaaa", node=None),
        build_event(
            ev.NodeClaimTerminated, "t", producer="launcher-ec2", nodeclaim="default-aaaaa", reason="x"
        ),
    ):
        decider.evolve(restored, event)
    assert restored.interruptions.notices == {}


def _replacement_story(name: str) -> list[ev.Event]:
    return [
        build_event(
            ev.NodeClaimPlanned,
            f"{name}-p",
            nodeclaim=name,
            nodepool="default",
            node_class="default",
            choice=ev.InstanceChoice("m5.large", "us-east-1c", "spot", 0.031),
            fallbacks=(),
            pods=(),
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched,
            f"{name}-l",
            producer="launcher-ec2",
            nodeclaim=name,
            provider_id="aws:///us-east-1c/i-0def",
            instance_type="m5.large",
        ),
        build_event(
            ev.NodeClaimRegistered,
            f"{name}-r",
            nodeclaim=name,
            node="ip-2",
            provider_id="aws:///us-east-1c/i-0def",
        ),
        build_event(ev.NodeClaimInitialized, f"{name}-i", nodeclaim=name, node="ip-2"),
    ]
