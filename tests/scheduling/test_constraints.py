"""One test per scheduling rule: a pod that must not land somewhere, doesn't (and what must happen, does)."""

from __future__ import annotations

from collections import Counter

from tests.scheduling.builders import (
    affinity,
    anti_affinity,
    catalog,
    daemon_set,
    itype,
    node,
    node_pool,
    plan_for,
    pod,
    spread,
    where,
)

ZONES = ("z1", "z2", "z3")
ARCH = "kubernetes.io/arch"


def two_arch_catalog():
    return catalog(
        itype("amd", 2, 4, 0.10, labels={ARCH: "amd64"}), itype("arm", 2, 4, 0.05, labels={ARCH: "arm64"})
    )


def test_node_selector_keeps_pod_off_other_arch():
    plan = plan_for(node_pool(), two_arch_catalog(), pod("a", nodeSelector={ARCH: "amd64"}), pod("b"))
    by_pod = {p: nc.instance_type for nc in plan.node_claims for p in nc.pods}
    assert by_pod["default/a"] == "amd"
    assert by_pod["default/b"] in ("amd", "arm")  # may share a's node, or go to the cheaper arm


def test_required_node_affinity_not_in():
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "NotIn",
                                "values": ["arm"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    plan = plan_for(node_pool(), two_arch_catalog(), pod("a", affinity=aff))
    assert [nc.instance_type for nc in plan.node_claims] == ["amd"]


def test_required_node_affinity_terms_are_ored():
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["s390x"]}]},
                    {"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["amd64"]}]},
                ]
            }
        }
    }
    plan = plan_for(node_pool(), two_arch_catalog(), pod("a", affinity=aff))
    assert [nc.instance_type for nc in plan.node_claims] == ["amd"]


def test_preferred_node_affinity_honoured_when_possible_relaxed_when_not():
    prefer_amd = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": ARCH, "operator": "In", "values": ["amd64"]}]
                    },
                }
            ]
        }
    }
    prefer_none = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": ARCH, "operator": "In", "values": ["s390x"]}]
                    },
                }
            ]
        }
    }
    plan = plan_for(node_pool(), two_arch_catalog(), pod("a", affinity=prefer_amd))
    assert [nc.instance_type for nc in plan.node_claims] == ["amd"]  # honoured although arm is cheaper
    plan = plan_for(node_pool(), two_arch_catalog(), pod("a", affinity=prefer_none))
    assert [nc.instance_type for nc in plan.node_claims] == ["arm"]  # relaxed: cheapest


