"""``explain_pod``: the batches that held a pod, what the scheduler's answers did with it, where it ended."""

from __future__ import annotations

import json

import pytest

from proto import events as ev
from tenon.domain.explain import explain_pod
from tests.explain.story import Story, pending_pod


def test_a_pod_that_got_a_new_claim_and_ended_bound_on_its_node() -> None:
    story = Story()
    big = pending_pod("big", "3")
    batch = story.pending([big], at=10)
    (planned,), _ = story.plan(batch, at=11)
    story.claim_event(
        ev.NodeClaimLaunched,
        planned.nodeclaim,
        at=40,
        provider_id="openstack:///m-1",
        instance_type="c3-8",
    )
    story.claim_event(
        ev.NodeClaimRegistered,
        planned.nodeclaim,
        at=60,
        producer="scheduler",
        node="worker-1",
        provider_id="openstack:///m-1",
    )
    story.bound(big, "worker-1", at=75)

    explanation = explain_pod("default/big", story.log)
    (held,) = explanation.batches
    assert held.outcome == "new-claim" and held.nodeclaim == planned.nodeclaim
    assert held.claim is not None and held.claim.phase == "Registered"
    assert explanation.bound_node == "worker-1"
    text = explanation.text()
    assert (
        f"batch batch-1 (#5 at 2026-11-29T10:00:10Z): a new claim {planned.nodeclaim}: c3-8 at $0.1000/h"
        in text
    )
    assert "ended: bound to node worker-1 (#" in text  # a phase is told only when the pod finished
    # the claim's own explanation follows, with the price verdicts
    assert f"NodeClaim {planned.nodeclaim}: Registered" in text and "c3-8 won on price" in text


def test_a_pod_placed_on_room_an_in_flight_claim_already_has() -> None:
    story = Story()
    batch = story.pending([pending_pod("big", "3")], at=10)
    (planned,), _ = story.plan(batch, at=11)
    # 4 vCPU - 100m DaemonSet - 3 vCPU leaves 900m: a 500m pod fits on the claim that is still launching
    second = story.pending([pending_pod("small", "500m")], at=20)
    claims, answer = story.plan(second, at=21)
    assert claims == [] and answer.existing

    explanation = explain_pod("default/small", story.log)
    (held,) = explanation.batches
    assert held.outcome == "existing"
    assert f"fits on existing room: in-flight NodeClaim {planned.nodeclaim}" in explanation.text()
    assert "ended: no BoundPodObserved: not bound to a node (yet)" in explanation.text()


def test_an_unschedulable_pod_gets_the_reason_per_nodepool() -> None:
    story = Story()
    batch = story.pending([pending_pod("huge", "100")], at=10)
    story.plan(batch, at=11)

    explanation = explain_pod("default/huge", story.log)
    (held,) = explanation.batches
    assert held.outcome == "unschedulable"
    assert set(held.reasons) == {"default"}
    text = explanation.text()
    assert "NodePool default: no instance type has cpu=100 free after DaemonSets (largest: cpu=7900m)" in text
    body = json.loads(json.dumps(explanation.to_json()))
    assert body["batches"][0]["outcome"] == "unschedulable" and body["boundNode"] is None


def test_a_pod_whose_claim_was_abandoned_shows_both_batches() -> None:
    story = Story()
    batch = story.pending([pending_pod("big", "3")], at=10)
    (first,), _ = story.plan(batch, at=11)
    abandoned = story.claim_event(
        ev.NodeClaimAbandoned,
        first.nodeclaim,
        at=300,
        producer="scheduler",
        reason="not registered within 5m",
        pods=("default/big",),
    )
    assert isinstance(abandoned, ev.NodeClaimAbandoned)
    (second,), _ = story.replan(abandoned, at=301)

    explanation = explain_pod("default/big", story.log)
    assert [(b.batch_id, b.outcome, b.nodeclaim) for b in explanation.batches] == [
        ("batch-1", "new-claim", first.nodeclaim),
        (f"replan-{first.nodeclaim}", "new-claim", second.nodeclaim),
    ]
    assert explanation.batches[0].claim is not None and explanation.batches[0].claim.phase == "Abandoned"


def test_a_batch_not_answered_yet_and_a_pod_not_in_the_log() -> None:
    story = Story()
    story.pending([pending_pod("waiting", "1")], at=10)
    (held,) = explain_pod("default/waiting", story.log).batches
    assert held.outcome == "not-answered"

    missing = explain_pod("default/ghost", story.log)
    assert not missing.found
    assert missing.text() == f"no pod named default/ghost in the log (searched {len(story.log)} events)"
    with pytest.raises(ValueError, match="expected NAMESPACE/NAME"):
        explain_pod("ghost", story.log)


def test_an_invalid_pod_says_why_it_could_not_be_read() -> None:
    story = Story()
    batch = story.pending([pending_pod("typo", "three")], at=10)
    story.plan(batch, at=11)
    (held,) = explain_pod("default/typo", story.log).batches
    assert held.outcome == "unschedulable" and held.reasons == {}
    assert held.detail.startswith("unschedulable (#6): invalid pod:") and "three" in held.detail
