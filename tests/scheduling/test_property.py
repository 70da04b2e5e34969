"""Property: every plan is valid under an independent checker (tests/scheduling/checker.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenon.core import solve
from tests.scheduling.builders import (
    anti_affinity,
    catalog,
    daemon_set,
    itype,
    node,
    node_pool,
    parse,
    pod,
    preferred,
    spread,
)
from tests.scheduling.checker import violations

ZONES = ("z1", "z2", "z3")


@st.composite
def rules(draw: st.DrawFn, app: str) -> dict[str, Any]:
    """A pod's rules about its peers (``app`` their label), or none."""
    kind = draw(st.integers(0, 8))
    if kind == 0:
        return {"affinity": anti_affinity({"app": app})}
    if kind == 1:
        return {"topologySpreadConstraints": spread({"app": app}, "topology.kubernetes.io/zone")}
    if kind == 2:
        skew = draw(st.integers(1, 2))
        return {"topologySpreadConstraints": spread({"app": app}, "kubernetes.io/hostname", max_skew=skew)}
    if kind == 3:  # soft rules: they may be relaxed, never at the cost of a hard one
        key = draw(st.sampled_from(["topology.kubernetes.io/zone", "kubernetes.io/hostname"]))
        return {"affinity": preferred({"app": app}, key, draw(st.integers(1, 100)), draw(st.booleans()))}
    if kind == 4:
        return {
            "topologySpreadConstraints": spread(
                {"app": app}, "topology.kubernetes.io/zone", when="ScheduleAnyway"
            )
        }
    return {}


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    n_types = draw(st.integers(1, 4))
    types = []
    for i in range(n_types):
        cpu = draw(st.sampled_from([1, 2, 4, 8]))
        gib = cpu * draw(st.sampled_from([1, 2, 4]))
        arch = draw(st.sampled_from(["amd64", "arm64"]))
        price = round(draw(st.floats(0.01, 1.0)), 4)
        types.append(
            itype(
                f"t{i}",
                cpu,
                gib,
                price,
                zones=ZONES,
                capacity_types=("on-demand", "spot"),
                labels={"kubernetes.io/arch": arch},
                overhead_cpu="100m",
            )
        )
    tainted = draw(st.booleans())
    docs: list[dict[str, Any]] = [
        node_pool(taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if tainted else None),
        catalog(*types),
    ]
    for n in range(draw(st.integers(0, 2))):
        zone = draw(st.sampled_from(ZONES))
        taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if draw(st.booleans()) else []
        docs.append(
            node(
                f"n{n}",
                draw(st.sampled_from(["1", "2", "4"])),
                draw(st.sampled_from(["2Gi", "4Gi"])),
                labels={"topology.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64"},
                taints=taints,
            )
        )
        for b in range(draw(st.integers(0, 2))):
            docs.append(
                pod(
                    f"bound-{n}-{b}",
                    "250m",
                    "256Mi",
                    {"app": draw(st.sampled_from(["a", "b"]))},
                    nodeName=f"n{n}",
                )
            )
    if draw(st.booleans()):
        docs.append(
            daemon_set(draw(st.sampled_from(["50m", "200m"])), "64Mi", tolerations=[{"operator": "Exists"}])
        )
    for i in range(draw(st.integers(1, 14))):
        spec: dict[str, Any] = {}
        labels = {"app": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 4)) == 0:
            spec["nodeSelector"] = {"kubernetes.io/arch": draw(st.sampled_from(["amd64", "arm64"]))}
        if draw(st.booleans()):
            spec["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
            ]
        spec.update(draw(rules(labels["app"])))
        request = draw(st.sampled_from(["100m", "250m", "500m", "1000m", "1500m", "3000m"]))
        mem = draw(st.sampled_from(["64Mi", "256Mi", "1024Mi", "3072Mi"]))
        docs.append(pod(f"p{i}", request, mem, labels, **spec))
    return docs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_plan_passes_the_independent_checker(docs: list[dict[str, Any]]) -> None:
    out = solve(parse(*docs)).to_json()
    assert violations(docs, out) == []
    for u in out["unschedulable"]:
        assert u["reason"]


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_same_input_same_plan(docs: list[dict[str, Any]]) -> None:
    assert solve(parse(*docs)).to_json() == solve(parse(*docs)).to_json()


@st.composite
def running_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Nodes in three zones and the pods running on them, with rules of their own (hostname and zone
    spreads, anti-affinity, host ports), in two namespaces."""
    docs: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        zone = ZONES[n % 3]
        docs.append(node(f"r{n}", "4", "8Gi", labels={"topology.kubernetes.io/zone": zone}))
        for b in range(draw(st.integers(0, 4))):
            app = draw(st.sampled_from(["a", "b"]))
            spec = draw(rules(app))
            if draw(st.integers(0, 5)) == 0:
                spec["containers"] = [
                    {"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {}}
                ]
            namespace = draw(st.sampled_from(["default", "other"]))
            docs.append(
                pod(f"run-{n}-{b}", "250m", "256Mi", {"app": app}, namespace, nodeName=f"r{n}", **spec)
            )
    return docs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), running_pods(), st.randoms(use_true_random=False))
def test_the_order_running_pods_come_in_does_not_change_the_plan(
    docs: list[dict[str, Any]], running: list[dict[str, Any]], rnd: Any
) -> None:
    inputs = parse(*docs, *running)
    bound = [p for p in inputs.pods if p.node_name]
    rnd.shuffle(bound)
    shuffled = replace(inputs, pods=(*bound, *(p for p in inputs.pods if not p.node_name)))
    assert solve(shuffled).to_json() == solve(inputs).to_json()
