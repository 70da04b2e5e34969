"""What a pool's disruption budget counts, kept event by event (:mod:`tenon.services.disruption.load`): it
must agree with a walk over every claim after every event, on a written story and on generated ones
(``TENON_FUZZ_EXAMPLES`` examples, default 25)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto import events as ev
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.load import PoolLoad, pool_load, walked_load
from tenon.services.disruption.projection_view import DisruptionState
from tests.disruption.test_budgets_and_emptiness import T0, app_pod, cluster, envelope, nodepool
from tests.support.events import build_event

EXAMPLES = int(os.environ.get("TENON_FUZZ_EXAMPLES", "25"))


def node(name: str, ready: str = "True", **metadata: Any) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": "default"}
    return {
        "metadata": {"name": name, "labels": labels, **metadata},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def claim_event(step: str, index: int, event_id: str, at: Any) -> ev.Event:
    """Step ``step`` of claim ``default-<index>``'s story, on Node ``node-<index>``."""
    claim, node_name, provider = f"default-{index}", f"node-{index}", f"p://{index}"
    fields: dict[str, Any] = {
        "planned": {
            "nodepool": "default",
            "node_class": "default",
            "choice": ev.InstanceChoice("c3-4", None, "on-demand", 0.05),
            "fallbacks": (),
            "pods": (),
            "requirements": (),
            "labels": {},
        },
        "launched": {"provider_id": provider, "instance_type": "c3-4"},
        "registered": {"node": node_name, "provider_id": provider},
        "initialized": {"node": node_name},
        "requested": {"method": "emptiness", "reason": "empty", "node": node_name},
        "drained": {"node": node_name},
        "terminated": {"reason": "gone"},
    }[step]
    kind = {
        "planned": ev.NodeClaimPlanned,
        "launched": ev.NodeClaimLaunched,
        "registered": ev.NodeClaimRegistered,
        "initialized": ev.NodeClaimInitialized,
        "requested": ev.DisruptionRequested,
        "drained": ev.NodeClaimDrained,
        "terminated": ev.NodeClaimTerminated,
    }[step]
    return build_event(kind, event_id, at=at, nodeclaim=claim, **fields)  # type: ignore[arg-type]


def node_event(change: str, index: int, event_id: str, at: Any) -> ev.Event:
    name = f"node-{index}"
    observed = {
        "ready": ("changed", node(name)),
        "not-ready": ("changed", node(name, "False")),
        "deleting": ("changed", node(name, deletionTimestamp="2026-11-29T10:00:00Z")),
        "removed": ("removed", {"metadata": {"name": name}}),
    }
    kind, obj = observed[change]
    return ev.NodeObserved(**{**envelope(event_id), "decided_at": at}, change=kind, node=obj)  # type: ignore[arg-type]


def test_the_budget_load_follows_each_claim_and_node_event_as_a_fresh_count_would() -> None:
    """A claim's whole way out and a new claim's way in: the counts after each event."""
    decider = DisruptionDecider()
    state = cluster(4, nodepool())
    assert pool_load(state) == {"default": PoolLoad(total=4, disrupting=0)}  # the index is made here
    pod = ev.BoundPodObserved(
        **envelope("pod"), change="added", pod=app_pod("a") | {"spec": {"nodeName": "node-0"}}
    )
    story: list[tuple[ev.Event, tuple[int, int]]] = [
        (pod, (4, 0)),
        (node_event("not-ready", 1, "nr", T0), (4, 1)),
        (node_event("ready", 1, "ok", T0), (4, 0)),
        (claim_event("requested", 2, "dr", T0), (4, 1)),
        (claim_event("drained", 2, "dd", T0), (4, 1)),
        (node_event("deleting", 3, "del", T0), (4, 2)),
        (node_event("removed", 2, "gone", T0), (4, 2)),
        (claim_event("terminated", 2, "dt", T0), (3, 1)),
        (claim_event("planned", 4, "p4", T0), (3, 1)),
        (claim_event("launched", 4, "l4", T0), (3, 1)),
        (claim_event("registered", 4, "r4", T0), (3, 1)),
        (claim_event("initialized", 4, "i4", T0), (4, 2)),  # counted from then; no Node observed yet: as gone
        (node_event("ready", 4, "n4", T0), (4, 1)),
    ]
    for event, (total, disrupting) in story:
        state = decider.evolve(state, event)
        assert pool_load(state) == {"default": PoolLoad(total, disrupting)}, event.id
        assert pool_load(state) == walked_load(state.projection), event.id


STEPS = ("planned", "launched", "registered", "initialized", "requested", "drained", "terminated")
NODE_CHANGES = ("ready", "not-ready", "deleting", "removed")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(STEPS + NODE_CHANGES),
            st.integers(min_value=0, max_value=5),
            st.sampled_from([0, 0, 0, 40]),  # minutes later: an ended claim is forgotten an hour after
        ),
        max_size=80,
    )
)
def test_the_budget_load_kept_by_events_agrees_with_a_walk_after_every_event(
    moves: list[tuple[str, int, int]],
) -> None:
    """Events in any order, the impossible ones refused (and changing nothing), time passing so that ended
    claims are forgotten: after each, the kept counts are a fresh walk's."""
    decider = DisruptionDecider()
    state = cluster(3, nodepool())
    pool_load(state)
    at = T0
    for number, (move, index, minutes) in enumerate(moves):
        at += timedelta(minutes=minutes)
        make = claim_event if move in STEPS else node_event
        try:
            state = decider.evolve(state, make(move, index, f"e{number}", at))
        except ImpossibleStory:
            pass
        assert pool_load(state) == walked_load(state.projection)
        assert pool_load(DisruptionState(state.projection)) == walked_load(state.projection)
