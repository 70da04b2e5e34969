"""The sandbox serves CustomResourceDefinitions as a kube-apiserver does, seen through kubectl and a client:
tenon's CRDs and Karpenter's own examples apply (server dry run), a bad NodePool is refused with the field
named, unknown fields are pruned and defaults show on read, CEL rules hold, deleting a CRD stops serving
it."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from devtools.sandbox.runtime import DEPLOY_CRDS
from devtools.sandbox.testing import SandboxHandle
from tests.sandbox.conftest import KubectlRunner

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "tests" / "deploy" / "karpenter_examples"  # Karpenter's example NodePools, vendored there
DEMO = REPO / "deploy" / "examples" / "capi-demo" / "nodepool.yaml"
CRD_FILES = sorted(p for p in DEPLOY_CRDS.rglob("*.yaml") if p.name != "kustomization.yaml")
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")


def nodepool(name: str, **spec: Any) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        }
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


async def test_kubectl_server_dry_run_of_tenons_crds_and_karpenters_examples(
    crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner
) -> None:
    examples = sorted(EXAMPLES.glob("*.yaml"))
    files = [arg for path in [*CRD_FILES, *examples, DEMO] for arg in ("-f", str(path))]
    applied = await crd_kubectl("apply", "--dry-run=server", *files, limit_seconds=120)
    for path in CRD_FILES:
        [crd] = _objects(path)
        assert (
            f"customresourcedefinition.apiextensions.k8s.io/{crd['metadata']['name']} "
            "configured (server dry run)" in applied.stdout
        )
    expected = 0
    for path in [*examples, DEMO]:
        for obj in _objects(path):
            group = obj["apiVersion"].split("/")[0]
            line = f"{obj['kind'].lower()}.{group}/{obj['metadata']['name']} created (server dry run)"
            if (path.name, obj["metadata"]["name"]) == (
                "windows-custom-userdata.yaml",
                "windows2022",
            ) and obj["kind"] == "NodePool":
                continue  # Karpenter's own example puts a version in nodeClassRef.group: its CRD refuses it
            expected += 1
            assert line in applied.stdout, (path.name, line)
    assert expected > 40
    # the one invalid example is refused by the schema, naming the field, exactly as a real cluster does
    assert applied.code != 0
    assert (
        'The NodePool "windows2022" is invalid: spec.template.spec.nodeClassRef.group: Invalid value: '
        "\"karpenter.k8s.aws/v1\": spec.template.spec.nodeClassRef.group in body should match '^[^/]*$'"
    ) in applied.stderr
    store = crd_sandbox.workload_store
    assert store.list(store.resource("karpenter.sh/v1", "NodePool"))[0] == []  # a dry run stores nothing


async def test_a_crd_applied_with_kubectl_serves_its_kind_with_its_printer_columns(
    api_sandbox: SandboxHandle, kubectl: KubectlRunner
) -> None:
    crd = DEPLOY_CRDS / "karpenter" / "karpenter.sh_nodeclaims.yaml"
    installed = await kubectl("apply", "-f", str(crd))
    assert installed.code == 0, installed.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/nodeclaims.karpenter.sh created" in installed.stdout
    established = await kubectl(
        "get",
        "crd",
        "nodeclaims.karpenter.sh",
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Established")].status}',
    )
    assert established.stdout == "True", established.stderr
    store = api_sandbox.workload_store
    claims = store.resource("karpenter.sh/v1", "NodeClaim")
    assert claims.custom is not None  # served from the CRD, no longer the stand-in
    store.create(
        claims,
        {
            "metadata": {
                "name": "default-abcde",
                "labels": {
                    "node.kubernetes.io/instance-type": "c3-8",
                    "karpenter.sh/capacity-type": "on-demand",
                    "topology.kubernetes.io/zone": "zone-a",
                },
            },
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.cluster.x-k8s.io",
                    "kind": "ClusterAPINodeClass",
                    "name": "d",
                },
                "requirements": [],
            },
        },
    )
    store.patch(
        claims,
        "default-abcde",
        None,
        {
            "status": {
                "nodeName": "node-1",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Ready",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        },
        "application/merge-patch+json",
        "status",
    )
    listed = await kubectl("get", "nodeclaims")
    assert listed.code == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert row.split()[:6] == ["default-abcde", "c3-8", "on-demand", "zone-a", "node-1", "True"]


async def test_a_bad_nodepool_is_refused_with_the_field_named(
    crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner
) -> None:
    bad = nodepool("bad", disruption={"budgets": [{"nodes": "ten"}]})
    refused = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(bad))
    assert refused.code != 0
    assert (
        'The NodePool "bad" is invalid: spec.disruption.budgets[0].nodes: Invalid value: "ten": '
        "spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'"
    ) in refused.stderr
    async with crd_sandbox.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as caught:
            await custom.create_cluster_custom_object(*NODEPOOLS, nodepool("bad", weight=0))
    status = status_of(caught.value)
    assert caught.value.status == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        'NodePool.karpenter.sh "bad" is invalid: spec.weight: Invalid value: 0: spec.weight in body should '
        "be greater than or equal to 1"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: spec.weight in body should be greater than or equal to 1",
            "field": "spec.weight",
        }
    ]
    store = crd_sandbox.workload_store
    assert store.list(store.resource("karpenter.sh/v1", "NodePool"))[0] == []


async def test_unknown_fields_are_pruned_and_defaults_show_on_read(
    crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner
) -> None:
    pool = nodepool("general", surprise=True)
    pool["spec"]["template"]["spec"]["invented"] = {"x": 1}
    strict = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(pool))  # kubectl validates strictly
    assert strict.code != 0
    assert (
        'NodePool in version "v1" cannot be handled as a NodePool: strict decoding error: unknown field '
        '"spec.surprise", unknown field "spec.template.spec.invented"'
    ) in strict.stderr
    lenient = await crd_kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(pool))
    assert lenient.code == 0, lenient.stderr
    assert 'Warning: unknown field "spec.surprise"' in lenient.stderr
    async with crd_sandbox.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        got = await custom.get_cluster_custom_object(*NODEPOOLS, "general")
    assert "surprise" not in got["spec"] and "invented" not in got["spec"]["template"]["spec"]
    assert got["spec"]["disruption"] == {
        "budgets": [{"nodes": "10%"}],
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
    }
    assert got["spec"]["template"]["spec"]["expireAfter"] == "720h"


async def test_a_default_added_by_a_crd_update_shows_on_objects_already_stored(
    crd_sandbox: SandboxHandle,
) -> None:
    store = crd_sandbox.workload_store
    catalogs = store.resource("tenon.sh/v1alpha1", "InstanceCatalog")
    crds = store.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    [doc] = _objects(DEPLOY_CRDS / "tenon" / "tenon.sh_instancecatalogs.yaml")
    spec_schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    store.create(catalogs, {"metadata": {"name": "c"}, "spec": {"provider": "kwok", "instanceTypes": []}})
    version = store.get(catalogs, "c")["metadata"]["resourceVersion"]
    spec_schema["properties"]["region"] = {"type": "string", "default": "local"}
    crd = store.get(crds, doc["metadata"]["name"])
    crd["spec"] = doc["spec"]
    store.update(crds, crd)
    got = store.get(store.resource("tenon.sh/v1alpha1", "InstanceCatalog"), "c")
    assert got["spec"]["region"] == "local"  # defaulted on read, as from etcd
    assert got["metadata"]["resourceVersion"] == version


async def test_cel_rules_are_enforced(crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner) -> None:
    restricted = nodepool("restricted")
    restricted["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/custom", "operator": "Exists"}
    ]
    refused = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(restricted))
    assert (
        'spec.template.spec.requirements[0].key: Invalid value: "string": '
        'label domain "karpenter.sh" is restricted' in refused.stderr
    )
    budget = nodepool("budget", disruption={"budgets": [{"nodes": "1", "schedule": "@daily"}]})
    refused = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(budget))
    assert (
        "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'"
        in refused.stderr
    )
    # transition rules hold on updates: the node class group is immutable, static stays static
    created = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(nodepool("pool")))
    assert created.code == 0, created.stderr
    moved = await crd_kubectl(
        "patch", "nodepool", "pool", "--type=merge",
        "-p", '{"spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.cluster.x-k8s.io"}}}}}',
    )  # fmt: skip
    assert (
        'spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.group is immutable'
        in moved.stderr
    )
    scaled = await crd_kubectl("scale", "nodepool/pool", "--replicas=3")
    assert (
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning "
        "modes" in scaled.stderr
    )
    # tenon's own rules on spec.openstack (docs/openstack.md)
    both = {
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": "both"},
        "spec": {"openstack": {"cloud": "c", "auth": {"authURL": "https://keystone", "username": "u",
                                                      "password": "p", "projectName": "x"}}},
    }  # fmt: skip
    refused = await crd_kubectl("apply", "-f", "-", stdin=json.dumps(both))
    assert (
        'spec.openstack: Invalid value: "object": '
        "set either cloud (an entry in clouds.yaml) or auth, not both" in refused.stderr
    )
    store = crd_sandbox.workload_store
    pools = store.resource("karpenter.sh/v1", "NodePool")
    assert [p["metadata"]["name"] for p in store.list(pools)[0]] == ["pool"]
    assert "replicas" not in store.get(pools, "pool")["spec"]


async def test_scale_of_a_static_nodepool_follows_the_crds_replica_paths(
    crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner
) -> None:
    store = crd_sandbox.workload_store
    pools = store.resource("karpenter.sh/v1", "NodePool")
    store.create(pools, nodepool("static", replicas=2))
    store.patch(pools, "static", None, {"status": {"nodes": 1}}, "application/merge-patch+json", "status")
    scaled = await crd_kubectl("scale", "nodepool/static", "--replicas=4")
    assert scaled.code == 0, scaled.stderr
    assert store.get(pools, "static")["spec"]["replicas"] == 4
    assert store.get_scale(pools, "static")["status"]["replicas"] == 1  # status.nodes, the CRD's path


async def test_deleting_a_crd_deletes_its_objects_and_stops_serving_the_kind(
    crd_sandbox: SandboxHandle, crd_kubectl: KubectlRunner
) -> None:
    store = crd_sandbox.workload_store
    pools = store.resource("karpenter.sh/v1", "NodePool")
    store.create(pools, nodepool("plain"))
    held = nodepool("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    store.create(pools, held)
    watch = store.watch(pools, resource_version=store.resource_version)
    deleted = await crd_kubectl("delete", "crd", "nodepools.karpenter.sh", "--wait=false")
    assert deleted.code == 0, deleted.stderr
    crds = store.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    crd = store.get(crds, "nodepools.karpenter.sh")  # held by an instance's finalizer
    assert crd["metadata"]["deletionTimestamp"]
    assert "Terminating" in {c["type"] for c in crd["status"]["conditions"]}
    assert [p["metadata"]["name"] for p in store.list(pools)[0]] == ["held"]
    store.patch(pools, "held", None, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    seen = []
    async for event in watch:
        seen.append((event.type, event.object["metadata"]["name"]))
    assert ("DELETED", "plain") in seen and seen[-1] == ("DELETED", "held")  # then the watch ended
    assert store.list(crds)[0] == [
        c for c in store.list(crds)[0] if c["metadata"]["name"] != "nodepools.karpenter.sh"
    ]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{crd_sandbox.workload_url}/apis/karpenter.sh/v1/nodepools") as response:
            assert response.status == 404
        async with http.get(f"{crd_sandbox.workload_url}/apis/karpenter.sh/v1") as response:
            names = {r["name"] for r in (await response.json())["resources"]}
    assert "nodepools" not in names and "nodeclaims" in names
    gone = await crd_kubectl("get", "nodepools")  # kubectl's discovery cache still knows the kind
    assert gone.code != 0 and "Error from server (NotFound)" in gone.stderr and "nodepools" in gone.stderr


async def test_a_rule_the_engine_cannot_evaluate_is_accepted_and_logged_once(
    api_sandbox: SandboxHandle, caplog: pytest.LogCaptureFixture
) -> None:
    store = api_sandbox.workload_store
    crds = store.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    rule = "quantity(self.size).isGreaterThan(quantity('1'))"
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "string"}},
                "x-kubernetes-validations": [{"rule": rule, "message": "size must exceed 1"}],
            }
        },
    }
    with caplog.at_level(logging.WARNING, logger="devtools.sandbox.cel_validation"):
        store.create(
            crds,
            {
                "metadata": {"name": "gadgets.example.com"},
                "spec": {
                    "group": "example.com",
                    "names": {"plural": "gadgets", "kind": "Gadget"},
                    "scope": "Cluster",
                    "versions": [
                        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
                    ],
                },
            },
        )
        gadgets = store.resource("example.com/v1", "Gadget")
        store.create(gadgets, {"metadata": {"name": "a"}, "spec": {"size": "0"}})
        store.create(gadgets, {"metadata": {"name": "b"}, "spec": {"size": "0"}})
    said = [r.getMessage() for r in caplog.records if rule in r.getMessage()]
    assert len(said) == 1 and ".spec" in said[0] and "quantity" in said[0], said
    assert [g["metadata"]["name"] for g in store.list(gadgets)[0]] == ["a", "b"]


async def test_tenon_sandbox_refuses_to_start_with_a_crd_the_api_server_would_refuse(tmp_path: Path) -> None:
    [doc] = _objects(DEPLOY_CRDS / "tenon" / "tenon.sh_instancecatalogs.yaml")
    doc["metadata"]["name"] = "catalogs.tenon.sh"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devtools.sandbox", "--port", "0", "--management-port", "0",
        "--kubeconfig", str(tmp_path / "w"), "--management-kubeconfig", str(tmp_path / "m"),
        "--no-controllers", "--crds", str(bad),
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert (
        f"sandbox: CRDs: {bad}: "
        'CustomResourceDefinition.apiextensions.k8s.io "catalogs.tenon.sh" is invalid: '
        'metadata.name: Invalid value: "catalogs.tenon.sh": must be spec.names.plural+"."+spec.group'
    ) in err.decode()
    assert not (tmp_path / "w").exists()


async def test_status_writes_are_validated_and_main_writes_leave_status_alone(
    crd_sandbox: SandboxHandle,
) -> None:
    async with crd_sandbox.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        await custom.create_cluster_custom_object(*NODEPOOLS, nodepool("pool"))
        condition = {
            "type": "Ready",
            "status": "True",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        with pytest.raises(ApiException) as caught:
            await custom.patch_cluster_custom_object_status(
                *NODEPOOLS, "pool", {"status": {"conditions": [condition]}},
                _content_type="application/merge-patch+json",
            )  # fmt: skip
        assert caught.value.status == 422
        assert status_of(caught.value)["details"]["causes"][0]["field"] == "status.conditions[0].reason"
        condition["reason"] = "Ready"
        await custom.patch_cluster_custom_object_status(
            *NODEPOOLS, "pool", {"status": {"conditions": [condition], "nodes": 2}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        ignored = await custom.patch_cluster_custom_object(
            *NODEPOOLS, "pool", {"spec": {"weight": 5}, "status": {"nodes": 9}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
    assert ignored["spec"]["weight"] == 5 and ignored["status"]["nodes"] == 2
    assert ignored["status"]["conditions"][0]["reason"] == "Ready"
