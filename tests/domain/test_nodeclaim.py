"""The NodeClaim aggregate: one definition of a claim's phase and liveness, and the stories it refuses."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from proto import events as ev
from tenon.domain.nodeclaim import ClaimBook, ImpossibleStory, NodeClaim, Phase
from tests.support.events import build_event

NAME = "default-abcde"


def planned(**overrides: Any) -> ev.NodeClaimPlanned:
    fields: dict[str, Any] = {
        "nodeclaim": NAME,
        "nodepool": "default",
        "node_class": "default",
        "choice": ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        "fallbacks": (ev.InstanceChoice("c3-16", None, "on-demand", 0.2),),
        "pods": ("default/a",),
        "requirements": (),
        "labels": {},
    }
    fields.update(overrides)
    return build_event(ev.NodeClaimPlanned, "plan", **fields)


def planned_again() -> ev.NodeClaimPlanned:
    """A second plan for the same claim (another id): a claim is planned once."""
    return msgspec.structs.replace(planned(), id="plan-again")


def step(event_type: type[ev.NodeClaimEvent], event_id: str, **fields: Any) -> ev.NodeClaimEvent:
    defaults: dict[type[ev.NodeClaimEvent], dict[str, Any]] = {
        ev.NodeClaimLaunched: {"provider_id": "p:///1", "instance_type": "c3-8"},
        ev.NodeClaimLaunchFailed: {"instance_type": "c3-8", "reason": "max size"},
        ev.NodeClaimRegistered: {"node": "n1", "provider_id": "p:///1"},
        ev.NodeClaimInitialized: {"node": "n1"},
        ev.NodeClaimAbandoned: {"reason": "timeout"},
        ev.DisruptionRequested: {"method": "emptiness", "reason": "empty"},
        ev.NodeClaimDrained: {"node": "n1"},
        ev.NodeClaimTerminated: {"reason": "gone"},
    }
    return build_event(event_type, event_id, **{"nodeclaim": NAME, **defaults.get(event_type, {}), **fields})


def story(*events: ev.NodeClaimEvent) -> NodeClaim:
    claim = NodeClaim(NAME)
    for sequence, event in enumerate(events, start=1):
        claim.apply(event, sequence)
    return claim


def test_a_claim_goes_through_its_phases_and_is_live_while_its_machine_is_wanted() -> None:
    claim = story(planned())
    assert (claim.phase, claim.live, claim.accepts_pods) == (Phase.PLANNED, True, True)
    for event_type, phase in (
        (ev.NodeClaimLaunched, Phase.LAUNCHED),
        (ev.NodeClaimRegistered, Phase.REGISTERED),
        (ev.NodeClaimInitialized, Phase.INITIALIZED),
    ):
        claim.apply(step(event_type, phase.value), claim.last_sequence + 1)
        assert claim.phase == phase and claim.live and claim.accepts_pods
    claim.apply(step(ev.DisruptionRequested, "d"), claim.last_sequence + 1)
    assert (claim.phase, claim.live, claim.accepts_pods) == (Phase.DISRUPTING, True, False)
    claim.apply(step(ev.NodeClaimDrained, "dr"), claim.last_sequence + 1)
    assert (claim.phase, claim.live) == (Phase.DRAINED, False)
    claim.apply(step(ev.NodeClaimTerminated, "t"), claim.last_sequence + 1)
    assert (claim.phase, claim.live, claim.ended) == (Phase.TERMINATED, False, True)
    assert claim.last_sequence == 7 and claim.first_sequence == 1


def test_a_failed_launch_moves_to_the_next_choice_until_none_is_left() -> None:
    claim = story(planned(), step(ev.NodeClaimLaunchFailed, "f1", retryable=True))
    assert claim.current_choice is not None and claim.current_choice.instance_type == "c3-16" and claim.live
    claim.apply(step(ev.NodeClaimLaunchFailed, "f2", instance_type="c3-16", retryable=False), 3)
    assert claim.current_choice is None and claim.phase == Phase.FAILED and not claim.live


@pytest.mark.parametrize(
    ("history", "event", "why"),
    [
        ((), step(ev.NodeClaimDrained, "x", producer="launcher-capi"), "only disruption may write this step"),
        ((), step(ev.NodeClaimLaunched, "x", producer="scheduler"), r"only launcher-\* may write this step"),
        ((planned(),), step(ev.NodeClaimDrained, "x"), "no disruption was requested"),
        ((planned(),), step(ev.NodeClaimRegistered, "x"), "it was never launched"),
        ((planned(), step(ev.NodeClaimLaunched, "l")), step(ev.NodeClaimLaunched, "l2"), "already launched"),
        ((planned(),), planned_again(), "already planned"),
        ((planned(),), step(ev.NodeClaimTerminated, "x"), "neither drained, abandoned nor failed"),
        (
            (
                planned(),
                step(ev.DisruptionRequested, "d"),
                step(ev.NodeClaimDrained, "dr"),
                step(ev.NodeClaimTerminated, "t"),
            ),
            step(ev.NodeClaimLaunched, "late"),
            "already terminated",
        ),
    ],
)
def test_impossible_stories_are_refused_with_the_reason(
    history: tuple[ev.NodeClaimEvent, ...], event: ev.NodeClaimEvent, why: str
) -> None:
    claim = story(*history)
    before = (claim.phase, claim.last_sequence)
    with pytest.raises(ImpossibleStory, match=why):
        claim.apply(event, 99)
    assert (claim.phase, claim.last_sequence) == before  # nothing folded


def test_a_claim_known_only_from_the_middle_of_its_story_exists_but_is_not_complete() -> None:
    claim = story(step(ev.NodeClaimRegistered, "r"), step(ev.NodeClaimInitialized, "i"))
    assert claim.phase == Phase.INITIALIZED and not claim.complete
    # its Planned aged out: whether it was launched is unknown, so the step is not held against it
    claim.apply(step(ev.DisruptionRequested, "d"), 3)
    claim.apply(step(ev.NodeClaimDrained, "dr"), 4)
    assert claim.phase == Phase.DRAINED


def test_folding_is_idempotent_by_sequence_and_by_id() -> None:
    book = ClaimBook()
    assert book.fold(planned(), 5)
    assert not book.fold(planned(), 5)  # a redelivery
    assert not book.fold(planned(), 9)  # the same event again, elsewhere (a duplicate the broker let through)
    assert book[NAME].last_sequence == 9
    with pytest.raises(ImpossibleStory):
        book.fold(step(ev.NodeClaimDrained, "x", nodeclaim="other-claim", producer="scheduler"), 10)
    assert "other-claim" not in book  # a refused first event adds no claim
