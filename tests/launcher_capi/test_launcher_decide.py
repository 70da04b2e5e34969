"""The pure decider: the states a crash or a redelivery can leave behind, and what the launcher does in each."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from proto.events import (
    NodeClaimAbandoned,
    NodeClaimDrained,
    NodeClaimLaunched,
    NodeClaimLaunchFailed,
    NodeClaimTerminated,
)
from proto.ids import derive_id
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube import Kube
from tenon.services.launcher_capi.catalog import MachineDeploymentKey
from tenon.services.launcher_capi.launching import (
    ClaimState,
    LauncherState,
    MachineDeploymentView,
    MachineView,
    Targets,
    apply_claim_event,
    decide,
)
from tenon.services.launcher_capi.service import CapiLauncher
from tests.launcher_capi.launcher_support import append_claim_event, nodeclass, planned, publish_nodeclasses

C38 = MachineDeploymentKey("default", "c3-8")
C316 = MachineDeploymentKey("default", "c3-16")
TARGETS: Targets = {"default": {("c3-8", "zone-a"): C38, ("c3-16", "zone-a"): C316}}


def claims(*names: str, fallbacks: tuple[str, ...] = ()) -> dict[str, ClaimState]:
    out: dict[str, ClaimState] = {}
    for index, name in enumerate(names):
        apply_claim_event(out, planned(name, "c3-8", *fallbacks), 10 + index)
    return out


def md(
    replicas: int = 0,
    *,
    up: tuple[str, ...] = (),
    down: tuple[str, ...] = (),
    max_size: int | None = None,
    key: MachineDeploymentKey = C38,
) -> MachineDeploymentView:
    return MachineDeploymentView(
        key, replicas, "7", max_size=max_size, scaled_up_for=up, scaled_down_for=down
    )


def machine(
    name: str,
    claim: str | None = None,
    *,
    provider_id: str | None = None,
    marked: bool = False,
    deleting: bool = False,
    created: str = "2026-11-29T10:00:00Z",
    first_seen: float = 0.0,
) -> MachineView:
    return MachineView("default", name, "c3-8", claim, provider_id, deleting, marked, created, first_seen)


def state(
    claim_states: dict[str, ClaimState],
    *views: MachineDeploymentView,
    machines: tuple[MachineView, ...] = (),
    now: float = 100.0,
    leak_grace: float = 600.0,
) -> LauncherState:
    deployments = {v.key: v for v in views} or {C38: md()}
    return LauncherState(claim_states, TARGETS, deployments, list(machines), now, leak_grace)


def test_a_planned_claim_scales_its_deployment_once_and_records_why() -> None:
    decision = decide(state(claims("a", "b")))
    assert [(s.key, s.replicas_from, s.replicas_to, s.scaled_up_for) for s in decision.scales] == [
        (C38, 0, 2, ("a", "b"))
    ]
    patch = decision.scales[0].patch()
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["annotations"]["tenon.sh/scaled-up-for"] == "a,b"
    assert patch["spec"] == {"replicas": 2}


def test_restart_between_the_scale_up_and_the_machine_does_not_scale_again() -> None:
    assert decide(state(claims("a"), md(1, up=("a",)))).empty
    # the Machine appears: it is bound, and the claim leaves the list
    decision = decide(state(claims("a"), md(1, up=("a",)), machines=(machine("c3-8-x"),)))
    assert [(b.name, b.claim, b.nodepool) for b in decision.binds] == [("c3-8-x", "a", "default")]
    assert [(s.replicas_to, s.scaled_up_for) for s in decision.scales] == [(1, ())]
    # bound, no providerID yet: nothing; with one: Launched on the claim's subject at its last sequence
    assert decide(state(claims("a"), md(1), machines=(machine("c3-8-x", "a"),))).empty
    decision = decide(
        state(claims("a"), md(1), machines=(machine("c3-8-x", "a", provider_id="openstack:///1"),))
    )
    [append] = decision.appends
    assert isinstance(append.event, NodeClaimLaunched) and append.expected_last_sequence == 10
    assert (append.event.provider_id, append.event.machine) == ("openstack:///1", "c3-8-x")


def test_machines_the_deployment_already_had_are_not_handed_to_new_claims() -> None:
    old = machine("c3-8-old", created="2026-01-01T00:00:00Z")
    decision = decide(state(claims("a"), md(1), machines=(old,)))
    assert decision.binds == []
    assert [(s.replicas_to, s.scaled_up_for) for s in decision.scales] == [(2, ("a",))]


def test_launched_claims_and_claims_of_other_node_classes_are_left_alone() -> None:
    projection = claims("a")
    apply_claim_event(projection, planned("ec2-claim", "m5.large", node_class="ec2-default"), 20)
    launched = NodeClaimLaunched(
        id="x",
        decided_at=datetime.now(UTC),
        producer="launcher-capi",
        nodeclaim="a",
        provider_id="openstack:///1",
        instance_type="c3-8",
        machine="c3-8-x",
    )
    apply_claim_event(projection, launched, 30)
    assert decide(
        state(projection, md(1), machines=(machine("c3-8-x", "a", provider_id="openstack:///1"),))
    ).empty


def test_max_size_fails_over_in_planning_order_and_the_last_choice_fails_for_good() -> None:
    projection = claims("a", "b", fallbacks=("c3-16",))
    decision = decide(state(projection, md(1, max_size=2), md(key=C316)))
    assert [(s.key, s.replicas_to, s.scaled_up_for) for s in decision.scales] == [(C38, 2, ("a",))]
    [failed] = decision.appends
    assert isinstance(failed.event, NodeClaimLaunchFailed)
    assert (failed.claim, failed.event.instance_type, failed.event.retryable) == ("b", "c3-8", True)
    apply_claim_event(projection, failed.event, 40)
    decision = decide(state(projection, md(2, up=("a",), max_size=2), md(0, max_size=0, key=C316)))
    [final] = decision.appends
    assert isinstance(final.event, NodeClaimLaunchFailed)
    assert (final.event.instance_type, final.event.retryable) == ("c3-16", False)
    assert final.expected_last_sequence == 40


def _abandon(projection: dict[str, ClaimState], name: str, sequence: int) -> None:
    event = NodeClaimAbandoned(
        id=derive_id("t", name),
        decided_at=datetime.now(UTC),
        producer="scheduler",
        nodeclaim=name,
        reason="not registered in time",
    )
    assert apply_claim_event(projection, event, sequence)
    assert not apply_claim_event(projection, event, sequence)  # folded in once


def test_removal_marks_then_decrements_and_a_crash_between_them_is_finished_once() -> None:
    projection = claims("a", "b")
    _abandon(projection, "a", 50)
    ma = machine("c3-8-a", "a", provider_id="p1")
    mb = machine("c3-8-b", "b")  # still booting: no Launched to append for b
    decision = decide(state(projection, md(2), machines=(ma, mb)))
    assert [m.name for m in decision.marks] == ["c3-8-a"]
    assert [(s.replicas_to, s.scaled_down_for) for s in decision.scales] == [(1, ("c3-8-a",))]
    # crash after the mark, before the decrement: only the decrement is left to do
    marked = machine("c3-8-a", "a", provider_id="p1", marked=True)
    decision = decide(state(projection, md(2), machines=(marked, mb)))
    assert decision.marks == [] and [s.replicas_to for s in decision.scales] == [1]
    # both done: nothing, until Cluster API deletes the Machine; then the record is pruned
    assert decide(state(projection, md(1, down=("c3-8-a",)), machines=(marked, mb))).empty
    decision = decide(state(projection, md(1, down=("c3-8-a",)), machines=(mb,)))
    assert [(s.replicas_to, s.scaled_down_for) for s in decision.scales] == [(1, ())]


def test_a_gone_claims_replica_goes_to_the_next_owed_claim_without_scaling() -> None:
    projection = claims("a", "b")
    _abandon(projection, "a", 50)
    decision = decide(state(projection, md(1, up=("a",))))
    assert [(s.replicas_to, s.scaled_up_for) for s in decision.scales] == [(1, ("b",))]


def test_a_claim_abandoned_before_its_machine_came_gets_that_machine_removed() -> None:
    projection = claims("a")
    _abandon(projection, "a", 50)
    fresh = machine("c3-8-new")
    decision = decide(state(projection, md(1, up=("a",)), machines=(fresh,)))
    assert [(b.name, b.claim) for b in decision.binds] == [("c3-8-new", "a")]
    decision = decide(state(projection, md(1), machines=(machine("c3-8-new", "a"),)))
    assert [m.name for m in decision.marks] == ["c3-8-new"]
    assert [(s.replicas_to, s.scaled_down_for) for s in decision.scales] == [(0, ("c3-8-new",))]
    assert decision.appends == []


def test_a_drained_claim_loses_its_machine_then_is_terminated_once() -> None:
    projection = claims("a")
    launched = NodeClaimLaunched(
        id="l",
        decided_at=datetime.now(UTC),
        producer="launcher-capi",
        nodeclaim="a",
        provider_id="p1",
        instance_type="c3-8",
        machine="c3-8-a",
    )
    apply_claim_event(projection, launched, 20)
    drained = NodeClaimDrained(
        id="d", decided_at=datetime.now(UTC), producer="disruption", nodeclaim="a", node="n"
    )
    apply_claim_event(projection, drained, 30)
    decision = decide(state(projection, md(1), machines=(machine("c3-8-a", "a", provider_id="p1"),)))
    assert [m.name for m in decision.marks] == ["c3-8-a"] and [s.replicas_to for s in decision.scales] == [0]
    assert decision.appends == []  # not while the Machine exists, even deleting
    going = machine("c3-8-a", "a", provider_id="p1", marked=True, deleting=True)
    assert decide(state(projection, md(0, down=("c3-8-a",)), machines=(going,))).appends == []
    decision = decide(state(projection, md(0, down=("c3-8-a",))))
    [append] = decision.appends
    assert isinstance(append.event, NodeClaimTerminated)
    assert (append.event.machine, append.expected_last_sequence, append.event.causation_id) == (
        "c3-8-a",
        30,
        "d",
    )
    apply_claim_event(projection, append.event, 31)
    assert decide(state(projection, md(0))).empty


def test_a_machine_bound_to_an_unknown_claim_is_removed_only_after_the_grace_period() -> None:
    stray = machine("c3-8-s", "nobody", first_seen=100.0)
    assert decide(state({}, md(1), machines=(stray,), now=150.0, leak_grace=60.0)).empty
    decision = decide(state({}, md(1), machines=(stray,), now=160.0, leak_grace=60.0))
    assert [m.name for m in decision.marks] == ["c3-8-s"] and "leaked" in decision.marks[0].reason
    assert [s.replicas_to for s in decision.scales] == [0]


async def test_rebuild_folds_each_claims_story_and_the_latest_node_classes_from_the_log() -> None:
    event_log = InMemoryEventLog()
    launcher = CapiLauncher(event_log, cast(Kube, None))
    await launcher.rebuild()
    assert launcher.claims == {} and launcher.nodeclasses == {}
    await append_claim_event(event_log, planned("a", "c3-8", "c3-16"))
    await publish_nodeclasses(event_log, nodeclass("old"))
    await append_claim_event(event_log, planned("b", "c3-8"))
    failed = NodeClaimLaunchFailed(
        id="f",
        decided_at=datetime.now(UTC),
        producer="launcher-capi",
        nodeclaim="a",
        instance_type="c3-8",
        reason="max size",
    )
    await append_claim_event(event_log, failed)
    await publish_nodeclasses(event_log, nodeclass())
    launcher = CapiLauncher(event_log, cast(Kube, None))
    await launcher.rebuild()
    assert sorted(launcher.nodeclasses) == ["default"]
    assert sorted(launcher.claims) == ["a", "b"]
    a = launcher.claims["a"]
    assert (a.failed_attempts, a.last_sequence, a.current_choice and a.current_choice.instance_type) == (
        1,
        4,
        "c3-16",
    )
