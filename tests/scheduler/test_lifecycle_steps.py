"""A Node Ready by the time its claim is registered is initialized with the same decision, unless a startup
taint of its NodePool still has to go: one hop (the Node's next observation) less between a machine and its
pods."""

from __future__ import annotations

from typing import Any

from proto import events as ev
from tenon.domain.projection import ClusterProjection
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import build_event

CLAIM = "default-abcde"


def joined(*, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a", "labels": {}},
        "spec": {
            "providerID": "p://a",
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def launched_claim(*, startup_taints: tuple[dict[str, Any], ...] = ()) -> ClusterProjection:
    projection = ClusterProjection()
    planned = build_event(
        ev.NodeClaimPlanned,
        "planned",
        nodeclaim=CLAIM,
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={"karpenter.sh/nodepool": "default"},
        startup_taints=startup_taints,
    )
    launched = build_event(
        ev.NodeClaimLaunched, "launched", nodeclaim=CLAIM, provider_id="p://a", instance_type="c3-8"
    )
    projection.apply(planned, 1)
    projection.apply(launched, 2)
    return projection


def decisions_on_join(projection: ClusterProjection, node: dict[str, Any]) -> list[str]:
    observed = build_event(ev.NodeObserved, "joined", change="added", node=node)
    projection.apply(observed, 3)
    return [type(d).__name__ for d in SchedulerDecider().decide(projection, observed)]


def test_a_node_ready_when_it_joins_is_registered_and_initialized_together() -> None:
    steps = decisions_on_join(launched_claim(), joined(ready=True))
    assert steps == ["NodeClaimRegistered", "NodeClaimInitialized"]


def test_a_node_not_ready_yet_is_only_registered() -> None:
    assert decisions_on_join(launched_claim(), joined(ready=False)) == ["NodeClaimRegistered"]


def test_a_startup_taint_the_registration_puts_on_keeps_it_from_being_initialized() -> None:
    agent = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    steps = decisions_on_join(launched_claim(startup_taints=(agent,)), joined(ready=True))
    assert steps == ["NodeClaimRegistered"]
