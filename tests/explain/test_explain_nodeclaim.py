"""``explain_nodeclaim`` on logs the real planner wrote: why a claim exists, its life, its disruptions."""

from __future__ import annotations

import json

import pytest

from proto import events as ev
from tenon.domain.explain import MAX_EVENT_MESSAGE, LoggedEvent, explain_nodeclaim, nodeclaim_event_message
from tests.explain.story import Story, pending_pod


def field_case() -> tuple[Story, ev.NodeClaimPlanned]:
    """Field case 1: one pod asking 3 vCPU on the CAPI demo (Karpenter's CAPI provider bought a c3-16)."""
    story = Story()
    batch = story.pending([pending_pod("big", "3")], at=10)
    claims, _ = story.plan(batch, at=10.5)
    assert [c.choice.instance_type for c in claims] == ["c3-8"]
    return story, claims[0]


def test_the_3_vcpu_field_case_says_c3_8_won_on_price_and_why_c3_4_did_not_fit() -> None:
    story, planned = field_case()
    explanation = explain_nodeclaim(planned.nodeclaim, story.log)
    text = explanation.text()
    assert "c3-8 won on price" in text
    (c3_4,) = [line for line in text.splitlines() if line.strip().startswith("c3-4")]
    assert "$0.0500/h" in c3_4
    assert "cheaper, but did not fit: too small: needs cpu=3" in c3_4
    assert "has 1900m after DaemonSets" in c3_4  # 2 vCPU minus the 100m node agent
    (c3_16,) = [line for line in text.splitlines() if line.strip().startswith("c3-16")]
    assert "lost on price" in c3_16 and "$0.2000/h > $0.1000/h" in c3_16
    outcomes = {v.instance_type: v.outcome for v in explanation.considered}
    assert outcomes == {"c3-4": "lost", "c3-8": "chosen", "c3-16": "fallback"}
    assert [v.instance_type for v in explanation.considered] == ["c3-4", "c3-8", "c3-16"]  # cheapest first


def test_why_it_exists_names_the_batch_its_pods_and_what_the_batch_else_did() -> None:
    story = Story()
    big, huge = pending_pod("big", "3"), pending_pod("huge", "100")
    batch = story.pending([big, huge], at=10)
    claims, answer = story.plan(batch, at=11)
    (planned,) = claims
    explanation = explain_nodeclaim(planned.nodeclaim, story.log)
    text = explanation.text()
    assert "It answers PendingBatch batch-1 (#5 at 2026-11-29T10:00:10Z, 2 pending pod(s)" in text
    assert "It is for 1 pod(s): default/big" in text
    assert "The same batch: 1 unschedulable pod(s)" in text
    assert "It must hold cpu=3100m" in text  # the pod plus the DaemonSet
    assert explanation.origin is not None and explanation.origin.batch_pods == ("default/big", "default/huge")
    assert answer.nodeclaims == (planned.nodeclaim,)


def test_each_claim_names_the_pods_of_its_own_batch() -> None:
    """The batch's pod list is computed once per batch and reused: a claim of the second batch must not be
    given the first batch's pods."""
    story = Story()
    first_claims, _ = story.plan(story.pending([pending_pod("a", "3")], at=10), at=11)
    second_claims, _ = story.plan(story.pending([pending_pod("b", "3"), pending_pod("c", "3")], at=20), at=21)
    pods_of = {}
    for planned in (*first_claims, *second_claims, *first_claims):
        origin = explain_nodeclaim(planned.nodeclaim, story.log).origin
        assert origin is not None
        pods_of[planned.nodeclaim] = origin.batch_pods
    assert {pods_of[c.nodeclaim] for c in first_claims} == {("default/a",)}
    assert {pods_of[c.nodeclaim] for c in second_claims} == {("default/b", "default/c")}