def test_taint_not_tolerated_is_explained_and_tolerated_runs():
    pool = node_pool(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    tol = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    plan = plan_for(pool, two_arch_catalog(), pod("plain"), pod("tolerant", tolerations=tol))
    assert [u.pod for u in plan.unschedulable] == ["default/plain"]
    assert plan.unschedulable[0].reasons == {"default": "taint dedicated=gpu:NoSchedule not tolerated"}
    assert plan.node_claims[0].pods == ("default/tolerant",)


def test_hostname_anti_affinity_one_per_node():
    pods = [pod(f"w{i}", labels={"app": "w"}, affinity=anti_affinity({"app": "w"})) for i in range(3)]
    plan = plan_for(node_pool(), two_arch_catalog(), *pods, pod("other", labels={"app": "x"}))
    placed = where(plan)
    assert len({placed[f"default/w{i}"] for i in range(3)}) == 3
    assert len(plan.node_claims) == 3  # the unrelated pod shares a node instead of buying a fourth


def test_zone_anti_affinity_distinct_zones_and_excess_unschedulable():
    cat = catalog(itype("t", 2, 4, 0.1, zones=ZONES))
    pods = [
        pod(f"z{i}", labels={"app": "z"}, affinity=anti_affinity({"app": "z"}, "topology.kubernetes.io/zone"))
        for i in range(4)
    ]
    plan = plan_for(node_pool(), cat, *pods)
    zones = [str(nc.zone) for nc in plan.node_claims for _ in nc.pods]
    assert sorted(zones) == list(ZONES)
    assert len(plan.unschedulable) == 1 and "anti-affinity" in plan.unschedulable[0].reason


def test_hostname_pod_affinity_shares_the_node():
    cat = catalog(itype("small", 1, 2, 0.01), itype("big", 4, 8, 0.05))
    plan = plan_for(
        node_pool(),
        cat,
        pod("db", "500m", labels={"app": "db"}),
        pod("cache", "500m", affinity=affinity({"app": "db"}, "kubernetes.io/hostname")),
    )
    placed = where(plan)
    assert placed["default/db"] == placed["default/cache"]


def test_zone_pod_affinity_keeps_group_in_one_zone():
    cat = catalog(itype("t", 1, 2, 0.1, zones=ZONES))
    pods = [
        pod(
            f"g{i}",
            "600m",
            labels={"grp": "g"},
            affinity=affinity({"grp": "g"}, "topology.kubernetes.io/zone"),
        )
        for i in range(4)
    ]
    plan = plan_for(node_pool(), cat, *pods)
    assert len(plan.node_claims) == 4 and len({nc.zone for nc in plan.node_claims}) == 1


def test_zone_spread_balances():
    cat = catalog(itype("t", 8, 16, 0.1, zones=ZONES))
    pods = [
        pod(
            f"s{i}",
            labels={"app": "s"},
            topologySpreadConstraints=spread({"app": "s"}, "topology.kubernetes.io/zone"),
        )
        for i in range(6)
    ]
    plan = plan_for(node_pool(), cat, *pods)
    per_zone = Counter(nc.zone for nc in plan.node_claims for _ in nc.pods)
    assert per_zone == {"z1": 2, "z2": 2, "z3": 2}


def test_zone_spread_counts_running_pods():
    cat = catalog(itype("t", 8, 16, 0.1, zones=ZONES))
    existing = node("n1", "1", "1Gi", labels={"topology.kubernetes.io/zone": "z1"})
    running = pod("old", labels={"app": "s"}, nodeName="n1")
    pods = [
        pod(
            f"s{i}",
            labels={"app": "s"},
            topologySpreadConstraints=spread({"app": "s"}, "topology.kubernetes.io/zone"),
        )
        for i in range(2)
    ]
    plan = plan_for(node_pool(), cat, existing, running, *pods)
    assert sorted(str(nc.zone) for nc in plan.node_claims for _ in nc.pods) == ["z2", "z3"]


def test_hostname_spread_limits_pods_per_node():
    pods = [
        pod(
            f"h{i}",
            labels={"app": "h"},
            topologySpreadConstraints=spread({"app": "h"}, "kubernetes.io/hostname", max_skew=2),
        )
        for i in range(5)
    ]
    plan = plan_for(node_pool(), two_arch_catalog(), *pods)
    assert max(len(nc.pods) for nc in plan.node_claims) <= 2 and len(plan.node_claims) == 3


def test_capacity_type_spread():
    cat = catalog(itype("t", 8, 16, 0.1, capacity_types=("on-demand", "spot")))
    pods = [
        pod(
            f"c{i}",
            labels={"app": "c"},
            topologySpreadConstraints=spread({"app": "c"}, "karpenter.sh/capacity-type"),
        )
        for i in range(4)
    ]
    plan = plan_for(node_pool(), cat, *pods)
    assert Counter(nc.capacity_type for nc in plan.node_claims for _ in nc.pods) == {
        "on-demand": 2,
        "spot": 2,
    }


def test_host_ports_never_share_a_node():
    ports = [
        {
            "name": "c",
            "ports": [{"containerPort": 80, "hostPort": 8080}],
            "resources": {"requests": {"cpu": "100m"}},
        }
    ]
    plan = plan_for(node_pool(), two_arch_catalog(), *(pod(f"p{i}", containers=ports) for i in range(2)))
    assert len(plan.node_claims) == 2


def test_daemonset_overhead_counts_against_new_nodes():
    cat = catalog(itype("two", 2, 4, 0.1), itype("four", 4, 8, 0.2))
    assert [nc.instance_type for nc in plan_for(node_pool(), cat, pod("a", "1900m")).node_claims] == ["two"]
    plan = plan_for(node_pool(), cat, daemon_set("200m"), pod("a", "1900m"))
    assert [nc.instance_type for nc in plan.node_claims] == ["four"]
    assert plan.node_claims[0].requests["cpu"] == "2100m"
    elsewhere = daemon_set("200m", nodeSelector={ARCH: "arm64"})  # would not land on these amd64 nodes
    assert [
        nc.instance_type for nc in plan_for(node_pool(), cat, elsewhere, pod("a", "1900m")).node_claims
    ] == ["two"]


def test_existing_room_used_before_buying():
    n = node("n1", "2", "4Gi")
    plan = plan_for(
        node_pool(),
        two_arch_catalog(),
        n,
        pod("bound", "1500m", nodeName="n1"),
        pod("a", "400m"),
        pod("b", "400m"),
    )
    assert [(e.name, e.pods) for e in plan.existing] == [("n1", ("default/a",))]
    assert [nc.pods for nc in plan.node_claims] == [("default/b",)]


def test_existing_room_fills_node_by_node_full_nodes_skipped_and_avoided_nodes_last():
    """First fit over the existing room: a Node already full takes nothing, each Node is filled before the
    next, a Node whose PreferNoSchedule taint the pods do not tolerate is used last, then new nodes."""
    avoided = [{"key": "dedicated", "value": "batch", "effect": "PreferNoSchedule"}]
    plan = plan_for(
        node_pool(),
        two_arch_catalog(),
        node("n0-avoided", "1", "4Gi", taints=avoided),
        node("n1-full", "1", "4Gi"),
        pod("bound", "1", nodeName="n1-full"),
        node("n2", "1", "4Gi"),
        node("n3", "1", "4Gi"),
        *(pod(f"p{i}", "500m") for i in range(7)),
    )
    assert [(e.name, e.pods) for e in plan.existing] == [
        ("n0-avoided", ("default/p4", "default/p5")),
        ("n2", ("default/p0", "default/p1")),
        ("n3", ("default/p2", "default/p3")),
    ]
    assert [nc.pods for nc in plan.node_claims] == [("default/p6",)]


def test_a_cluster_with_nothing_pending_plans_nothing():
    plan = plan_for(node_pool(), two_arch_catalog(), node("n1", "2", "4Gi"), pod("bound", "1", nodeName="n1"))
    assert (plan.existing, plan.node_claims, plan.unschedulable) == ((), (), ())


def test_existing_node_taint_respected():
    n = node("n1", "4", "8Gi", taints=[{"key": "team", "value": "x", "effect": "NoSchedule"}])
    plan = plan_for(node_pool(), two_arch_catalog(), n, pod("a"))
    assert plan.existing == () and len(plan.node_claims) == 1


def test_in_flight_node_claim_room_is_used_and_its_pods_not_rebought():
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": "default-abc",
            "annotations": {"tenon.sh/nominated-pods": "default/first"},
            "labels": {
                "karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": "amd",
                "topology.kubernetes.io/zone": "z1",
                "karpenter.sh/capacity-type": "on-demand",
            },
        },
    }
    plan = plan_for(node_pool(), two_arch_catalog(), claim, pod("first", "1"), pod("second", "500m"))
    assert plan.node_claims == ()
    assert [(e.kind, e.name, e.pods) for e in plan.existing] == [
        ("NodeClaim", "default-abc", ("default/second",))
    ]


