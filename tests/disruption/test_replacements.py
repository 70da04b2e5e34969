"""A consolidation that needs a new node, through the log: disruption proposes, judges again after the settle
period, confirms and asks for the replacement; the scheduler plans exactly that claim; the candidate's
termination is requested only once the replacement is Initialized; and the recorded run replays to the same
decisions. Also: the scheduler's answer copies the request, and an invalid budget shows on the NodePool's
``ValidationSucceeded``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.replay import replay
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.nodepools import validation_problem
from tests.disruption.clusters import SIZES, catalog, node, nodepool, pod
from tests.support.events import append_to_claim, build_event
from tests.support.services import running
from tests.support.waiting import until


def observed(event_type: type[ev.Event], event_id: str, **fields: Any) -> ev.Event:
    return build_event(event_type, event_id, **fields)


def big_node_story() -> tuple[list[ev.Event], list[ev.NodeClaimEvent]]:
    """A c-16 running one 1-CPU pod: a c-2 would do (facts, then the claim's story)."""
    facts: list[ev.Event] = [
        observed(ev.NodePoolsSnapshot, "np", nodepools=(nodepool(budgets=[{"nodes": "100%"}]),)),
        observed(
            ev.CatalogSnapshot,
            "cat",
            provider="static",
            node_class="default",
            instance_types=tuple(catalog(SIZES)["spec"]["instanceTypes"]),
        ),
        observed(ev.NodeObserved, "n0", change="added", node=node("big", "c-16", 16, 32)),
        observed(ev.BoundPodObserved, "p0", change="added", pod=pod("web-0", "big", "1", "1Gi")),
    ]
    claim = "default-big"
    story: list[ev.NodeClaimEvent] = [
        build_event(
            ev.NodeClaimPlanned,
            "planned-big",
            nodeclaim=claim,
            nodepool="default",
            node_class="default",
            choice=ev.InstanceChoice("c-16", "z1", "on-demand", 0.8),
            fallbacks=(),
            pods=(),
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched, "launched-big", nodeclaim=claim, provider_id="p://big", instance_type="c-16"
        ),
        build_event(
            ev.NodeClaimRegistered, "registered-big", nodeclaim=claim, node="big", provider_id="p://big"
        ),
        build_event(ev.NodeClaimInitialized, "initialized-big", nodeclaim=claim, node="big"),
    ]
    return facts, story


async def test_a_replacement_is_planned_by_the_scheduler_and_initialized_before_the_drain() -> None:
    event_log = InMemoryEventLog()
    facts, story = big_node_story()
    for event in facts:
        await event_log.publish(registry.subject_of(event), event)
    for claim_event in story:
        await append_to_claim(event_log, claim_event)
    settle = timedelta(seconds=0.3)
    async with (
        running(SchedulerDecider(), BaseExecutor(), event_log, tick_seconds=0) as scheduler,
        running(DisruptionDecider(settle=settle), BaseExecutor(), event_log, tick_seconds=0.05) as disruption,
    ):
        request = await until(
            lambda: [e for e in event_log.events() if isinstance(e, ev.ReplacementsRequested)],
            what="a replacement requested",
        )
        [replacement] = request[0].replacements
        assert replacement.choice.instance_type == "c-2" and request[0].candidates == ("default-big",)
        planned = await until(
            lambda: scheduler.state.claims.get(replacement.nodeclaim),
            what="the scheduler plans the replacement",
        )
        assert planned.planned.choice == replacement.choice and planned.planned.causation_id == request[0].id
        # the replacement boots; nothing is drained while it is not Initialized
        name = replacement.nodeclaim
        for step in (
            build_event(
                ev.NodeClaimLaunched, "l-r", nodeclaim=name, provider_id="p://r", instance_type="c-2"
            ),
            build_event(ev.NodeClaimRegistered, "r-r", nodeclaim=name, node="small", provider_id="p://r"),
        ):
            await append_to_claim(event_log, step)
        await until(
            lambda: (claim := disruption.state.projection.claims.get(name)) is not None and claim.registered,
            what="registered folded",
        )
        assert disruption.state.projection.claims["default-big"].disruption is None
        initialized_at = await append_to_claim(
            event_log, build_event(ev.NodeClaimInitialized, "i-r", nodeclaim=name, node="small")
        )
        requested = await until(
            lambda: disruption.state.projection.claims["default-big"].disruption, what="the drain requested"
        )
        assert requested.method == "consolidation" and requested.decision_id == request[0].command
    sequences = {r.event.id: r.sequence for r in event_log.records() if r.event is not None}
    assert sequences[requested.id] > initialized_at
    stages = [e.stage for e in event_log.events() if isinstance(e, ev.DisruptionDecision)]
    assert stages == ["proposed", "confirmed"]
    report = replay(DisruptionDecider(settle=settle), event_log.records())
    assert report.differing == [], [c.differences() for c in report.differing]


def test_the_scheduler_plans_exactly_what_was_requested_once() -> None:
    facts, story = big_node_story()
    decider = SchedulerDecider()
    state = decider.initial_state()
    for event in [*facts, *story]:
        state = decider.evolve(state, event)
    choice = ev.InstanceChoice("c-2", "z1", "on-demand", 0.1)
    request = build_event(
        ev.ReplacementsRequested,
        "req",
        command="cmd",
        candidates=("default-big",),
        replacements=(
            ev.ReplacementClaim(
                nodeclaim="default-abcde",
                nodepool="default",
                node_class="default",
                choice=choice,
                fallbacks=(ev.InstanceChoice("c-4", "z1", "on-demand", 0.2),),
                pods=("default/web-0",),
            ),
        ),
        reason="single-node",
    )
    [planned] = decider.decide(state, request)
    assert isinstance(planned, ev.NodeClaimPlanned)
    assert (planned.nodeclaim, planned.choice, planned.causation_id) == ("default-abcde", choice, "req")
    assert planned.labels["node.kubernetes.io/instance-type"] == "c-2"
    state = decider.evolve(state, planned)
    assert decider.decide(state, request) == []  # planned already: a redelivered request plans nothing more


def test_an_invalid_budget_makes_validation_fail_naming_the_field() -> None:
    assert validation_problem(nodepool(budgets=[{"nodes": "abc%"}])) == (
        "NodePool default: spec.disruption.budgets[0].nodes: 'abc%' is neither a count (5) nor a percentage "
        "up to 100% (10%)"
    )
    problem = validation_problem(
        nodepool(budgets=[{"nodes": "1", "schedule": "0 25 * * *", "duration": "1h"}])
    )
    assert problem is not None and "budgets[0].schedule" in problem
    assert (
        validation_problem(
            nodepool(budgets=[{"nodes": "1", "schedule": "0 9 * * mon-fri", "duration": "8h"}])
        )
        is None
    )
