"""Parsing Kubernetes objects: requests arithmetic, workload expansion, NodeClaims, errors that say where."""

from __future__ import annotations

import pytest

from tenon.core import InputError, parse_objects
from tenon.core.quantities import QuantityError, format_quantity, parse_quantity, to_canonical
from tests.scheduling.builders import parse, pod


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        ("100m", "cpu", 100),
        ("1.5", "cpu", 1500),
        ("2", "cpu", 2000),
        ("1Gi", "memory", 2**30),
        ("1G", "memory", 10**9),
        ("1.5Mi", "memory", 1572864),
        ("2e3", "memory", 2000),
        ("1n", "cpu", 1),
        (3, "pods", 3),
    ],
)
def test_quantities(text, resource, expected):
    assert to_canonical(resource, text) == expected


@pytest.mark.parametrize("bad", ["", "1.2.3", "abc", "5Xi", "-1"])
def test_bad_quantities(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_format_quantity():
    assert (
        format_quantity("cpu", 1500),
        format_quantity("cpu", 2000),
        format_quantity("memory", 3 * 2**30),
    ) == ("1500m", "2", "3Gi")


def test_requests_sum_containers_max_init_add_sidecars_and_overhead():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "250m", "memory": "512Mi"}}},
        ],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }
    p = parse({"kind": "Pod", "metadata": {"name": "x"}, "spec": spec}).pods[0]
    # regular: 750m + sidecar 100m = 850m; init phase: 2000m + sidecar 100m = 2100m; max = 2100m; + overhead
    assert p.requests["cpu"] == 2110
    assert p.requests["memory"] == 2**30 + 512 * 2**20
    assert p.requests["pods"] == 1


def test_workloads_expand_to_numbered_pods():
    template = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c"}]}}
    docs = [
        {
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 3, "template": template},
        },
        {"kind": "Job", "metadata": {"name": "batch"}, "spec": {"parallelism": 2, "template": template}},
        {"kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {"template": template}},
    ]
    keys = [p.key for p in parse(*docs).pods]
    assert keys == [
        "shop/web-0",
        "shop/web-1",
        "shop/web-2",
        "default/batch-0",
        "default/batch-1",
        "default/db-0",
    ]
    assert parse(*docs).pods[0].labels == {"app": "w"}


def test_node_claim_is_in_flight_unless_its_node_exists():
    claim = {
        "kind": "NodeClaim",
        "metadata": {
            "name": "c1",
            "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large"},
        },
        "status": {"nodeName": "n1", "allocatable": {"cpu": "2", "memory": "8Gi"}},
    }
    inputs = parse(claim)
    assert [(c.name, c.capacity_type, c.allocatable) for c in inputs.in_flight] == [
        ("c1", "on-demand", {"cpu": 2000, "memory": 8 * 2**30})
    ]
    n1 = {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "2"}}}
    assert parse(claim, n1).in_flight == ()


def test_unknown_kinds_are_skipped_not_rejected():
    inputs = parse({"kind": "ConfigMap", "metadata": {"name": "x"}})
    assert [s.kind for s in inputs.skipped] == ["ConfigMap"]


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (pod("p", cpu="lots"), "spec.containers[0].resources.requests.cpu"),
        ({"kind": "Pod", "metadata": {}}, "metadata.name"),
        (
            {
                "kind": "NodePool",
                "metadata": {"name": "np"},
                "spec": {
                    "template": {
                        "spec": {"requirements": [{"key": "k", "operator": "Near", "values": ["a"]}]}
                    }
                },
            },
            "spec.template.spec.requirements[0].operator",
        ),
        (
            {
                "kind": "NodePool",
                "metadata": {"name": "np"},
                "spec": {
                    "template": {"spec": {"requirements": [{"key": "k", "operator": "Gt", "values": ["x"]}]}}
                },
            },
            "spec.template.spec.requirements[0].values[0]",
        ),
        (
            {
                "kind": "NodePool",
                "metadata": {"name": "np"},
                "spec": {"template": {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}},
            },
            "spec.template.spec.taints[0].effect",
        ),
        ({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "many"}}, "spec.replicas"),
        (
            pod("p", topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "z"}]),
            "spec.topologySpreadConstraints[0].maxSkew",
        ),
        (
            {
                "kind": "InstanceCatalog",
                "metadata": {"name": "c"},
                "spec": {"instanceTypes": [{"name": "t", "capacity": {"cpu": "2"}}]},
            },
            "spec.instanceTypes[0].capacity",
        ),
    ],
)
def test_invalid_input_names_file_document_object_and_field(doc, field):
    with pytest.raises(InputError) as err:
        parse_objects(
            [("cluster.yaml", 0, {"kind": "Pod", "metadata": {"name": "fine"}}), ("cluster.yaml", 1, doc)]
        )
    message = str(err.value)
    assert message.startswith("cluster.yaml document 1 (")
    assert field in message
