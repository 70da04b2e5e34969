"""The decision functions over generated logs (:mod:`tests.trust.generated`): whatever the log holds,
``evolve`` raises nothing but :class:`ImpossibleStory` (the runtime dead-letters that event), ``decide`` and
``tick`` raise nothing, and every decision is an event its service may record: its own producer, a type it
writes, on its subject, unchanged through the log. Decisions are folded back as the runtime folds them. The
long run (``make fuzz``) also breaks the objects' shapes and checks that the state survives a snapshot; what
it finds today is pinned in ``test_hostile_facts.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given

from proto import events as ev
from proto import registry, subjects
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.runtime.decider import Decider
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import T0
from tests.trust.generated import FUZZ, SNAPSHOTS, script, valid_output


def _subject(event: ev.Event) -> str:
    """Where the event would be stored; for an object too broken to name, a name of the right family."""
    try:
        return registry.subject_of(event)
    except (AttributeError, TypeError, ValueError):
        return registry.spec_of(type(event)).subject.replace("*", "x")


def _record(decider: Decider[Any], state: Any, decision: ev.Event, sequence: int) -> Any:
    """What the runtime does with a decision: a claim step its own claim refuses is not recorded; anything
    recorded is folded at once (a duplicate of what the state holds is ignored)."""
    if isinstance(decision, ev.NodeClaimEvent):
        claim = decider.claims(state).get(decision.nodeclaim)
        if claim is not None and claim.refusal(decision) is not None:
            return state
    try:
        return decider.evolve(state, decision, sequence)
    except ImpossibleStory:
        return state


def play(decider: Decider[Any], steps: list[ev.Event | timedelta]) -> None:
    state = decider.initial_state()
    sequence = 0
    for step in steps:
        if isinstance(step, timedelta):
            decisions = list(decider.tick(state, T0 + step))
        else:
            sequence += 1
            subject = _subject(step)
            if not any(subjects.matches(f, subject) for f in decider.inputs):
                continue
            if registry.refusal(subject, step) is not None:
                continue  # the runtime dead-letters it before the decider sees it
            try:
                state = decider.evolve(state, step, sequence)
            except ImpossibleStory:
                continue  # dead-lettered with the reason
            decisions = list(decider.decide(state, step))
        for decision in decisions:
            problem = valid_output(decider.name, decision)
            assert problem is None, problem
            sequence += 1
            state = _record(decider, state, decision, sequence)
    if SNAPSHOTS:
        decider.decode(decider.encode(state))  # and the state survives a snapshot


@FUZZ
@given(script(("cluster", "pending", "claims", "disruption")))
def test_the_scheduler_decides_on_any_log(steps: list[ev.Event | timedelta]) -> None:
    play(SchedulerDecider(), steps)


@FUZZ
@given(script(("cluster", "pending", "claims", "disruption")))
def test_disruption_decides_on_any_log(steps: list[ev.Event | timedelta]) -> None:
    play(DisruptionDecider(), steps)


@FUZZ
@given(script(("cluster", "claims", "capi")))
def test_the_capi_launcher_decides_on_any_log(steps: list[ev.Event | timedelta]) -> None:
    play(CapiLauncherDecider(), steps)