def test_nodepool_limit_stops_buying_with_reason():
    pool = node_pool(limits={"cpu": "4"})
    plan = plan_for(pool, catalog(itype("t", 2, 4, 0.1)), *(pod(f"p{i}", "1500m") for i in range(3)))
    assert len(plan.node_claims) == 2
    assert [u.reasons for u in plan.unschedulable] == [{"default": "NodePool limit cpu reached"}]


def test_weight_orders_pools_and_limits_spill_over():
    heavy = node_pool("heavy", weight=50, limits={"cpu": "2"}, catalog="cat")
    light = node_pool("light", catalog="cat")
    cat = catalog(itype("t", 2, 4, 0.1))
    plan = plan_for(light, heavy, cat, *(pod(f"p{i}", "1500m") for i in range(2)))
    assert sorted(nc.node_pool for nc in plan.node_claims) == ["heavy", "light"]


def test_min_values_unmet_is_unschedulable():
    req = [{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3}]
    cat = catalog(itype("a", 2, 4, 0.1), itype("b", 4, 8, 0.2), itype("c", 1, 2, 0.05))
    ok = plan_for(node_pool(requirements=req), cat, pod("small", "500m"))
    assert ok.node_claims and len({ok.node_claims[0].instance_type, *ok.node_claims[0].fallbacks}) >= 3
    bad = plan_for(node_pool(requirements=req), cat, pod("big", "1500m"))  # only a and b fit
    assert not bad.node_claims and "minValues 3" in bad.unschedulable[0].reason


