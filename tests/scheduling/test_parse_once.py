"""Parse once, at the edge: objects parsed one by one and assembled plan exactly like the documents parsed
together, in-flight claims can be given as model objects, and a bad object fails alone with the same error."""

from __future__ import annotations

from typing import Any

import pytest

from tenon.core import (
    InFlightNodeClaim,
    InputError,
    Requirement,
    assemble,
    parse_object,
    parse_objects,
    solve,
)
from tests.scheduling.builders import (
    anti_affinity,
    catalog,
    daemon_set,
    itype,
    node,
    node_pool,
    pod,
    spread,
)

ZONE = "topology.kubernetes.io/zone"
MEMBER = "node.cluster.x-k8s.io/karpenter-member"


def machine_deployment(name: str, cpu: int, price: str | None) -> dict[str, Any]:
    annotations = {
        "capacity.cluster-autoscaler.kubernetes.io/cpu": str(cpu),
        "capacity.cluster-autoscaler.kubernetes.io/memory": f"{2 * cpu}Gi",
    }
    if price is not None:
        annotations["tenon.sh/price-per-hour"] = price
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": "capi", "annotations": annotations, "labels": {MEMBER: ""}},
        "spec": {"replicas": 0},
    }


def node_claim(name: str, nominated: list[str], node_name: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": "big",
                ZONE: "z1",
                "karpenter.sh/capacity-type": "on-demand",
            },
            "annotations": {"tenon.sh/nominated-pods": ",".join(nominated)},
        },
        "status": {"nodeName": node_name} if node_name else {},
    }


def cluster() -> list[dict[str, Any]]:
    """A cluster as a service sees it: pools of both kinds, catalogs, a DaemonSet, nodes, claims, pods."""
    capi_pool = node_pool("capi", weight=10)
    capi_pool["spec"]["template"]["spec"]["nodeClassRef"] = {"kind": "ClusterAPINodeClass", "name": "capi"}
    capi_pool["spec"]["template"]["spec"]["taints"] = [{"key": "capi", "effect": "NoSchedule"}]
    capi_tolerated = [{"key": "capi", "operator": "Exists"}]
    web = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 4,
            "template": {
                "metadata": {"labels": web},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "700m"}}}],
                    "topologySpreadConstraints": spread(web, ZONE),
                },
            },
        },
    }
    listing = {
        "kind": "List",
        "items": [
            pod("db-0", "1", labels={"app": "db"}, affinity=anti_affinity({"app": "db"})),
            pod("db-1", "1", labels={"app": "db"}, affinity=anti_affinity({"app": "db"})),
            {"kind": "ConfigMap", "metadata": {"name": "settings"}},
        ],
    }
    return [
        node_pool(),
        capi_pool,
        {"kind": "ClusterAPINodeClass", "metadata": {"name": "capi"}, "spec": {}},
        catalog(
            itype("small", 2, 4, 0.05, zones=("z1", "z2")),
            itype("big", 8, 32, 0.2, zones=("z1", "z2")),
        ),
        machine_deployment("c3-8", 4, "0.10"),
        machine_deployment("c3-16", 8, None),  # estimated, scaled by the priced one (another object)
        daemon_set("100m"),
        node("n1", "4", "8Gi", labels={ZONE: "z2", "karpenter.sh/nodepool": "default"}),
        pod("running", "3", nodeName="n1"),
        node_claim("default-aaaaa", ["default/first"]),
        node_claim("default-bbbbb", [], node_name="n1"),  # became n1: the Node counts, not the claim
        pod("first", "2"),
        pod("gpu-less", "6", tolerations=capi_tolerated),
        deployment,
        listing,
    ]


def test_parts_parsed_one_by_one_and_assembled_plan_like_the_documents():
    docs = cluster()
    together = parse_objects(("cluster.yaml", i, d) for i, d in enumerate(docs))
    parts = {i: parse_object("cluster.yaml", i, d) for i, d in enumerate(docs)}
    assembled = assemble(parts.values())

    assert assembled == together
    assert solve(assembled).to_json() == solve(together).to_json()
    # the unpriced MachineDeployment is estimated against the priced one of another object
    alone = {t.instance_type.name: t.instance_type for t in parts[5].machine_deployments}
    prices = {t.instance_type.name: t.instance_type.offerings[0].price for t in assembled.machine_deployments}
    assert alone["c3-16"].price_estimated and prices["c3-16"] != alone["c3-16"].offerings[0].price
    assert prices["c3-16"] == pytest.approx(2 * prices["c3-8"], rel=0.01)
    assert [c.name for c in assembled.in_flight] == ["default-aaaaa"]


