"""Property-based: on generated clusters, no disruption round breaks a PodDisruptionBudget, a
``do-not-disrupt`` or a budget, loses a pod, or moves a pod off a node that stays; and consolidation never
raises the price. Clusters are drawn by hypothesis (``TENON_FUZZ_EXAMPLES`` examples, default 25)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenon.domain.disruption.whatif import run
from tests.disruption.clusters import NOW, SIZES, catalog, node, nodepool, pdb, pod

EXAMPLES = int(os.environ.get("TENON_FUZZ_EXAMPLES", "25"))


@st.composite
def clusters(draw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    budget = draw(st.integers(min_value=0, max_value=4))
    objects: list[dict[str, Any]] = [nodepool(budgets=[{"nodes": str(budget)}]), catalog(SIZES)]
    facts: dict[str, Any] = {"budget": budget, "guarded": set(), "pdb": {}, "pods": {}}
    for i in range(draw(st.integers(min_value=1, max_value=7))):
        name, cpu, gib, _ = draw(st.sampled_from(SIZES))
        node_name = f"n{i}"
        objects.append(node(node_name, name, cpu, gib))
        room = cpu * 1000
        for j in range(draw(st.integers(min_value=0, max_value=4))):
            millis = draw(st.sampled_from([100, 250, 500, 1000]))
            if millis > room:
                break
            room -= millis
            app = draw(st.sampled_from(["web", "api", "db"]))
            guarded = draw(st.booleans()) and draw(st.booleans())
            annotations = {"karpenter.sh/do-not-disrupt": "true"} if guarded else None
            key = f"default/p{i}-{j}"
            objects.append(
                pod(
                    f"p{i}-{j}",
                    node_name,
                    f"{millis}m",
                    "256Mi",
                    labels={"app": app},
                    annotations=annotations,
                )
            )
            facts["pods"][key] = (node_name, app)
            if guarded:
                facts["guarded"].add(key)
        if draw(st.booleans()):
            objects.append(pod(f"agent-{i}", node_name, "50m", "64Mi", owner="DaemonSet"))
    for app in ("web", "api", "db"):
        if draw(st.booleans()):
            allowed = draw(st.integers(min_value=0, max_value=2))
            objects.append(pdb(app, {"app": app}, allowed))
            facts["pdb"][app] = allowed
    return objects, facts


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_round_breaks_a_pdb_a_do_not_disrupt_or_a_budget(
    cluster: tuple[list[dict[str, Any]], Any],
) -> None:
    objects, facts = cluster
    result = run(objects, NOW, rounds=4)
    where = {key: node_name for key, (node_name, _) in facts["pods"].items()}
    price = result["priceBefore"]
    for played in result["rounds"]:
        assert played["method"] in ("emptiness", "consolidation"), played
        assert len(played["candidates"]) <= facts["budget"], played
        moved = Counter(facts["pods"][key][1] for key in played["podsMoved"] if key in facts["pods"])
        for app, count in moved.items():
            assert count <= facts["pdb"].get(app, count), (app, played)
        gone = set(played["candidates"])
        for key in facts["guarded"]:
            assert where[key] not in gone, (key, played)
        for key, node_name in list(where.items()):
            if node_name in gone:
                assert key in played["podsMoved"], (key, played)
        destinations = {r["name"] for r in played["replacements"]}
        assert played["savingsPerHour"] > 0 or not destinations
        price -= played["savingsPerHour"]
        # follow the pods to where the round put them
        final = {p: n["name"] for n in result["finalNodes"] for p in n["pods"]}
        for key in played["podsMoved"]:
            where[key] = final.get(key, where[key])
    final = {p: n["name"] for n in result["finalNodes"] for p in n["pods"]}
    assert set(facts["pods"]) <= set(final), "a pod was lost"
    assert result["finalPricePerHour"] <= result["priceBefore"] + 1e-9
    assert abs(result["finalPricePerHour"] - price) < 1e-6
