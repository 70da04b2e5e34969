"""The price floor a consolidation probe checks before its solve: never above what the core's repacking
costs (property-based, on generated clusters: ``TENON_FUZZ_EXAMPLES`` examples, default 25), and tight
enough on a well packed cluster that a round decides nothing without a solve, as it did with them."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenon.domain.disruption.candidates import candidates
from tenon.domain.disruption.rounds import decide_round
from tenon.domain.disruption.simulation import Repacker
from tenon.domain.disruption.whatif import Cluster
from tests.disruption.clusters import NOW, SIZES, catalog, node, nodepool, pod

EXAMPLES = int(os.environ.get("TENON_FUZZ_EXAMPLES", "25"))


@st.composite
def clusters(draw: Any) -> list[dict[str, Any]]:
    types = draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=4, unique=True))
    objects: list[dict[str, Any]] = [nodepool(budgets=[{"nodes": "100%"}]), catalog(types)]
    for i in range(draw(st.integers(min_value=1, max_value=6))):
        name, cpu, gib, _ = draw(st.sampled_from(SIZES))
        objects.append(node(f"n{i}", name, cpu, gib))
        room, memory = cpu * 1000, gib * 1024
        for j in range(draw(st.integers(min_value=0, max_value=8))):
            millis = draw(st.sampled_from([0, 100, 250, 400, 790, 1000, 1500, 3000]))
            mib = draw(st.sampled_from([0, 128, 512, 1024, 3000, 6000]))
            if millis > room or mib > memory:
                break
            room, memory = room - millis, memory - mib
            objects.append(pod(f"p{i}-{j}", f"n{i}", f"{millis}m", f"{mib}Mi"))
    for j in range(draw(st.integers(min_value=0, max_value=2))):
        objects.append(pod(f"pending-{j}", None, f"{draw(st.sampled_from([100, 1000]))}m", "256Mi"))
    return objects


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_the_floor_is_never_above_what_the_repacking_costs(objects: list[dict[str, Any]], data: Any) -> None:
    view = Cluster.of(objects, NOW).view()
    found = [c for c in candidates(view)[0] if c.reschedulable]
    if not found:
        return
    chosen = data.draw(st.lists(st.sampled_from(found), min_size=1, unique_by=lambda c: c.name))
    repacker = Repacker(view)
    outcome = repacker.simulate(chosen)
    if outcome.feasible:
        assert repacker.price_floor(chosen) <= outcome.price + 1e-12, outcome


def full_cluster(nodes: int) -> list[dict[str, Any]]:
    """c-8 nodes holding ten 790m pods each: any repacking costs what the nodes do."""
    objects: list[dict[str, Any]] = [nodepool(budgets=[{"nodes": "100%"}]), catalog(SIZES)]
    for i in range(nodes):
        objects.append(node(f"n{i}", "c-8", 8, 16))
        objects += [pod(f"p{i}-{j}", f"n{i}", "790m", "256Mi") for j in range(10)]
    return objects


def test_a_well_packed_cluster_is_left_as_it_is_without_a_solve() -> None:
    view = Cluster.of(full_cluster(6), NOW).view()
    repacker = Repacker(view)
    found = candidates(view)[0]
    assert repacker.price_floor(found) >= sum(c.price for c in found) - 1e-12
    played = decide_round(view)
    assert played.command is None and played.solves == 0


def test_free_room_elsewhere_lowers_the_floor_to_nothing() -> None:
    objects = [*full_cluster(3), node("spare", "c-8", 8, 16)]
    view = Cluster.of(objects, NOW).view()
    one = [c for c in candidates(view)[0] if c.node_name == "n0"]
    assert Repacker(view).price_floor(one) == 0.0
