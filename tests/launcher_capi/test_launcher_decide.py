"""The pure decider: the states a crash, a redelivery or a lost log can leave behind, and what the launcher
does.

States are built by folding the events the live service would fold (claims as their owners write them, the
launcher's own catalog), with the Cluster API objects as views; decisions are what :func:`plan` returns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from proto import events as ev
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.services.launcher_capi.catalog import Offer
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.launcher_capi.launching import plan
from tenon.services.launcher_capi.observations import (
    MachineDeploymentView,
    MachineView,
    machine_observed,
    trim_machine,
)
from tenon.services.launcher_capi.removal import (
    INCOMPLETE_HISTORY,
    LOG_TOO_SHORT,
    NODECLAIM_OBJECT_EXISTS,
    leak_suspects,
)
from tenon.services.launcher_capi.state import CatalogRecord, LauncherState
from tests.launcher_capi.launcher_support import nodeclass, planned
from tests.support.events import T0, build_event

E = TypeVar("E", bound=ev.Event)

INPUT = build_event(ev.NodeClassesSnapshot, "the-input", nodeclasses=())
"""Stands for whatever input a decision answers (its cause)."""


def state_with(*claims: str, fallbacks: tuple[str, ...] = ()) -> LauncherState:
    state = LauncherState()
    state.catalogs["default"] = CatalogRecord(
        "catalog-1",
        "hash",
        T0,
        (Offer("c3-8", "zone-a", "default", "c3-8"), Offer("c3-16", "zone-a", "default", "c3-16")),
    )
    for index, name in enumerate(claims):
        state.apply(planned(name, "c3-8", *fallbacks), 10 + index)
    return state


def md(
    state: LauncherState,
    replicas: int = 0,
    *,
    up: tuple[str, ...] = (),
    down: tuple[str, ...] = (),
    max_size: int | None = None,
    name: str = "c3-8",
) -> MachineDeploymentView:
    view = MachineDeploymentView(
        "default", name, replicas, "7", max_size=max_size, scaled_up_for=up, scaled_down_for=down
    )
    state.deployments[view.ref] = view
    return view


def machine(
    state: LauncherState,
    name: str,
    claim: str | None = None,
    *,
    provider_id: str | None = None,
    marked: bool = False,
    deleting: bool = False,
    created: str = "2026-11-29T10:00:00Z",
    bound_since: datetime = T0,
) -> MachineView:
    view = MachineView(
        "default",
        name,
        "c3-8",
        claim,
        provider_id,
        deleting,
        marked,
        created,
        uid=f"uid-{name}",
        bound_since=bound_since if claim else None,
    )
    state.machines[view.ref] = view
    return view


def gone(state: LauncherState, name: str) -> None:
    del state.machines[f"default/{name}"]


def decide(state: LauncherState, at: datetime = T0) -> list[ev.Event]:
    return plan(state, INPUT, at)


def of(decisions: list[ev.Event], event_type: type[E]) -> list[E]:
    return [d for d in decisions if isinstance(d, event_type)]


def record(state: LauncherState, decisions: list[ev.Event]) -> None:
    """What the runtime does after carrying them out: fold each at once."""
    for decision in decisions:
        state.apply(decision)


def step(claim: str, event_type: type[E], step_id: str, **fields: Any) -> E:
    return build_event(event_type, step_id, nodeclaim=claim, **fields)


def test_a_planned_claim_scales_its_deployment_once_and_records_why() -> None:
    state = state_with("a", "b")
    md(state)
    [scale] = decide(state)
    assert isinstance(scale, ev.MachineDeploymentScaled)
    assert (scale.machine_deployment, scale.replicas_from, scale.replicas_to) == ("c3-8", 0, 2)
    assert (scale.scaled_up_for, scale.resource_version, scale.causation_id) == (("a", "b"), "7", INPUT.id)
    assert "a replica for NodeClaim a, b" in scale.reason
    record(state, [scale])
    assert decide(state) == []  # decided again on the same state: nothing new


def test_restart_between_the_scale_up_and_the_machine_does_not_scale_again() -> None:
    state = state_with("a")
    md(state, 1, up=("a",))
    assert decide(state) == []
    # the Machine appears: still provisioning (no providerID), it waits; nothing is scaled again
    machine(state, "c3-8-x")
    assert decide(state) == []
    # provisioned: bound, its claim Launched right after the bind; the records wait (no MachineDeployment
    # write holds back the plan on the way to a Launched)
    machine(state, "c3-8-x", provider_id="openstack:///1")
    decisions = decide(state)
    bind, launched = decisions
    assert isinstance(bind, ev.MachineBound)
    assert (bind.machine, bind.nodeclaim, bind.nodepool) == ("c3-8-x", "a", "default")
    assert isinstance(launched, ev.NodeClaimLaunched) and launched.causation_id == INPUT.id
    assert (launched.provider_id, launched.machine, launched.zone) == ("openstack:///1", "c3-8-x", "zone-a")
    record(state, decisions)
    assert state.machines["default/c3-8-x"].claim == "a"
    # nothing waits any more: the claim leaves the records in one write
    [tidy] = decide(state)
    assert isinstance(tidy, ev.MachineDeploymentScaled)
    assert (tidy.replicas_to, tidy.scaled_up_for) == (1, ())
    record(state, [tidy])
    assert decide(state) == []


def test_the_records_wait_while_a_claim_of_the_deployment_waits_to_be_launched() -> None:
    state = state_with("a", "b")
    md(state, 2, up=("a", "b"))
    machine(state, "c3-8-x", provider_id="openstack:///1")
    decisions = decide(state)  # a's Machine is provisioned, b's not there yet
    assert [type(d) for d in decisions] == [ev.MachineBound, ev.NodeClaimLaunched]
    record(state, decisions)
    assert decide(state) == []  # b is still listed: no write for a's entry alone
    machine(state, "c3-8-y")  # b's Machine, booting
    assert decide(state) == []
    machine(state, "c3-8-y", provider_id="openstack:///2")
    decisions = decide(state)
    assert [type(d) for d in decisions] == [ev.MachineBound, ev.NodeClaimLaunched]
    record(state, decisions)
    [tidy] = decide(state)
    assert isinstance(tidy, ev.MachineDeploymentScaled) and tidy.scaled_up_for == ()


def test_machines_the_deployment_already_had_are_not_handed_to_new_claims() -> None:
    state = state_with("a")
    md(state, 1)
    machine(state, "c3-8-old", created="2026-01-01T00:00:00Z")
    decisions = decide(state)
    assert of(decisions, ev.MachineBound) == []
    assert [(s.replicas_to, s.scaled_up_for) for s in of(decisions, ev.MachineDeploymentScaled)] == [
        (2, ("a",))
    ]


def test_launched_claims_and_claims_of_other_node_classes_are_left_alone() -> None:
    state = state_with("a")
    state.apply(planned("ec2-claim", "m5.large", node_class="ec2-default"), 20)
    state.apply(
        step(
            "a",
            ev.NodeClaimLaunched,
            "l",
            provider_id="openstack:///1",
            instance_type="c3-8",
            machine="c3-8-x",
        ),
        30,
    )
    md(state, 1)
    machine(state, "c3-8-x", "a", provider_id="openstack:///1")
    assert decide(state) == []


def test_max_size_fails_over_in_planning_order_and_the_last_choice_fails_for_good() -> None:
    state = state_with("a", "b", fallbacks=("c3-16",))
    md(state, 1, max_size=2)
    md(state, name="c3-16")
    decisions = decide(state)
    assert [
        (s.machine_deployment, s.replicas_to, s.scaled_up_for)
        for s in of(decisions, ev.MachineDeploymentScaled)
    ] == [("c3-8", 2, ("a",))]
    [failed] = of(decisions, ev.NodeClaimLaunchFailed)
    assert (failed.nodeclaim, failed.instance_type, failed.retryable) == ("b", "c3-8", True)
    assert "at its max size 2" in failed.reason
    state.apply(failed, 40)
    md(state, 2, up=("a",), max_size=2)
    md(state, 0, max_size=0, name="c3-16")
    [final] = decide(state)
    assert isinstance(final, ev.NodeClaimLaunchFailed)
    assert (final.nodeclaim, final.instance_type, final.retryable) == ("b", "c3-16", False)
    state.apply(final, 41)
    assert state.claims["b"].finally_failed and decide(state) == []


def test_removal_marks_then_decrements_and_a_crash_between_them_is_finished_once() -> None:
    state = state_with("a", "b")
    state.apply(step("a", ev.NodeClaimAbandoned, "abandon-a", reason="not registered in time"), 50)
    md(state, 2)
    machine(state, "c3-8-a", "a", provider_id="p1")
    machine(state, "c3-8-b", "b")  # still booting: nothing to say for b
    decisions = decide(state)
    [removal] = of(decisions, ev.MachineRemovalDecided)
    assert (removal.machine, removal.nodeclaim, removal.reason) == ("c3-8-a", "a", "NodeClaim a abandoned")
    assert any("NodeClaimAbandoned abandon-a by scheduler" in fact for fact in removal.evidence)
    assert any("complete history from NodeClaimPlanned" in fact for fact in removal.evidence)
    assert [(s.replicas_to, s.scaled_down_for) for s in of(decisions, ev.MachineDeploymentScaled)] == [
        (1, ("c3-8-a",))
    ]
    assert decisions.index(removal) < decisions.index(of(decisions, ev.MachineDeploymentScaled)[0])
    # crash after the mark, before the decrement: only the decrement is left to do
    record(state, [removal])
    assert state.machines["default/c3-8-a"].marked
    [scale] = decide(state)
    assert isinstance(scale, ev.MachineDeploymentScaled) and scale.replicas_to == 1
    # both done: nothing, until Cluster API deletes the Machine; then the record is pruned
    record(state, [scale])
    assert decide(state) == []
    gone(state, "c3-8-a")
    [prune] = decide(state)
    assert isinstance(prune, ev.MachineDeploymentScaled)
    assert (prune.replicas_to, prune.scaled_down_for) == (1, ())


def test_a_gone_claims_replica_goes_to_the_next_owed_claim_without_scaling() -> None:
    state = state_with("a", "b")
    state.apply(step("a", ev.NodeClaimAbandoned, "abandon-a", reason="gone"), 50)
    md(state, 1, up=("a",))
    [scale] = decide(state)
    assert isinstance(scale, ev.MachineDeploymentScaled)
    assert (scale.replicas_to, scale.scaled_up_for) == (1, ("b",))


def test_a_claim_abandoned_before_its_machine_came_gets_that_machine_removed() -> None:
    state = state_with("a")
    state.apply(step("a", ev.NodeClaimAbandoned, "abandon-a", reason="gone"), 50)
    md(state, 1, up=("a",))
    machine(state, "c3-8-new")  # a claim gone takes its Machine at once, provisioned or not
    [bind] = decide(state)
    assert isinstance(bind, ev.MachineBound) and (bind.machine, bind.nodeclaim) == ("c3-8-new", "a")
    record(state, [bind])
    decisions = decide(state)
    assert [r.machine for r in of(decisions, ev.MachineRemovalDecided)] == ["c3-8-new"]
    assert [
        (s.replicas_to, s.scaled_down_for, s.scaled_up_for) for s in of(decisions, ev.MachineDeploymentScaled)
    ] == [(0, ("c3-8-new",), ())]
    assert of(decisions, ev.NodeClaimEvent) == []


def a_drained(state: LauncherState) -> LauncherState:
    """Claim ``a`` launched on Machine c3-8-a (the only replica of c3-8), then disrupted and drained."""
    state.apply(
        step("a", ev.NodeClaimLaunched, "l", provider_id="p1", instance_type="c3-8", machine="c3-8-a"), 20
    )
    state.apply(step("a", ev.DisruptionRequested, "r", method="emptiness", reason="empty", node="n"), 25)
    state.apply(step("a", ev.NodeClaimDrained, "d", node="n"), 30)
    md(state, 1)
    machine(state, "c3-8-a", "a", provider_id="p1")
    return state


def test_a_drained_claim_loses_its_machine_then_is_terminated_once() -> None:
    state = a_drained(state_with("a"))
    decisions = decide(state)
    assert [r.machine for r in of(decisions, ev.MachineRemovalDecided)] == ["c3-8-a"]
    assert [s.replicas_to for s in of(decisions, ev.MachineDeploymentScaled)] == [0]
    assert of(decisions, ev.NodeClaimTerminated) == []  # not while the Machine exists, even deleting
    record(state, decisions)
    machine(state, "c3-8-a", "a", provider_id="p1", marked=True, deleting=True)
    assert of(decide(state), ev.NodeClaimTerminated) == []
    gone(state, "c3-8-a")
    [terminated] = of(decide(state), ev.NodeClaimTerminated)
    assert (terminated.machine, terminated.causation_id) == ("c3-8-a", INPUT.id)
    state.apply(terminated, 31)
    assert of(decide(state), ev.NodeClaimTerminated) == []


def test_a_forged_drain_is_refused_by_the_aggregate_and_removes_nothing() -> None:
    state = state_with("a")
    state.apply(
        step("a", ev.NodeClaimLaunched, "l", provider_id="p1", instance_type="c3-8", machine="c3-8-a"), 20
    )
    md(state, 1)
    machine(state, "c3-8-a", "a", provider_id="p1")
    assert decide(state) == []
    for producer in ("launcher-capi", "scheduler"):
        forged = build_event(
            ev.NodeClaimDrained, f"forged-{producer}", producer=producer, nodeclaim="a", node="n"
        )
        with pytest.raises(ImpossibleStory, match="only disruption may write"):
            state.apply(forged, 30)
    # the disruption service's name without a disruption request is no better
    unrequested = build_event(ev.NodeClaimDrained, "no-request", nodeclaim="a", node="n")
    with pytest.raises(ImpossibleStory, match="no disruption was requested"):
        state.apply(unrequested, 31)
    assert state.claims["a"].drained is None and state.claims["a"].live
    assert decide(state) == []


def test_a_claim_known_only_in_part_keeps_its_machine_and_says_so_once() -> None:
    state = state_with()
    # its Planned and Launched aged out of the log; what is left says it was abandoned
    state.apply(step("old", ev.NodeClaimAbandoned, "abandon-old", reason="not registered in time"), 90)
    assert not state.claims["old"].complete
    md(state, 1)
    machine(state, "c3-8-old", "old", provider_id="p1")
    [kept] = decide(state)
    assert isinstance(kept, ev.MachineKept)
    assert (kept.machine, kept.nodeclaim, kept.code) == ("c3-8-old", "old", INCOMPLETE_HISTORY)
    assert "history is incomplete" in kept.reason
    record(state, [kept])
    assert decide(state) == []  # said once


def leak_check(view: MachineView, **fields: Any) -> ev.MachineLeakChecked:
    values: dict[str, Any] = {
        "namespace": view.namespace,
        "machine": view.name,
        "machine_deployment": view.deployment,
        "nodeclaim": view.claim,
        "machine_created": T0,
        "bound_since": view.bound_since,
        "leak_grace": 600.0,
        "nodeclaim_object": "absent",
        "log_first_sequence": 1,
        "log_needed_since": T0 - timedelta(minutes=5),
        "log_reaches_back": True,
    }
    values.update(fields)
    return build_event(ev.MachineLeakChecked, f"check-{view.name}", at=T0 + timedelta(minutes=11), **values)


def test_a_machine_bound_to_an_unknown_claim_waits_for_the_grace_then_for_evidence() -> None:
    state = state_with()
    md(state, 1)
    stray = machine(state, "c3-8-s", "nobody", bound_since=T0)
    grace = timedelta(minutes=10)
    assert list(leak_suspects(state, T0 + timedelta(minutes=9), grace)) == []
    assert [m.name for m in leak_suspects(state, T0 + timedelta(minutes=10), grace)] == ["c3-8-s"]
    assert decide(state, T0 + timedelta(days=30)) == []  # time alone removes nothing
    state.apply(leak_check(stray))
    assert list(leak_suspects(state, T0 + timedelta(minutes=12), grace)) == []  # checked once
    decisions = decide(state)
    [removal] = of(decisions, ev.MachineRemovalDecided)
    assert removal.reason.startswith("leaked: bound to NodeClaim nobody")
    assert any("no NodeClaim object nobody" in fact for fact in removal.evidence)
    assert any("the log reaches back to" in fact for fact in removal.evidence)
    assert [s.replicas_to for s in of(decisions, ev.MachineDeploymentScaled)] == [0]


@pytest.mark.parametrize(
    ("evidence", "code", "says"),
    [
        ({"nodeclaim_object": "present"}, NODECLAIM_OBJECT_EXISTS, "a NodeClaim object nobody exists"),
        (
            {"log_reaches_back": False, "log_first_sequence": 900, "log_starts_at": T0},
            LOG_TOO_SHORT,
            "the claim may have aged out",
        ),
    ],
)
def test_a_leak_without_the_evidence_is_kept_and_said_once(
    evidence: dict[str, Any], code: str, says: str
) -> None:
    state = state_with()
    md(state, 1)
    stray = machine(state, "c3-8-s", "nobody", bound_since=T0)
    state.apply(leak_check(stray, **evidence))
    [kept] = decide(state)
    assert isinstance(kept, ev.MachineKept) and kept.code == code and says in kept.reason
    record(state, [kept])
    assert decide(state) == []


def test_a_check_made_for_another_binding_is_not_evidence() -> None:
    state = state_with()
    md(state, 1)
    stray = machine(state, "c3-8-s", "nobody", bound_since=T0)
    state.apply(leak_check(stray))
    # the Machine was bound to another claim since: that check says nothing about it
    machine(state, "c3-8-s", "somebody", bound_since=T0 + timedelta(minutes=20))
    assert decide(state) == []


def test_observations_keep_when_a_binding_began_and_forget_a_machine_that_went() -> None:
    state = LauncherState()
    obj: dict[str, Any] = {
        "kind": "Machine",
        "metadata": {
            "name": "m",
            "namespace": "default",
            "uid": "u1",
            "resourceVersion": "5",
            "labels": {"cluster.x-k8s.io/deployment-name": "c3-8", "unrelated": "x"},
            "annotations": {"tenon.sh/nodeclaim": "a", "note": "not kept"},
            "managedFields": [{"big": "x"}],
        },
        "spec": {"providerID": "p1", "bootstrap": {}},
        "status": {"phase": "Running"},
    }
    assert trim_machine(obj)["metadata"]["annotations"] == {"tenon.sh/nodeclaim": "a"}
    first = machine_observed(obj, "added", at=T0)
    state.apply(first)
    obj["metadata"]["resourceVersion"] = "6"
    state.apply(machine_observed(obj, "changed", at=T0 + timedelta(hours=1)))
    assert state.machines["default/m"].bound_since == T0
    assert machine_observed(obj, "changed").id == machine_observed(obj, "changed").id  # deterministic
    state.apply(leak_check(state.machines["default/m"]))
    assert "default/m" in state.checks
    state.apply(machine_observed(obj, "removed"))
    assert "default/m" not in state.machines and "default/m" not in state.checks


def test_an_observation_older_than_an_action_does_not_undo_it() -> None:
    state = state_with("a")
    md(state, 1, up=("a",))
    obj: dict[str, Any] = {
        "kind": "Machine",
        "metadata": {
            "name": "c3-8-x",
            "namespace": "default",
            "uid": "uid-x",
            "resourceVersion": "3",
            "labels": {"cluster.x-k8s.io/deployment-name": "c3-8"},
        },
        "spec": {"providerID": "p1"},
    }
    state.apply(machine_observed(obj, "added", at=T0), 20)
    bind, launched = decide(state)
    state.apply(bind, 30)  # recorded at 30 (and folded at once)
    state.apply(launched, 31)
    # the watch saw the Machine change before the bind (a label, say): stored at 25, it reaches the decider
    # now
    obj["metadata"]["resourceVersion"] = "4"
    state.apply(machine_observed(obj, "changed", at=T0), 25)
    assert state.machines["default/c3-8-x"].claim == "a"
    assert not any(isinstance(d, ev.MachineDeploymentScaled) and d.replicas_to > 1 for d in decide(state))
    # what was stored after the action counts again
    obj["metadata"]["resourceVersion"] = "6"
    obj["metadata"]["annotations"] = {"tenon.sh/nodeclaim": "a"}
    obj["metadata"]["labels"]["karpenter.sh/nodepool"] = "default"
    state.apply(machine_observed(obj, "changed", at=T0, after=bind.id), 33)
    assert state.machines["default/c3-8-x"].nodepool == "default"
    assert state.machines["default/c3-8-x"].bound_since == bind.decided_at


def test_the_state_survives_a_snapshot_round_trip() -> None:
    decider = CapiLauncherDecider()
    state = state_with("a")
    state.apply(build_event(ev.NodeClassesSnapshot, "ncs", nodeclasses=(nodeclass(),)))
    state.apply(step("a", ev.NodeClaimLaunchFailed, "f", instance_type="c3-8", reason="max size"), 12)
    md(state, 1, up=("a",))
    machine(state, "c3-8-x", "a", bound_since=datetime(2026, 11, 29, 10, 1, tzinfo=UTC))
    again = decider.decode(decider.encode(state))
    assert again == state
    assert again.claims["a"].current_choice is None and again.claims["a"].last_sequence == 12
    assert decide(again) == decide(state)


def test_a_claim_owed_a_replica_waits_while_a_machine_of_its_deployment_is_being_removed() -> None:
    """Cluster API deletes a marked Machine only when the MachineSet shrinks: one write that took a replica
    away and gave one back left the size as it was, the marked Machine stayed and no new Machine came (seen
    under chaos: two claims waited five minutes, were abandoned, and the same happened to their
    successors)."""
    state = a_drained(state_with("a", "b"))
    decisions = decide(state)
    assert [r.machine for r in of(decisions, ev.MachineRemovalDecided)] == ["c3-8-a"]
    assert [
        (s.replicas_to, s.scaled_down_for, s.scaled_up_for) for s in of(decisions, ev.MachineDeploymentScaled)
    ] == [(0, ("c3-8-a",), ())]
    assert of(decisions, ev.NodeClaimLaunchFailed) == []  # b waits; it has not failed
    record(state, decisions)
    machine(state, "c3-8-a", "a", provider_id="p1", marked=True)  # marked, not yet deleting
    assert of(decide(state), ev.MachineDeploymentScaled) == []
    machine(state, "c3-8-a", "a", provider_id="p1", marked=True, deleting=True)
    [scale] = of(decide(state), ev.MachineDeploymentScaled)
    assert (scale.replicas_from, scale.replicas_to, scale.scaled_up_for) == (0, 1, ("b",))