def test_the_life_of_a_claim_with_a_fallback_launch_and_a_termination() -> None:
    story, planned = field_case()
    name = planned.nodeclaim
    story.claim_event(
        ev.NodeClaimLaunchFailed,
        name,
        at=11.0,
        producer="launcher-capi",
        instance_type="c3-8",
        reason="MachineDeployment default/c3-8 is at its max size 10",
    )
    story.claim_event(
        ev.NodeClaimLaunched,
        name,
        at=12.5,
        producer="launcher-capi",
        instance_type="c3-16",
        provider_id="openstack:///m-1",
        machine="c3-16-abcde",
    )
    story.claim_event(
        ev.NodeClaimRegistered,
        name,
        at=70.5,
        producer="scheduler",
        node="worker-1",
        provider_id="openstack:///m-1",
    )
    story.claim_event(ev.NodeClaimInitialized, name, at=80.5, producer="scheduler", node="worker-1")
    story.claim_event(
        ev.DisruptionRequested,
        name,
        at=3700.5,
        producer="disruption",
        method="delete",
        reason="kubectl delete nodeclaim",
        node="worker-1",
    )
    story.claim_event(
        ev.NodeClaimDrained, name, at=3710.5, producer="disruption", node="worker-1", evicted=("default/big",)
    )
    story.claim_event(
        ev.NodeClaimTerminated,
        name,
        at=3712.5,
        reason="node deleted",
        machine="c3-16-abcde",
    )

    explanation = explain_nodeclaim(name, story.log)
    assert explanation.phase == "Terminated"
    steps = [(s.step, s.since_planned.total_seconds() if s.since_planned else 0.0) for s in explanation.life]
    assert steps == [
        ("Planned", 0.0),
        ("LaunchFailed", 0.5),
        ("Launched", 2.0),
        ("Registered", 60.0),
        ("Initialized", 70.0),
        ("DisruptionRequested", 3690.0),
        ("Drained", 3700.0),
        ("Terminated", 3702.0),
    ]
    text = explanation.text()
    assert "c3-8 could not be launched: MachineDeployment default/c3-8 is at its max size 10" in text
    assert "launched as fallback c3-16 instead of c3-8" in text
    assert "node worker-1 joined (openstack:///m-1)" in text
    assert "+1m00s" in text and "+1h01m" in text
    assert "1 pod(s) evicted: default/big" in text
    assert "node deleted (machine c3-16-abcde removed)" in text
    # a delete by a user has no decision behind it, and the story says so
    assert "termination requested without a disruption decision: kubectl delete nodeclaim" in text
    life = text[text.index("Where it is in its life") :]
    assert life.index("LaunchFailed") < life.index("Launched ") < life.index("Terminated")


def test_an_abandoned_claim_and_the_claim_planned_again_for_its_pods() -> None:
    story, planned = field_case()
    name = planned.nodeclaim
    story.claim_event(
        ev.NodeClaimLaunchFailed,
        name,
        at=11,
        producer="launcher-capi",
        instance_type="c3-8",
        reason="quota exceeded",
        retryable=False,
    )
    abandoned = story.claim_event(
        ev.NodeClaimAbandoned,
        name,
        at=12,
        producer="scheduler",
        reason="no instance type could be launched: quota exceeded",
        pods=("default/big",),
    )
    assert isinstance(abandoned, ev.NodeClaimAbandoned)
    claims, _ = story.replan(abandoned, at=13)
    (again,) = claims
    assert again.nodeclaim != name

    first = explain_nodeclaim(name, story.log)
    assert first.phase == "Abandoned"
    assert "its pods go back to the scheduler: default/big" in first.text()
    second = explain_nodeclaim(again.nodeclaim, story.log)
    assert f"Planned again for the pods of claim {name}, which was abandoned" in second.text()
    assert second.origin is not None and second.origin.replan_of == name


def test_disruption_decisions_that_chose_and_that_blocked_the_claim() -> None:
    story, planned = field_case()
    name = planned.nodeclaim
    assert "no disruption decision has named it" in explain_nodeclaim(name, story.log).text()
    story.decision(
        at=100,
        reason="empty for 30s (consolidateAfter)",
        budget="default: nodes 10% = 1 node",
        blocked=(ev.BlockedCandidate(name, "worker-1", "pod default/big has karpenter.sh/do-not-disrupt"),),
    )
    decision = story.decision(
        at=200,
        reason="empty for 30s (consolidateAfter)",
        budget="default: nodes 10% = 1 node",
        candidates=(
            ev.DisruptionCandidate(name, "worker-1", "default", "no pods but DaemonSets"),
            ev.DisruptionCandidate("default-other", "worker-2", "default", "empty"),
        ),
    )
    story.claim_event(
        ev.DisruptionRequested,
        name,
        at=201,
        producer="disruption",
        method="emptiness",
        reason="empty",
        node="worker-1",
        decision_id=decision.id,
    )

    explanation = explain_nodeclaim(name, story.log)
    roles = [(d.role, d.method) for d in explanation.disruptions]
    assert roles == [("blocked", "emptiness"), ("candidate", "emptiness")]  # the request is explained by #2
    text = explanation.text()
    assert "emptiness: considered but blocked: pod default/big has karpenter.sh/do-not-disrupt" in text
    assert (
        "emptiness: chosen for disruption: empty for 30s (consolidateAfter): no pods but DaemonSets "
        "(allowed by budget default: nodes 10% = 1 node)"
    ) in text
    assert explanation.phase == "Disrupting"
    # the other candidate's decision does not leak into a claim it does not name
    other = explain_nodeclaim("default-other", story.log)
    assert [d.role for d in other.disruptions] == ["candidate"]


