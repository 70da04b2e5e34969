"""OpenStack flavors fill the Cluster API catalog: NodeClass surface, openstacksdk against a local stub,
merging.

The OpenStack side is ``devtools.openstack_stub.OpenStackStub``: a real Keystone v3 + Nova flavors HTTP
server on a loopback port, so openstacksdk does its real authentication, catalog lookup, version discovery and
paging. Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.openstack_stub import OpenStackStub, nova_flavor
from tenon.core.wellknown import FLAVOR, INSTANCE_TYPE, KARPENTER_MEMBER, PRICE_PER_HOUR
from tenon.services.launcher_capi.openstack import (
    CPU_ANNOTATION,
    EPHEMERAL_DISK_ANNOTATION,
    LABELS_ANNOTATION,
    MEMORY_ANNOTATION,
    Flavor,
    NodeClassError,
    OpenStackError,
    SecretKeyRef,
    enrich_machine_deployments,
    load_flavors,
    openstack_settings_from_nodeclass,
    read_flavors,
    with_secrets,
)

# openstacksdk's own PendingDeprecationWarnings about its internals say nothing about this code.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:openstack")

PASSWORD_REF = SecretKeyRef(namespace="kube-system", name="openstack-credentials", key="password")


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests honours proxy variables; with them unset every call stays on 127.0.0.1."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OS_CLIENT_CONFIG_FILE", raising=False)


@pytest.fixture
def cloud() -> Iterator[OpenStackStub]:
    flavors = [
        nova_flavor("c3-4", vcpus=2, ram_mib=4096, disk_gib=40, extra_specs={"hw:cpu_policy": "dedicated"}),
        nova_flavor("c3-8", vcpus=4, ram_mib=8192, disk_gib=80),
        nova_flavor("c3-16", vcpus=8, ram_mib=16384, disk_gib=160),
        nova_flavor("bfv-8", vcpus=4, ram_mib=8192, disk_gib=0),
        nova_flavor("old-2", vcpus=1, ram_mib=2048, disk_gib=20, disabled=True),
    ]
    # A page size of 2 makes openstacksdk follow Nova's "next" links, as it must on a cloud with many flavors.
    with OpenStackStub(flavors=flavors, page_size=2) as stub:
        yield stub


def nodeclass(openstack: Any, name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": name},
        "spec": {"scalableResourceSelector": {}, "openstack": openstack},
    }


def auth_spec(stub: OpenStackStub, auth_url: str | None = None) -> dict[str, Any]:
    return {
        "authURL": auth_url or stub.auth_url,
        "username": stub.username,
        "passwordSecretRef": {"namespace": PASSWORD_REF.namespace, "name": PASSWORD_REF.name},
        "projectName": stub.project_name,
        "userDomainName": "Default",
        "projectDomainName": "Default",
    }


def machine_deployment(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "capi",
            "labels": {KARPENTER_MEMBER: ""},
            "annotations": dict(annotations or {}),
        },
        "spec": {"replicas": 0},
    }


def settings_for(stub: OpenStackStub, *, password: str | None = None, **extra: Any) -> Any:
    spec = {"auth": auth_spec(stub), **extra}
    settings = openstack_settings_from_nodeclass(nodeclass(spec))
    assert settings is not None
    return with_secrets(settings, {PASSWORD_REF: password if password is not None else stub.password})


# -- openstacksdk against the stub ---------------------------------------------------------------------------


def test_flavors_from_openstack_fill_capacity_and_prices(cloud: OpenStackStub) -> None:
    settings = settings_for(cloud, prices={"c3-4": "0.05", "c3-8": "0.1", "c3-16": 0.2})

    flavors = read_flavors(settings)

    assert set(flavors) == {"c3-4", "c3-8", "c3-16", "bfv-8"}, "disabled flavors cannot boot and are left out"
    assert flavors["c3-4"] == Flavor(
        "c3-4", vcpus=2, ram_mib=4096, disk_gib=40, extra_specs={"hw:cpu_policy": "dedicated"}
    )
    pages = [r for r in cloud.requests if r.path.endswith("/flavors/detail")]
    assert len(pages) == 3, "five flavors in pages of two"
    assert not any("os-extra_specs" in r.path for r in cloud.requests), "no request per flavor"

    mds = [machine_deployment("c3-4"), machine_deployment("c3-8"), machine_deployment("c3-16")]
    enriched, notes = enrich_machine_deployments(mds, flavors, dict(settings.prices))

    by_name = {md["metadata"]["name"]: md["metadata"]["annotations"] for md in enriched}
    assert by_name["c3-8"] == {
        CPU_ANNOTATION: "4",
        MEMORY_ANNOTATION: "8192Mi",
        EPHEMERAL_DISK_ANNOTATION: "80Gi",
        PRICE_PER_HOUR: "0.1",
    }
    assert by_name["c3-16"][PRICE_PER_HOUR] == "0.2"
    assert by_name["c3-4"][CPU_ANNOTATION] == "2"
    assert len(notes) == 3
    assert "capi/c3-8" in notes[1] and "OpenStack flavor 'c3-8'" in notes[1] and "price table" in notes[1]


async def test_read_flavors_from_async_code_in_a_thread() -> None:
    async with OpenStackStub(flavors=[nova_flavor("m1.small", vcpus=1, ram_mib=2048, disk_gib=20)]) as stub:
        flavors = await asyncio.to_thread(read_flavors, settings_for(stub))
    assert flavors == {"m1.small": Flavor("m1.small", vcpus=1, ram_mib=2048, disk_gib=20, extra_specs={})}


async def test_load_flavors_reads_secrets_through_the_callers_reader(cloud: OpenStackStub) -> None:
    settings = openstack_settings_from_nodeclass(nodeclass({"auth": auth_spec(cloud)}))
    assert settings is not None
    asked: list[SecretKeyRef] = []

    async def read_secret(ref: SecretKeyRef) -> str | None:
        asked.append(ref)
        return cloud.password + "\n"  # as `kubectl create secret --from-file` stores it

    assert (await load_flavors(settings, read_secret))["c3-8"].vcpus == 4
    assert asked == [PASSWORD_REF]


async def test_load_flavors_with_a_missing_secret_names_the_field(cloud: OpenStackStub) -> None:
    settings = openstack_settings_from_nodeclass(nodeclass({"auth": auth_spec(cloud)}))
    assert settings is not None

    async def no_secrets(ref: SecretKeyRef) -> str | None:
        return None

    with pytest.raises(NodeClassError, match=r"spec.openstack.auth.passwordSecretRef: Secret kube-system/"):
        await load_flavors(settings, no_secrets)
    assert cloud.requests == []


def test_cloud_from_a_clouds_yaml_file(cloud: OpenStackStub, tmp_path: Path) -> None:
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(cloud.clouds_yaml("devstack")))
    settings = openstack_settings_from_nodeclass(
        nodeclass({"cloud": "devstack", "cloudsYAMLPath": str(path), "timeoutSeconds": 5})
    )
    assert settings is not None and settings.secret_refs() == []

    assert read_flavors(settings)["c3-16"].vcpus == 8


def test_cloud_from_the_default_search_path_honours_os_client_config_file(
    cloud: OpenStackStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(cloud.clouds_yaml("devstack")))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(path))
    settings = openstack_settings_from_nodeclass(nodeclass({"cloud": "devstack"}))
    assert settings is not None

    assert read_flavors(settings)["c3-8"].ram_mib == 8192


def test_cloud_missing_from_clouds_yaml_file_is_a_clear_error(cloud: OpenStackStub, tmp_path: Path) -> None:
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(cloud.clouds_yaml("devstack")))
    settings = openstack_settings_from_nodeclass(nodeclass({"cloud": "prod", "cloudsYAMLPath": str(path)}))
    assert settings is not None

    with pytest.raises(OpenStackError, match=r'ClusterAPINodeClass "default".*prod'):
        read_flavors(settings)


def test_missing_clouds_yaml_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    settings = openstack_settings_from_nodeclass(nodeclass({"cloud": "prod", "cloudsYAMLPath": str(path)}))
    assert settings is not None

    with pytest.raises(OpenStackError, match=rf"spec.openstack.cloudsYAMLPath: {path} is not a file"):
        read_flavors(settings)


def test_cloud_from_a_clouds_yaml_secret(cloud: OpenStackStub) -> None:
    ref = SecretKeyRef(namespace="capo-system", name="cloud-config", key="clouds.yaml")
    settings = openstack_settings_from_nodeclass(
        nodeclass(
            {"cloud": "devstack", "cloudsSecretRef": {"namespace": "capo-system", "name": "cloud-config"}}
        )
    )
    assert settings is not None
    assert settings.secret_refs() == [ref]

    resolved = with_secrets(settings, {ref: yaml.safe_dump(cloud.clouds_yaml("devstack"))})

    assert resolved.secret_refs() == []
    assert "c3-4" in read_flavors(resolved)
    assert "s3cret" not in repr(resolved), "credentials never show in reprs or logs"


def test_wrong_password_is_a_clear_error(cloud: OpenStackStub) -> None:
    settings = settings_for(cloud, password="not-the-password")

    with pytest.raises(OpenStackError) as caught:
        read_flavors(settings)

    message = str(caught.value)
    assert 'ClusterAPINodeClass "default"' in message
    assert "401" in message and "credentials" in message
    assert cloud.auth_url in message
    assert "not-the-password" not in message
    assert not any("flavors" in r.path for r in cloud.requests), "no compute call without a token"


@pytest.mark.parametrize(
    ("field", "value"), [("username", "mallory"), ("projectName", "other"), ("userDomainName", "LDAP")]
)
def test_wrong_user_project_or_domain_is_refused(cloud: OpenStackStub, field: str, value: str) -> None:
    spec = {"auth": {**auth_spec(cloud), field: value}}
    parsed = openstack_settings_from_nodeclass(nodeclass(spec))
    assert parsed is not None

    with pytest.raises(OpenStackError, match=r"refused the credentials \(HTTP 401\)"):
        read_flavors(with_secrets(parsed, {PASSWORD_REF: cloud.password}))


def test_wrong_password_in_clouds_yaml_secret_is_a_clear_error(cloud: OpenStackStub) -> None:
    ref = SecretKeyRef(namespace="capo-system", name="cloud-config", key="clouds.yaml")
    settings = openstack_settings_from_nodeclass(
        nodeclass(
            {"cloud": "devstack", "cloudsSecretRef": {"namespace": "capo-system", "name": "cloud-config"}}
        )
    )
    assert settings is not None
    resolved = with_secrets(settings, {ref: yaml.safe_dump(cloud.clouds_yaml("devstack", password="nope"))})

    with pytest.raises(OpenStackError, match=r"refused the credentials \(HTTP 401\)"):
        read_flavors(resolved)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_refused_endpoint_is_a_clear_error_quickly(cloud: OpenStackStub) -> None:
    url = f"http://127.0.0.1:{_free_port()}/identity"
    spec = {"auth": auth_spec(cloud, auth_url=url), "timeoutSeconds": 2}
    parsed = openstack_settings_from_nodeclass(nodeclass(spec))
    assert parsed is not None
    settings = with_secrets(parsed, {PASSWORD_REF: "x"})

    started = time.monotonic()
    with pytest.raises(OpenStackError, match="cannot connect") as caught:
        read_flavors(settings)

    assert time.monotonic() - started < 2
    assert url in str(caught.value) and 'ClusterAPINodeClass "default"' in str(caught.value)


def test_silent_endpoint_times_out_after_timeout_seconds() -> None:
    # A socket that is listening but never answers: the TCP handshake succeeds, the HTTP reply never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/identity"
        stub = OpenStackStub()
        spec = {"auth": {**auth_spec(stub, auth_url=url)}, "timeoutSeconds": 0.5}
        settings = openstack_settings_from_nodeclass(nodeclass(spec))
        assert settings is not None
        settings = with_secrets(settings, {PASSWORD_REF: "x"})

        started = time.monotonic()
        with pytest.raises(OpenStackError, match=r"no answer within 0.5 s"):
            read_flavors(settings)
        assert time.monotonic() - started < 3


def test_region_without_compute_is_a_clear_error(cloud: OpenStackStub) -> None:
    settings = settings_for(cloud, regionName="RegionTwo")

    with pytest.raises(OpenStackError, match=r'ClusterAPINodeClass "default".*compute.*RegionTwo'):
        read_flavors(settings)


def test_unread_secret_fails_before_any_request(cloud: OpenStackStub) -> None:
    settings = openstack_settings_from_nodeclass(nodeclass({"auth": auth_spec(cloud)}))
    assert settings is not None and settings.secret_refs() == [PASSWORD_REF]

    with pytest.raises(OpenStackError, match="Secret kube-system/openstack-credentials key 'password'"):
        read_flavors(settings)
    assert cloud.requests == []


def test_stub_rejects_compute_calls_without_a_valid_token(cloud: OpenStackStub) -> None:
    request = urllib.request.Request(
        f"{cloud.compute_url}/flavors/detail", headers={"X-Auth-Token": "forged"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["code"] == 401


# -- merging flavors into MachineDeployments (pure) ----------------------------------------------------------

FLAVORS = {
    "c3-8": Flavor("c3-8", vcpus=4, ram_mib=8192, disk_gib=80, extra_specs={}),
    "gpu-a": Flavor("gpu-a", vcpus=16, ram_mib=65536, disk_gib=200, extra_specs={}),
    "bfv-8": Flavor("bfv-8", vcpus=4, ram_mib=8192, disk_gib=0, extra_specs={}),
}


def test_annotations_win_over_flavor_facts_and_price_table() -> None:
    md = machine_deployment(
        "c3-8", {CPU_ANNOTATION: "3500m", MEMORY_ANNOTATION: "7Gi", PRICE_PER_HOUR: "0.09"}
    )

    [enriched], [note] = enrich_machine_deployments([md], FLAVORS, {"c3-8": 0.1})

    annotations = enriched["metadata"]["annotations"]
    assert annotations[CPU_ANNOTATION] == "3500m"
    assert annotations[MEMORY_ANNOTATION] == "7Gi"
    assert annotations[PRICE_PER_HOUR] == "0.09"
    assert annotations[EPHEMERAL_DISK_ANNOTATION] == "80Gi", "only what is missing is filled"
    assert "kept its own cpu=3500m, memory=7Gi, price-per-hour=0.09" in note
    assert "price table says 0.1" in note


def test_empty_annotation_counts_as_missing() -> None:
    md = machine_deployment("c3-8", {CPU_ANNOTATION: " "})
    [enriched], _ = enrich_machine_deployments([md], FLAVORS, {})
    assert enriched["metadata"]["annotations"][CPU_ANNOTATION] == "4"


@pytest.mark.parametrize(
    ("name", "annotations", "expected_cpu", "source"),
    [
        (
            "workers-a",
            {FLAVOR: "gpu-a", LABELS_ANNOTATION: "node.kubernetes.io/instance-type=c3-8"},
            "16",
            "annotation tenon.sh/flavor",
        ),
        (
            "workers-a",
            {LABELS_ANNOTATION: "tier=web, node.kubernetes.io/instance-type=c3-8"},
            "4",
            "node.kubernetes.io/instance-type in annotation",
        ),
        ("gpu-a", {LABELS_ANNOTATION: "tier=web"}, "16", "the MachineDeployment's name"),
        ("gpu-a", {"template-label": "c3-8"}, "4", "label node.kubernetes.io/instance-type in spec.template"),
        (
            "workers-a",
            {"template-label": "c3-8", LABELS_ANNOTATION: "node.kubernetes.io/instance-type=gpu-a"},
            "16",
            "node.kubernetes.io/instance-type in annotation",
        ),
    ],
)
def test_which_flavor_a_machine_deployment_uses(
    name: str, annotations: dict[str, str], expected_cpu: str, source: str
) -> None:
    md = machine_deployment(name, {k: v for k, v in annotations.items() if k != "template-label"})
    if "template-label" in annotations:
        md["spec"]["template"] = {"metadata": {"labels": {INSTANCE_TYPE: annotations["template-label"]}}}
    [enriched], [note] = enrich_machine_deployments([md], FLAVORS, {})
    assert enriched["metadata"]["annotations"][CPU_ANNOTATION] == expected_cpu
    assert source in note


def test_unknown_flavor_leaves_machine_deployment_unchanged_and_says_so() -> None:
    md = machine_deployment("workers-b", {FLAVOR: "m9.huge"})
    [enriched], [note] = enrich_machine_deployments([md], FLAVORS, {"c3-8": 0.1})
    assert enriched == md
    assert "no OpenStack flavor 'm9.huge' (named by annotation tenon.sh/flavor)" in note
    assert "price table has no entry for 'm9.huge'" in note


def test_boot_from_volume_flavor_leaves_ephemeral_disk_unset() -> None:
    [enriched], [note] = enrich_machine_deployments(
        [machine_deployment("bfv-8")], FLAVORS, {"bfv-8": 0.00001}
    )
    annotations = enriched["metadata"]["annotations"]
    assert EPHEMERAL_DISK_ANNOTATION not in annotations
    assert annotations[MEMORY_ANNOTATION] == "8192Mi"
    assert annotations[PRICE_PER_HOUR] == "0.00001", "plain decimals, never 1e-05"
    assert "boot from volume" in note


def test_inputs_are_not_modified_and_odd_entries_pass_through() -> None:
    md = machine_deployment("c3-8")
    bare = {"metadata": {"name": "c3-8"}}
    odd: Any = "not a machine deployment"
    before = [json.dumps(md, sort_keys=True), json.dumps(bare, sort_keys=True)]

    enriched, notes = enrich_machine_deployments([md, bare, odd], FLAVORS, {"c3-8": 0.1})

    assert [json.dumps(md, sort_keys=True), json.dumps(bare, sort_keys=True)] == before
    assert enriched[1]["metadata"]["annotations"][CPU_ANNOTATION] == "4"
    assert enriched[2] == odd and "left as is" in notes[2]


# -- the NodeClass surface -----------------------------------------------------------------------------------


def test_nodeclass_without_openstack_gives_none() -> None:
    assert (
        openstack_settings_from_nodeclass({"kind": "ClusterAPINodeClass", "metadata": {"name": "x"}}) is None
    )
    assert openstack_settings_from_nodeclass(nodeclass(None)) is None


def test_nodeclass_settings_are_read() -> None:
    settings = openstack_settings_from_nodeclass(
        nodeclass(
            {
                "cloud": "prod",
                "regionName": "RegionTwo",
                "timeoutSeconds": 3,
                "prices": {"c3-8": "0.096", "c3-16": 0.192, "tiny": 0},
            },
            name="openstack",
        )
    )
    assert settings is not None
    assert (settings.nodeclass, settings.cloud, settings.region_name) == ("openstack", "prod", "RegionTwo")
    assert settings.timeout_seconds == 3.0
    assert dict(settings.prices) == {"c3-8": 0.096, "c3-16": 0.192, "tiny": 0.0}


AUTH = {
    "authURL": "https://keystone.example.com/v3",
    "username": "tenon",
    "passwordSecretRef": {"namespace": "kube-system", "name": "os"},
    "projectName": "p",
}


@pytest.mark.parametrize(
    ("openstack", "field", "problem"),
    [
        (
            {"cloud": "prod", "prices": {"c3-8": "ten"}},
            'spec.openstack.prices["c3-8"]',
            "non-negative number",
        ),
        ({"cloud": "prod", "prices": {"c3-8": "-1"}}, 'spec.openstack.prices["c3-8"]', "non-negative number"),
        ({"cloud": "prod", "prices": {"c3-8": True}}, 'spec.openstack.prices["c3-8"]', "non-negative number"),
        ({"cloud": "prod", "prices": ["c3-8"]}, "spec.openstack.prices", "must be an object"),
        ({"cloud": "prod", "flavours": {}}, "spec.openstack.flavours", "unknown field"),
        ({"prices": {}}, "spec.openstack.cloud", "is required"),
        ({"cloud": ""}, "spec.openstack.cloud", "non-empty string"),
        ({"cloud": "prod", "auth": AUTH}, "spec.openstack.auth", "not both"),
        ({"cloud": "prod", "timeoutSeconds": 0}, "spec.openstack.timeoutSeconds", "(0, 300]"),
        ({"cloud": "prod", "timeoutSeconds": "10s"}, "spec.openstack.timeoutSeconds", "(0, 300]"),
        (
            {"cloud": "p", "cloudsYAMLPath": "/a", "cloudsSecretRef": {"namespace": "n", "name": "s"}},
            "spec.openstack.cloudsSecretRef",
            "not both",
        ),
        (
            {"cloud": "p", "cloudsSecretRef": {"name": "s"}},
            "spec.openstack.cloudsSecretRef.namespace",
            "is required",
        ),
        ({"auth": {**AUTH, "projectName": None}}, "spec.openstack.auth.projectName", "is required"),
        ({"auth": {**AUTH, "authURL": "keystone:5000"}}, "spec.openstack.auth.authURL", "http(s) URL"),
        ({"auth": {**AUTH, "password": "pw"}}, "spec.openstack.auth.passwordSecretRef", "exactly one"),
        (
            {"auth": {**AUTH, "passwordSecretRef": None}},
            "spec.openstack.auth.passwordSecretRef",
            "exactly one",
        ),
        ({"auth": {**AUTH, "domain": "x"}}, "spec.openstack.auth.domain", "unknown field"),
        ("prod", "spec.openstack", "must be an object"),
    ],
)
def test_invalid_nodeclass_field_is_named(openstack: Any, field: str, problem: str) -> None:
    with pytest.raises(NodeClassError) as caught:
        openstack_settings_from_nodeclass(nodeclass(openstack, name="gpu-pool"))
    error = caught.value
    assert (error.nodeclass, error.field_path) == ("gpu-pool", field)
    assert problem in error.problem
    assert str(error).startswith(f'ClusterAPINodeClass "gpu-pool": {field}: ')


def test_nodeclass_without_name_is_named_as_such() -> None:
    with pytest.raises(NodeClassError, match=r"metadata.name: is required"):
        openstack_settings_from_nodeclass(
            {"kind": "ClusterAPINodeClass", "spec": {"openstack": {"cloud": "a"}}}
        )


def test_secret_problems_name_the_field() -> None:
    settings = openstack_settings_from_nodeclass(
        nodeclass({"cloud": "prod", "cloudsSecretRef": {"namespace": "capo-system", "name": "cloud-config"}})
    )
    assert settings is not None
    [ref] = settings.secret_refs()

    with pytest.raises(
        NodeClassError, match=r"spec.openstack.cloudsSecretRef: Secret capo-system/cloud-config"
    ):
        with_secrets(settings, {})
    with pytest.raises(
        NodeClassError, match=r"spec.openstack.cloud: cloud 'prod' is not in .* \(clouds there: a, b\)"
    ):
        with_secrets(settings, {ref: "clouds: {a: {}, b: {}}"})
    with pytest.raises(NodeClassError, match=r"no top-level 'clouds' mapping"):
        with_secrets(settings, {ref: "- just a list"})


# -- end to end: NodeClass + cloud -> catalog ----------------------------------------------------------------


def test_unannotated_machine_deployments_become_priced_instance_types(cloud: OpenStackStub) -> None:
    """The field case of issue 3, with capacity and prices known only to OpenStack and the NodeClass."""
    from tenon.core.catalog import instance_types_from_machine_deployments

    mds = [machine_deployment(name) for name in ("c3-4", "c3-8", "c3-16")]
    _, skipped_before = instance_types_from_machine_deployments(mds)
    assert len(skipped_before) == 3, "without the flavors nothing says how big these machines are"

    settings = settings_for(cloud, prices={"c3-4": "0.05", "c3-8": "0.1", "c3-16": "0.2"})
    enriched, _ = enrich_machine_deployments(mds, read_flavors(settings), dict(settings.prices))
    types, skipped = instance_types_from_machine_deployments(enriched)

    assert skipped == []
    by_name = {t.name: t for t in types}
    assert set(by_name) == {"c3-4", "c3-8", "c3-16"}
    assert by_name["c3-8"].capacity["cpu"] == 4000
    assert by_name["c3-8"].capacity["memory"] == 8192 * 2**20
    assert by_name["c3-8"].capacity["ephemeral-storage"] == 80 * 2**30
    assert {name: t.offerings[0].price for name, t in by_name.items()} == {
        "c3-4": 0.05,
        "c3-8": 0.1,
        "c3-16": 0.2,
    }
    assert not any(t.price_estimated for t in types)
