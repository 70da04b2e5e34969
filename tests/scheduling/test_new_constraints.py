"""Constraints modelled since issue 10: preferred pod (anti-)affinity with weights, topology on any
node label, volume topology, pods the kube-scheduler is already placing.

Cases come from Karpenter's tests (kubernetes-sigs/karpenter ``pkg/controllers/provisioning/suite_test.go``,
``pkg/controllers/provisioning/scheduling/{suite,topology}_test.go``), named in a comment above each.
"""

from __future__ import annotations

from collections import Counter

from tenon.core.wellknown import PLANNED_NODE
from tests.scheduling.builders import (
    affinity,
    anti_affinity,
    catalog,
    itype,
    node,
    node_pool,
    plan_for,
    pod,
    preferred,
    pv,
    pvc,
    spread,
    storage_class,
    where,
    with_claim,
)

ZONE = "topology.kubernetes.io/zone"
ARCH = "kubernetes.io/arch"
HOSTNAME = "kubernetes.io/hostname"
ZONES = ("z1", "z2", "z3")


def zones_of(plan):
    return {p: nc.zone for nc in plan.node_claims for p in nc.pods}


def three_zone_catalog(cpu: int = 4):
    return catalog(itype("t", cpu, cpu * 2, 0.1, zones=ZONES))


# -- preferred pod affinity and anti-affinity ----------------------------------------------------------------


def test_preferred_hostname_affinity_puts_the_pod_beside_its_partner_when_they_fit():
    cat = catalog(itype("small", 1, 2, 0.03), itype("big", 4, 8, 0.1))
    plan = plan_for(
        node_pool(),
        cat,
        pod("db", "600m", labels={"app": "db"}),
        pod("cache", "600m", affinity=preferred({"app": "db"}, HOSTNAME, 50)),
    )
    placed = where(plan)
    assert placed["default/db"] == placed["default/cache"]  # one big node rather than two small ones


def test_preferred_pod_affinity_to_no_pod_is_violated_not_blocking():
    # scheduling/topology_test.go "should allow violation of preferred pod affinity".
    lonely = pod("lonely", affinity=preferred({"security": "s2"}, HOSTNAME, 50))
    plan = plan_for(node_pool(), three_zone_catalog(), lonely)
    assert plan.unschedulable == () and len(plan.node_claims) == 1


def test_preferred_zone_affinity_follows_the_zone_of_the_matching_pod():
    db = pod("db", labels={"app": "db"}, nodeSelector={ZONE: "z2"})
    web = pod("web", affinity=preferred({"app": "db"}, ZONE, 10))
    plan = plan_for(node_pool(), three_zone_catalog(), db, web)
    assert zones_of(plan)["default/web"] == "z2"


def test_preferred_zone_anti_affinity_spreads_when_it_can_and_is_violated_when_it_must():
    # scheduling/topology_test.go "should allow violation of preferred pod anti-affinity".
    pods = [
        pod(f"p{i}", labels={"app": "w"}, affinity=preferred({"app": "w"}, ZONE, 50, anti=True))
        for i in range(5)
    ]
    plan = plan_for(node_pool(), three_zone_catalog(), *pods)
    assert plan.unschedulable == ()
    assert set(zones_of(plan).values()) == set(ZONES)


def test_the_heavier_preference_wins_as_in_the_kube_schedulers_scoring():
    a = pod("a", labels={"app": "a"}, nodeSelector={ZONE: "z1"})
    b = pod("b", labels={"app": "b"}, nodeSelector={ZONE: "z3"})
    both = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": ZONE},
                },
                {
                    "weight": 80,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": ZONE},
                },
            ]
        }
    }
    plan = plan_for(node_pool(), three_zone_catalog(), a, b, pod("c", affinity=both))
    assert zones_of(plan)["default/c"] == "z3"


def test_preferred_hostname_anti_affinity_spreads_pods_until_a_limit_forces_them_together():
    pods = [
        pod(f"p{i}", labels={"app": "w"}, affinity=preferred({"app": "w"}, HOSTNAME, 50, anti=True))
        for i in range(3)
    ]
    plan = plan_for(node_pool(), three_zone_catalog(), *pods)
    assert len(plan.node_claims) == 3  # one per node while nothing stops it
    plan = plan_for(node_pool(limits={"cpu": "8"}), three_zone_catalog(), *pods)
    assert plan.unschedulable == () and len(plan.node_claims) == 2  # relaxed: two nodes are all it may buy


