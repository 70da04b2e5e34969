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


def claim_step(name: str, event_type: type[ev.NodeClaimEvent], **fields: Any) -> ev.NodeClaimEvent:
    event = step(event_type, f"{name}-{event_type.__name__}", **fields)
    return msgspec.structs.replace(event, nodeclaim=name)


def test_a_book_answers_which_claims_are_in_a_phase_and_which_claim_a_node_has() -> None:
    """The book's lookups follow every fold (a claim moving on leaves its phase), what it forgets and what a
    snapshot brings back, and give the same answers as a walk over every claim."""
    book = ClaimBook()
    sequence = 0

    def fold(name: str, event_type: type[ev.NodeClaimEvent], **fields: Any) -> None:
        nonlocal sequence
        sequence += 1
        if event_type is ev.NodeClaimPlanned:
            book.fold(msgspec.structs.replace(planned(), id=f"{name}-plan", nodeclaim=name), sequence)
        else:
            book.fold(claim_step(name, event_type, **fields), sequence)

    for name in ("c", "a", "b", "d"):
        fold(name, ev.NodeClaimPlanned)
    for name in ("c", "a", "b"):
        fold(name, ev.NodeClaimLaunched, provider_id=f"p:///{name}")
    fold("a", ev.NodeClaimRegistered, node="node-a", provider_id="p:///a")
    fold("b", ev.NodeClaimRegistered, node="node-b", provider_id="p:///b")
    fold("b", ev.NodeClaimInitialized, node="node-b")

    def walked(*phases: Phase) -> list[str]:
        return sorted(name for name, claim in book.items() if claim.phase in phases)

    for phases in ((Phase.LAUNCHED, Phase.REGISTERED), (Phase.PLANNED,), (Phase.INITIALIZED,)):
        assert [c.name for c in book.in_phases(phases)] == walked(*phases)
    assert [c.name for c in book.in_phases((Phase.LAUNCHED, Phase.REGISTERED))] == ["a", "c"]
    assert book.registered_to("node-a") is book["a"] and book.registered_to("node-c") is None

    fold("a", ev.NodeClaimInitialized, node="node-a")
    assert [c.name for c in book.in_phases((Phase.LAUNCHED, Phase.REGISTERED))] == ["c"]
    del book["a"]  # forgotten long after it ended
    assert book.registered_to("node-a") is None
    assert [c.name for c in book.in_phases((Phase.INITIALIZED,))] == ["b"]

    restored = ClaimBook.from_plain(msgspec.to_builtins(dict(book)))
    assert [c.name for c in restored.in_phases((Phase.LAUNCHED,))] == ["c"]
    assert restored.registered_to("node-b") is restored["b"]


def test_a_claim_changed_outside_the_book_is_not_returned_for_its_old_phase() -> None:
    """An executor that appends a step folds it into its own claim (``NodeClaim.apply``); until the book
    folds it, the book must not return that claim for the phase it left."""
    book = ClaimBook()
    book.fold(planned(), 1)
    book.fold(step(ev.NodeClaimLaunched, "launch"), 2)
    book[NAME].apply(step(ev.NodeClaimRegistered, "register"), 3)
    assert book.in_phases((Phase.LAUNCHED,)) == []