def test_json_output_carries_the_same_story() -> None:
    story, planned = field_case()
    story.claim_event(
        ev.NodeClaimLaunched,
        planned.nodeclaim,
        at=12,
        producer="launcher-capi",
        instance_type="c3-8",
        provider_id="openstack:///m-1",
    )
    body = json.loads(json.dumps(explain_nodeclaim(planned.nodeclaim, story.log).to_json()))
    assert body["found"] is True and body["phase"] == "Launched"
    assert body["choice"]["instanceType"] == "c3-8" and body["choice"]["pricePerHour"] == 0.1
    assert [(c["instanceType"], c["outcome"]) for c in body["considered"]] == [
        ("c3-4", "lost"),
        ("c3-8", "chosen"),
        ("c3-16", "fallback"),
    ]
    assert body["origin"]["batchId"] == "batch-1" and body["pods"] == ["default/big"]
    assert [s["step"] for s in body["life"]] == ["Planned", "Launched"]
    assert body["life"][1]["sincePlannedSeconds"] == 1.5
    assert body["disruptionSummary"] == "no disruption decision has named it"


def test_a_claim_not_in_the_log_says_how_much_was_searched() -> None:
    story, _ = field_case()
    explanation = explain_nodeclaim("default-nope", story.log)
    assert not explanation.found
    assert (
        explanation.text() == f"no NodeClaim named default-nope in the log (searched {len(story.log)} events)"
    )
    assert explanation.to_json()["found"] is False
    with pytest.raises(ValueError, match="name is empty"):
        explain_nodeclaim("", story.log)


def test_a_claim_whose_plan_aged_out_still_tells_what_is_left() -> None:
    story = Story()
    story.claim_event(ev.NodeClaimTerminated, "default-old", at=5, reason="node deleted")
    explanation = explain_nodeclaim("default-old", story.log)
    assert explanation.found and explanation.phase == "Terminated"
    assert "its NodeClaimPlanned is not in the log" in explanation.text()


def test_a_step_the_services_refuse_is_noted_not_folded() -> None:
    """A forged launch (written by a service that does not own the step) is dead-lettered by the services:
    explain says so, and the claim's phase and life stay as the services see them."""
    story, planned = field_case()
    name = planned.nodeclaim
    story.claim_event(
        ev.NodeClaimLaunched,
        name,
        at=12,
        producer="pod-watcher",
        instance_type="c3-16",
        provider_id="openstack:///forged",
    )
    explanation = explain_nodeclaim(name, story.log)
    assert explanation.phase == "Planned"
    assert [s.step for s in explanation.life] == ["Planned"]
    (note,) = explanation.notes
    assert note.startswith(f"#{story.log[-1].sequence} refused by the services (not part of its story):")
    assert "NodeClaimLaunched from pod-watcher: only launcher-* may write this step" in note
    assert f"Notes\n  {note}" in explanation.text()


def test_the_event_message_fits_a_kubernetes_event_and_keeps_the_point() -> None:
    story, planned = field_case()
    name = planned.nodeclaim
    story.claim_event(
        ev.NodeClaimLaunched,
        name,
        at=12,
        producer="launcher-capi",
        instance_type="c3-8",
        provider_id="openstack:///m-1",
    )
    message = nodeclaim_event_message(explain_nodeclaim(name, story.log))
    assert len(message) <= MAX_EVENT_MESSAGE
    assert "c3-8 won on price" in message and "c3-4 cheaper, but did not fit: too small" in message
    assert "Launched +1.5s" in message and "no disruption decision has named it" in message

    # a long story: a hundred blocked decisions still leave room for why the claim exists
    for i in range(100):
        story.decision(
            at=100 + i,
            reason=f"empty for {30 + i}s",
            blocked=(ev.BlockedCandidate(name, "worker-1", f"budget nodes 0 in window {i}"),),
        )
    long_message = nodeclaim_event_message(explain_nodeclaim(name, story.log))
    assert len(long_message) <= MAX_EVENT_MESSAGE
    assert (
        "c3-8 won on price" in long_message
        and "Disruption: emptiness: considered but blocked" in long_message
    )
    assert "…" in long_message


def test_a_service_can_explain_the_plan_it_is_about_to_append() -> None:
    """The scheduler attaches the message to its NodeClaim before the log has sequences for the events."""
    story, planned = field_case()
    unsequenced = [LoggedEvent(0, r.recorded_at, r.event) for r in story.log]
    message = nodeclaim_event_message(explain_nodeclaim(planned.nodeclaim, unsequenced))
    assert "answers batch batch-1" in message and "c3-8 won on price" in message