# -- topology on any node label ----------------------------------------------------------------------------


def two_arch_catalog():
    return catalog(
        itype("amd", 2, 4, 0.1, labels={ARCH: "amd64"}),
        itype("arm", 2, 4, 0.1, labels={ARCH: "arm64"}),
    )


def test_a_spread_on_architecture_counts_the_existing_node_of_the_other_architecture():
    # scheduling/topology_test.go "should balance pods across arch (no constraints)": one amd64 pod runs, the
    # pool makes arm64 only; maxSkew 1 lets two arm64 pods in, not five.
    existing = node("amd-node", "1", "2Gi", labels={ARCH: "amd64"})
    running = pod("running", "500m", labels={"app": "s"}, nodeName="amd-node")
    arm_only = node_pool(requirements=[{"key": ARCH, "operator": "In", "values": ["arm64"]}])
    pods = [
        pod(f"p{i}", "2", "1Gi", labels={"app": "s"}, topologySpreadConstraints=spread({"app": "s"}, ARCH))
        for i in range(5)
    ]
    plan = plan_for(arm_only, two_arch_catalog(), existing, running, *pods)
    assert sum(len(nc.pods) for nc in plan.node_claims) == 2
    assert len(plan.unschedulable) == 3


def test_pod_affinity_on_architecture_keeps_pods_on_one_architecture():
    # scheduling/topology_test.go "should respect pod affinity (arch)".
    labels = {"security": "s2"}
    one = spread(labels, HOSTNAME)
    first = pod("first", "2", labels=labels, nodeSelector={ARCH: "arm64"}, topologySpreadConstraints=one)
    second = pod("second", "1", labels=labels, affinity=affinity(labels, ARCH), topologySpreadConstraints=one)
    plan = plan_for(node_pool(), two_arch_catalog(), first, second)
    types = {p: nc.instance_type for nc in plan.node_claims for p in nc.pods}
    assert types == {"default/first": "arm", "default/second": "arm"} and len(plan.node_claims) == 2


def test_pod_anti_affinity_on_architecture_keeps_pods_apart():
    # scheduling/topology_test.go "should not violate pod anti-affinity (arch)".
    labels = {"security": "s2"}
    first = pod("first", "2", labels=labels, nodeSelector={ARCH: "arm64"})
    second = pod("second", "1", labels=labels, affinity=anti_affinity(labels, ARCH))
    plan = plan_for(node_pool(), two_arch_catalog(), first, second)
    types = {p: nc.instance_type for nc in plan.node_claims for p in nc.pods}
    assert types == {"default/first": "arm", "default/second": "amd"}


def test_a_spread_on_a_key_no_node_has_keeps_the_pod_pending_and_no_other():
    # scheduling/topology_test.go "should ignore unknown topology keys": the pod with the constraint is not
    # scheduled, the other one is (the kube-scheduler refuses nodes without the key).
    odd = pod("odd", labels={"app": "x"}, topologySpreadConstraints=spread({"app": "x"}, "unknown"))
    plan = plan_for(node_pool(), three_zone_catalog(), odd, pod("plain"))
    assert [u.pod for u in plan.unschedulable] == ["default/odd"]
    assert "unknown" in plan.unschedulable[0].reason
    assert [p for nc in plan.node_claims for p in nc.pods] == ["default/plain"]


def test_a_spread_on_instance_type_uses_every_type():
    pods = [
        pod(
            f"p{i}",
            labels={"app": "s"},
            topologySpreadConstraints=spread({"app": "s"}, "node.kubernetes.io/instance-type"),
        )
        for i in range(4)
    ]
    plan = plan_for(node_pool(), two_arch_catalog(), *pods)
    assert Counter(nc.instance_type for nc in plan.node_claims for _ in nc.pods) == {"amd": 2, "arm": 2}


# -- volume topology ---------------------------------------------------------------------------------------


def test_a_pod_with_a_bound_zonal_volume_gets_a_node_in_the_volumes_zone():
    # provisioning/suite_test.go "should schedule to volume zones if volume already bound".
    plan = plan_for(
        node_pool(),
        three_zone_catalog(),
        pv("vol", ["z3"]),
        pvc("data", volume="vol"),
        pod("p", **with_claim("data")),
    )
    assert zones_of(plan) == {"default/p": "z3"}