def test_too_big_pod_reason_names_the_resource():
    plan = plan_for(node_pool(), two_arch_catalog(), pod("huge", "1", "96Gi"))
    assert "no instance type has" in plan.unschedulable[0].reason and "96Gi" in plan.unschedulable[0].reason


def test_nodepool_requirement_filters_types_and_offerings():
    cat = catalog(itype("t", 2, 4, 0.1, zones=ZONES, capacity_types=("on-demand", "spot")))
    req = [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]},
        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
    ]
    plan = plan_for(node_pool(requirements=req), cat, pod("a"))
    nc = plan.node_claims[0]
    assert (nc.zone, nc.capacity_type) == ("z2", "on-demand")


def _in_flight_claim(name: str, nominated: str, instance_type: str = "amd") -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "annotations": {"tenon.sh/nominated-pods": nominated},
            "labels": {
                "karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": "z1",
                "karpenter.sh/capacity-type": "on-demand",
            },
        },
    }


def test_pod_destined_to_in_flight_claim_keeps_its_hostname_rules_there():
    """A claim bought for a host-port / anti-affinity pod: the pod's rules hold on the claim's room."""
    ports = [{"name": "c", "ports": [{"hostPort": 8080}], "resources": {"requests": {"cpu": "100m"}}}]
    plan = plan_for(
        node_pool(),
        two_arch_catalog(),
        _in_flight_claim("claim-a", "default/first"),
        pod("first", containers=ports),
        pod("second", containers=ports),
        pod("third"),
    )
    assert [(e.name, e.pods) for e in plan.existing] == [("claim-a", ("default/third",))]
    assert [nc.pods for nc in plan.node_claims] == [("default/second",)]

    plan = plan_for(
        node_pool(),
        two_arch_catalog(),
        _in_flight_claim("claim-a", "default/first"),
        pod("first", labels={"app": "db"}, affinity=anti_affinity({"app": "db"})),
        pod("second", labels={"app": "db"}),
    )
    assert plan.existing == ()
    assert [nc.pods for nc in plan.node_claims] == [("default/second",)]


def test_pods_that_cannot_share_a_node_leave_other_pinned_pods_schedulable():
    """Two pods with hostname affinity that fit no type together: the first runs, the second cannot join it
    (as the kube-scheduler places them), and neither takes the zone-spread pods with it."""
    cat = catalog(itype("small", 2, 8, 0.1, zones=("z1", "z2")), itype("big", 4, 16, 0.2, zones=("z1", "z2")))
    together = affinity({"app": "a"}, "kubernetes.io/hostname")
    docs = [
        pod(
            name,
            "3",
            "1Gi",
            {"app": "a"},
            affinity=together,
            nodeSelector={"topology.kubernetes.io/zone": "z1"},
        )
        for name in ("a1", "a2")
    ]
    docs += [
        pod(
            f"s{i}",
            "500m",
            "1Gi",
            {"app": "s"},
            topologySpreadConstraints=spread({"app": "s"}, "topology.kubernetes.io/zone"),
        )
        for i in range(4)
    ]
    plan = plan_for(node_pool(), cat, *docs)
    assert sorted(u.pod for u in plan.unschedulable) == ["default/a2"]
    spread_zones = Counter(nc.zone for nc in plan.node_claims for p in nc.pods if "/s" in p)
    assert spread_zones == {"z1": 2, "z2": 2}
