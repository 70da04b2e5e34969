"""The sandbox refuses bad resource quantities as a kube-apiserver does: 422, the field named, nothing stored.

Driven through the machine's kubectl and through kubernetes-asyncio (tenon's client); the last test stores odd
objects past admission (as another writer might) and checks that every controller keeps working.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from devtools.sandbox import admission
from devtools.sandbox.testing import SandboxHandle
from tests.sandbox.conftest import KubectlRunner, node_manifest
from tests.sandbox.controller_support import node, pod, pods_of, running_controllers, wait_for

NEGATIVE_MEMORY = 'Invalid value: "-1Gi": must be greater than or equal to 0'


def pod_yaml(name: str, requests: dict[str, str], limits: dict[str, str] | None = None) -> str:
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "app:1", "resources": resources}]},
    }
    return json.dumps(manifest)  # JSON is YAML, and keeps "-1" a string


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or b"{}")
    return body


def pods_named(store: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(store) if p["metadata"]["name"] == name]


# ------------------------------------------------------------------------------------------------ kubectl
@pytest.mark.parametrize(
    ("name", "requests", "limits", "message"),
    [
        (
            "negative",
            {"cpu": "-1"},
            None,
            'The Pod "negative" is invalid: spec.containers[0].resources.requests[cpu]: '
            'Invalid value: "-1": must be greater than or equal to 0',
        ),
        (
            "over-limit",
            {"cpu": "2", "memory": "1Gi"},
            {"cpu": "1500m", "memory": "1Gi"},
            'The Pod "over-limit" is invalid: spec.containers[0].resources.requests: '
            'Invalid value: "2": must be less than or equal to cpu limit of 1500m',
        ),
        (
            "lots",
            {"cpu": "lots"},
            None,
            'spec.containers[0].resources.requests[cpu]: Invalid value: "lots": not a number',
        ),
        (
            "full-width",
            {"memory": "１Gi"},
            None,
            'spec.containers[0].resources.requests[memory]: Invalid value: "１Gi": not a number',
        ),
        (
            "huge",
            {"cpu": "1e999999999"},
            None,
            'spec.containers[0].resources.requests[cpu]: Invalid value: "1e999999999": too large',
        ),
    ],
)
async def test_kubectl_sees_the_field_and_nothing_is_stored(
    api_sandbox: SandboxHandle,
    kubectl: KubectlRunner,
    name: str,
    requests: dict[str, str],
    limits: dict[str, str] | None,
    message: str,
) -> None:
    result = await kubectl("apply", "-f", "-", stdin=pod_yaml(name, requests, limits))
    assert result.code != 0
    assert message in result.stderr, result.stderr
    assert "\n" not in result.stderr.strip(), result.stderr
    assert pods_named(api_sandbox.workload_store, name) == []


async def test_kubectl_deployment_template_quantities_are_checked(
    api_sandbox: SandboxHandle, kubectl: KubectlRunner
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app:1", "resources": {"requests": {"memory": "1e5000"}}}
                    ]
                },
            },
        },
    }
    result = await kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    assert result.code != 0
    assert (
        'The Deployment "web" is invalid: spec.template.spec.containers[0].resources.requests[memory]: '
        'Invalid value: "1e5000": too large'
    ) in result.stderr, result.stderr
    fine = await kubectl("apply", "-f", "-", stdin=json.dumps(deployment).replace("1e5000", "1e3"))
    assert fine.code == 0, fine.stderr


# -------------------------------------------------------------------------------------- kubernetes-asyncio
async def test_client_gets_422_naming_each_bad_field(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)
        bad_pod = {
            "metadata": {"name": "bad"},
            "spec": {
                "containers": [
                    {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "1e5000"}}}
                ],
                "initContainers": [
                    {"name": "init", "image": "app:1", "resources": {"limits": {"memory": "-1Gi"}}}
                ],
                "overhead": {"cpu": "NaN"},
            },
        }
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod("default", bad_pod)
        status = status_of(refused.value)
        assert (refused.value.status, status["reason"]) == (422, "Invalid")
        fields = {cause["field"]: cause["message"] for cause in status["details"]["causes"]}
        assert fields == {
            "spec.containers[0].resources.requests[cpu]": fields[
                "spec.containers[0].resources.requests[cpu]"
            ],
            # the defaulted request (from the limit) is as negative as the limit
            "spec.initContainers[0].resources.limits[memory]": NEGATIVE_MEMORY,
            "spec.initContainers[0].resources.requests[memory]": NEGATIVE_MEMORY,
            "spec.overhead[cpu]": fields["spec.overhead[cpu]"],
        }
        assert fields["spec.containers[0].resources.requests[cpu]"].startswith(
            'Invalid value: "1e5000": too large'
        )
        assert fields["spec.overhead[cpu]"].startswith('Invalid value: "NaN": not a number')
        assert status["message"].startswith('Pod "bad" is invalid: [')

        daemonset = {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "agent",
                                "image": "agent:1",
                                "resources": {"requests": {"nvidia.com/gpu": "1"}},
                            }
                        ]
                    },
                },
            },
        }
        with pytest.raises(ApiException) as no_limit:
            await apps.create_namespaced_daemon_set("default", daemonset)
        assert status_of(no_limit.value)["message"] == (
            'DaemonSet.apps "agent" is invalid: spec.template.spec.containers[0].resources.limits: '
            "Required value: Limit must be set for non overcommitable resources"
        )

        bad_node = node_manifest("n1")
        bad_node["status"]["capacity"] = {"cpu": "4", "pods": "1.5", "memory": "-16Gi"}
        bad_node["status"]["allocatable"] = {"cpu": "lots"}
        with pytest.raises(ApiException) as node_refused:
            await core.create_node(bad_node)
        causes = status_of(node_refused.value)["details"]["causes"]
        assert [(c["field"], c["message"].split(":")[0]) for c in causes] == [
            ("status.capacity.pods", "Invalid value"),
            ("status.capacity.memory", "Invalid value"),
            ("status.allocatable.cpu", "Invalid value"),
        ]
        assert causes[0]["message"] == 'Invalid value: "1500m": must be an integer'

        stored = await core.list_pod_for_all_namespaces()
        assert [p.metadata.name for p in stored.items] == []
        assert (await core.list_node()).items == []


async def test_a_limit_stands_for_a_missing_request(api_sandbox: SandboxHandle) -> None:
    async with api_sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        gpu_pod = {
            "metadata": {"name": "trainer"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "app:1",
                        "resources": {
                            "requests": {"cpu": "1"},
                            "limits": {"nvidia.com/gpu": "2", "cpu": "2"},
                        },
                    }
                ]
            },
        }
        created = await core.create_namespaced_pod("default", gpu_pod)
        assert created.spec.containers[0].resources.requests == {"cpu": "1", "nvidia.com/gpu": "2"}
        with pytest.raises(ApiException) as unequal:
            await core.create_namespaced_pod(
                "default",
                {
                    "metadata": {"name": "greedy"},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "app:1",
                                "resources": {
                                    "requests": {"nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "2"},
                                },
                            }
                        ]
                    },
                },
            )
        assert status_of(unequal.value)["message"] == (
            'Pod "greedy" is invalid: spec.containers[0].resources.requests: Invalid value: "1": '
            "must be equal to nvidia.com/gpu limit of 2"
        )


# ------------------------------------------------------------------------------------------- controllers
async def test_controllers_log_and_skip_odd_stored_objects(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with running_controllers() as store:
        pods_rt, nodes_rt = store.resource("v1", "Pod"), store.resource("v1", "Node")
        store.create(nodes_rt, node("good-node", cpu="4"))
        with monkeypatch.context() as bypass:  # stored past admission, as another writer might
            bypass.setattr(admission, "validate", lambda rt, obj: None)
            store.create(pods_rt, pod("huge", cpu="1e5000"))
            store.create(pods_rt, pod("negative", memory="-1Gi"))
            store.create(nodes_rt, node("odd-node", cpu="lots"))
        store.create(pods_rt, pod("fine", cpu="1"))

        def running() -> bool:
            found = pods_named(store, "fine")
            return bool(found) and (found[0].get("status") or {}).get("phase") == "Running"

        await wait_for(running, 10.0, "the well-formed pod to run beside the odd ones")
        assert pods_named(store, "fine")[0]["spec"]["nodeName"] == "good-node"
        await wait_for(
            lambda: "ignoring pod/default/huge" in caplog.text and "ignoring node/odd-node" in caplog.text,
            5.0,
            "the scheduler to say which objects it ignores",
        )
        assert 'quantity "1e5000": too large' in caplog.text
        assert "ignoring pod/default/negative" in caplog.text
        assert not pods_named(store, "huge")[0]["spec"].get("nodeName")
    # leaving running_controllers re-raises the error of any controller that crashed meanwhile
