"""Drift and expiration, on files (``tenon simulate --disruption``'s engine) and in the service's decider."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from proto import events as ev
from tenon.domain.disruption.drift import drift_reason, template_hash
from tenon.domain.disruption.view import ClaimFacts, ClusterView
from tenon.domain.disruption.whatif import run
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.orchestration import REQUEST_AGAIN_AFTER
from tenon.services.disruption.projection_view import DisruptionState
from tests.disruption.clusters import NOW, SIZES, catalog, node, nodepool, pod
from tests.support.events import T0, build_event


def test_a_node_whose_type_the_requirements_no_longer_allow_is_replaced_first() -> None:
    pool = nodepool(budgets=[{"nodes": "100%"}], consolidationPolicy="WhenEmpty")
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4", "c-8"]}
    ]
    objects = [pool, catalog(SIZES), node("old", "c-16", 16, 32), pod("web-0", "old", "3", "1Gi")]
    result = run(objects, NOW, rounds=None)
    [played] = result["rounds"]
    assert (played["method"], played["candidates"]) == ("drift", ["old"])
    assert [r["instanceType"] for r in played["replacements"]] == ["c-4"]
    assert result["finalNodes"][0]["pods"] == ["default/web-0"]


def test_the_template_hash_covers_what_drifts_and_nothing_else() -> None:
    pool = nodepool()
    changed_labels = copy.deepcopy(pool)
    changed_labels["spec"]["template"]["metadata"] = {"labels": {"team": "b"}}
    changed_budget = nodepool(budgets=[{"nodes": "0"}])
    tainted = copy.deepcopy(pool)
    tainted["spec"]["template"]["spec"]["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]
    assert template_hash(pool) != template_hash(changed_labels)
    assert template_hash(pool) != template_hash(tainted)
    assert template_hash(pool) == template_hash(changed_budget)  # budgets are not the template


def test_expiration_is_forceful_whatever_the_budget() -> None:
    pool = nodepool(budgets=[{"nodes": "0"}])
    pool["spec"]["template"]["spec"]["expireAfter"] = "24h"  # the nodes were made two days ago
    objects = [pool, catalog(SIZES), node("aged", "c-4", 4, 8), pod("web-0", "aged", "1", "1Gi")]
    played = run(objects, NOW, rounds=1)["rounds"]
    assert [(p["method"], p["candidates"]) for p in played] == [("expiration", ["aged"])]


def drifting_cluster() -> tuple[DisruptionDecider, DisruptionState, dict[str, Any]]:
    """One node of a WhenEmpty pool, its pod and its claim through Initialized, as the service folds them."""
    pool = nodepool(budgets=[{"nodes": "100%"}], consolidationPolicy="WhenEmpty")
    decider = DisruptionDecider()
    state = decider.initial_state()
    facts: list[ev.Event] = [
        build_event(ev.NodePoolsSnapshot, "np1", nodepools=(pool,)),
        build_event(
            ev.CatalogSnapshot,
            "cat",
            provider="static",
            node_class="default",
            instance_types=tuple(catalog(SIZES)["spec"]["instanceTypes"]),
        ),
        build_event(ev.NodeObserved, "n", change="added", node=node("n1", "c-4", 4, 8)),
        build_event(ev.BoundPodObserved, "p", change="added", pod=pod("web-0", "n1", "1", "1Gi")),
        build_event(
            ev.NodeClaimPlanned,
            "pl",
            nodeclaim="c1",
            nodepool="default",
            node_class="default",
            choice=ev.InstanceChoice("c-4", "z1", "on-demand", 0.2),
            fallbacks=(),
            pods=(),
            requirements=(),
            labels={},
        ),
        build_event(ev.NodeClaimLaunched, "la", nodeclaim="c1", provider_id="p://1", instance_type="c-4"),
        build_event(ev.NodeClaimRegistered, "re", nodeclaim="c1", node="n1", provider_id="p://1"),
        build_event(ev.NodeClaimInitialized, "in", nodeclaim="c1", node="n1"),
    ]
    for event in facts:
        state = decider.evolve(state, event)
    return decider, state, pool


def test_the_service_notices_a_template_change_and_replaces_the_node_before_draining_it() -> None:
    decider, state, pool = drifting_cluster()
    later = T0 + timedelta(minutes=5)
    assert decider.tick(state, later) == []  # nothing drifted
    relabelled = copy.deepcopy(pool)
    relabelled["spec"]["template"]["metadata"] = {"labels": {"team": "b"}}
    state = decider.evolve(state, build_event(ev.NodePoolsSnapshot, "np2", nodepools=(relabelled,)))
    decisions = decider.tick(state, later)
    assert [type(d).__name__ for d in decisions] == ["DisruptionDecision", "ReplacementsRequested"]
    decision = decisions[0]
    assert isinstance(decision, ev.DisruptionDecision)
    assert (decision.method, decision.stage) == ("drift", "confirmed")
    assert "NodePoolDrifted" in decision.candidates[0].reason
    request = decisions[1]
    assert isinstance(request, ev.ReplacementsRequested)
    assert request.replacements[0].labels == {"team": "b"}  # the replacement is what the template says now
    for event in decisions:
        state = decider.evolve(state, event)
    assert decider.tick(state, later + timedelta(seconds=1)) == []  # nothing drained before it is Initialized


def test_replacements_asked_for_and_never_planned_are_asked_for_again() -> None:
    """A leader that lost its lease between recording the confirmation and the request left a command
    waiting for claims nobody had asked for."""
    decider, state, pool = drifting_cluster()
    later = T0 + timedelta(minutes=5)
    relabelled = copy.deepcopy(pool)
    relabelled["spec"]["template"]["metadata"] = {"labels": {"team": "b"}}
    state = decider.evolve(state, build_event(ev.NodePoolsSnapshot, "np2", nodepools=(relabelled,)))
    confirmed, request = decider.tick(state, later)
    state = decider.evolve(state, confirmed)  # the request itself never reached the log
    assert decider.tick(state, later + timedelta(seconds=10)) == []  # the scheduler may still be at it
    [again] = decider.tick(state, later + REQUEST_AGAIN_AFTER)
    assert isinstance(again, ev.ReplacementsRequested) and again.id == request.id
    assert again.replacements == request.replacements  # the same claims: the scheduler plans each once


def test_a_view_kept_while_its_nodepool_changes_judges_drift_on_the_new_template() -> None:
    """The template hash is worked out once per view for many claims, but a NodePool replaced in the view (a
    new snapshot of it) is hashed again: its claims drift."""
    pool = nodepool()
    claims = [
        ClaimFacts(
            f"c{i}",
            "default",
            f"n{i}",
            "c3-4",
            None,
            "on-demand",
            0.1,
            T0,
            T0,
            nodepool_hash=template_hash(pool),
        )
        for i in range(3)
    ]
    view = ClusterView(now=NOW, nodepools={"default": pool}, claims={c.name: c for c in claims})
    assert [drift_reason(view, c) for c in claims] == [None, None, None]
    changed = copy.deepcopy(pool)
    changed["spec"]["template"]["metadata"] = {"labels": {"team": "new"}}
    view.nodepools["default"] = changed
    assert {drift_reason(view, c)[0] for c in claims} == {"NodePoolDrifted"}  # type: ignore[index]
