"""Karpenter's scheduling semantics, one test per behaviour (issue 10, divergences 1-10).

Each case is derived from Karpenter's own tests (kubernetes-sigs/karpenter, ``pkg/controllers/provisioning/
suite_test.go`` and ``pkg/controllers/provisioning/scheduling/{suite,topology,instance_selection}_test.go``);
the comment above each names the test it comes from. Where tenon deliberately decides better, the docstring
says so (docs/simulate.md lists those differences too).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tenon.core import InputError
from tests.scheduling.builders import (
    capi_pool,
    catalog,
    daemon_set,
    itype,
    machine_deployment,
    node,
    node_claim,
    node_pool,
    plan_for,
    pod,
    spread,
)

ZONE = "topology.kubernetes.io/zone"
ARCH = "kubernetes.io/arch"
ZONES = ("z1", "z2", "z3")


def placed_zones(plan):
    return Counter(nc.zone for nc in plan.node_claims for _ in nc.pods)


# -- 1. DaemonSet requests always count ----------------------------------------------------------------------


def test_a_type_its_daemonsets_overflow_is_never_bought_even_for_a_pod_asking_nothing():
    # provisioning/suite_test.go "should not schedule if daemonset overhead is too large" and
    # "should account for daemonsets": daemon overhead is part of every fit.
    cat = catalog(itype("two", 2, 4, 0.1), itype("four", 4, 8, 0.2))
    plan = plan_for(node_pool(), cat, daemon_set("3"), pod("nothing", "0", "0"))
    assert [(nc.instance_type, nc.pods) for nc in plan.node_claims] == [("four", ("default/nothing",))]

    plan = plan_for(node_pool(), cat, daemon_set("10000", "10000Gi"), pod("p"))
    assert plan.node_claims == ()
    assert "too small for the DaemonSets" in plan.unschedulable[0].reason


def test_daemonset_init_container_peak_counts_against_the_type():
    # provisioning/suite_test.go "should not schedule if initContainer resources are too large" applied to
    # DaemonSets: a DaemonSet pod's requests follow the init-container max rule like any pod's.
    agent = daemon_set("100m", initContainers=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}])
    cat = catalog(itype("two", 2, 4, 0.1), itype("four", 4, 8, 0.2))
    plan = plan_for(node_pool(), cat, agent, pod("p", "100m"))
    assert [nc.instance_type for nc in plan.node_claims] == ["four"]


# -- 2. minValues constrains each claim ----------------------------------------------------------------------


def test_min_values_holds_for_each_claim_so_two_pods_that_each_need_a_node_both_get_one():
    # scheduling/instance_selection_test.go "should schedule respecting the minValues from instance-type
    # requirements": each NodeClaim keeps at least minValues instance types, whatever the batch.
    req = [{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2}]
    cat = catalog(itype("s", 2, 4, 0.1), itype("m", 4, 8, 0.2), itype("l", 8, 16, 0.4))
    plan = plan_for(node_pool(requirements=req), cat, pod("a", "3"), pod("b", "3"))
    assert plan.unschedulable == ()
    assert len(plan.node_claims) == 2  # both on one "l" would leave one type: minValues 2 unmet
    for nc in plan.node_claims:
        assert len({nc.instance_type, *nc.fallbacks}) >= 2


def test_min_values_that_no_claim_can_meet_leaves_the_pod_unschedulable_with_the_reason():
    # scheduling/instance_selection_test.go "schedule should fail if minimum number of InstanceTypes is not
    # met as per the minValues in the requirement".
    req = [{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3}]
    cat = catalog(itype("a", 2, 4, 0.1), itype("b", 4, 8, 0.2), itype("c", 1, 2, 0.05))
    plan = plan_for(node_pool(requirements=req), cat, pod("big", "1500m"))  # only a and b fit it
    assert plan.node_claims == () and "minValues 3" in plan.unschedulable[0].reason


# -- 3. nodes still starting ---------------------------------------------------------------------------------


def starting_node(taints, initialized: bool = False):
    labels = {"karpenter.sh/nodepool": "default", ZONE: "z1"}
    if initialized:
        labels["karpenter.sh/initialized"] = "true"
    return node("booting", "4", "8Gi", labels=labels, taints=taints)


def test_a_pod_waits_for_a_starting_node_with_an_ephemeral_not_ready_taint():
    # scheduling/suite_test.go "should assume pod will schedule to a node with ephemeral taint
    # node.kubernetes.io/not-ready:NoExecute when the node is uninitialized".
    not_ready = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    plan = plan_for(node_pool(), catalog(itype("t", 4, 8, 0.1)), starting_node(not_ready), pod("p"))
    assert plan.node_claims == () and [e.name for e in plan.existing] == ["booting"]
    # ... but not once the node is initialized: then the taint is real
    plan = plan_for(node_pool(), catalog(itype("t", 4, 8, 0.1)), starting_node(not_ready, True), pod("p"))
    assert plan.existing == () and len(plan.node_claims) == 1


def test_a_starting_node_is_judged_without_its_nodepools_startup_taints():
    # scheduling/suite_test.go "should assume pod will schedule to a tainted node with a custom startup taint"
    # and "should not assume pod will schedule to a node with startup taints after initialization".
    pool = node_pool()
    pool["spec"]["template"]["spec"]["startupTaints"] = [{"key": "cni", "effect": "NoSchedule"}]
    startup = [
        {"key": "cni", "effect": "NoSchedule"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    cat = catalog(itype("t", 4, 8, 0.1))
    plan = plan_for(pool, cat, starting_node(startup), pod("p"))
    assert [e.name for e in plan.existing] == ["booting"] and plan.node_claims == ()
    plan = plan_for(pool, cat, starting_node(startup[:1], initialized=True), pod("p"))
    assert plan.existing == () and len(plan.node_claims) == 1


def test_other_taints_of_a_starting_node_still_hold():
    # scheduling/suite_test.go "should not assume pod will schedule to a tainted node".
    taints = [{"key": "foo.com/taint", "value": "tainted", "effect": "NoSchedule"}]
    plan = plan_for(node_pool(), catalog(itype("t", 4, 8, 0.1)), starting_node(taints), pod("p"))
    assert plan.existing == () and len(plan.node_claims) == 1


def test_initialized_nodes_are_used_before_starting_ones():
    # scheduling/suite_test.go "should order initialized nodes for scheduling uninitialized nodes when all
    # other nodes are inflight": the starting node sorts first by name, the initialized one is used.
    plan = plan_for(
        node_pool(),
        catalog(itype("t", 4, 8, 0.1)),
        node("a-starting", "4", "8Gi", labels={"karpenter.sh/nodepool": "default"}),
        node(
            "b-ready",
            "4",
            "8Gi",
            labels={"karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true"},
        ),
        pod("p"),
    )
    assert [e.name for e in plan.existing] == ["b-ready"]


# -- 4. spreads judged per placement -------------------------------------------------------------------------


def zone_spread_pods(n: int, max_skew: int, when: str = "DoNotSchedule", cpu: str = "1"):
    return [
        pod(
            f"p{i}",
            cpu,
            "1Gi",
            labels={"app": "w"},
            topologySpreadConstraints=spread({"app": "w"}, ZONE, max_skew=max_skew, when=when),
        )
        for i in range(n)
    ]


def pool_in(*zones: str):
    return node_pool(requirements=[{"key": ZONE, "operator": "In", "values": list(zones)}])


def test_a_zone_the_pool_cannot_reach_caps_spreads_at_max_skew_above_it_not_at_one_node_per_zone():
    # scheduling/topology_test.go "should schedule to the non-minimum domain if its all that's available"
    # and "should only count running/scheduled pods with matching labels scheduled to nodes with a
    # corresponding domain": an existing node in z3 holds one pod; z1 and z2 may then hold up to
    # 1 + maxSkew each, judged as each pod is placed.
    cat = catalog(itype("small", 2, 4, 0.1, zones=ZONES), itype("big", 16, 32, 0.8, zones=ZONES))
    existing = node("n3", "1", "1Gi", labels={ZONE: "z3"})
    plan = plan_for(pool_in("z1", "z2"), cat, existing, *zone_spread_pods(10, max_skew=3))
    assert [e.name for e in plan.existing] == ["n3"]
    assert placed_zones(plan) == {"z1": 4, "z2": 4}
    (left,) = plan.unschedulable
    assert "topology spread" in left.reason and "DaemonSet" not in left.reason


def test_schedule_anyway_spread_is_honoured_while_it_can_be_then_relaxed():
    # scheduling/topology_test.go "should violate max-skew when unsat = schedule anyway (capacity type)":
    # ScheduleAnyway holds like DoNotSchedule until the pod would fail, then it is relaxed (Karpenter's
    # preference ladder), so every pod runs.
    cat = catalog(itype("small", 2, 4, 0.1, zones=ZONES))
    existing = node("n3", "1", "1Gi", labels={ZONE: "z3"})
    pods = zone_spread_pods(6, max_skew=1, when="ScheduleAnyway")
    plan = plan_for(pool_in("z1", "z2"), cat, existing, *pods)
    assert plan.unschedulable == ()
    assert sum(placed_zones(plan).values()) == 5


def test_karpenters_benchmark_mix_is_placed_whole():
    # scheduling/scheduling_benchmark_test.go makeDiversePods: zonal spreads whose selectors do not match the
    # pods' own labels, hostname spreads, zonal self-affinity, hostname anti-affinity; all are placed.
    from bench.scheduling_workloads import diverse_pods
    from bench.scheduling_workloads import node_pool as bench_pool
    from tenon.core.catalogs_generated import fake_400

    plan = plan_for(bench_pool(), fake_400(), *diverse_pods(300, seed=3))  # judged in the final state: 4 left
    assert plan.unschedulable == ()
    assert sum(len(nc.pods) for nc in plan.node_claims) == 300


# -- 5. NodePool template labels -----------------------------------------------------------------------------


def test_a_nodepool_template_label_restricts_the_zone_of_its_claims_and_of_spreads():
    # scheduling/topology_test.go "should respect NodePool zonal constraints (subset) with labels" and
    # "... with labels across NodePools".
    cat = catalog(itype("t", 8, 16, 0.1, zones=ZONES))
    pinned = node_pool(labels={ZONE: "z1"})
    plan = plan_for(pinned, cat, *zone_spread_pods(4, max_skew=1, cpu="100m"))
    assert placed_zones(plan) == {"z1": 4}
    other = node_pool("second", labels={ZONE: "z2"})
    plan = plan_for(pinned, other, cat, *zone_spread_pods(4, max_skew=1, cpu="100m"))
    assert placed_zones(plan) == {"z1": 2, "z2": 2}


def test_a_nodepool_template_label_conflicting_with_a_pods_selector_excludes_the_pool():
    # scheduling/suite_test.go "should not schedule pods that have conflicting node selectors".
    pool = node_pool(labels={"test-key": "test-value"})
    plan = plan_for(pool, catalog(itype("t", 2, 4, 0.1)), pod("p", nodeSelector={"test-key": "other"}))
    assert plan.node_claims == () and len(plan.unschedulable) == 1


# -- 6. multi-value custom requirements ----------------------------------------------------------------------


def test_a_multi_value_custom_requirement_gives_the_node_the_value_the_pod_needs():
    # scheduling/suite_test.go "should schedule pods that have matching requirements" with the values on the
    # NodePool: Karpenter narrows the claim to the value the pod asks for and labels the node with it.
    pool = node_pool(requirements=[{"key": "team", "operator": "In", "values": ["a", "b"]}])
    plan = plan_for(pool, catalog(itype("t", 2, 4, 0.1)), pod("p", nodeSelector={"team": "b"}), pod("q"))
    by_pod = {p: nc for nc in plan.node_claims for p in nc.pods}
    assert plan.unschedulable == ()
    team = [r for r in by_pod["default/p"].requirements if r.key == "team"]
    assert [(r.operator, r.values) for r in team] == [("In", ("b",))]


def test_pods_needing_different_values_of_one_key_get_different_nodes():
    pool = node_pool(requirements=[{"key": "team", "operator": "In", "values": ["a", "b"]}])
    pods = [pod("pa", nodeSelector={"team": "a"}), pod("pb", nodeSelector={"team": "b"})]
    plan = plan_for(pool, catalog(itype("t", 2, 4, 0.1)), *pods)
    assert len(plan.node_claims) == 2 and plan.unschedulable == ()


def test_spread_over_a_nodepools_custom_key_uses_every_value():
    # scheduling/topology_test.go "should balance pods across NodePool requirements": 20 pods spread over
    # capacity.spread.4-1 values 2..5 (spot pool) and 1 (on-demand pool) end 4 per value.
    key = "capacity.spread.4-1"
    spot = node_pool(
        "spot",
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": key, "operator": "In", "values": ["2", "3", "4", "5"]},
        ],
    )
    on_demand = node_pool(
        "on-demand",
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": key, "operator": "In", "values": ["1"]},
        ],
    )
    cat = catalog(itype("t", 2, 4, 0.1, capacity_types=("spot", "on-demand")))
    pods = [
        pod(f"p{i}", labels={"app": "s"}, topologySpreadConstraints=spread({"app": "s"}, key))
        for i in range(20)
    ]
    plan = plan_for(spot, on_demand, cat, *pods)
    assert plan.unschedulable == ()
    values: Counter[str] = Counter()
    for nc in plan.node_claims:
        value = next(r.values[0] for r in nc.requirements if r.key == key)
        values[value] += len(nc.pods)
    assert sorted(values.values()) == [4, 4, 4, 4, 4]
    assert Counter(nc.capacity_type for nc in plan.node_claims for _ in nc.pods) == {
        "spot": 16,
        "on-demand": 4,
    }


# -- 7. self pod affinity larger than a node ---------------------------------------------------------------


def test_self_affinity_larger_than_a_node_places_the_pods_that_fit_and_reports_the_rest():
    # scheduling/topology_test.go "should respect self pod affinity for first empty topology domain only
    # (hostname)": ten pods that must share a node, on a type that holds five: five run, five cannot.
    together = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"security": "s2"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    pods = [pod(f"p{i}", "1", "1Gi", labels={"security": "s2"}, affinity=together) for i in range(10)]
    plan = plan_for(node_pool(), catalog(itype("five", 5, 10, 0.1)), *pods)
    assert [len(nc.pods) for nc in plan.node_claims] == [5]
    assert len(plan.unschedulable) == 5
    assert all("hostname" in u.reason for u in plan.unschedulable)


# -- 8. preferences relaxed before a spread is given up; PreferNoSchedule pools last -------------------


def test_preferred_node_affinity_is_relaxed_before_a_spread_is_given_up():
    # provisioning/suite_test.go "should relax all node affinity terms" with a zone spread: the pods prefer
    # z1, the spread needs z2 and z3 too; the preference goes, the spread holds.
    prefer_z1 = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]},
                }
            ]
        }
    }
    pods = [
        pod(
            f"p{i}",
            "1",
            "1Gi",
            labels={"app": "w"},
            affinity=prefer_z1,
            topologySpreadConstraints=spread({"app": "w"}, ZONE),
        )
        for i in range(3)
    ]
    plan = plan_for(node_pool(), catalog(itype("t", 2, 4, 0.1, zones=ZONES)), *pods)
    assert plan.unschedulable == ()
    assert placed_zones(plan) == {"z1": 1, "z2": 1, "z3": 1}


def test_a_nodepool_with_a_prefer_no_schedule_taint_is_used_only_when_no_other_pool_matches():
    # provisioning/suite_test.go "should not match NodePool with PreferNoSchedule taint when other NodePool
    # match" and "should tolerate PreferNoSchedule taint only after trying to relax Affinity terms".
    soft = node_pool(
        "a-soft", weight=50, taints=[{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}]
    )
    plain = node_pool("b-plain")
    cat = catalog(itype("t", 2, 4, 0.1))
    plan = plan_for(soft, plain, cat, pod("p"))
    assert [nc.node_pool for nc in plan.node_claims] == ["b-plain"]
    plan = plan_for(soft, cat, pod("p"))
    assert [nc.node_pool for nc in plan.node_claims] == ["a-soft"]


# -- 9. in-flight claims and shared max sizes ----------------------------------------------------------------


def test_in_flight_claims_count_toward_nodepool_limits_with_their_capacity():
    # provisioning/suite_test.go "should not schedule to a nodepool after a scheduling round if limits would
    # be exceeded": capacity already ordered counts, from status.capacity even for a type the catalog lacks.
    pool = node_pool(limits={"cpu": "6"})
    cat = catalog(itype("t", 2, 4, 0.1, zones=("z1", "z2")))
    elsewhere = [pod(n, "1500m", nodeSelector={ZONE: "z2"}) for n in ("a", "b")]  # not on the claim (z1)
    assert len(plan_for(pool, cat, *elsewhere).node_claims) == 2
    ordered = node_claim(
        "ordered", instance_type="gone-from-catalog", capacity={"cpu": "5", "memory": "10Gi"}
    )
    plan = plan_for(pool, cat, ordered, *elsewhere)
    assert plan.node_claims == () and plan.existing == ()
    assert {u.reasons["default"] for u in plan.unschedulable} == {"NodePool limit cpu reached"}


def test_an_in_flight_claim_whose_type_is_not_in_the_catalog_offers_its_capacity():
    # scheduling/suite_test.go "should not launch a second node if there is an in-flight node that can
    # support the pod": the room of a claim counts even when its type left the catalog.
    ordered = node_claim("ordered", instance_type="gone-from-catalog", capacity={"cpu": "4", "memory": "8Gi"})
    plan = plan_for(node_pool(), catalog(itype("t", 2, 4, 0.1)), ordered, pod("a", "3"))
    assert plan.node_claims == () and [(e.kind, e.name) for e in plan.existing] == [("NodeClaim", "ordered")]


def test_an_in_flight_claims_requirements_say_where_its_node_will_be():
    # scheduling/suite_test.go "should not launch a second node if there is an in-flight node that can
    # support the pod (node selectors)": a claim in z2 takes a pod that accepts z1 or z2, not one that
    # accepts z1 or z3.
    cat = catalog(itype("t", 2, 4, 0.1, zones=ZONES))
    claim = node_claim("in-z2", zone=None, capacity={"cpu": "2", "memory": "4Gi"})
    claim["spec"]["requirements"] = [{"key": ZONE, "operator": "In", "values": ["z2"]}]

    def accepting(name: str, *zones: str):
        aff = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": list(zones)}]}
                    ]
                }
            }
        }
        return pod(name, "10m", affinity=aff)

    plan = plan_for(node_pool(), cat, claim, accepting("second", "z1", "z2"), accepting("third", "z1", "z3"))
    assert [(e.name, e.pods) for e in plan.existing] == [("in-z2", ("default/second",))]
    assert [nc.pods for nc in plan.node_claims] == [("default/third",)]


def test_two_pools_selecting_one_machine_deployment_share_its_max_size():
    # cluster-autoscaler's node-group max size, which Karpenter's Cluster API provider honours per group:
    # it bounds the group, whichever NodePool buys from it.
    md = machine_deployment("c3-8", "4", "8Gi", "0.1", max_size="2")
    pools = [capi_pool("first", weight=50), capi_pool("second")]
    plan = plan_for(*pools, md, *(pod(f"p{i}", "3") for i in range(4)))
    assert len(plan.node_claims) == 2
    assert {u.reasons["second"] for u in plan.unschedulable} == {
        "MachineDeployment default/c3-8 is at its max size"
    }


# -- 10. Gte and Lte -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("operator", "bound", "expected"), [("Gte", "16", "16"), ("Lte", "2", "2")])
def test_gte_and_lte_nodepool_requirements_select_the_types_they_allow(operator, bound, expected):
    # scheduling/suite_test.go "should schedule compatible requirements with Operator=Gte" / "=Lte".
    key = "integer-label"
    types = [itype(f"t{n}", 2, 4, 0.1 * n, labels={key: str(n)}) for n in (2, 8, 16)]
    pool = node_pool(requirements=[{"key": key, "operator": operator, "values": [bound]}])
    plan = plan_for(pool, catalog(*types), pod("p", "100m"))
    assert [nc.instance_type for nc in plan.node_claims] == [f"t{expected}"]


@pytest.mark.parametrize("values", [[], ["1", "2"], ["a"], ["-1"], ["１"]])
def test_gte_and_lte_need_one_non_negative_integer(values):
    # apis/v1/nodepool_validation_cel_test.go "should fail with invalid GTE or LTE values" (and full-width
    # digits, which Kubernetes does not read as numbers).
    pool = node_pool(requirements=[{"key": "k", "operator": "Gte", "values": values}])
    with pytest.raises(InputError, match=r"requirements\[0\]\.values"):
        plan_for(pool, catalog(itype("t", 2, 4, 0.1)), pod("p"))


def test_a_pod_node_affinity_keeps_kubernetes_operators():
    """Gte/Lte are Karpenter's, for NodePool and NodeClaim requirements; a pod's node affinity with them
    would be refused by the API server, so tenon refuses it too, naming the field."""
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "Gte", "values": ["1"]}]}
                ]
            }
        }
    }
    with pytest.raises(InputError, match="operator"):
        plan_for(node_pool(), catalog(itype("t", 2, 4, 0.1)), pod("p", affinity=aff))
