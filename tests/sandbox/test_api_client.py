"""kubernetes-asyncio (the client tenon's services use) driving the sandbox over HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from devtools.sandbox.testing import SandboxHandle, running_sandbox
from tests.sandbox.conftest import node_manifest, pod_manifest


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or b"{}")
    return body


async def test_list_then_watch_and_relist_after_410(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        core: Any = client.CoreV1Api(api)  # dict bodies: the generated stubs want models
        await core.create_namespaced_pod("default", pod_manifest("first"))
        listed = await core.list_namespaced_pod("default")
        rv = listed.metadata.resource_version
        await core.create_namespaced_pod("default", pod_manifest("second"))
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
        )
        event = await asyncio.wait_for(stream.__anext__(), 5)
        assert (event["type"], event["object"].metadata.name) == ("ADDED", "second")
        await stream.close()

        for i in range(80):  # more writes than the 64-event history keeps
            await core.create_namespaced_event(
                "default",
                {"metadata": {"generateName": "e-"}, "involvedObject": {"kind": "Pod", "name": "first"}},
            )
            await core.patch_namespaced_pod("first", "default", {"metadata": {"labels": {"n": str(i)}}})
        stale = watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
        )
        with pytest.raises(ApiException) as expired:
            await asyncio.wait_for(stale.__anext__(), 5)
        assert expired.value.status == 410
        await stale.close()

        relisted = await core.list_namespaced_pod(
            "default"
        )  # the client's recovery: re-list, watch from there
        assert {p.metadata.name for p in relisted.items} == {"first", "second"}
        fresh = watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            resource_version=relisted.metadata.resource_version,
            timeout_seconds=5,
        )
        await core.delete_namespaced_pod("second", "default")
        event = await asyncio.wait_for(fresh.__anext__(), 5)
        assert (event["type"], event["object"].metadata.name) == ("DELETED", "second")
        await fresh.close()


async def test_stale_lease_update_conflicts(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        leases: Any = client.CoordinationV1Api(api)  # dict bodies: the generated stubs want models
        lease = await leases.create_namespaced_lease(
            "kube-system",
            {
                "metadata": {"name": "tenon-leader"},
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
            },
        )
        lease.spec.holder_identity = "b"
        updated = await leases.replace_namespaced_lease("tenon-leader", "kube-system", lease)
        assert updated.spec.holder_identity == "b"
        lease.spec.holder_identity = "c"  # still carries the old resourceVersion
        with pytest.raises(ApiException) as conflict:
            await leases.replace_namespaced_lease("tenon-leader", "kube-system", lease)
        assert conflict.value.status == 409 and status_of(conflict.value)["reason"] == "Conflict"
        with pytest.raises(ApiException) as duplicate:
            await leases.create_namespaced_lease(
                "kube-system", {"metadata": {"name": "tenon-leader"}, "spec": {}}
            )
        assert duplicate.value.status == 409 and status_of(duplicate.value)["reason"] == "AlreadyExists"


async def test_each_patch_type_through_the_client(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        core: Any = client.CoreV1Api(api)  # dict bodies: the generated stubs want models
        await core.create_node(node_manifest("n1"))
        # dict body -> strategic merge patch: conditions merge by type
        await core.patch_node_status(
            "n1",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "MemoryPressure",
                            "status": "False",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                }
            },
        )
        node = await core.read_node("n1")
        assert [c.type for c in node.status.conditions] == ["Ready", "MemoryPressure"]
        # list body -> JSON patch
        await core.patch_node(
            "n1",
            [
                {
                    "op": "add",
                    "path": "/spec/taints",
                    "value": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
                }
            ],
        )
        node = await core.read_node("n1")
        assert node.spec.taints[0].key == "karpenter.sh/disrupted"

        custom: Any = client.CustomObjectsApi(api)  # dict bodies: the generated stubs want models
        await custom.create_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {
                    "template": {
                        "spec": {
                            "nodeClassRef": {
                                "group": "karpenter.k8s.aws",
                                "kind": "EC2NodeClass",
                                "name": "default",
                            }
                        }
                    }
                },
            },
        )
        # The CustomObjectsApi pitfall: a dict sent as application/json-patch+json is refused, as upstream.
        with pytest.raises(ApiException) as refused:
            await custom.patch_cluster_custom_object(
                "karpenter.sh", "v1", "nodepools", "default", {"spec": {"weight": 10}}
            )
        assert refused.value.status == 400 and status_of(refused.value)["kind"] == "Status"
        patched = await custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "default",
            {"spec": {"weight": 10}},
            _content_type="application/merge-patch+json",
        )
        assert patched["spec"]["weight"] == 10
        await custom.patch_cluster_custom_object_status(
            "karpenter.sh",
            "v1",
            "nodepools",
            "default",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Ready",
                            "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                }
            },
            _content_type="application/merge-patch+json",
        )
        got = await custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
        assert got["status"]["conditions"][0]["type"] == "Ready" and got["spec"]["weight"] == 10


async def test_selectors_limit_and_continue(api_sandbox: SandboxHandle) -> None:
    store = api_sandbox.workload_store
    pods = store.resource("v1", "Pod")
    store.create(store.resource("v1", "Namespace"), {"metadata": {"name": "team"}})
    for i in range(5):
        store.create(
            pods,
            pod_manifest(
                f"p{i}", namespace="team" if i % 2 else "default", labels={"app": "web" if i < 3 else "db"}
            ),
        )
    store.bind("p1", "team", "n1")
    store.bind("p2", "default", "n1")
    async with api_sandbox.api_client() as api:
        core: Any = client.CoreV1Api(api)  # dict bodies: the generated stubs want models
        on_node = await core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=n1,status.phase!=Succeeded", label_selector="app=web"
        )
        assert sorted(p.metadata.name for p in on_node.items) == ["p1", "p2"]
        names: list[str] = []
        token = None
        while True:
            page = await core.list_pod_for_all_namespaces(limit=2, _continue=token)
            names += [p.metadata.name for p in page.items]
            token = page.metadata._continue
            if not token:
                break
        assert sorted(names) == [f"p{i}" for i in range(5)] and len(names) == 5
        with pytest.raises(ApiException) as bad:
            await core.list_pod_for_all_namespaces(field_selector="spec.containers=x")
        assert bad.value.status == 400 and "field label not supported" in status_of(bad.value)["message"]
        with pytest.raises(ApiException) as bad_labels:
            await core.list_namespaced_pod("default", label_selector="app in (web")
        assert bad_labels.value.status == 400


async def test_bookmarks_and_server_closed_watches_reconnect() -> None:
    async with (
        running_sandbox(controllers=False, watch_max_seconds=0.4, bookmark_interval=0.1) as sandbox,
        sandbox.api_client() as api,
    ):
        core: Any = client.CoreV1Api(api)  # dict bodies: the generated stubs want models
        listed = await core.list_node()
        seen: list[str] = []
        bookmarks = 0
        w = watch.Watch()
        # No timeout_seconds: the client watches "forever" and must reconnect when the server ends the stream.
        stream = w.stream(
            core.list_node, resource_version=listed.metadata.resource_version, allow_watch_bookmarks=True
        )

        async def writer() -> None:
            for i in range(6):
                await asyncio.sleep(0.25)
                sandbox.workload_store.create(
                    sandbox.workload_store.resource("v1", "Node"), node_manifest(f"n{i}")
                )

        task = asyncio.create_task(writer())
        async with asyncio.timeout(10):
            async for event in stream:
                if event["type"] == "BOOKMARK":
                    bookmarks += 1
                    continue
                seen.append(event["object"].metadata.name)
                if len(seen) == 6:
                    break
        await task
        await w.close()
        assert seen == [f"n{i}" for i in range(6)]  # nothing lost across the server-side closes
        assert bookmarks >= 1


async def test_eviction_blocked_by_budget_and_binding(api_sandbox: SandboxHandle) -> None:
    store = api_sandbox.workload_store
    pods, pdbs = store.resource("v1", "Pod"), store.resource("policy/v1", "PodDisruptionBudget")
    async with api_sandbox.api_client() as api:
        core: Any = client.CoreV1Api(api)  # dict bodies: the generated stubs want models
        await core.create_namespaced_pod("default", pod_manifest("web-1", labels={"app": "web"}))
        # The real server answers a binding with a Status, which the generated client cannot parse as a
        # V1Binding (kubernetes-client/python#825); callers read the raw response, as sandbox users must.
        response = await core.create_namespaced_pod_binding(
            "web-1",
            "default",
            {"metadata": {"name": "web-1"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
            _preload_content=False,
        )
        assert response.status == 201 and (await response.json())["status"] == "Success"
        await core.create_namespaced_pod("default", pod_manifest("web-2", labels={"app": "web"}))
        old_style = await core.create_namespaced_binding(
            "default",
            {  # POST .../namespaces/default/bindings
                "metadata": {"name": "web-2"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"},
            },
            _preload_content=False,
        )
        assert old_style.status == 201
        assert store.get(pods, "web-2", "default")["spec"]["nodeName"] == "n2"
        pod = store.get(pods, "web-1", "default")
        assert pod["spec"]["nodeName"] == "n1"
        store.update(pods, {**pod, "status": {**pod["status"], "phase": "Running"}}, subresource="status")
        pdb = store.create(
            pdbs,
            {
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
            },
        )
        store.update(
            pdbs,
            {
                **pdb,
                "status": {
                    "observedGeneration": 1,
                    "disruptionsAllowed": 0,
                    "currentHealthy": 1,
                    "desiredHealthy": 1,
                    "expectedPods": 1,
                },
            },
            subresource="status",
        )
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "web-1", "namespace": "default"},
        }
        with pytest.raises(ApiException) as blocked:
            await core.create_namespaced_pod_eviction("web-1", "default", eviction)
        assert blocked.value.status == 429
        assert status_of(blocked.value)["details"]["causes"][0]["reason"] == "DisruptionBudget"
        with pytest.raises(ApiException) as mismatch:
            await core.create_namespaced_pod_eviction(
                "web-1", "default", {**eviction, "metadata": {"name": "x"}}
            )
        assert mismatch.value.status == 400


async def test_bad_requests_get_a_status_never_a_trace(api_sandbox: SandboxHandle) -> None:
    url = api_sandbox.workload_url
    cases: list[tuple[str, str, Any, int, str]] = [
        ("GET", "/api/v1/widgets", None, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/widgets", None, 404, "NotFound"),
        ("GET", "/apis/example.com/v1/things", None, 404, "NotFound"),
        ("POST", "/api/v1/namespaces/default/pods", "{not json", 400, "BadRequest"),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "p"}, "spec": {"containers": []}},
            422,
            "Invalid",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            {"kind": "Node", "metadata": {"name": "p"}},
            400,
            "BadRequest",
        ),
        ("GET", "/api/v1/pods?labelSelector=a%20in%20(b", None, 400, "BadRequest"),
        ("GET", "/api/v1/pods?fieldSelector=spec.image%3Dx", None, 400, "BadRequest"),
        ("GET", "/api/v1/pods?watch=maybe", None, 400, "BadRequest"),
        ("GET", "/api/v1/namespaces/default/pods/ghost", None, 404, "NotFound"),
        ("PATCH", "/api/v1/nodes/ghost", {"spec": {}}, 404, "NotFound"),
        ("DELETE", "/api/v1/nodes", "[1]", 400, "BadRequest"),
        ("GET", "/api/v1/namespaces/default/bindings", None, 405, "MethodNotAllowed"),
        (
            "POST",
            "/api/v1/namespaces/default/pods/ghost/binding",
            {"target": {"name": "n1"}},
            404,
            "NotFound",
        ),
    ]
    async with aiohttp.ClientSession() as session:
        for method, path, body, code, reason in cases:
            data = body if isinstance(body, str) else json.dumps(body) if body is not None else None
            headers = {
                "Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json"
            }
            async with session.request(method, url + path, data=data, headers=headers) as response:
                payload = await response.json(content_type=None)
                assert (response.status, payload["kind"], payload["reason"]) == (code, "Status", reason), path
                assert "Traceback" not in payload["message"]


async def test_scale_subresource_and_discovery(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        apps: Any = client.AppsV1Api(api)  # dict bodies: the generated stubs want models
        await apps.create_namespaced_deployment(
            "default",
            {
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c"}]},
                    },
                },
            },
        )
        core: Any = client.CoreV1Api(api)
        scale = await apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 8}})
        assert scale.spec.replicas == 8 and scale.status.selector == "app=web"
        assert (await apps.read_namespaced_deployment("web", "default")).spec.replicas == 8
        resources = await core.get_api_resources()
        eviction = next(r for r in resources.resources if r.name == "pods/eviction")
        assert (eviction.group, eviction.version, eviction.kind) == ("policy", "v1", "Eviction")
        groups = await client.ApisApi(api).get_api_versions()
        assert {"apps", "policy", "karpenter.sh", "cluster.x-k8s.io"} <= {g.name for g in groups.groups}


def _pb_field(number: int, payload: bytes) -> bytes:
    assert number < 16 and len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _pb_envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _pb_field(1, api_version.encode()) + _pb_field(2, kind.encode())
    return b"k8s\x00" + _pb_field(1, type_meta) + _pb_field(2, raw)


async def test_protobuf_bodies_outside_the_supported_set_get_415(api_sandbox: SandboxHandle) -> None:
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    metadata = _pb_field(1, _pb_field(1, b"x"))
    async with aiohttp.ClientSession() as session:
        url = api_sandbox.workload_url + "/api/v1/namespaces"
        async with session.post(url, data=_pb_envelope("v1", "Namespace", metadata), headers=headers) as ok:
            assert ok.status == 201 and (await ok.json())["metadata"]["name"] == "x"
        unknown_kind = _pb_envelope("v1", "Secret", metadata)
        async with session.post(
            api_sandbox.workload_url + "/api/v1/namespaces/default/pods", data=unknown_kind, headers=headers
        ) as refused:
            status = await refused.json()
            assert refused.status == 415 and status["reason"] == "UnsupportedMediaType"
            assert "send Secret as JSON" in status["message"]
        unknown_field = _pb_envelope("v1", "Namespace", metadata + _pb_field(9, b"?"))
        async with session.post(url, data=unknown_field, headers=headers) as refused:
            assert refused.status == 415 and "field 9 of Namespace" in (await refused.json())["message"]
        async with session.post(url, data=b"k8s\x00\x0a\x7f", headers=headers) as truncated:
            assert truncated.status == 400 and (await truncated.json())["kind"] == "Status"


async def test_two_clusters_and_custom_object_watches(api_sandbox: SandboxHandle) -> None:
    machine_deployment = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "clusterName": "demo",
            "replicas": 1,
            "selector": {"matchLabels": {"pool": "workers"}},
            "template": {"metadata": {"labels": {"pool": "workers"}}, "spec": {"clusterName": "demo"}},
        },
    }
    async with api_sandbox.api_client("management") as management, api_sandbox.api_client() as workload:
        capi: Any = client.CustomObjectsApi(management)
        await capi.create_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", machine_deployment
        )
        scale = await capi.patch_namespaced_custom_object_scale(
            "cluster.x-k8s.io",
            "v1beta1",
            "default",
            "machinedeployments",
            "workers",
            {"spec": {"replicas": 3}},
            _content_type="application/merge-patch+json",
        )
        assert scale["spec"]["replicas"] == 3
        as_v1beta2 = await capi.get_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta2", "default", "machinedeployments", "workers"
        )
        assert as_v1beta2["apiVersion"] == "cluster.x-k8s.io/v1beta2" and as_v1beta2["spec"]["replicas"] == 3
        other: Any = client.CustomObjectsApi(workload)
        listed = await other.list_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments"
        )
        assert listed["items"] == []  # the workload cluster is a separate store

        karpenter: Any = client.CustomObjectsApi(workload)
        start = (await karpenter.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims"))["metadata"]
        stream = watch.Watch().stream(
            karpenter.list_cluster_custom_object,
            "karpenter.sh",
            "v1",
            "nodeclaims",
            resource_version=start["resourceVersion"],
            timeout_seconds=5,
        )
        await karpenter.create_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "claim-1"},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                },
            },
        )
        await karpenter.patch_cluster_custom_object_status(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "claim-1",
            {"status": {"providerID": "aws:///eu-west-1a/i-1"}},
            _content_type="application/merge-patch+json",
        )
        events = [await asyncio.wait_for(stream.__anext__(), 5) for _ in range(2)]
        await stream.close()
        assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
        assert events[1]["object"]["status"]["providerID"] == "aws:///eu-west-1a/i-1"