def test_a_wait_for_first_consumer_class_limits_the_zones_to_its_allowed_topologies():
    # provisioning/suite_test.go "should schedule to storage class zones if volume does not exist".
    plan = plan_for(
        node_pool(),
        three_zone_catalog(),
        storage_class("zonal", ["z2"]),
        pvc("data", "zonal"),
        pod("p", **with_claim("data")),
    )
    assert zones_of(plan) == {"default/p": "z2"}


def test_an_ephemeral_volume_follows_its_templates_storage_class():
    # provisioning/suite_test.go "should schedule to storage class zones if volume does not exist (ephemeral
    # volume)".
    volume = {
        "name": "scratch",
        "ephemeral": {
            "volumeClaimTemplate": {"spec": {"storageClassName": "zonal", "accessModes": ["ReadWriteOnce"]}}
        },
    }
    plan = plan_for(
        node_pool(), three_zone_catalog(), storage_class("zonal", ["z3"]), pod("p", volumes=[volume])
    )
    assert zones_of(plan) == {"default/p": "z3"}


def test_the_default_storage_class_applies_to_a_claim_without_one():
    default = storage_class("standard", ["z1"])
    default["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    plan = plan_for(node_pool(), three_zone_catalog(), default, pvc("data"), pod("p", **with_claim("data")))
    assert zones_of(plan) == {"default/p": "z1"}


def test_pods_with_zonal_classes_and_anti_affinity_land_in_different_allowed_zones():
    # scheduling/suite_test.go "should schedule pods using a StorageClass with multiple zones in
    # AllowedTopologies".
    docs = [node_pool(), three_zone_catalog(), storage_class("two-zones", ["z1", "z2"])]
    for i in range(2):
        docs.append(pvc(f"data-{i}", "two-zones"))
        docs.append(
            pod(
                f"p{i}",
                labels={"app": "sc"},
                affinity=anti_affinity({"app": "sc"}, ZONE),
                **with_claim(f"data-{i}"),
            )
        )
    plan = plan_for(*docs)
    assert sorted(zones_of(plan).values()) == ["z1", "z2"]


def test_an_unbound_claim_of_an_immediate_class_waits_for_its_volume():
    # scheduling/suite_test.go "should not launch nodes for pod with unbound volume for volumeBindingMode
    # immediate".
    plan = plan_for(
        node_pool(),
        three_zone_catalog(),
        storage_class("now", mode="Immediate"),
        pvc("data", "now"),
        pod("p", **with_claim("data")),
    )
    assert plan.node_claims == () and "Immediate" in plan.unschedulable[0].reason


def test_a_pod_with_a_missing_claim_waits_while_the_others_run():
    # provisioning/suite_test.go "should schedule valid pods when a pod with an invalid pvc is encountered
    # (pvc)" and "should not schedule if invalid pvc".
    plan = plan_for(
        node_pool(),
        three_zone_catalog(),
        pvc("other", volume="vol"),
        pv("vol", ["z1"]),
        pod("broken", **with_claim("missing")),
        pod("fine"),
    )
    assert [u.pod for u in plan.unschedulable] == ["default/broken"]
    assert "PersistentVolumeClaim default/missing not found" in plan.unschedulable[0].reason
    assert [p for nc in plan.node_claims for p in nc.pods] == ["default/fine"]


def test_an_input_without_volume_objects_plans_pods_without_volume_topology():
    """tenon's choice (docs/simulate.md): a what-if file, or a scheduler that does not watch volumes, says
    nothing about them, and its pods are planned as if they had none rather than all left pending."""
    plan = plan_for(node_pool(), three_zone_catalog(), pod("p", **with_claim("data")))
    assert plan.unschedulable == () and len(plan.node_claims) == 1


# -- pods the kube-scheduler is already placing --------------------------------------------------------------


def test_a_pod_nominated_to_a_node_is_not_provisioned_for_and_holds_its_room_there():
    existing = node("n1", "2", "4Gi")
    nominated = pod("preemptor", "1500m")
    nominated["status"] = {"nominatedNodeName": "n1"}
    plan = plan_for(node_pool(), three_zone_catalog(), existing, nominated, pod("other", "1"))
    assert [(n.pod, n.node) for n in plan.nominated] == [("default/preemptor", "n1")]
    assert all("default/preemptor" not in nc.pods for nc in plan.node_claims)
    assert plan.existing == ()  # its room on n1 is taken: "other" does not fit there any more
    assert [nc.pods for nc in plan.node_claims] == [("default/other",)]
    assert plan.to_json()["nominated"] == [{"pod": "default/preemptor", "node": "n1"}]


def test_a_pod_offered_again_takes_the_room_of_the_node_it_was_planned_for_first():
    # tenon's own nomination (the scheduler marks such a pod tenon.sh/planned-node in its input): the
    # kube-scheduler tries the pod on that node first, so the plan must not give the room to a larger pod
    # placed before it (which would then wait, planned there again and again)
    existing = node("n1", "2", "4Gi")
    offered_again = pod("planned", "1500m")
    offered_again["metadata"]["annotations"] = {PLANNED_NODE: "n1"}
    plan = plan_for(node_pool(), three_zone_catalog(), existing, offered_again, pod("larger", "2"))
    assert [(e.name, e.pods) for e in plan.existing] == [("n1", ("default/planned",))]
    assert [nc.pods for nc in plan.node_claims] == [("default/larger",)]
    assert plan.nominated == ()  # pending, planned: not a pod the kube-scheduler is placing elsewhere


def test_a_pod_offered_again_that_no_longer_fits_its_node_is_placed_as_any_pending_pod():
    existing = node("n1", "2", "4Gi")
    taken = pod("taken", "1500m")
    taken["spec"]["nodeName"] = "n1"
    offered_again = pod("planned", "1")
    offered_again["metadata"]["annotations"] = {PLANNED_NODE: "n1"}
    plan = plan_for(node_pool(), three_zone_catalog(), existing, taken, offered_again)
    assert plan.existing == ()
    assert [nc.pods for nc in plan.node_claims] == [("default/planned",)]


def test_a_schedule_anyway_hostname_spread_spreads_while_it_can_then_gives_way():
    # scheduling/topology_test.go "should violate max-skew when unsat = schedule anyway (capacity type)",
    # on the hostname: held like DoNotSchedule until the pods could not run, then relaxed.
    pods = [
        pod(
            f"p{i}",
            labels={"app": "w"},
            topologySpreadConstraints=spread({"app": "w"}, HOSTNAME, when="ScheduleAnyway"),
        )
        for i in range(4)
    ]
    plan = plan_for(node_pool(), three_zone_catalog(), *pods)
    assert len(plan.node_claims) == 4
    plan = plan_for(node_pool(limits={"cpu": "8"}), three_zone_catalog(), *pods)
    assert plan.unschedulable == () and len(plan.node_claims) == 2


def test_a_drivers_attach_limit_listed_by_the_catalog_bounds_the_pods_per_node():
    # scheduling/suite_test.go "should launch multiple nodes if required due to volume limits" (there from a
    # CSINode; here from the instance type, where the catalog knows it): six pods of two volumes each on a
    # type that attaches ten volumes of the driver take two nodes, though one node would hold them all.
    limited = itype("t", 64, 128, 0.1, zones=ZONES)
    limited["capacity"]["attachable-volumes-csi-ebs.csi.aws.com"] = "10"
    docs: list = [node_pool(), catalog(limited), storage_class("ebs", ["z1"])]
    for i in range(6):
        docs += [pvc(f"a-{i}", "ebs"), pvc(f"b-{i}", "ebs")]
        volumes = [
            {"name": "a", "persistentVolumeClaim": {"claimName": f"a-{i}"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": f"b-{i}"}},
        ]
        docs.append(pod(f"p{i}", volumes=volumes))
    docs[2]["provisioner"] = "ebs.csi.aws.com"
    plan = plan_for(*docs)
    assert sorted(len(nc.pods) for nc in plan.node_claims) == [1, 5]
    assert plan.node_claims[0].requests["attachable-volumes-csi-ebs.csi.aws.com"] in ("10", "2")
    # a type that does not list the driver's limit is not limited by it
    unlimited = itype("t", 64, 128, 0.1, zones=ZONES)
    docs[1] = catalog(unlimited)
    assert [len(nc.pods) for nc in plan_for(*docs).node_claims] == [6]