def test_replacing_one_part_plans_like_the_changed_documents():
    """A service keeps one part per object and re-parses only the object whose event arrived."""
    docs = cluster()
    parts = {i: parse_object("event", 0, d) for i, d in enumerate(docs)}
    docs[12] = pod("gpu-less", "7", tolerations=[{"key": "capi", "operator": "Exists"}])
    parts[12] = parse_object("event", 0, docs[12])
    del docs[11], parts[11]
    expected = solve(parse_objects(("event", 0, d) for d in docs)).to_json()
    assert solve(assemble(parts.values())).to_json() == expected
    assert "default/first" not in str(expected)


def test_in_flight_claim_given_as_model_object_plans_like_the_nodeclaim_document():
    docs = cluster()
    claim_docs = [d for d in docs if d["kind"] == "NodeClaim"]
    others = [parse_object("cluster.yaml", i, d) for i, d in enumerate(docs) if d["kind"] != "NodeClaim"]
    given = [
        InFlightNodeClaim(
            "default-aaaaa",
            "default",
            "big",
            "z1",
            "on-demand",
            dict(claim_docs[0]["metadata"]["labels"]),
            pods=("default/first",),
        ),
        InFlightNodeClaim("default-bbbbb", "default", "big", "z1", "on-demand", node_name="n1"),
    ]
    direct = solve(assemble(others, in_flight=given))
    from_documents = solve(parse_objects(("cluster.yaml", i, d) for i, d in enumerate(docs)))
    assert direct.to_json() == from_documents.to_json()
    assert "default-aaaaa" in [e.name for e in direct.existing]


INVALID = [
    (pod("web-0", cpu="lots"), "Pod default/web-0", "spec.containers[0].resources.requests.cpu"),
    (
        {"kind": "NodePool", "metadata": {"name": "np"}, "spec": {"weight": 101}},
        "NodePool np",
        "spec.weight",
    ),
    (
        {"kind": "Deployment", "metadata": {"name": "d", "namespace": "shop"}, "spec": {"replicas": "x"}},
        "Deployment shop/d",
        "spec.replicas",
    ),
    (
        {**node_claim("c", []), "spec": {"requirements": [{"key": "k", "operator": "Near"}]}},
        "NodeClaim c",
        "spec.requirements[0].operator",
    ),
    (
        {"kind": "List", "items": [pod("ok"), {"kind": "Node", "metadata": {"name": "n"}}]},
        "Node n",
        "status.allocatable",
    ),
]


@pytest.mark.parametrize(("doc", "names", "field"), INVALID)
def test_invalid_object_fails_alone_with_the_one_line_error_of_the_documents(doc, names, field):
    with pytest.raises(InputError) as alone:
        parse_object("cluster.yaml", 3, doc)
    docs = [("cluster.yaml", 2, pod("fine")), ("cluster.yaml", 3, doc)]
    with pytest.raises(InputError) as together:
        parse_objects(docs)
    message = str(alone.value)
    assert message == str(together.value)
    assert "\n" not in message
    assert message.startswith(f"cluster.yaml document 3 ({names}): {field}: ")


def test_in_flight_claim_requirements_label_its_node_and_capacity_counts_for_limits():
    pool = node_pool(limits={"cpu": "12"})
    cat = catalog(itype("big", 8, 32, 0.2, zones=("z1",)))
    arm_pod = pod("a", "1", nodeSelector={"kubernetes.io/arch": "arm64"})
    claim = node_claim("default-ccccc", [])
    claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "unknown-type"  # room from the claim
    claim["spec"] = {"requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
    claim["status"] = {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    parts = [parse_object("t", i, d) for i, d in enumerate([pool, cat, arm_pod, claim])]
    assert parts[3].in_flight[0].requirements == (Requirement("kubernetes.io/arch", "In", ("arm64",)),)
    plan = solve(assemble(parts))
    assert [(e.name, e.pods) for e in plan.existing] == [("default-ccccc", ("default/a",))]

    # its capacity (8 cpu) counts against the 12-cpu limit: one more 8-cpu node would go over it
    big_pod = parse_object("t", 9, pod("b", "6"))
    capacity = {"cpu": 8000}
    claimed = InFlightNodeClaim(
        "default-ddddd", "default", "unknown-type", "z1", "on-demand", capacity=capacity
    )
    plan = solve(assemble([*parts[:2], big_pod], in_flight=[claimed]))
    assert plan.node_claims == ()
    assert [u.pod for u in plan.unschedulable] == ["default/b"]
    assert "limit cpu" in plan.unschedulable[0].reason
    assert [nc.instance_type for nc in solve(assemble([*parts[:2], big_pod])).node_claims] == ["big"]
