"""The CRDs tenon ships install like Karpenter's: structural schemas (so the API server accepts them and
prunes as it should), Karpenter's printer columns, and schemas under which Karpenter's own example manifests,
tenon's demo and docs are valid and bad objects are refused with the field named."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenon.core.catalogs_generated import fake_400, kwok_144
from tests.deploy.crd_schema import cel_rules, field_errors, structural_problems, version_schema

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
EXAMPLES = Path(__file__).parent / "karpenter_examples"
CRD_FILES = sorted(p for p in CRD_DIR.rglob("*.yaml") if p.name != "kustomization.yaml")


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    return {doc["spec"]["names"]["kind"]: doc for path in CRD_FILES for doc in load(path)}


def test_every_kind_tenon_reads_or_writes_has_a_crd() -> None:
    found = {(d["spec"]["group"], kind) for kind, d in crds().items()}
    assert found == {
        ("karpenter.sh", "NodePool"),
        ("karpenter.sh", "NodeClaim"),
        ("karpenter.cluster.x-k8s.io", "ClusterAPINodeClass"),
        ("karpenter.k8s.aws", "EC2NodeClass"),
        ("tenon.sh", "InstanceCatalog"),
    }


@pytest.mark.parametrize("path", CRD_FILES, ids=[p.name for p in CRD_FILES])
def test_crd_is_well_formed_and_structural(path: Path) -> None:
    [crd] = load(path)
    assert (crd["apiVersion"], crd["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{names['plural']}.{crd['spec']['group']}"
    assert crd["spec"]["scope"] == "Cluster"
    versions = crd["spec"]["versions"]
    assert sum(1 for v in versions if v.get("storage")) == 1
    for version in versions:
        assert structural_problems(version["schema"]["openAPIV3Schema"]) == [], version["name"]
        for where, rule in cel_rules(version["schema"]["openAPIV3Schema"]):
            assert rule.get("rule") and (rule.get("message") or rule.get("messageExpression")), where


@pytest.mark.parametrize("path", CRD_FILES, ids=[p.name for p in CRD_FILES])
def test_copied_crds_name_their_source_and_license(path: Path) -> None:
    head = path.read_text().split("\n---", 1)[0]
    if "tenon.sh_" in path.name:
        return  # tenon's own
    assert re.search(r"^# Source: https://github\.com/[\w-]+/[\w-]+/blob/[0-9a-f]{40}/\S+\.yaml$", head, re.M)
    assert "License: Apache-2.0" in head


def test_the_structural_check_catches_what_the_api_server_refuses() -> None:
    bad = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {
                "type": "object",
                "properties": {"size": {"description": "no type"}},
                "anyOf": [{"type": "object", "properties": {"other": {"type": "string"}}}],
            },
        },
    }
    assert structural_problems(bad) == [
        "openAPIV3Schema.metadata: only name and generateName may be restricted, not ['labels']",
        "openAPIV3Schema.spec.anyOf[0]: type is not allowed in anyOf",
        "openAPIV3Schema.spec.anyOf[0].other: specified in anyOf but not outside it",
        "openAPIV3Schema.spec.size: no type",
    ]


def test_nodeclaim_printer_columns_are_karpenters() -> None:
    [version] = crds()["NodeClaim"]["spec"]["versions"]
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Type", "Capacity", "Zone", "Node", "Ready", "Age"]
    [version] = crds()["NodePool"]["spec"]["versions"]
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "NodeClass",
        "Nodes",
        "Ready",
        "Age",
    ]


def _example_objects() -> list[tuple[str, dict[str, Any]]]:
    objects = [
        (f"{p.name}: {d['kind']} {d['metadata']['name']}", d)
        for p in sorted(EXAMPLES.glob("*.yaml"))
        for d in load(p)
    ]
    demo = ROOT / "deploy" / "examples" / "capi-demo" / "nodepool.yaml"
    objects += [(f"capi-demo: {d['kind']} {d['metadata']['name']}", d) for d in load(demo)]
    return objects


EXAMPLE_OBJECTS = _example_objects()


KNOWN_INVALID = {
    # Karpenter's own example puts the version in nodeClassRef.group; its CRD (so the API server) refuses it
    "windows-custom-userdata.yaml: NodePool windows2022": [
        "spec.template.spec.nodeClassRef.group: 'karpenter.k8s.aws/v1' does not match '^[^/]*$'"
    ],
}


@pytest.mark.parametrize(("name", "obj"), EXAMPLE_OBJECTS, ids=[n for n, _ in EXAMPLE_OBJECTS])
def test_karpenters_examples_and_the_demo_are_valid(name: str, obj: dict[str, Any]) -> None:
    assert field_errors(crds()[obj["kind"]], obj) == KNOWN_INVALID.get(name, [])


def test_karpenters_examples_cover_nodepools_and_ec2nodeclasses() -> None:
    kinds = {o["kind"] for _, o in EXAMPLE_OBJECTS}
    assert {"NodePool", "EC2NodeClass", "ClusterAPINodeClass"} <= kinds


def _nodepool(**requirement: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "bad"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.sh",
                        "kind": "ClusterAPINodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"], **requirement}
                    ],
                }
            }
        },
    }


def test_a_bad_nodepool_is_refused_with_the_field_named() -> None:
    nodepool = crds()["NodePool"]
    assert field_errors(nodepool, _nodepool()) == []
    [error] = field_errors(nodepool, _nodepool(operator="Equals"))
    assert error.startswith("spec.template.spec.requirements[0].operator: 'Equals' is not one of")
    bad_budget = _nodepool()
    bad_budget["spec"]["disruption"] = {"budgets": [{"nodes": "ten"}]}
    [error] = field_errors(nodepool, bad_budget)
    assert error.startswith("spec.disruption.budgets[0].nodes: 'ten' does not match")


def _openstack_nodeclass() -> dict[str, Any]:
    text = (ROOT / "docs" / "openstack.md").read_text()
    block = re.search(r"```yaml\n(apiVersion: karpenter\.cluster\.x-k8s\.io/v1alpha1\n.*?)```", text, re.S)
    assert block, "docs/openstack.md: the ClusterAPINodeClass example"
    doc: dict[str, Any] = yaml.safe_load(block[1])
    return doc


def test_the_openstack_extension_is_in_the_schema_so_it_is_not_pruned() -> None:
    nodeclass = crds()["ClusterAPINodeClass"]
    example = _openstack_nodeclass()
    assert field_errors(nodeclass, example) == []
    openstack = version_schema(nodeclass)["properties"]["spec"]["properties"]["openstack"]
    assert set(openstack["properties"]) == {
        "cloud", "cloudsSecretRef", "cloudsYAMLPath", "auth", "regionName", "timeoutSeconds", "prices"
    }  # fmt: skip
    example["spec"]["openstack"]["prices"]["c3-8"] = "ten"
    example["spec"]["openstack"]["timeoutSeconds"] = 0
    assert field_errors(nodeclass, example) == [
        "spec.openstack.prices.c3-8: 'ten' does not match '^[0-9]+(\\\\.[0-9]+)?$'",
        "spec.openstack.timeoutSeconds: 0 is less than or equal to the minimum of 0",
    ]


def test_the_openstack_cross_field_rules_are_cel_rules_on_spec_openstack() -> None:
    schema = version_schema(crds()["ClusterAPINodeClass"])
    rules = {where: [r["message"] for r in rs] for where, rs in _grouped(cel_rules(schema)).items()}
    assert "set either cloud (an entry in clouds.yaml) or auth, not both" in rules[".spec.openstack"]
    assert "set exactly one of passwordSecretRef (recommended) and password" in rules[".spec.openstack.auth"]


def _grouped(rules: Any) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for where, rule in rules:
        grouped.setdefault(where, []).append(rule)
    return grouped


def test_tenons_generated_catalogs_are_valid_instance_catalogs() -> None:
    catalog = crds()["InstanceCatalog"]
    for doc in (fake_400(40), kwok_144()):
        assert field_errors(catalog, doc) == []
    broken = fake_400(2)
    del broken["spec"]["instanceTypes"][1]["offerings"][0]["price"]
    assert field_errors(catalog, broken) == [
        "spec.instanceTypes[1].offerings[0]: 'price' is a required property"
    ]
